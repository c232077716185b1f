// tests/emulated/cuda_emulation.h — CUDA kernel source run on CPU threads, one std::thread per
// CUDA thread of a block, so that a kernel written for the GPU can be checked, and stepped through
// in a debugger, on a machine without one. It stands in for what the tensor-core attention kernels
// (core/kernels/cuda/flash_kernels.cuh) use, each with its documented meaning and nothing faster:
// the thread and block indices; __syncthreads() and __syncwarp() as barriers of the block's and
// the warp's threads; __shfl_xor_sync; the block's dynamic shared memory (filled with NaN bytes,
// as a GPU's holds whatever was there); bfloat16 and half (Tandem's own types, which round the
// same way); and WMMA's 16×16×16 warp-wide products, where every lane holds the whole tile, each
// call first waits for the warp's other lanes (the CUDA guide: "waits until all warp lanes have
// arrived"), and lane 0 writes a stored tile; a WMMA access the hardware would refuse (a pointer
// not 256-bit aligned, rows not 16 bytes apart) is recorded for the test to see. Not emulated:
// timing, occupancy, bank conflicts. A launch asking for more shared memory than sm_90 has is
// recorded too.
// Include it before the kernels; nothing else in the program may include CUDA headers.
#pragma once

#include <tandem/core/float16.h>
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define TANDEM_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)

struct EmulatedDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmulatedDim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

using __nv_bfloat16 = tandem::BFloat16;
using __half = tandem::Float16;
inline float __bfloat162float(__nv_bfloat16 x) { return float(x); }
inline float __half2float(__half x) { return float(x); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16(x); }
inline __half __float2half_rn(float x) { return __half(x); }

namespace tandem::cuda {  // launch.cuh's and device_math.cuh's, for float
inline constexpr int kWarp = 32;
using std::isinf;
inline float d_exp(float v) { return std::exp(v); }
inline float d_log(float v) { return std::log(v); }
}  // namespace tandem::cuda

namespace tandem::emulation {

// What the threads of one block share.
struct Block {
  Block(unsigned threads, size_t shared_bytes)
      : block(std::ptrdiff_t(threads)), exchange(threads / 32), shared(shared_bytes + 128) {
    for (unsigned w = 0; w < threads / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(32));
    std::memset(shared.data(), 0xFF, shared.size());  // NaN in every float type
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::array<uint64_t, 32>> exchange;  // a warp's lanes' values in a shuffle
  std::vector<unsigned char> shared;
};
inline thread_local Block* t_block = nullptr;

inline unsigned char* dynamic_shared() {  // 128-byte aligned, as CUDA's
  auto at = reinterpret_cast<uintptr_t>(t_block->shared.data());
  return t_block->shared.data() + ((128 - at % 128) % 128);
}
inline unsigned lane() { return threadIdx.x % 32; }

// What the hardware would refuse that the CPU would not: a WMMA load or store whose pointer is not
// 256-bit aligned, or whose leading dimension is not a multiple of 16 bytes. Recorded, not thrown
// (a std::thread cannot throw), for the test to check after each launch.
inline std::mutex g_violations_mutex;
inline std::vector<std::string> g_violations;
inline std::vector<std::string> take_violations() {
  std::lock_guard lk(g_violations_mutex);
  return std::exchange(g_violations, {});
}
template <typename T>
void check_wmma_access(const T* p, unsigned ldm, const char* what) {
  const bool aligned = reinterpret_cast<uintptr_t>(p) % 32 == 0;
  const bool stride = (ldm * sizeof(T)) % 16 == 0;
  if (aligned && stride) return;
  std::lock_guard lk(g_violations_mutex);
  g_violations.push_back(std::string(what) + (aligned ? "" : ": pointer not 32-byte aligned") +
                         (stride ? "" : ": ldm " + std::to_string(ldm) + " not 16 bytes apart"));
}
inline void warp_barrier() { t_block->warps[threadIdx.x / 32]->arrive_and_wait(); }

/// Runs `kernel` as `blocks` blocks of `threads` threads (a multiple of 32) with `shared_bytes` of
/// dynamic shared memory each, one block after another.
template <typename F>
void launch(unsigned blocks, unsigned threads, size_t shared_bytes, F kernel) {
  constexpr size_t kMaxShared = 227 * 1024;  // sm_90's most dynamic shared memory per block
  if (shared_bytes > kMaxShared) {
    std::lock_guard lk(g_violations_mutex);
    g_violations.push_back("launch: " + std::to_string(shared_bytes) +
                           " bytes of shared memory, past sm_90's " + std::to_string(kMaxShared));
  }
  for (unsigned b = 0; b < blocks; ++b) {
    Block block(threads, shared_bytes);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        blockIdx = {b, 0, 0};
        blockDim = {threads, 1, 1};
        gridDim = {blocks, 1, 1};
        t_block = &block;
        kernel();
      });
    for (std::thread& t : pool) t.join();
  }
}

}  // namespace tandem::emulation

inline void __syncthreads() { tandem::emulation::t_block->block.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { tandem::emulation::warp_barrier(); }

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  auto& slots = tandem::emulation::t_block->exchange[threadIdx.x / 32];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[tandem::emulation::lane()] = bits;
  __syncwarp();
  const uint64_t got = slots[tandem::emulation::lane() ^ unsigned(lane_mask)];
  __syncwarp();  // the slots are free for the next shuffle
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16×16×16 shape only");
  float x[16][16];  // the whole tile, in every lane
};
template <typename Use, typename T, typename Layout = void>
using tile = fragment<Use, 16, 16, 16, T, Layout>;

// element (r, c) of a row-major (or column-major) matrix at p with leading dimension ldm
template <typename Use, typename T, typename Layout>
void load_matrix_sync(tile<Use, T, Layout>& f, const T* p, unsigned ldm) {
  tandem::emulation::warp_barrier();
  tandem::emulation::check_wmma_access(p, ldm, "load_matrix_sync");
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.x[r][c] = float(std::is_same_v<Layout, col_major> ? p[r + c * ldm] : p[r * ldm + c]);
}
inline void load_matrix_sync(tile<accumulator, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  tandem::emulation::warp_barrier();
  tandem::emulation::check_wmma_access(p, ldm, "load_matrix_sync");
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.x[r][c] = layout == mem_col_major ? p[r + c * ldm] : p[r * ldm + c];
}
inline void store_matrix_sync(float* p, const tile<accumulator, float>& f, unsigned ldm,
                              layout_t layout) {
  tandem::emulation::warp_barrier();
  if (tandem::emulation::lane() != 0) return;
  tandem::emulation::check_wmma_access(p, ldm, "store_matrix_sync");
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      (layout == mem_col_major ? p[r + c * ldm] : p[r * ldm + c]) = f.x[r][c];
}
inline void fill_fragment(tile<accumulator, float>& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}
// d = a·b + c in float (d may be c)
template <typename TA, typename LA, typename TB, typename LB>
void mma_sync(tile<accumulator, float>& d, const tile<matrix_a, TA, LA>& a,
              const tile<matrix_b, TB, LB>& b, const tile<accumulator, float>& c) {
  tandem::emulation::warp_barrier();
  float out[16][16];
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float s = c.x[r][col];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][col];
      out[r][col] = s;
    }
  std::memcpy(d.x, out, sizeof(out));
}

}  // namespace nvcuda::wmma
