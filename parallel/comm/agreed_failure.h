// parallel/comm/agreed_failure.h — a failure on one rank made every rank's, before anyone goes
// on: a rank that throws between two collectives leaves the others waiting in the second until
// the timeout. So a step that can fail on some ranks (a save, a load) catches its error, every
// rank learns which ranks failed (one all-reduce), and all throw together.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace tandem::parallel {

/// What `f` threw: its message, and the exception itself (to rethrow as it was); both empty when
/// it returned.
struct Attempt {
  std::string error;
  std::exception_ptr exception;
};
template <typename F>
Attempt attempt(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return {e.what(), std::current_exception()};
  }
  return {};
}

/// What `f` throws, as its message; empty when it returns.
template <typename F>
std::string error_of(F&& f) {
  return attempt(std::forward<F>(f)).error;
}

/// Every rank calls it with its own `error` (empty: it managed); each returns the ranks whose
/// error is not empty, in order. One all-reduce on `device` (the group's).
std::vector<int> failed_ranks(Communicator& group, Device device, const std::string& error);

}  // namespace tandem::parallel
