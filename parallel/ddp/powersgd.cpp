// parallel/ddp/powersgd.cpp — the PowerSGD hook: per bucket, its matrices' P in one all-reduce,
// then their Q and the uncompressed gradients in a second.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/parallel/ddp/powersgd.h>
#include <cmath>
#include <map>

namespace tandem::parallel {
namespace {

// Orthonormalises the rows of p (r × n) in place, in order (Gram-Schmidt). A zero row (a zero
// gradient) stays zero instead of dividing by zero.
void orthonormalise_rows(Tensor& p) {
  for (int64_t i = 0; i < p.size(0); ++i) {
    Tensor row = p.select(0, i);
    for (int64_t j = 0; j < i; ++j) {
      const Tensor prev = p.select(0, j);
      row.sub_(prev, (row * prev).sum().item());
    }
    const double norm = std::sqrt((row * row).sum().item());
    if (norm > 0) row.div_(norm);
  }
}

// Concatenates flat views into one new buffer, and copies a buffer back out of it.
Tensor pack(const std::vector<Tensor>& parts, const Tensor& like) {
  int64_t total = 0;
  for (const Tensor& t : parts) total += t.numel();
  Tensor out = empty({total}, {.dtype = like.dtype(), .device = like.device()});
  int64_t at = 0;
  for (const Tensor& t : parts) {
    out.narrow(0, at, t.numel()).copy_(t.reshape({t.numel()}));
    at += t.numel();
  }
  return out;
}

class PowerSgdHook : public CommHook {
 public:
  explicit PowerSgdHook(PowerSGDOptions o) : o_(o) {
    TD_CHECK_VALUE(o.rank >= 1, "powersgd: rank must be at least 1, not ", o.rank);
    TD_CHECK_VALUE(o.start_iter >= 0, "powersgd: start_iter must be >= 0, not ", o.start_iter);
  }
  std::string name() const override { return "powersgd:" + std::to_string(o_.rank); }

  WorkPtr start(Communicator& group, GradBucket& bucket) override {
    if (bucket.index == 0) ++backwards_;
    State& s = state_[bucket.index];
    s.plain = backwards_ <= o_.start_iter;
    if (s.plain) return group.all_reduce(bucket.buffer, ReduceOp::Mean);

    s.matrices.clear();
    s.vectors.clear();
    std::vector<Tensor> ps;
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const Tensor& param = bucket.parameters[i];
      const int64_t n = param.dim() >= 2 ? param.size(0) : 1, m = param.numel() / n;
      const bool compress =
          param.dim() >= 2 && double((n + m) * o_.rank) * o_.min_compression_rate < double(n * m);
      if (!compress) {
        s.vectors.push_back(i);
        continue;
      }
      Tensor mat = bucket.gradient(i).reshape({n, m});  // a view of the buffer
      if (o_.error_feedback && s.error.count(i)) mat.add_(s.error[i]);
      Tensor& qt = s.qt[i];  // r × m: Qᵀ
      if (!qt.defined() || !o_.warm_start) qt = initial_q(bucket.index, i, m, bucket.buffer);
      s.matrices.push_back(i);
      ps.push_back(matmul(qt, mat.t()));  // Pᵀ = Qᵀ Mᵀ: r × n
    }
    // First all-reduce: every matrix's P, in one message; waited for here, since Q needs it.
    Tensor p_all = pack(ps, bucket.buffer);
    if (p_all.numel() > 0) group.all_reduce(p_all, ReduceOp::Sum)->wait();
    std::vector<Tensor> second;
    int64_t at = 0;
    for (size_t k = 0; k < s.matrices.size(); ++k) {
      const size_t i = s.matrices[k];
      const int64_t n = ps[k].size(1);
      Tensor pt = p_all.narrow(0, at, o_.rank * n).reshape({o_.rank, n});
      at += o_.rank * n;
      orthonormalise_rows(pt);
      s.pt[i] = pt;
      const Tensor mat = bucket.gradient(i).reshape({n, bucket.parameters[i].numel() / n});
      second.push_back(matmul(pt, mat));  // Qᵀ = Pᵀ M: r × m
    }
    for (size_t i : s.vectors) second.push_back(bucket.gradient(i));
    // Second all-reduce: every Q and every uncompressed gradient.
    s.q_all = pack(second, bucket.buffer);
    return group.all_reduce(s.q_all, ReduceOp::Sum);
  }

  void finish(Communicator& group, GradBucket& bucket) override {
    State& s = state_[bucket.index];
    if (s.plain) return;
    const double inv_world = 1.0 / group.size();
    int64_t at = 0;
    for (size_t i : s.matrices) {
      const int64_t n = s.pt[i].size(1), m = bucket.parameters[i].numel() / n;
      s.qt[i] = s.q_all.narrow(0, at, o_.rank * m).reshape({o_.rank, m}).clone();  // warm start
      at += o_.rank * m;
      Tensor mat = bucket.gradient(i).reshape({n, m});
      const Tensor approx = matmul(s.pt[i].t(), s.qt[i]) * inv_world;  // P Qᵀ / world
      if (o_.error_feedback) s.error[i] = mat - approx;  // what this rank's gradient lost
      mat.copy_(approx);
    }
    for (size_t i : s.vectors) {
      const int64_t len = bucket.parameters[i].numel();
      bucket.gradient(i).copy_(
          (s.q_all.narrow(0, at, len) * inv_world).reshape(bucket.parameters[i].shape()));
      at += len;
    }
  }

 private:
  struct State {
    bool plain = true;               // this step used plain all-reduce
    std::vector<size_t> matrices;    // parameters sent as P and Q, this step
    std::vector<size_t> vectors;     // parameters sent whole
    std::map<size_t, Tensor> qt;     // Qᵀ (r × m) per matrix, kept for warm start
    std::map<size_t, Tensor> pt;     // Pᵀ (r × n), orthonormal rows, this step
    std::map<size_t, Tensor> error;  // error feedback per matrix
    Tensor q_all;                    // the second all-reduce's buffer
  };

  // Q's first values: normal draws from a generator every rank seeds alike.
  Tensor initial_q(size_t bucket, size_t param, int64_t m, const Tensor& like) const {
    const uint64_t seed = o_.seed * 1'000'003 + bucket * 10'007 + param +
                          (o_.warm_start ? 0 : uint64_t(backwards_) * 7'919'000'003ull);
    ReplayGenerators replay({{like.device(), GeneratorState{seed, 0}}});
    return randn({o_.rank, m}, {.dtype = like.dtype(), .device = like.device()});
  }

  const PowerSGDOptions o_;
  int64_t backwards_ = 0;
  std::map<size_t, State> state_;  // per bucket
};

}  // namespace

std::shared_ptr<CommHook> powersgd(PowerSGDOptions options) {
  return std::make_shared<PowerSgdHook>(options);
}

}  // namespace tandem::parallel
