// parallel/pipeline/stage_workers.cpp — start, fan out, wait, join.
#include <pthread.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/error.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/pipeline/stage_workers.h>
#include <string>

namespace tandem::parallel {

StageWorkers::StageWorkers(const std::vector<Device>& devices) {
  for (size_t k = 0; k < devices.size(); ++k) {
    threads_.emplace_back([this, k, device = devices[k]] { loop(k, device); });
    pthread_setname_np(threads_.back().native_handle(),
                       ("tandem-pp-" + std::to_string(k)).substr(0, 15).c_str());
  }
}

StageWorkers::~StageWorkers() {
  {
    std::lock_guard lk(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StageWorkers::loop(size_t k, Device device) {
  cuda::DeviceGuard guard(device);  // a CUDA stage's device stays current
  trace::set_thread_name(str("pipeline stage ", k, " (", device, ")"));
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* job;
    {
      std::unique_lock lk(mutex_);
      start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(k);
    std::lock_guard lk(mutex_);
    if (--running_ == 0) done_.notify_all();
  }
}

void StageWorkers::run(const std::function<void(size_t)>& fn) {
  std::unique_lock lk(mutex_);
  job_ = &fn;
  running_ = threads_.size();
  ++generation_;
  start_.notify_all();
  done_.wait(lk, [&] { return running_ == 0; });
  job_ = nullptr;
}

}  // namespace tandem::parallel
