// core/kernels/cuda/flash_attention.cu — scaled-dot-product attention on the tensor cores for
// bfloat16 and float16 (FlashAttention-2's algorithm): the products q·kᵀ, P·v, dO·vᵀ, dS·k, P̃ᵀ·dO
// and dSᵀ·q run as 16×16×16 WMMA steps with float accumulators, the softmax in float between
// them, and nothing of size Tq×Tk ever reaches global memory. attention.cu's CUDA-core kernel,
// which the 16-bit types otherwise reach through widen.h, spent most of a GPT-2 step there, and
// the Math backend's alternative writes and reads the scores and probabilities several times over.
//
// Forward: a block per 64 queries; each warp keeps its 16 rows' running maximum, sum and float
// output (in shared memory, where each row can be rescaled), key tiles streaming past. Backward
// as attention.cu's: dQ in one kernel (a block per 64 queries, key tiles streaming) and dK, dV in
// another (a block per 64 keys, query tiles streaming), each recomputing the probabilities from
// the saved log-sum-exp. Every sum runs in a fixed order, with no atomics: the same bits every run.
// The probabilities and dS are rounded to the input type before their products, as in
// FlashAttention; the CUDA-core kernel keeps them in float, so the two agree to 16-bit rounding.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/tensor_checks.h>
#include <mutex>
#include <set>
#include <tandem/core/kernels/cuda/flash_kernels.cuh>
#include <utility>

namespace tandem::cuda {
namespace {

using namespace flash;

// ---- host side ----

// `t` itself if it is contiguous, 16-byte aligned (the tiles' vector loads) and of `dtype`, else
// such a copy (a view at an odd offset, an upstream gradient broadcast from a scalar or one that
// arrives in float32).
Tensor ready(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous() &&
      reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)
    return t;
  Tensor copy = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  kernels(t.device()).copy(t, copy);  // the kernel: core does not call autograd's copy_
  return copy;
}

// Opts `kernel` into `bytes` of shared memory past the default 48 KB: an attribute of the function
// on the current device, so set once per device rather than at every launch.
void allow_shared_memory(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  TD_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lk(mu);
  if (done.count({kernel, device})) return;
  TD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  done.insert({kernel, device});
}

// Launches `blocks` blocks of `kernel` with `bytes` of shared memory.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, size_t bytes, int64_t blocks, Args... args) {
  TD_CHECK_VALUE(blocks <= int64_t(INT32_MAX), "scaled_dot_product_attention: ", blocks,
                 " tiles are more than one CUDA launch takes");
  allow_shared_memory(reinterpret_cast<const void*>(kernel), bytes);
  kernel<<<unsigned(blocks), kBlockThreads, bytes, stream()>>>(args...);
  TD_CUDA_CHECK_LAUNCH();
}

// f.template operator()<S, D>() for q's 16-bit type and head dim (params.h says which).
template <typename F>
void dispatch_flash(const Tensor& q, const Tensor& v, F&& f) {
  const char* why = flash_attention_unsupported(q.dtype(), q.size(2), v.size(2));
  TD_CHECK_VALUE(why == nullptr, "scaled_dot_product_attention: the flash kernels cannot take ",
                 describe(q), ": ", why ? why : "");
  auto by_dim = [&]<typename S>() {
    switch (q.size(2)) {
      case 32:
        return f.template operator()<S, 32>();
      case 64:
        return f.template operator()<S, 64>();
      default:
        return f.template operator()<S, 128>();
    }
  };
  if (q.dtype() == kBFloat16)
    by_dim.template operator()<__nv_bfloat16>();
  else
    by_dim.template operator()<__half>();
}

}  // namespace

void flash_attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                             const Tensor& mask, const AttentionParams& a, Tensor& out,
                             Tensor& lse) {
  if (q_in.size(0) * q_in.size(1) == 0) return;
  DeviceGuard guard(out.device());
  const Tensor q = ready(q_in, q_in.dtype()), k = ready(k_in, q.dtype()),
               v = ready(v_in, q.dtype());
  dispatch_flash(q, v, [&]<typename S, int D>() {
    const int64_t tiles = tiles_of(q.size(1));
    launch(flash_forward_kernel<S, D>, kForwardBytes<S, D>, tiles * q.size(0), in<S>(q), in<S>(k),
           in<S>(v), scores_for<S>(q, k, mask, a), tiles, out_of<S>(out), lse.data<float>());
  });
}

void flash_attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                              const Tensor& mask, const Tensor& out_in, const Tensor& lse,
                              const Tensor& dout_in, const AttentionParams& a, Tensor& dq,
                              Tensor& dk, Tensor& dv) {
  DeviceGuard guard(dq.device());
  const Tensor q = ready(q_in, q_in.dtype()), k = ready(k_in, q.dtype()),
               v = ready(v_in, q.dtype());
  const Tensor out = ready(out_in, q.dtype()), dout = ready(dout_in, q.dtype());
  const int64_t b = q.size(0), tq = q.size(1), tk = k.size(1);
  dispatch_flash(q, v, [&]<typename S, int D>() {
    const Scores<S> sc = scores_for<S>(q, k, mask, a);
    if (b * tq > 0) {
      Tensor delta = empty({b * tq}, {.dtype = kFloat32, .device = q.device()});
      flash_delta_kernel<S><<<blocks_for(b * tq * kWarp), kThreads, 0, stream()>>>(
          in<S>(out), in<S>(dout), delta.data<float>(), b * tq, D);
      TD_CUDA_CHECK_LAUNCH();
      launch(flash_dq_kernel<S, D>, kDqBytes<S, D>, tiles_of(tq) * b, in<S>(q), in<S>(k), in<S>(v),
             in<S>(dout), lse.data<float>(), delta.data<float>(), sc, tiles_of(tq), out_of<S>(dq));
      if (tk > 0)
        launch(flash_dkdv_kernel<S, D>, kDkDvBytes<S, D>, tiles_of(tk) * b, in<S>(q), in<S>(k),
               in<S>(v), in<S>(dout), lse.data<float>(), delta.data<float>(), sc, tiles_of(tk),
               out_of<S>(dk), out_of<S>(dv));
    } else if (b * tk > 0) {  // no queries: the keys and values get no gradient
      kernels(dk.device()).fill(dk, 0);
      kernels(dv.device()).fill(dv, 0);
    }
  });
}

}  // namespace tandem::cuda
