// core/kernels/cuda/copy.cu — copies to, from and between CUDA devices, and fill. On one device a
// copy of any layout and dtype is one kernel (a cudaMemcpyAsync when nothing changes); host <->
// device copies move contiguous bytes, converting on the host or on the device around them; GPU to
// GPU is peer to peer. A copy that touches host memory has finished when it returns.
#include <cuda_runtime.h>
#include <tandem/core/cuda/deferred_errors.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/layout.h>
#include <cmath>
#include <memory>
#include <mutex>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <vector>

namespace tandem::cuda {
namespace {

template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) dst[i] = static_cast<D>(src[i]);
}

template <typename S, typename D>
__global__ void strided_copy_kernel(const S* src, StridedIndex is, D* dst, StridedIndex id,
                                    int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) dst[id.offset(i)] = static_cast<D>(src[is.offset(i)]);
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) out[i] = value;
}

template <typename T>
__global__ void strided_fill_kernel(T* out, StridedIndex io, T value, int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) out[io.offset(i)] = value;
}

/// Nothing to convert or rearrange: the copy is nbytes of memory.
bool plain_bytes(const Tensor& src, const Tensor& dst) {
  return src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous();
}

/// A contiguous tensor of `like`'s shape with `dtype` on `device`, for staging.
Tensor staging(const Tensor& like, DType dtype, Device device) {
  return empty(like.shape(), {.dtype = dtype, .device = device});
}

/// src and dst on the same CUDA device: any strides (dst's too) and any dtypes.
void copy_on_device(const Tensor& src, Tensor& dst) {
  DeviceGuard guard(dst.device());
  if (plain_bytes(src, dst)) {
    if (src.data_ptr() == dst.data_ptr()) return;
    TD_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                  cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  const int64_t n = dst.numel();
  dispatch_all(src.dtype(), "copy", [&]<typename S>() {
    dispatch_all(dst.dtype(), "copy", [&]<typename D>() {
      if (src.is_contiguous() && dst.is_contiguous()) {  // same shape: one index walks both
        convert_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(src.data<S>(), dst.data<D>(), n);
      } else {
        strided_copy_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
            src.data<S>(), StridedIndex(src, dst.shape()), dst.data<D>(),
            StridedIndex(dst, dst.shape()), n);
      }
      TD_CUDA_CHECK_LAUNCH();
    });
  });
}

/// Bytes from one GPU to another on the destination's stream, without blocking the host. Events
/// order the copy after the work queued on the source device (which may still be writing src) and
/// the source device's later work after the copy (which may overwrite or free src).
void peer_copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  DeviceGuard on_src(src_device);
  Event src_ready;  // an event belongs to the device current when it is made
  src_ready.record(stream());
  DeviceGuard on_dst(dst_device);
  Event copied;
  src_ready.wait(stream());
  TD_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream()));
  copied.record(stream());
  DeviceGuard back_on_src(src_device);
  copied.wait(stream());
}

/// GPU to GPU. Peer copies move contiguous bytes, so convert/compact on the source device first
/// and scatter into a strided destination on the destination device after.
void copy_between_devices(const Tensor& src, Tensor& dst) {
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    Tensor staged = staging(src, dst.dtype(), src.device());
    copy_on_device(src, staged);
    return copy_between_devices(staged, dst);
  }
  if (!dst.is_contiguous()) {
    Tensor landed = staging(dst, dst.dtype(), dst.device());
    copy_between_devices(src, landed);
    return copy_on_device(landed, dst);
  }
  peer_copy(dst.data_ptr(), dst.device().index(), src.data_ptr(), src.device().index(),
            src.nbytes());
}

/// Pinned sources of non-blocking copies in flight, each with the event after its copy: a source
/// freed earlier could be reused by the host while the DMA still reads it. Finished ones are
/// dropped on every new copy.
void keep_alive_until_done(const Tensor& host) {
  static std::mutex mu;
  static std::vector<std::pair<std::unique_ptr<Event>, Tensor>> in_flight;
  std::lock_guard lk(mu);
  std::erase_if(in_flight, [](auto& e) {
    try {
      return e.first->query();  // not ready: keep (query() clears cudaErrorNotReady)
    } catch (const Error&) {
      return true;  // failed: the copy itself reports that
    }
  });
  auto done = std::make_unique<Event>();
  done->record(stream());
  in_flight.emplace_back(std::move(done), host);
}

/// Host to GPU: convert and compact on the host (the CPU copy kernel), move the bytes, and
/// scatter on the device if dst is strided.
void copy_host_to_device(const Tensor& src, Tensor& dst) {
  // A captured copy would read this host memory again at every replay, long after it is gone.
  TD_CHECK_AS(CudaError, !is_capturing(dst.device().index()), "a copy from the host to ",
              dst.device(),
              " is being captured into a CUDA graph, whose replays would read the host memory "
              "again after it is gone\n  hint: copy inputs into the graph's tensors before "
              "replay(), outside the capture");
  const Tensor host = src.is_contiguous() && src.dtype() == dst.dtype()
                          ? src
                          : tandem::detail::convert(src, src.device(), dst.dtype());
  DeviceGuard guard(dst.device());
  Tensor landed = dst.is_contiguous() ? dst : staging(dst, dst.dtype(), dst.device());
  TD_CUDA_CHECK(cudaMemcpyAsync(landed.data_ptr(), host.data_ptr(), host.nbytes(),
                                cudaMemcpyHostToDevice, stream()));
  if (!landed.is_same(dst)) copy_on_device(landed, dst);
  if (non_blocking_copies() && host.is_same(src) && is_pinned(src)) {
    keep_alive_until_done(host);  // returns now; the bytes move while the caller goes on
    return;
  }
  // The caller may free or overwrite the host memory as soon as we return.
  note_host_sync("a copy to cuda from host memory that is not pinned or not non-blocking");
  TD_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

/// GPU to host: convert and compact on the device, move the bytes, and scatter on the host if
/// dst is strided.
void copy_device_to_host(const Tensor& src, Tensor& dst) {
  DeviceGuard guard(src.device());
  Tensor dense = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    dense = staging(src, dst.dtype(), src.device());
    copy_on_device(src, dense);
  }
  Tensor landed = dst.is_contiguous() ? dst : staging(dst, dst.dtype(), dst.device());
  note_host_sync("a copy from cuda to the host (Tensor::to, item(), to_vector)");
  TD_CUDA_CHECK(cudaMemcpyAsync(landed.data_ptr(), dense.data_ptr(), dense.nbytes(),
                                cudaMemcpyDeviceToHost, stream()));
  TD_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the data must be there when we return
  raise_deferred_errors(src.device().index());     // the device has been waited for anyway
  if (!landed.is_same(dst)) kernels(dst.device()).copy(landed, dst);
}

}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  TD_INTERNAL_ASSERT(src.shape() == dst.shape(), "copy: ", src.shape(), " vs ", dst.shape());
  const bool from_host = src.device().is_cpu(), to_host = dst.device().is_cpu();
  TD_CHECK_DEVICE(!from_host || !to_host, "copy: the CUDA backend cannot copy ", src.device(),
                  " -> ", dst.device());
  if (dst.numel() == 0) return;
  if (from_host) return copy_host_to_device(src, dst);
  if (to_host) return copy_device_to_host(src, dst);
  if (src.device() == dst.device()) return copy_on_device(src, dst);
  copy_between_devices(src, dst);
}

void fill(Tensor& out, double value) {
  DeviceGuard guard(out.device());
  dispatch_all(out.dtype(), "fill", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    if (out.is_contiguous() && value == 0.0 && !std::signbit(value)) {
      // +0 is all-zero bytes in every dtype: a memset is the fastest fill.
      TD_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream()));
      return;
    }
    const T v = static_cast<T>(value);
    if (out.is_contiguous()) {
      fill_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out.data<T>(), v, n);
    } else {
      strided_fill_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
          out.data<T>(), StridedIndex(out, out.shape()), v, n);
    }
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
