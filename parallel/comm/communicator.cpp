// parallel/comm/communicator.cpp — Work (a completion flag with a deadline) and the checks and
// descriptions every backend shares.
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/communicator.h>
#include <cstdio>

namespace tandem::parallel {

Work::Work(uint64_t sequence_number, std::string description, std::chrono::milliseconds timeout)
    : seq_(sequence_number), description_(std::move(description)), timeout_(timeout) {}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  const bool done = cv_.wait_for(lk, timeout, [&] { return done_; });
  TD_CHECK_AS(DistributedError, done, description_, " did not complete within ",
              timeout.count() / 1000.0,
              " s (timeout)\n  hint: a rank that stopped calling collectives, or called them in a "
              "different order, leaves the others waiting; compare the sequence numbers");
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() {
  std::lock_guard lk(mu_);
  return done_;
}

void Work::mark_done(std::exception_ptr error) {
  {
    std::lock_guard lk(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

Communicator::Communicator(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  TD_CHECK_VALUE(size >= 1 && rank >= 0 && rank < size, "Communicator: rank ", rank,
                 " is not in a world of size ", size);
}

Communicator::~Communicator() = default;

void Communicator::check_tensor(const Tensor& t, const std::string& what) const {
  TD_CHECK_VALUE(t.defined(), backend(), " ", what, ": the tensor is undefined");
  TD_CHECK_VALUE(t.is_contiguous(), backend(), " ", what,
                 ": expected a contiguous tensor, but got ", ::tandem::describe(t),
                 " with strides ", t.strides(),
                 "\n  hint: call .contiguous() first; a collective works on the memory in place");
  TD_CHECK_DTYPE(t.dtype() != kBool, backend(), " ", what, ": ", t.dtype(),
                 " is not supported (float32, float64, int64, bfloat16, float16 are)");
}

void Communicator::check_reduce_op(ReduceOp op, const std::string& what) const {
  TD_CHECK_VALUE(op != ReduceOp::ArgMax, backend(), " ", what,
                 ": argmax is a reduction of one tensor, not across ranks (sum, mean, max, min)");
}

std::string Communicator::describe(const std::string& op, uint64_t seq, const Tensor* t,
                                   const std::string& extra) const {
  std::string s = op + " #" + std::to_string(seq) + " (";
  if (!extra.empty()) s += extra + (t ? ", " : "");
  if (t != nullptr) {
    char mib[32];
    std::snprintf(mib, sizeof(mib), "%.2f MiB", double(t->nbytes()) / (1 << 20));
    s += str(t->numel(), " x ", t->dtype(), " = ", mib);
  }
  return s + ") on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
}

}  // namespace tandem::parallel
