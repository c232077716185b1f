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

namespace {

// What the checks found: the batch dims and their product, the lengths, head dims, scale and
// backend.
struct Problem {
  Shape batch;
  int64_t b = 1, tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1;
  AttentionBackend backend = AttentionBackend::Auto;
};

Problem check(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
              const AttentionOptions& o) {
  check_same_device(kOp,
                    {{"query", q_in}, {"key", k_in}, {"value", v_in}, {"attn_mask", o.attn_mask}});
  check_same_dtype(kOp, {{"query", q_in}, {"key", k_in}, {"value", v_in}});
  TD_CHECK_DTYPE(is_floating(q_in.dtype()), kOp, ": query must be floating, not ", describe(q_in));
  TD_CHECK_SHAPE(q_in.dim() >= 2 && k_in.dim() == q_in.dim() && v_in.dim() == q_in.dim(), kOp,
                 ": query ", q_in.shape(), ", key ", k_in.shape(), " and value ", v_in.shape(),
                 " must be [..., T, D] with the same number of dims");
  Problem pr;
  pr.batch = batch_shape(q_in);
  TD_CHECK_SHAPE(batch_shape(k_in) == pr.batch && batch_shape(v_in) == pr.batch &&
                     q_in.size(-1) == k_in.size(-1) && k_in.size(-2) == v_in.size(-2),
                 kOp, ": query ", q_in.shape(), ", key ", k_in.shape(), " and value ", v_in.shape(),
                 " do not fit: they need the same batch dims, query and key the same head dim, "
                 "key and value the same length");
  TD_CHECK_VALUE(o.dropout_p >= 0 && o.dropout_p < 1, kOp, ": dropout_p must be in [0, 1), not ",
                 o.dropout_p);
  TD_CHECK_VALUE(!(o.causal && o.attn_mask.defined()), kOp,
                 ": give causal or attn_mask, not both (fold the causal mask into attn_mask)");
  pr.tq = q_in.size(-2), pr.tk = k_in.size(-2), pr.d = q_in.size(-1), pr.dv = v_in.size(-1);
  for (int64_t s : pr.batch) pr.b *= s;
  pr.scale = o.scale.value_or(1.0 / std::sqrt(double(std::max<int64_t>(pr.d, 1))));
  pr.backend = choose(o, q_in, v_in, pr.b, pr.tq, pr.tk);
  return pr;
}

// The fused kernels' forward: q, k, v as [b, T, D] contiguous, the mask in the kernels' form, the
// output (shaped [..., Tq, Dv]) and one log-sum-exp per query row: what the backward reads.
struct FusedForward {
  Tensor q, k, v, mask, out, lse;
  AttentionParams p;
};

FusedForward fused_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                           const AttentionOptions& o, const Problem& pr) {
  FusedForward f;
  f.q = detail::contiguous(q_in).reshape({pr.b, pr.tq, pr.d});
  f.k = detail::contiguous(k_in).reshape({pr.b, pr.tk, pr.d});
  f.v = detail::contiguous(v_in).reshape({pr.b, pr.tk, pr.dv});
  f.mask = kernel_mask(o.attn_mask, pr.batch, pr.b, pr.tq, pr.tk, f.q.options());
  f.p = {.scale = pr.scale,
         .causal = o.causal,
         .dropout_p = o.dropout_p,
         .flash = pr.backend == AttentionBackend::Flash};
  if (f.p.dropout_p > 0)
    f.p.rng = reserve_random(f.q.device(), uint64_t(pr.b) * uint64_t(pr.tq) * uint64_t(pr.tk));
  f.out = empty({pr.b, pr.tq, pr.dv}, f.q.options());
  f.lse = empty({pr.b, pr.tq}, {.dtype = accumulate_dtype(f.q.dtype()), .device = f.q.device()});
  kernels(f.q.device()).attention_forward(f.q, f.k, f.v, f.mask, f.p, f.out, f.lse);
  Shape out_shape = pr.batch;
  out_shape.push_back(pr.tq);
  out_shape.push_back(pr.dv);
  f.out = f.out.reshape(out_shape);
  return f;
}

// dq, dk, dv as [b, T, D], from what record() saved: q, k, v, mask, output, lse.
std::array<Tensor, 3> fused_backward(const Tensor& dy, const Saved& s, const AttentionParams& p) {
  const Tensor &q = s[0], &k = s[1], &v = s[2];
  std::array<Tensor, 3> g{empty(q.shape(), dy.options()), empty(k.shape(), dy.options()),
                          empty(v.shape(), dy.options())};
  const Tensor out = s[4].reshape({q.size(0), q.size(1), v.size(2)});
  kernels(dy.device())
      .attention_backward(q, k, v, s[3], out, s[5], dy.reshape(out.shape()), p, g[0], g[1], g[2]);
  return g;
}

// record() for the fused backends: the tensors their backward reads, the same for both forms.
Tensor record_fused(const char* name, const FusedForward& f, std::span<const Tensor> inputs,
                    BackwardFn backward) {
  return record(name, f.out, inputs,
                {{"query", f.q},
                 {"key", f.k},
                 {"value", f.v},
                 {"mask", f.mask},
                 {"output", f.out},
                 {"lse", f.lse}},
                std::move(backward));
}

}  // namespace

// S = q·kᵀ·scale + mask (−∞ above the diagonal when causal), P = softmax(S), O = dropout(P)·v
// dV = P̃ᵀ·dO, dP = dO·vᵀ (∘ keep), dS = P ∘ (dP − rowsum(dO ∘ O)), dq = dS·k·scale, dk =
// dSᵀ·q·scale
Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& o) {
  if (auto c = autocast::lower_precision({q_in, k_in, v_in}))
    return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], o);
  const Problem pr = check(q_in, k_in, v_in, o);
  if (pr.backend == AttentionBackend::Math) return attention_math(q_in, k_in, v_in, o, pr.scale);
  const FusedForward f = fused_forward(q_in, k_in, v_in, o, pr);
  const std::array<Tensor, 3> inputs{q_in, k_in, v_in};
  return record_fused(
      kOp, f, inputs,
      [p = f.p, shapes = std::array<Shape, 3>{q_in.shape(), k_in.shape(), v_in.shape()}](
          const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        const std::array<Tensor, 3> g = fused_backward(dy, s, p);
        return {g[0].reshape(shapes[0]), g[1].reshape(shapes[1]), g[2].reshape(shapes[2])};
      });
}

// The heads of one [B, T, 3·H·D] tensor: q, k, v side by side, each [B, T, H, D] seen as
// [B, H, T, D]. The fused backends record one op on qkv, whose backward writes dq, dk and dv into
// one [B, T, 3·H·D] gradient; three narrow() views would each hand back a zero-filled gradient of
// that size, to be added up (three fills and two additions of the whole, a transformer layer's
// largest activation after its MLP's).
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head,
                                           const AttentionOptions& o) {
  if (auto c = autocast::lower_precision({qkv}))
    return scaled_dot_product_attention_packed((*c)[0], n_head, o);
  TD_CHECK_SHAPE(qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0, kOp,
                 "_packed: qkv ", qkv.shape(), " must be [B, T, 3 * n_head * D] for n_head ",
                 n_head);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * C, C).view({B, T, n_head, D}).transpose(1, 2);
  };
  std::array<Tensor, 3> views;
  {
    NoGradGuard no_grad;  // the fused op reads them; its one node is on qkv
    views = {heads(0), heads(1), heads(2)};
  }
  const Problem pr = check(views[0], views[1], views[2], o);
  if (pr.backend == AttentionBackend::Math)  // separate ops, through views that track gradients
    return attention_math(heads(0), heads(1), heads(2), o, pr.scale);
  const FusedForward f = fused_forward(views[0], views[1], views[2], o, pr);
  return record_fused(
      "scaled_dot_product_attention_packed", f, {&qkv, 1},
      [p = f.p, B, T, C, n_head, D](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        const std::array<Tensor, 3> g = fused_backward(dy, s, p);
        Tensor dqkv = empty({B, T, 3 * C}, dy.options());
        for (int64_t i = 0; i < 3; ++i) {  // [B, H, T, D] into its third of [B, T, 3C]
          Tensor third =
              detail::as_strided(dqkv, {B, n_head, T, D}, {T * 3 * C, D, 3 * C, 1}, i * C);
          kernels(dy.device()).copy(g[size_t(i)].reshape({B, n_head, T, D}), third);
        }
        return {dqkv};
      });
}

}  // namespace tandem
