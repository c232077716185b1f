// parallel/comm/thread_world.cpp — meetings, phases and mailboxes under one mutex. Collectives
// between threads are rare events next to the work inside them (a reduction over megabytes), so
// one lock and one condition variable for the whole world is simple and fast enough, with one
// refinement: a waiter spins briefly before it sleeps (wait(), below).
#include <sched.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/cpu_relax.h>
#include <tandem/parallel/comm/thread_world.h>

namespace tandem::parallel {

ThreadWorld::ThreadWorld(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout) {
  TD_CHECK_VALUE(size >= 1, "ThreadWorld: expected at least one rank, but got ", size);
}

template <typename Ready, typename Missing>
void ThreadWorld::wait(std::unique_lock<std::mutex>& lk, Ready ready, Missing missing,
                       const std::string& description) {
  // Spin first, as the shared-memory transport does: the ranks of a collective arrive within
  // microseconds of each other, and a sleep on the condition variable costs a wake-up of tens of
  // microseconds on each side (on a VM, the sleeping core halts and must be woken), which was
  // 4 KB's whole all-reduce time. Past 20 µs yield between looks, so ranks that outnumber the
  // cores let the late one run; past 200 µs sleep, so a rank waiting for a peer that is still
  // computing leaves the core. The spin reads `changes_` without the lock and takes the lock
  // only to look again after something changed.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  while (aborted_.empty() && !ready()) {
    const uint64_t seen = changes_.load(std::memory_order_relaxed);
    lk.unlock();
    for (int k = 0; k < 64 && changes_.load(std::memory_order_acquire) == seen; ++k)
      detail::cpu_relax();
    const auto waited = Clock::now() - start;
    if (waited > std::chrono::microseconds(20)) sched_yield();
    lk.lock();
    if (waited > std::chrono::microseconds(200)) break;
  }
  const bool ok = cv_.wait_for(lk, timeout_, [&] { return !aborted_.empty() || ready(); });
  TD_CHECK_AS(DistributedError, aborted_.empty(), "threads ", description, " failed because ",
              aborted_);
  TD_CHECK_AS(DistributedError, ok, "threads ", description, " did not complete within ",
              timeout_.count() / 1000.0, " s: ", missing(),
              "\n  hint: every rank must call the same collectives in the same order");
}

std::shared_ptr<ThreadWorld::Meeting> ThreadWorld::arrive(uint64_t seq, int rank,
                                                          const Tensor& input,
                                                          const std::string& call,
                                                          const std::string& description) {
  std::unique_lock lk(mu_);
  auto& slot = meetings_[seq];
  if (!slot) {
    slot = std::make_shared<Meeting>();
    slot->inputs.resize(size_t(size_));
    slot->calls.resize(size_t(size_));
    slot->parts.resize(size_t(size_));
  }
  std::shared_ptr<Meeting> m = slot;
  m->inputs[size_t(rank)] = input;
  m->calls[size_t(rank)] = call;
  if (m->phase_count.empty()) m->phase_count.assign(1, 0);
  ++m->phase_count[0];
  changed();
  wait(
      lk, [&] { return m->phase_count[0] == size_; },
      [&] {
        std::string late;
        for (int r = 0; r < size_; ++r)
          if (m->calls[size_t(r)].empty())
            late += (late.empty() ? "rank " : ", ") + std::to_string(r);
        return late + " did not arrive";
      },
      description);
  for (int r = 0; r < size_; ++r)
    TD_CHECK_AS(DistributedError, m->calls[size_t(r)] == call, "threads ", description, ": rank ",
                rank, " called ", call, " but rank ", r, " called ", m->calls[size_t(r)],
                "\n  hint: every rank must call the same collectives, with the same sizes, in "
                "the same order");
  return m;
}

void ThreadWorld::sync(Meeting& m, int phase, const std::string& description) {
  std::unique_lock lk(mu_);
  if (int(m.phase_count.size()) <= phase) m.phase_count.resize(size_t(phase) + 1, 0);
  ++m.phase_count[size_t(phase)];
  changed();
  wait(
      lk, [&] { return m.phase_count[size_t(phase)] == size_; },
      [&] { return str("ranks stopped inside the collective (phase ", phase, ")"); }, description);
}

void ThreadWorld::leave(uint64_t seq, Meeting& m) {
  std::lock_guard lk(mu_);
  if (++m.left == size_) meetings_.erase(seq);
}

void ThreadWorld::post(int src, int dst, Tensor message) {
  {
    std::lock_guard lk(mu_);
    mailboxes_[{src, dst}].push_back(std::move(message));
    changed();
  }
}

Tensor ThreadWorld::take(int src, int dst, const std::string& description) {
  std::unique_lock lk(mu_);
  auto& box = mailboxes_[{src, dst}];
  wait(
      lk, [&] { return !box.empty(); }, [&] { return str("rank ", src, " sent nothing"); },
      description);
  Tensor t = std::move(box.front());
  box.pop_front();
  return t;
}

void ThreadWorld::abort(int rank, const std::string& what) {
  abort_because(str("rank ", rank, " failed: ", what));
}

// The sub-groups' waiters fail too (a mesh's groups, a pipeline's message groups): a rank that
// fails leaves none of the others waiting in any group for the timeout.
void ThreadWorld::abort_because(const std::string& reason) {
  std::vector<std::shared_ptr<ThreadWorld>> subs;
  {
    std::lock_guard lk(mu_);
    if (aborted_.empty()) aborted_ = reason;
    for (const auto& [name, world] : subworlds_) subs.push_back(world);
    changed();
  }
  for (const auto& world : subs) world->abort_because(reason);
}

std::shared_ptr<ThreadWorld> ThreadWorld::subworld(const std::string& name, int size) {
  std::shared_ptr<ThreadWorld> world;
  std::string aborted;
  {
    std::lock_guard lk(mu_);
    auto& slot = subworlds_[name];
    if (!slot) slot = std::make_shared<ThreadWorld>(size, timeout_);
    world = slot;
    aborted = aborted_;
  }
  if (!aborted.empty()) world->abort_because(aborted);  // made after the failure: failed too
  return world;
}

}  // namespace tandem::parallel
