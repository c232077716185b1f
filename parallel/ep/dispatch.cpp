// parallel/ep/dispatch.cpp — the differentiable all_to_all_v, and the dispatch round trip.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/parallel/ep/dispatch.h>
#include <numeric>

namespace tandem::parallel::ep {
namespace {

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t(0));
}

// The rows of x exchanged: what the forward does, and (sizes swapped) its backward.
Tensor exchanged(const Tensor& x, Communicator& group, const std::vector<int64_t>& output_splits,
                 const std::vector<int64_t>& input_splits) {
  NoGradGuard no_grad;
  const Tensor in = x.contiguous();
  Shape shape = in.shape();
  shape[0] = total(output_splits);
  Tensor out = empty(shape, in.options());
  group.all_to_all_v(out, in, output_splits, input_splits)->wait();
  return out;
}

// Every rank's counts [P][E], from this rank's [E] (an all-gather over the group).
std::vector<std::vector<int64_t>> every_ranks(const std::vector<int64_t>& counts,
                                              Communicator& group) {
  const Tensor mine = from_vector(counts, {int64_t(counts.size())});
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r) parts.push_back(empty(mine.shape(), mine.options()));
  group.all_gather(parts, mine)->wait();
  std::vector<std::vector<int64_t>> all;
  for (const Tensor& p : parts) all.push_back(p.to_vector<int64_t>());
  return all;
}

}  // namespace

Tensor all_to_all_v(const Tensor& x, const std::shared_ptr<Communicator>& group,
                    const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits) {
  TD_CHECK_VALUE(group != nullptr, "ep::all_to_all_v: no group (a null communicator)");
  TD_CHECK_SHAPE(x.dim() >= 1, "ep::all_to_all_v: rows must be [M, ...], not a scalar");
  return record("ep_all_to_all_v", exchanged(x, *group, output_splits, input_splits), {x}, {},
                [group, output_splits, input_splits](const Tensor& dy, const NeedsGrad&,
                                                     const Saved&) -> Grads {
                  return {exchanged(dy, *group, input_splits, output_splits)};
                });
}

Tensor dispatch_to_experts(const Tensor& tokens, const std::vector<int64_t>& counts,
                           const nn::Experts& local, const std::shared_ptr<Communicator>& group) {
  TD_CHECK_VALUE(group != nullptr, "expert parallel dispatch: no group (a null communicator)");
  const int P = group->size(), r = group->rank();
  const int64_t E = int64_t(counts.size()), L = local.size();
  TD_CHECK_VALUE(L * P == E, "expert parallel dispatch: ", P, " ranks of ", L,
                 " experts each hold ", L * P, ", but the router chose among ", E);
  const auto all = every_ranks(counts, *group);  // all[s][e]: rank s's rows for expert e

  // Out: the rows for rank j's experts, contiguous in the sorted tokens. In: rank s's rows for
  // this rank's experts, rank by rank, each expert by expert.
  std::vector<int64_t> send(size_t(P), 0), recv(size_t(P), 0), mine(size_t(L), 0);
  for (int j = 0; j < P; ++j)
    for (int64_t l = 0; l < L; ++l) {
      send[size_t(j)] += counts[size_t(j * L + l)];
      recv[size_t(j)] += all[size_t(j)][size_t(r * L + l)];
      mine[size_t(l)] += all[size_t(j)][size_t(r * L + l)];
    }
  const Tensor arrived = all_to_all_v(tokens, group, recv, send);

  // Arrival order (source, expert) -> expert order (expert, source), and back.
  std::vector<int64_t> start(size_t(P * L)), by_expert, back(size_t(total(recv)));
  for (int64_t s = 0, at = 0; s < P; ++s)
    for (int64_t l = 0; l < L; ++l) {
      start[size_t(s * L + l)] = at;
      at += all[size_t(s)][size_t(r * L + l)];
    }
  for (int64_t l = 0; l < L; ++l)
    for (int64_t s = 0; s < P; ++s)
      for (int64_t i = 0; i < all[size_t(s)][size_t(r * L + l)]; ++i) {
        back[size_t(start[size_t(s * L + l)] + i)] = int64_t(by_expert.size());
        by_expert.push_back(start[size_t(s * L + l)] + i);
      }
  const Device dev = tokens.device();
  const int64_t n = int64_t(by_expert.size());
  const Tensor grouped = embedding(arrived, from_vector(by_expert, {n}, dev));
  const Tensor out = local.forward(grouped, mine);
  const Tensor returned = embedding(out, from_vector(back, {n}, dev));
  return all_to_all_v(returned, group, send, recv);
}

}  // namespace tandem::parallel::ep
