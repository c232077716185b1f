// tools/plan/step_trace.cpp — a rank's kernels and collectives in order (step_trace.h).
#include "step_trace.h"

namespace tandem::tools {

int CallTable::add(const meta_calls::Call& call,
                   const std::function<meta_calls::Replay()>& replay) {
  const std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = index_.emplace(call.signature, int(calls_.size()));
  if (fresh) {
    calls_.push_back(call);
    replays_.push_back(replay());  // the shapes, once per distinct call
  }
  return it->second;
}

size_t CallTable::size() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return calls_.size();
}

StepTrace::StepTrace(int rank, std::shared_ptr<CallTable> calls)
    : rank_(rank), calls_(std::move(calls)) {}

StepTrace::~StepTrace() { stop(); }

void StepTrace::start() {
  on_ = true;
  meta_calls::attach(rank_, this);
}

void StepTrace::stop() {
  if (!on_.exchange(false)) return;
  meta_calls::attach(rank_, nullptr);
}

RankTrace StepTrace::take() {
  const std::lock_guard<std::mutex> lock(mu_);
  return std::move(trace_);
}

void StepTrace::record(const meta_calls::Call& call,
                       const std::function<meta_calls::Replay()>& replay) {
  if (!on_) return;
  const int index = calls_->add(call, replay);
  const std::lock_guard<std::mutex> lock(mu_);
  trace_.items.push_back({TraceItem::Kind::Kernel, index});
}

uint64_t StepTrace::issued(const parallel::RehearsedCollective& c) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (!on_) return ~uint64_t(0);
  const int index = int(trace_.collectives.size());
  trace_.collectives.push_back(c);
  trace_.items.push_back({TraceItem::Kind::Issue, index});
  return uint64_t(index);
}

void StepTrace::waited(uint64_t id) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (!on_ || id >= trace_.collectives.size()) return;  // one issued before the recording
  trace_.items.push_back({TraceItem::Kind::Wait, int(id)});
}

}  // namespace tandem::tools
