// parallel/comm/all_to_all_v.cpp — the all-to-all of unequal parts: its checks, the exchange of
// the split sizes, and the default, a message to and from every peer.
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/communicator.h>

namespace tandem::parallel {

int64_t Communicator::check_all_to_all_v(const Tensor& output, const Tensor& input,
                                         const std::vector<int64_t>& output_splits,
                                         const std::vector<int64_t>& input_splits) const {
  check_tensor(input, "all_to_all_v");
  check_tensor(output, "all_to_all_v");
  TD_CHECK_VALUE(int(input_splits.size()) == size_ && int(output_splits.size()) == size_, backend(),
                 " all_to_all_v: ", input_splits.size(), " input splits and ", output_splits.size(),
                 " output splits, for a group of ", size_, " (a split per rank)");
  TD_CHECK_SHAPE(input.dim() >= 1 && output.dim() == input.dim() && output.dtype() == input.dtype(),
                 backend(), " all_to_all_v: the output ", ::tandem::describe(output),
                 " must be rows like the input's ", ::tandem::describe(input));
  for (int64_t d = 1; d < input.dim(); ++d)
    TD_CHECK_SHAPE(output.size(d) == input.size(d), backend(), " all_to_all_v: the output ",
                   ::tandem::describe(output), " must be rows like the input's ",
                   ::tandem::describe(input));
  int64_t in_rows = 0, out_rows = 0;
  for (int r = 0; r < size_; ++r) {
    TD_CHECK_VALUE(input_splits[size_t(r)] >= 0 && output_splits[size_t(r)] >= 0, backend(),
                   " all_to_all_v: the splits for rank ", r, " are ", input_splits[size_t(r)],
                   " (input) and ", output_splits[size_t(r)], " (output); no split is negative");
    in_rows += input_splits[size_t(r)], out_rows += output_splits[size_t(r)];
  }
  TD_CHECK_SHAPE(in_rows == input.size(0) && out_rows == output.size(0), backend(),
                 " all_to_all_v: the input splits sum to ", in_rows, " rows and the output's to ",
                 out_rows, ", but the input ", ::tandem::describe(input), " and the output ",
                 ::tandem::describe(output), " have ", input.size(0), " and ", output.size(0));
  TD_CHECK_SHAPE(input_splits[size_t(rank_)] == output_splits[size_t(rank_)], backend(),
                 " all_to_all_v: rank ", rank_, " keeps ", input_splits[size_t(rank_)],
                 " rows of its input but expects ", output_splits[size_t(rank_)], " from itself");
  int64_t per_row = 1;
  for (int64_t d = 1; d < input.dim(); ++d) per_row *= input.size(d);
  return (in_rows - input_splits[size_t(rank_)]) * per_row;
}

WorkPtr Communicator::all_to_all_v(Tensor& output, const Tensor& input,
                                   const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) {
  check_all_to_all_v(output, input, output_splits, input_splits);
  std::vector<WorkPtr> works;
  std::vector<Tensor> parts;  // held until the messages are done
  int64_t in_at = 0, out_at = 0, mine_in = 0, mine_out = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t n = input_splits[size_t(r)];
    if (r == rank_) mine_in = in_at;
    if (r != rank_ && n > 0) {
      parts.push_back(input.narrow(0, in_at, n));
      works.push_back(send(parts.back(), r));
    }
    in_at += n;
  }
  for (int r = 0; r < size_; ++r) {
    const int64_t n = output_splits[size_t(r)];
    if (r == rank_) mine_out = out_at;
    if (r != rank_ && n > 0) {
      parts.push_back(output.narrow(0, out_at, n));
      works.push_back(recv(parts.back(), r));
    }
    out_at += n;
  }
  const int64_t kept = input_splits[size_t(rank_)];
  if (kept > 0) output.narrow(0, mine_out, kept).copy_(input.narrow(0, mine_in, kept));
  // The messages were counted as sends; this Work counts the call.
  WorkPtr done = new_work("all_to_all_v", 0, nullptr, "as messages", timeout_);
  try {
    for (const WorkPtr& w : works) w->wait();
    done->mark_done();
  } catch (...) {
    done->mark_done(std::current_exception());
  }
  return done;
}

std::vector<int64_t> all_to_all_splits(Communicator& group,
                                       const std::vector<int64_t>& input_splits) {
  TD_CHECK_VALUE(int(input_splits.size()) == group.size(), group.backend(),
                 " all_to_all_splits: ", input_splits.size(), " splits for a group of ",
                 group.size());
  const Tensor mine = from_vector(input_splits, {int64_t(input_splits.size())});
  Tensor theirs = empty(mine.shape(), mine.options());
  Tensor in = mine.clone();
  group.all_to_all(theirs, in)->wait();
  return theirs.to_vector<int64_t>();
}

}  // namespace tandem::parallel
