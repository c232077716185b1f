// parallel/pipeline/stage_workers.h — one long-lived thread per pipeline stage. A pipeline step
// hands every stage its part at once and waits for all of them: the stages then run side by side,
// each blocking only on its neighbours' results. One thread per *stage* (not per device, as
// DataParallel's replica threads): two stages placed on the same device still both make progress.
#pragma once

#include <tandem/core/device.h>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::parallel {

class StageWorkers {
 public:
  /// Starts devices.size() threads, named "tandem-pp-<k>", each with its device current.
  explicit StageWorkers(const std::vector<Device>& devices);
  /// Lets every thread finish and joins them.
  ~StageWorkers();
  StageWorkers(const StageWorkers&) = delete;
  StageWorkers& operator=(const StageWorkers&) = delete;

  /// Calls fn(k) on stage k's thread for every k, all at once, and returns when all have
  /// returned. fn must not throw (the pipeline catches inside it); one call at a time.
  void run(const std::function<void(size_t)>& fn);

 private:
  void loop(size_t k, Device device);

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(size_t)>* job_ = nullptr;
  uint64_t generation_ = 0;  // bumped by run(): each thread runs each generation's job once
  size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::parallel
