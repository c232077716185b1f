// autograd/ops/attention.cpp — scaled_dot_product_attention as one fused op: the checks, the mask
// in the kernels' form, the backend's choice, and a backward that needs only q, k, v, the output
// and one log-sum-exp per query row (the kernels: core/kernels/cpu/attention.cpp, cuda/attention.cu
// and, on the tensor cores, cuda/flash_attention.cu); and the same attention as separate ops (the
// Math backend).
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>

namespace tandem {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The batch dims of a [..., T, D] tensor.
Shape batch_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// `mask` as the kernels take it: additive, x's dtype, [1, Tq, Tk] when it is the same for every
// batch entry, else [B, Tq, Tk]. A bool mask is true where a query may attend: false becomes −∞.
Tensor kernel_mask(const Tensor& mask, const Shape& batch, int64_t b, int64_t tq, int64_t tk,
                   const TensorOptions& options) {
  if (!mask.defined()) return Tensor();
  Shape full = batch;
  full.push_back(tq);
  full.push_back(tk);
  bool fits = mask.dim() <= int64_t(full.size());
  for (int64_t d = 1; fits && d <= mask.dim(); ++d) {
    const int64_t have = mask.size(-d), want = full[full.size() - size_t(d)];
    fits = have == want || have == 1;
  }
  TD_CHECK_SHAPE(fits, kOp, ": attn_mask ", mask.shape(), " does not broadcast to ", full);
  bool per_batch = false;
  for (int64_t d = 3; d <= mask.dim(); ++d) per_batch |= mask.size(-d) != 1;
  NoGradGuard no_grad;  // the mask is a constant of the graph
  Tensor m = mask;
  if (mask.dtype() == kBool) {
    m = where(mask, zeros({}, options),
              tandem::full({}, -std::numeric_limits<double>::infinity(), options));
  } else {
    TD_CHECK_DTYPE(is_floating(mask.dtype()), kOp, ": attn_mask must be bool or floating, not ",
                   describe(mask));
    m = mask.to(options.dtype);
  }
  if (!per_batch) {
    while (m.dim() > 2) m = m.select(0, 0);
    return detail::contiguous(m.expand({tq, tk})).reshape({1, tq, tk});
  }
  return detail::contiguous(m.expand(full)).reshape({b, tq, tk});
}

// The Math backend: every step its own op, the Tq×Tk scores and probabilities materialised (the
// tests' oracle for the fused op). Dropout keeps where rand() of [..., Tq, Tk] is at least p: the
// counters the fused kernels draw.
Tensor attention_math(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                      double scale) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
  const double inf = std::numeric_limits<double>::infinity();
  // The scale on q, [..., Tq, D], rather than on the scores, [..., Tq, Tk]: the smaller pass.
  Tensor s = (q * scale).matmul(k.transpose(-2, -1));
  if (o.causal) s = s + triu(full({tq, tk}, -inf, s.options()), 1);
  if (o.attn_mask.defined()) {
    s = o.attn_mask.dtype() == kBool ? where(o.attn_mask, s, full({}, -inf, s.options()))
                                     : s + o.attn_mask.to(s.dtype());
  }
  Tensor p = s.softmax(-1);
  if (o.dropout_p > 0) {
    Tensor keep;  // 0 or 1/(1 − p), a constant: one pass over the probabilities that tracks grad
    {
      NoGradGuard no_grad;
      keep =
          rand(p.shape(), p.options()).ge(o.dropout_p).to(p.dtype()) * (1.0 / (1.0 - o.dropout_p));
    }
    p = p * keep;
  }
  return p.matmul(v);
}

std::atomic<bool> g_flash_enabled{false};

// Auto's choice: Flash where it applies and is enabled; else Math on CUDA where the fused kernel
// is the slower (module comment in nn_ops.h). On an H100 with 8 heads of 64 (gpt_bench attention)
// the fused kernel won below 2^19 scores (T = 128: 0.15 against 0.29 ms, both launch-bound) and
// lost from there (T = 256: 0.30 against 0.26 ms; 2048: 7.4 against 1.9; the GPT recipe's step:
// 31.9 against 9.6 ms).
AttentionBackend choose(const AttentionOptions& o, const Tensor& q, const Tensor& v, int64_t b,
                        int64_t tq, int64_t tk) {
  const char* no_flash = flash_attention_unsupported(q.dtype(), q.size(-1), v.size(-1));
  if (o.backend == AttentionBackend::Flash) {
    TD_CHECK_DEVICE(q.device().is_cuda(), kOp, ": the Flash backend runs on CUDA, but query is ",
                    describe(q), "\n  hint: AttentionBackend::Auto takes what the device has");
    TD_CHECK_VALUE(no_flash == nullptr, kOp, ": the Flash backend cannot take query ", describe(q),
                   " and value ", describe(v), ": ", no_flash ? no_flash : "",
                   "\n  hint: AttentionBackend::Auto takes another where Flash does not apply");
    return o.backend;
  }
  if (o.backend != AttentionBackend::Auto) return o.backend;
  if (q.device().is_cuda() && no_flash == nullptr && g_flash_enabled.load()) {
    return AttentionBackend::Flash;
  }
  constexpr double kMinScores = 1 << 19, kMaxProbabilityBytes = 1 << 30;
  const double scores = double(b) * double(tq) * double(tk);
  const bool math = q.device().is_cuda() && !o.attn_mask.defined() && scores >= kMinScores &&
                    scores * double(element_size(q.dtype())) <= kMaxProbabilityBytes;
  return math ? AttentionBackend::Math : AttentionBackend::Fused;
}

}  // namespace

void enable_flash_attention(bool on) { g_flash_enabled.store(on); }
bool flash_attention_enabled() { return g_flash_enabled.load(); }

// S = q·kᵀ·scale + mask (−∞ above the diagonal when causal), P = softmax(S), O = dropout(P)·v
// dV = P̃ᵀ·dO, dP = dO·vᵀ (∘ keep), dS = P ∘ (dP − rowsum(dO ∘ O)), dq = dS·k·scale, dk =
// dSᵀ·q·scale
Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& o) {
  if (auto c = autocast::lower_precision({q_in, k_in, v_in}))
    return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], o);
  check_same_device(kOp,
                    {{"query", q_in}, {"key", k_in}, {"value", v_in}, {"attn_mask", o.attn_mask}});
  check_same_dtype(kOp, {{"query", q_in}, {"key", k_in}, {"value", v_in}});
  TD_CHECK_DTYPE(is_floating(q_in.dtype()), kOp, ": query must be floating, not ", describe(q_in));
  TD_CHECK_SHAPE(q_in.dim() >= 2 && k_in.dim() == q_in.dim() && v_in.dim() == q_in.dim(), kOp,
                 ": query ", q_in.shape(), ", key ", k_in.shape(), " and value ", v_in.shape(),
                 " must be [..., T, D] with the same number of dims");
  const Shape batch = batch_shape(q_in);
  TD_CHECK_SHAPE(batch_shape(k_in) == batch && batch_shape(v_in) == batch &&
                     q_in.size(-1) == k_in.size(-1) && k_in.size(-2) == v_in.size(-2),
                 kOp, ": query ", q_in.shape(), ", key ", k_in.shape(), " and value ", v_in.shape(),
                 " do not fit: they need the same batch dims, query and key the same head dim, "
                 "key and value the same length");
  TD_CHECK_VALUE(o.dropout_p >= 0 && o.dropout_p < 1, kOp, ": dropout_p must be in [0, 1), not ",
                 o.dropout_p);
  TD_CHECK_VALUE(!(o.causal && o.attn_mask.defined()), kOp,
                 ": give causal or attn_mask, not both (fold the causal mask into attn_mask)");
  const int64_t tq = q_in.size(-2), tk = k_in.size(-2), d = q_in.size(-1), dv = v_in.size(-1);
  int64_t b = 1;
  for (int64_t s : batch) b *= s;
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(std::max<int64_t>(d, 1))));
  const AttentionBackend backend = choose(o, q_in, v_in, b, tq, tk);
  if (backend == AttentionBackend::Math) return attention_math(q_in, k_in, v_in, o, scale);
  const Tensor q = detail::contiguous(q_in).reshape({b, tq, d});
  const Tensor k = detail::contiguous(k_in).reshape({b, tk, d});
  const Tensor v = detail::contiguous(v_in).reshape({b, tk, dv});
  const Tensor mask = kernel_mask(o.attn_mask, batch, b, tq, tk, q.options());
  AttentionParams p{.scale = scale,
                    .causal = o.causal,
                    .dropout_p = o.dropout_p,
                    .flash = backend == AttentionBackend::Flash};
  if (p.dropout_p > 0)
    p.rng = reserve_random(q.device(), uint64_t(b) * uint64_t(tq) * uint64_t(tk));
  Tensor out = empty({b, tq, dv}, q.options());
  Tensor lse = empty({b, tq}, {.dtype = accumulate_dtype(q.dtype()), .device = q.device()});
  kernels(q.device()).attention_forward(q, k, v, mask, p, out, lse);
  Shape out_shape = batch;
  out_shape.push_back(tq);
  out_shape.push_back(dv);
  out = out.reshape(out_shape);

  return record(
      kOp, out, {q_in, k_in, v_in},
      {{"query", q}, {"key", k}, {"value", v}, {"mask", mask}, {"output", out}, {"lse", lse}},
      [p, shapes = std::array<Shape, 3>{q_in.shape(), k_in.shape(), v_in.shape()}](
          const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        const Tensor &q = s[0], &k = s[1], &v = s[2];
        Tensor dq = empty(q.shape(), dy.options()), dk = empty(k.shape(), dy.options()),
               dv = empty(v.shape(), dy.options());
        const Tensor out = s[4].reshape({q.size(0), q.size(1), v.size(2)});
        kernels(dy.device())
            .attention_backward(q, k, v, s[3], out, s[5], dy.reshape(out.shape()), p, dq, dk, dv);
        return {dq.reshape(shapes[0]), dk.reshape(shapes[1]), dv.reshape(shapes[2])};
      });
}

}  // namespace tandem
