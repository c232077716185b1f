// tools/plan/step_trace.h — what a rank does in a step, in order, as the rehearsal walks it: the
// kernels it would call (meta_calls.h) and the collectives it would issue and wait for
// (parallel/comm/rehearsal_communicator.h). The time model (step_time.h) prices each kernel from
// the host's profile and each collective from the link's fit, then plays the ranks' traces against
// each other. The kernels of all ranks go in one table of distinct calls, each timed once.
#pragma once

#include <tandem/core/kernels/meta_calls.h>
#include <tandem/parallel/comm/rehearsal_communicator.h>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem::tools {

/// Every distinct kernel call of a rehearsal (by signature), shared by its ranks.
class CallTable {
 public:
  /// The call's index, new or seen before.
  int add(const meta_calls::Call& call, const std::function<meta_calls::Replay()>& replay);
  size_t size() const;
  const meta_calls::Call& call(int index) const { return calls_[size_t(index)]; }
  const meta_calls::Replay& replay(int index) const { return replays_[size_t(index)]; }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> index_;
  std::vector<meta_calls::Call> calls_;
  std::vector<meta_calls::Replay> replays_;
};

struct TraceItem {
  enum class Kind : uint8_t { Kernel, Issue, Wait };
  Kind kind = Kind::Kernel;
  int index = 0;  // Kernel: into the CallTable; Issue and Wait: into RankTrace::collectives
};

struct RankTrace {
  std::vector<TraceItem> items;
  std::vector<parallel::RehearsedCollective> collectives;
};

/// One rank's recorder: attached to its meta device and observing its communicator; records
/// between start() and stop() only (the second step).
class StepTrace : public meta_calls::Recorder, public parallel::RehearsalObserver {
 public:
  StepTrace(int rank, std::shared_ptr<CallTable> calls);
  ~StepTrace() override;
  void start();
  void stop();
  RankTrace take();

  void record(const meta_calls::Call& call,
              const std::function<meta_calls::Replay()>& replay) override;
  uint64_t issued(const parallel::RehearsedCollective& c) override;
  void waited(uint64_t id) override;

 private:
  const int rank_;
  std::shared_ptr<CallTable> calls_;
  std::atomic<bool> on_{false};
  std::mutex mu_;
  RankTrace trace_;
};

}  // namespace tandem::tools
