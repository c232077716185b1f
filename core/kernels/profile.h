// core/kernels/profile.h — where a step's device time goes, kernel by kernel: between start() and
// stop(), every call through the kernel table (kernels.h) is timed, on CUDA by two events recorded
// on the stream it launches on, on the CPU by the wall clock. The rows are labelled by the table's
// entry, the operation for the elementwise and reduction kernels, and the dtype of the first
// floating-point tensor ("gemm bfloat16", "binary add float32"): the table a user of
// torch.profiler's key_averages() reads, at the one place every op's work passes through.
//   kernel_profile::start();  step();
//   std::puts(kernel_profile::format(kernel_profile::stop()).c_str());
// On CUDA the time between the two events is the GPU's work, and, where the GPU had nothing
// queued when the call began (a launch-bound step), the host's work on the call too (its checks,
// allocations, library setup): a row then says what the step waited for, not what the kernel
// took. Off, the profiler costs one relaxed atomic load per kernel call; on, each call costs two
// event records (or two clock reads) and a label: profile a few steps, not a training run. A
// kernel that calls another through the table counts once, as the outer one. Calls on a stream
// being captured into a CUDA graph are not timed (their events would be graph nodes). Code between
// start() and stop() that may throw should stop() on the way out: the profiler stays on until then.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {
struct Kernels;
class Device;
}  // namespace tandem

namespace tandem::kernel_profile {

struct Row {
  std::string kernel;  // "gemm bfloat16", "binary add float32", "copy float32"
  std::string device;  // "cuda" or "cpu"
  int64_t calls = 0;
  double ms = 0;     // summed over the calls
  double bytes = 0;  // the memory the calls' tensor arguments span (a broadcast view: once)
  double flops = 0;  // gemm: 2·M·N·K summed; 0 for the others
};

/// Starts timing kernel calls on every device (a second start() is an error).
void start();
/// Stops timing and returns one row per label and device type, the largest time first. Waits for
/// the GPU work that was timed to finish.
std::vector<Row> stop();
bool active();

/// The rows as a table: calls, milliseconds, each row's share of `whole_ms` (the step's time) or,
/// when it is 0, of the rows' sum, GB/s (bytes over time: a kernel far below the memory's
/// bandwidth is worth a look) and, for gemm, TFLOP/s; at most `limit` rows, the rest in one line.
std::string format(const std::vector<Row>& rows, double whole_ms = 0, size_t limit = 40);

namespace detail {
inline std::atomic<bool> g_active{false};
/// The timed table standing in for `plain` (the CPU's or CUDA's) while profiling.
const Kernels& timed(const Kernels& plain, Device device);
}  // namespace detail

}  // namespace tandem::kernel_profile
