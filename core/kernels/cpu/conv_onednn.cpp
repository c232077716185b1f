// core/kernels/cpu/conv_onednn.cpp — convolutions on the CPU through oneDNN's convolution
// primitives (Debian's libdnnl 2.6, the library LibTorch uses for the same job), which pick their
// kernels from the CPU at run time, so one binary serves every host:
// - bfloat16 / float16 with float32 accumulation, where the CPU has the format's instructions
//   (onednn.cpp decides, once); elsewhere the caller widens to float32.
// - float32 on CPUs with AVX-512, for layers with at least 16 input channels per group: Winograd
//   F(4×4, 3×3) for the forward pass and weight gradient of 3×3 stride-1 layers (about half the
//   multiplications; the input gradient stays direct: Shapes::algorithms; its rounding differs from
//   a direct convolution's by float32 noise: tests/autograd/conv_float32_test.cpp), direct kernels
//   for the others; both keep a register block of output channels × pixels hot, where im2col +
//   GEMM multiplies small matrices (a 13×13 plane is a 121-column GEMM) and copies every input
//   nine times. Below 16 input channels (a first layer on grey images) and without AVX-512,
//   conv.cpp's im2col path runs: it is faster there, and it stays the readable reference that the
//   tests compare with (float64 always takes it).
//
// Layouts: oneDNN's fast kernels work on blocked layouts (nChw16c: channels in blocks of 16
// innermost), not on NCHW, where it falls back to a GEMM-based kernel no faster than im2col. So
// each primitive is created with "any" layouts, and each call reorders the NCHW inputs into the
// layout the primitive chose and the outputs back (Layouts below). Measured on Zen 4, conv
// 32->64 3x3 at batch 64, forward + both backwards, reorders included: bfloat16 4.7 ms against
// 14.8 ms on NCHW; float32 8.5 against 12.9.
//
// Threads, as for the GEMMs: one OpenMP thread per oneDNN call, the batch split over the pool.
// Forward and the input gradient are per sample, so each task takes its own samples. The weight
// and bias gradients are sums over the batch: each task writes float32 partial sums (oneDNN
// accumulates 16-bit products in float32 anyway), added in task order (and rounded once for a
// 16-bit type), so the result does not depend on thread timing.
#include <tandem/core/cpu_info.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/onednn.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// float32 layers with fewer input channels per group than this stay on im2col (see the top).
constexpr int64_t kOneDnnMinChannels = 16;

// Shapes and parameters of one call, for the descriptors and the per-thread primitive caches.
struct Shapes {
  memory::dims src, weights, bias, dst;  // src/dst for a block of `block` samples
  memory::dims strides, dilates, pad;    // oneDNN counts dilation from 0
  bool grouped;
  bool winograd;  // 3x3, stride 1, no dilation, one group: where oneDNN has Winograd kernels

  Shapes(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p, int64_t block)
      : src{block, x.size(1), x.size(2), x.size(3)},
        bias{w.size(0)},
        dst{block, y.size(1), y.size(2), y.size(3)},
        strides{p.stride_h, p.stride_w},
        dilates{p.dilation_h - 1, p.dilation_w - 1},
        pad{p.pad_h, p.pad_w},
        grouped(p.groups > 1),
        winograd(w.size(2) == 3 && w.size(3) == 3 && p.stride_h == 1 && p.stride_w == 1 &&
                 p.dilation_h == 1 && p.dilation_w == 1 && p.groups == 1) {
    weights = grouped
                  ? memory::dims{p.groups, w.size(0) / p.groups, w.size(1), w.size(2), w.size(3)}
                  : memory::dims{w.size(0), w.size(1), w.size(2), w.size(3)};
  }
  // The tensors' own layouts (NCHW, OIHW), and "any" for the primitives to choose their own.
  memory::desc src_md(memory::data_type t, bool any = false) const {
    return {src, t, any ? Tag::any : Tag::nchw};
  }
  memory::desc dst_md(memory::data_type t, bool any = false) const {
    return {dst, t, any ? Tag::any : Tag::nchw};
  }
  memory::desc weights_md(memory::data_type t, bool any = false) const {
    return {weights, t, any ? Tag::any : grouped ? Tag::goihw : Tag::oihw};
  }
  memory::desc bias_md(memory::data_type t) const { return {bias, t, Tag::a}; }
  std::vector<int64_t> key(int64_t kind, DType t, bool with_bias) const {
    std::vector<int64_t> k{kind, int64_t(t), with_bias};
    for (const memory::dims* d : {&src, &weights, &dst, &strides, &dilates, &pad})
      k.insert(k.end(), d->begin(), d->end());
    return k;
  }
  // The algorithms to try, best first: float32 3x3 layers try Winograd, then direct, for the
  // forward pass and the weight gradient. The input gradient is always direct: oneDNN's Winograd
  // kernel for it is slower than the direct one on Sapphire Rapids-class Xeons (2.1 against 1.7-1.8
  // ms for 32 samples of 32 -> 64 channels at 13×13) and no faster on Zen 4 (1.31
  // against 1.30-1.32).
  enum class Pass { forward, input_grad, weight_grad };
  std::vector<dnnl::algorithm> algorithms(DType t, Pass pass) const {
    if (t == DType::f32 && winograd && pass != Pass::input_grad)
      return {dnnl::algorithm::convolution_winograd, dnnl::algorithm::convolution_direct};
    return {dnnl::algorithm::convolution_direct};
  }
  dnnl::convolution_forward::desc forward_desc(memory::data_type t, bool with_bias,
                                               dnnl::algorithm alg) const {
    if (with_bias)
      return {dnnl::prop_kind::forward_training,
              alg,
              src_md(t, true),
              weights_md(t, true),
              bias_md(t),
              dst_md(t, true),
              strides,
              dilates,
              pad,
              pad};
    return {dnnl::prop_kind::forward_training,
            alg,
            src_md(t, true),
            weights_md(t, true),
            dst_md(t, true),
            strides,
            dilates,
            pad,
            pad};
  }
};

// Whether oneDNN's kernel `impl` is worth calling for dtype t: for 16-bit types anything but its
// reference loops; for float32 only its AVX-512 direct kernels (its "gemm:" ones are im2col too).
bool worth_calling(DType t, const std::string& impl) {
  if (t != DType::f32) return is_optimized(impl);
  return impl.find("avx512") != std::string::npos && impl.rfind("gemm", 0) != 0;
}

// The three primitives, created once per thread and shape (a training step repeats its shapes)
// from make_pd()'s primitive descriptor; empty when oneDNN has no kernel worth calling for these
// shapes (the caller runs im2col then).
template <typename P>
struct Cached {
  typename P::primitive_desc pd;
  P primitive;
};
template <typename P, typename MakePd>
const std::optional<Cached<P>>& cached(const std::vector<int64_t>& key, DType t,
                                       const std::vector<dnnl::algorithm>& algorithms,
                                       MakePd make_pd) {
  thread_local std::map<std::vector<int64_t>, std::optional<Cached<P>>> cache;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() > 512) cache.clear();
  std::optional<Cached<P>> p;
  for (dnnl::algorithm alg : algorithms) {
    try {
      const auto pd = make_pd(alg);
      if (worth_calling(t, pd.impl_info_str())) {
        p.emplace(Cached<P>{pd, P(pd)});
        break;
      }
    } catch (const dnnl::error&) {  // no kernel for this algorithm here: the next one
    }
  }
  return cache.emplace(key, std::move(p)).first->second;
}

// Whether a convolution of x's dtype and shape goes to oneDNN at all (then per shape, whether it
// has a kernel worth calling: cached()).
bool onednn_conv(const Tensor& x, const Conv2dParams& p) {
  if (x.dtype() == DType::f32)
    return cpu_info().avx512f && x.size(1) / p.groups >= kOneDnnMinChannels;
  return x.dtype() != DType::f64 && has_16bit_hardware(x.dtype());
}

memory mem(const memory::desc& d, const Tensor& t, int64_t offset = 0) {
  return onednn_memory(d, t, offset);
}

// A call's operands in the layouts its primitive chose: an input in another layout is reordered
// into scratch first, an output is written to scratch and reordered into the tensor by finish().
// Scratch is tensor memory, so memory statistics count it.
class Layouts {
 public:
  memory in(memory user, const memory::desc& want) {
    if (user.get_desc() == want) return user;
    // Backward reads dy twice (input and weight gradients): reorder it once.
    for (const Reordered& r : reordered_)
      if (r.data == user.get_data_handle() && r.from == user.get_desc() && r.to.get_desc() == want)
        return r.to;
    memory m = scratch(want);
    dnnl::reorder(user, m).execute(onednn_stream(), user, m);
    reordered_.push_back({user.get_data_handle(), user.get_desc(), m});
    return m;
  }
  memory out(memory user, const memory::desc& want) {
    if (user.get_desc() == want) return user;
    memory m = scratch(want);
    pending_.emplace_back(m, user);
    return m;
  }
  void finish() {
    for (auto& [from, to] : pending_) dnnl::reorder(from, to).execute(onednn_stream(), from, to);
    pending_.clear();
  }

 private:
  memory scratch(const memory::desc& d) {
    scratch_.push_back(empty({int64_t(d.get_size())}, {.dtype = DType::b8}));
    return memory(d, onednn_engine(), scratch_.back().data_ptr());
  }
  struct Reordered {
    void* data;
    memory::desc from;
    memory to;
  };
  std::vector<Tensor> scratch_;
  std::vector<std::pair<memory, memory>> pending_;
  std::vector<Reordered> reordered_;
};

// One task per intra-op thread, at most one per sample; one inside a pool task.
int64_t task_count(int64_t n) {
  if (detail::in_parallel_region()) return 1;
  return std::min<int64_t>(get_num_threads(), std::max<int64_t>(n, 1));
}

// Splits samples [0, n) over task_count(n) tasks: fn(task, lo, hi), in parallel.
template <typename F>
int64_t over_samples(int64_t n, F&& fn) {
  const int64_t tasks = task_count(n), per = (n + tasks - 1) / tasks;
  detail::parallel_for(0, tasks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) fn(t, std::min(n, t * per), std::min(n, (t + 1) * per));
  });
  return tasks;
}

}  // namespace

bool conv2d_forward_onednn(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                           const Conv2dParams& p) {
  if (!onednn_conv(x, p) || x.numel() == 0 || w.numel() == 0) return false;
  const memory::data_type t = onednn_type(x.dtype());
  const int64_t sample_x = x.numel() / x.size(0), sample_y = y.numel() / y.size(0);
  bool ok = true;
  over_samples(x.size(0), [&](int64_t, int64_t lo, int64_t hi) {
    if (lo == hi) return;
    OneOpenMpThread one;
    const Shapes s(x, w, y, p, hi - lo);
    const auto& c = cached<dnnl::convolution_forward>(
        s.key(0, x.dtype(), b.defined()), x.dtype(), s.algorithms(x.dtype(), Shapes::Pass::forward),
        [&](dnnl::algorithm alg) {
          return dnnl::convolution_forward::primitive_desc(s.forward_desc(t, b.defined(), alg),
                                                           onednn_engine());
        });
    if (!c) {
      ok = false;
      return;
    }
    Layouts l;
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, l.in(mem(s.src_md(t), x, lo * sample_x), c->pd.src_desc())},
        {DNNL_ARG_WEIGHTS, l.in(mem(s.weights_md(t), w), c->pd.weights_desc())},
        {DNNL_ARG_DST, l.out(mem(s.dst_md(t), y, lo * sample_y), c->pd.dst_desc())}};
    if (b.defined()) args.emplace(DNNL_ARG_BIAS, mem(s.bias_md(t), b));
    c->primitive.execute(onednn_stream(), args);
    l.finish();
  });
  return ok;
}

bool conv2d_backward_onednn(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                            Tensor& dw, Tensor& db, const Conv2dParams& p) {
  if (!onednn_conv(x, p) || x.numel() == 0 || w.numel() == 0 || dy.numel() == 0) return false;
  // oneDNN computes the bias gradient only with the weights'; a bias gradient alone (a frozen
  // kernel) is left to the im2col path.
  if (db.defined() && !dw.defined()) return false;
  const memory::data_type t = onednn_type(x.dtype()), f32 = memory::data_type::f32;
  const int64_t n = x.size(0), sample_x = x.numel() / n, sample_y = dy.numel() / n;
  const int64_t tasks = task_count(n);
  // Float32 partial sums of the weight and bias gradients, one row per task.
  Tensor dw_part, db_part;
  if (dw.defined()) dw_part = zeros({tasks, dw.numel()});
  if (db.defined()) db_part = zeros({tasks, db.numel()});
  bool ok = true;
  over_samples(n, [&](int64_t task, int64_t lo, int64_t hi) {
    if (lo == hi) return;
    OneOpenMpThread one;
    const Shapes s(x, w, dy, p, hi - lo);
    const bool bias = db.defined();
    auto hint = [&](dnnl::algorithm alg) {
      return dnnl::convolution_forward::primitive_desc(s.forward_desc(t, bias, alg),
                                                       onednn_engine());
    };
    Layouts l;
    if (dx.defined()) {
      const auto& c = cached<dnnl::convolution_backward_data>(
          s.key(1, x.dtype(), false), x.dtype(), s.algorithms(x.dtype(), Shapes::Pass::input_grad),
          [&](dnnl::algorithm alg) {
            return dnnl::convolution_backward_data::primitive_desc(
                {alg, s.src_md(t, true), s.weights_md(t, true), s.dst_md(t, true), s.strides,
                 s.dilates, s.pad, s.pad},
                onednn_engine(), hint(alg));
          });
      if (!c) {
        ok = false;
        return;
      }
      c->primitive.execute(
          onednn_stream(),
          {{DNNL_ARG_DIFF_SRC, l.out(mem(s.src_md(t), dx, lo * sample_x), c->pd.diff_src_desc())},
           {DNNL_ARG_WEIGHTS, l.in(mem(s.weights_md(t), w), c->pd.weights_desc())},
           {DNNL_ARG_DIFF_DST, l.in(mem(s.dst_md(t), dy, lo * sample_y), c->pd.diff_dst_desc())}});
      l.finish();
    }
    if (dw.defined()) {
      const auto& c = cached<dnnl::convolution_backward_weights>(
          s.key(2, x.dtype(), bias), x.dtype(), s.algorithms(x.dtype(), Shapes::Pass::weight_grad),
          [&](dnnl::algorithm alg) {
            const auto d =
                bias ? dnnl::convolution_backward_weights::desc(
                           alg, s.src_md(t, true), s.weights_md(f32, true), s.bias_md(f32),
                           s.dst_md(t, true), s.strides, s.dilates, s.pad, s.pad)
                     : dnnl::convolution_backward_weights::desc(
                           alg, s.src_md(t, true), s.weights_md(f32, true), s.dst_md(t, true),
                           s.strides, s.dilates, s.pad, s.pad);
            return dnnl::convolution_backward_weights::primitive_desc(d, onednn_engine(),
                                                                      hint(alg));
          });
      if (!c) {
        ok = false;
        return;
      }
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, l.in(mem(s.src_md(t), x, lo * sample_x), c->pd.src_desc())},
          {DNNL_ARG_DIFF_DST, l.in(mem(s.dst_md(t), dy, lo * sample_y), c->pd.diff_dst_desc())},
          {DNNL_ARG_DIFF_WEIGHTS,
           l.out(mem(s.weights_md(f32), dw_part, task * dw.numel()), c->pd.diff_weights_desc())}};
      if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, mem(s.bias_md(f32), db_part, task * db.numel()));
      c->primitive.execute(onednn_stream(), args);
      l.finish();
    }
  });
  if (!ok) return false;
  // Summed in task order (reduce_cols walks the rows in order), then rounded once.
  for (auto [part, grad] : {std::pair{&dw_part, &dw}, std::pair{&db_part, &db}}) {
    if (!grad->defined()) continue;
    if (grad->dtype() == DType::f32) {  // reduce_cols reads out as its numel() columns
      reduce_cols(ReduceOp::Sum, *part, *grad);
      continue;
    }
    Tensor sum = empty(grad->shape());
    reduce_cols(ReduceOp::Sum, *part, sum);
    copy(sum, *grad);
  }
  return true;
}

}  // namespace tandem::cpu

namespace tandem {

std::string cpu_conv_path(DType t) {
  if (!is_floating(t) || t == DType::f64) return t == DType::f64 ? "im2col + dgemm" : "none";
  if (t == DType::f32 && !cpu_info().avx512f) return "im2col + sgemm (no AVX-512)";
  if (t != DType::f32 && !cpu::has_16bit_hardware(t))
    return "converted to float32 (" + cpu::no_16bit_hardware_reason(t) + ")";
  // What oneDNN picks for a typical layer (32 -> 64 channels, 3x3, batch 64), per algorithm.
  cpu::OneOpenMpThread one;
  const dnnl::memory::data_type dt = cpu::onednn_type(t);
  auto impl = [&](dnnl::algorithm alg) -> std::string {
    auto md = [&](dnnl::memory::dims d) {
      return dnnl::memory::desc(d, dt, dnnl::memory::format_tag::any);
    };
    try {
      return dnnl::convolution_forward::primitive_desc({dnnl::prop_kind::forward_training,
                                                        alg,
                                                        md({64, 32, 13, 13}),
                                                        md({64, 32, 3, 3}),
                                                        md({64, 64, 11, 11}),
                                                        {1, 1},
                                                        {0, 0},
                                                        {0, 0},
                                                        {0, 0}},
                                                       cpu::onednn_engine())
          .impl_info_str();
    } catch (const dnnl::error&) {
      return "none";
    }
  };
  const std::string direct = impl(dnnl::algorithm::convolution_direct);
  if (t != DType::f32)
    return direct == "none" ? "converted to float32 (oneDNN has no convolution for it)"
                            : "oneDNN " + direct + " on blocked layouts";
  if (!cpu::worth_calling(t, direct)) return "im2col + sgemm (oneDNN has only " + direct + ")";
  const std::string wino = impl(dnnl::algorithm::convolution_winograd);
  return "oneDNN on blocked layouts, 16+ input channels: " +
         (cpu::worth_calling(t, wino) ? wino + " for 3x3 stride 1 (not the input gradient), "
                                      : std::string()) +
         direct + " otherwise; im2col + sgemm below 16";
}

}  // namespace tandem
