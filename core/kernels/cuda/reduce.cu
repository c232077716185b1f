// core/kernels/cuda/reduce.cu — reductions over the last dim of [M, K] (rows) or the first dim of
// [K, M] (cols), the CUDA side of cpu/reduce.cpp. Rows: a warp per short row, a block per long
// one; cols: 32 columns per block, 8 threads down each. Few long rows or columns are split across
// blocks and finished by a second pass over the partial results. bfloat16 and float16 are read as
// they are and reduced in float (compute_t), rounded once into the result: the numbers of a float32
// copy reduced, without the copy (a 16-bit Linear's bias gradient is the column sum of its output
// gradient, tokens × features).
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>
#include <tandem/core/kernels/cuda/in_float.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

constexpr int kColThreadsY = kThreads / kWarp;  // threads down each column
constexpr int64_t kTargetBlocks = 1024;         // enough resident blocks to fill an H100

// A partial result: the value, and for ArgMax the index it came from.
template <typename T>
struct Acc {
  T v;
  int64_t i;
};

template <typename T>
__device__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return isnan(v);
  else
    return false;
}

template <ReduceOp Op, typename T>
__device__ Acc<T> identity() {
  using L = std::numeric_limits<T>;
  constexpr bool fp = std::is_floating_point_v<T>;
  if constexpr (Op == ReduceOp::Max || Op == ReduceOp::ArgMax)
    return {fp ? -L::infinity() : L::lowest(), INT64_MAX};
  else if constexpr (Op == ReduceOp::Min)
    return {fp ? L::infinity() : L::max(), 0};
  else
    return {T(0), 0};
}

// Max and Min are NaN if any element is (torch.amax, as the CPU). ArgMax ranks NaN above every
// number (torch.argmax); ties, NaNs among them, go to the lower index: the CPU keeps the first.
template <ReduceOp Op, typename T>
__device__ Acc<T> combine(Acc<T> a, Acc<T> b) {
  if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Mean) {
    return {T(a.v + b.v), 0};
  } else if constexpr (Op == ReduceOp::Max) {
    return {d_max(a.v, b.v), 0};
  } else if constexpr (Op == ReduceOp::Min) {
    return {d_min(a.v, b.v), 0};
  } else {
    const bool a_nan = is_nan(a.v), b_nan = is_nan(b.v);
    if (a_nan || b_nan) return b_nan && (!a_nan || b.i < a.i) ? b : a;
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
  }
}

// Adds element x[i] to a.
template <ReduceOp Op, typename A, typename T>
__device__ Acc<A> fold(Acc<A> a, T x_stored, int64_t i) {
  const A x = A(x_stored);
  if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Mean) {
    a.v += x;
    return a;
  } else {
    return combine<Op>(a, Acc<A>{x, i});
  }
}

template <ReduceOp Op, typename T>
__device__ Acc<T> warp_reduce(Acc<T> a) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    Acc<T> b;
    b.v = __shfl_down_sync(0xffffffffu, a.v, o);
    b.i = Op == ReduceOp::ArgMax ? __shfl_down_sync(0xffffffffu, a.i, o) : 0;
    a = combine<Op>(a, b);
  }
  return a;  // in lane 0
}

// Reduces over a block of kThreads threads; the result is in thread 0.
template <ReduceOp Op, typename T>
__device__ Acc<T> block_reduce(Acc<T> a) {
  __shared__ Acc<T> per_warp[kThreads / kWarp];
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  a = warp_reduce<Op>(a);
  if (lane == 0) per_warp[warp] = a;
  __syncthreads();
  if (warp == 0) a = warp_reduce<Op>(lane < kThreads / kWarp ? per_warp[lane] : identity<Op, T>());
  __syncthreads();  // per_warp is written again for the next row
  return a;
}

// Writes out[r] (rounded once into T) from the reduction `a` of k elements; the input pointer
// gives T.
template <ReduceOp Op, typename A, typename T>
__device__ void finish(Acc<A> a, const T* /*x0*/, int64_t k, void* out, int64_t r) {
  if constexpr (Op == ReduceOp::ArgMax) {
    static_cast<int64_t*>(out)[r] = k == 0 ? 0 : a.i;
  } else {
    A v = a.v;
    if constexpr (Op == ReduceOp::Mean) v = k ? A(a.v / A(k)) : std::numeric_limits<A>::quiet_NaN();
    if constexpr (Op == ReduceOp::Max || Op == ReduceOp::Min) v = k == 0 ? A(0) : a.v;
    static_cast<T*>(out)[r] = T(v);
  }
}

// Result r is either finished into out, or stored as partial [r, split] when the launch is split.
template <ReduceOp Op, typename A, typename T>
__device__ void emit(Acc<A> a, const T* x0, int64_t k, void* out, A* part_v, int64_t* part_i,
                     int64_t r) {
  if (part_v == nullptr) {
    finish<Op>(a, x0, k, out, r);
    return;
  }
  const int64_t slot = r * gridDim.y + blockIdx.y;
  part_v[slot] = a.v;
  if (part_i != nullptr) part_i[slot] = a.i;
}

// A warp per row, for rows short enough that a block would mostly idle.
template <ReduceOp Op, typename T>
__global__ void rows_warp_kernel(const T* x, int64_t m, int64_t k, void* out) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = blockDim.x / kWarp;
  for (int64_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < m; r += gridDim.x * warps) {
    const T* row = x + r * k;
    Acc<compute_t<T>> a = identity<Op, compute_t<T>>();
    for (int64_t c = lane; c < k; c += kWarp) a = fold<Op>(a, row[c], c);
    a = warp_reduce<Op>(a);
    if (lane == 0) finish<Op>(a, row, k, out, r);
  }
}

// A block per row; with gridDim.y > 1, block (r, s) reduces columns [s·chunk, (s+1)·chunk).
template <ReduceOp Op, typename T>
__global__ void rows_block_kernel(const T* x, int64_t m, int64_t k, int64_t chunk, void* out,
                                  compute_t<T>* part_v, int64_t* part_i) {
  const int64_t lo = blockIdx.y * chunk, hi = lo + chunk < k ? lo + chunk : k;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* row = x + r * k;
    Acc<compute_t<T>> a = identity<Op, compute_t<T>>();
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) a = fold<Op>(a, row[c], c);
    a = block_reduce<Op>(a);
    if (threadIdx.x == 0) emit<Op>(a, row, k, out, part_v, part_i, r);
  }
}

// 32 columns per block (coalesced along a row), kColThreadsY threads walking down each; with
// gridDim.y > 1, block (tile, s) walks rows [s·chunk, (s+1)·chunk).
template <ReduceOp Op, typename T>
__global__ void cols_kernel(const T* x, int64_t k, int64_t m, int64_t chunk, void* out,
                            compute_t<T>* part_v, int64_t* part_i) {
  __shared__ Acc<compute_t<T>> acc[kColThreadsY][kWarp];
  const int64_t lo = blockIdx.y * chunk, hi = lo + chunk < k ? lo + chunk : k;
  for (int64_t tile = blockIdx.x; tile * kWarp < m; tile += gridDim.x) {
    const int64_t j = tile * kWarp + threadIdx.x;
    Acc<compute_t<T>> a = identity<Op, compute_t<T>>();
    if (j < m)
      for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) a = fold<Op>(a, x[r * m + j], r);
    acc[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && j < m) {
      for (int y = 1; y < kColThreadsY; ++y) a = combine<Op>(a, acc[y][threadIdx.x]);
      emit<Op>(a, x + j, k, out, part_v, part_i, j);
    }
    __syncthreads();  // acc is written again for the next tile
  }
}

// Second pass of a split launch: a warp per result combines its `splits` partials. The first
// element of result r is x[r·x0_stride].
template <ReduceOp Op, typename T>
__global__ void partials_kernel(const compute_t<T>* part_v, const int64_t* part_i, int64_t m,
                                int64_t splits, const T* x, int64_t x0_stride, int64_t k,
                                void* out) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = blockDim.x / kWarp;
  for (int64_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < m; r += gridDim.x * warps) {
    using A = compute_t<T>;
    Acc<A> a = identity<Op, A>();
    for (int64_t s = lane; s < splits; s += kWarp) {
      const int64_t slot = r * splits + s;
      a = combine<Op>(a, Acc<A>{part_v[slot], part_i != nullptr ? part_i[slot] : 0});
    }
    a = warp_reduce<Op>(a);
    if (lane == 0) finish<Op>(a, x + r * x0_stride, k, out, r);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits a reduction of `per_result` elements into as many pieces (each at least `min_piece`)
// as keep about kTargetBlocks blocks busy when there are only `blocks` results' worth of blocks.
int64_t splits_for(int64_t blocks, int64_t per_result, int64_t min_piece) {
  return std::clamp<int64_t>(
      std::min(ceil_div(per_result, min_piece), ceil_div(kTargetBlocks, blocks)), 1, 65535);
}

// Partial results of a split launch (in compute_t<T>), kept as tensors so memory statistics see
// them.
template <ReduceOp Op, typename T>
struct Partials {
  Tensor values, indices;
  Partials(const Tensor& x, int64_t count) {
    values = empty({count}, {.dtype = dtype_of<compute_t<T>>(), .device = x.device()});
    if (Op == ReduceOp::ArgMax) indices = empty({count}, {.dtype = kInt64, .device = x.device()});
  }
  compute_t<T>* v() const { return values.data<compute_t<T>>(); }
  int64_t* i() const { return indices.defined() ? indices.data<int64_t>() : nullptr; }
};

template <ReduceOp Op, typename T>
void* out_ptr(Tensor& out) {
  if constexpr (Op == ReduceOp::ArgMax)
    return out.data<int64_t>();
  else
    return out.data<T>();
}

template <ReduceOp Op, typename T>
void launch_rows(const Tensor& x, Tensor& out, int64_t m, int64_t k) {
  const T* px = x.data<T>();
  void* po = out_ptr<Op, T>(out);
  if (k <= 8 * kWarp) {
    rows_warp_kernel<Op, T><<<blocks_for(m * kWarp), kThreads, 0, stream()>>>(px, m, k, po);
    TD_CUDA_CHECK_LAUNCH();
    return;
  }
  const auto grid_x = unsigned(std::min<int64_t>(m, 65535 * 8));
  const int64_t splits = splits_for(m, k, 16 * kThreads);
  if (splits == 1) {
    rows_block_kernel<Op, T><<<grid_x, kThreads, 0, stream()>>>(px, m, k, k, po, nullptr, nullptr);
    TD_CUDA_CHECK_LAUNCH();
    return;
  }
  Partials<Op, T> part(x, m * splits);
  const dim3 grid(grid_x, unsigned(splits));
  rows_block_kernel<Op, T>
      <<<grid, kThreads, 0, stream()>>>(px, m, k, ceil_div(k, splits), po, part.v(), part.i());
  TD_CUDA_CHECK_LAUNCH();
  partials_kernel<Op, T><<<blocks_for(m * kWarp), kThreads, 0, stream()>>>(part.v(), part.i(), m,
                                                                           splits, px, k, k, po);
  TD_CUDA_CHECK_LAUNCH();
}

template <ReduceOp Op, typename T>
void launch_cols(const Tensor& x, Tensor& out, int64_t m, int64_t k) {
  const T* px = x.data<T>();
  void* po = out_ptr<Op, T>(out);
  const int64_t tiles = ceil_div(m, kWarp);
  const auto grid_x = unsigned(std::min<int64_t>(tiles, 65535 * 8));
  const dim3 block(kWarp, kColThreadsY);
  const int64_t splits = splits_for(tiles, k, 32 * kColThreadsY);
  if (splits == 1) {
    cols_kernel<Op, T><<<grid_x, block, 0, stream()>>>(px, k, m, k, po, nullptr, nullptr);
    TD_CUDA_CHECK_LAUNCH();
    return;
  }
  Partials<Op, T> part(x, m * splits);
  const dim3 grid(grid_x, unsigned(splits));
  cols_kernel<Op, T>
      <<<grid, block, 0, stream()>>>(px, k, m, ceil_div(k, splits), po, part.v(), part.i());
  TD_CUDA_CHECK_LAUNCH();
  partials_kernel<Op, T><<<blocks_for(m * kWarp), kThreads, 0, stream()>>>(part.v(), part.i(), m,
                                                                           splits, px, 1, k, po);
  TD_CUDA_CHECK_LAUNCH();
}

// Runs f.template operator()<Op>() for the runtime op: each op is its own kernel instantiation.
template <typename F>
void dispatch_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum:
      return f.template operator()<ReduceOp::Sum>();
    case ReduceOp::Mean:
      return f.template operator()<ReduceOp::Mean>();
    case ReduceOp::Max:
      return f.template operator()<ReduceOp::Max>();
    case ReduceOp::Min:
      return f.template operator()<ReduceOp::Min>();
    case ReduceOp::ArgMax:
      return f.template operator()<ReduceOp::ArgMax>();
  }
  ::tandem::detail::fail<ValueError>("reduce: unknown op ", int(op));
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& x, Tensor& out) {
  const int64_t m = out.numel(), k = m ? x.numel() / m : 0;
  if (m == 0) return;
  DeviceGuard guard(out.device());
  dispatch<NumericTypesWith16Bit>(x.dtype(), name(op), [&]<typename T>() {
    dispatch_op(op, [&]<ReduceOp Op>() { launch_rows<Op, T>(x, out, m, k); });
  });
}

void reduce_cols(ReduceOp op, const Tensor& x, Tensor& out) {
  const int64_t m = out.numel(), k = m ? x.numel() / m : 0;
  if (m == 0) return;
  DeviceGuard guard(out.device());
  dispatch<NumericTypesWith16Bit>(x.dtype(), name(op), [&]<typename T>() {
    dispatch_op(op, [&]<ReduceOp Op>() { launch_cols<Op, T>(x, out, m, k); });
  });
}

}  // namespace tandem::cuda
