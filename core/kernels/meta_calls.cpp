// core/kernels/meta_calls.cpp — recorders by meta device, placeholders, timing (meta_calls.h).
#include <tandem/core/check.h>
#include <tandem/core/kernels/meta_calls.h>
#include <tandem/core/tensor.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

namespace tandem::meta_calls {
namespace {

std::mutex g_mu;
std::map<int, Recorder*>& recorders() {
  static std::map<int, Recorder*> m;
  return m;
}

}  // namespace

void attach(int index, Recorder* recorder) {
  const std::lock_guard<std::mutex> lock(g_mu);
  auto& m = recorders();
  if (recorder == nullptr) {
    if (m.erase(index) > 0) detail::g_attached.fetch_sub(1);
    return;
  }
  if (m.insert_or_assign(index, recorder).second) detail::g_attached.fetch_add(1);
}

Recorder* detail::recorder(int index) {
  const std::lock_guard<std::mutex> lock(g_mu);
  auto it = recorders().find(index);
  return it == recorders().end() ? nullptr : it->second;
}

TensorSpec spec_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {.defined = true, .shape = t.shape(), .strides = t.strides(), .dtype = t.dtype()};
}

Tensor placeholder(const TensorSpec& spec, Device where) {
  if (!spec.defined) return Tensor();
  int64_t extent = 1;
  bool empty = false;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    empty = empty || spec.shape[d] == 0;
    extent += (spec.shape[d] - 1) * std::abs(spec.strides[d]);
  }
  const Tensor base = full({empty ? 0 : extent}, is_floating(spec.dtype) ? 0.5 : 0.0,
                           {.dtype = spec.dtype, .device = where});
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl_ptr()->storage;
  impl->shape = spec.shape;
  impl->strides = spec.strides;
  impl->dtype = spec.dtype;
  return Tensor(std::move(impl));
}

double time_replay(const Replay& replay, Device where) {
  TD_CHECK_DEVICE(where.is_cpu(), "meta_calls::time_replay: times calls on the CPU, not on ",
                  where);
  using Clock = std::chrono::steady_clock;
  const Prepared run = replay(where);
  auto seconds = [](Clock::time_point from) {
    return std::chrono::duration<double>(Clock::now() - from).count();
  };
  Clock::time_point t0 = Clock::now();
  run();  // the warm-up: first-touch pages, oneDNN's primitive cache
  const double once = std::max(seconds(t0), 1e-7);
  const int runs = int(std::clamp(1e-3 / once, 1.0, 1000.0));
  double best = once;
  for (int trial = 0; trial < 3; ++trial) {
    t0 = Clock::now();
    for (int i = 0; i < runs; ++i) run();
    best = std::min(best, seconds(t0) / runs);
  }
  return best;
}

}  // namespace tandem::meta_calls
