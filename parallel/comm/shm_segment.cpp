// parallel/comm/shm_segment.cpp — mapping segments, and the spin-then-futex wait on a peer's
// step count.
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/cpu_relax.h>
#include <tandem/parallel/comm/shm_segment.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <utility>

namespace tandem::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// A shared (not FUTEX_PRIVATE) futex: the word is in memory that other processes map.
void futex_wait(const std::atomic<uint32_t>& word, uint32_t expected, long timeout_ns) {
  timespec ts{0, timeout_ns};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool reached(const std::atomic<uint32_t>& word, uint32_t target) {
  return int32_t(word.load(std::memory_order_acquire) - target) >= 0;
}

void* map(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  TD_CHECK_AS(DistributedError, p != MAP_FAILED, "shared memory: cannot map /dev/shm", name, " (",
              bytes, " bytes): ", std::strerror(err));
  return p;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t data_bytes) {
  ShmSegment s;
  s.name_ = name;
  s.bytes_ = kHeaderBytes + data_bytes;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  TD_CHECK_AS(DistributedError, fd >= 0, "shared memory: cannot create /dev/shm", name, ": ",
              std::strerror(errno));
  s.owns_name_ = true;
  // posix_fallocate, not ftruncate: a full /dev/shm fails here with ENOSPC instead of killing
  // the process with SIGBUS at its first write.
  const int err = ::posix_fallocate(fd, 0, off_t(s.bytes_));
  if (err != 0) {
    ::close(fd);
    ::tandem::detail::fail<DistributedError>(
        "shared memory: cannot size /dev/shm", name, " to ", s.bytes_,
        " bytes: ", std::strerror(err),
        "\n  hint: /dev/shm is too small (a container's default is 64 MB; "
        "docker run --shm-size), or use backend \"gloo\"");
  }
  s.base_ = map(fd, s.bytes_, name);
  ShmHeader& h = s.header();
  new (&h) ShmHeader{};  // the words start at zero
  h.pid = int32_t(::getpid());
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t data_bytes) {
  ShmSegment s;
  s.name_ = name;
  s.bytes_ = kHeaderBytes + data_bytes;
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  TD_CHECK_AS(DistributedError, fd >= 0, "shared memory: cannot open a peer's /dev/shm", name, ": ",
              std::strerror(errno));
  s.base_ = map(fd, s.bytes_, name);
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  std::swap(name_, o.name_);
  std::swap(base_, o.base_);
  std::swap(bytes_, o.bytes_);
  std::swap(owns_name_, o.owns_name_);
  return *this;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  unlink();
}

void ShmSegment::unlink() {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

void shm_arrive(ShmHeader& mine) {
  mine.arrived.fetch_add(1, std::memory_order_seq_cst);  // publishes this rank's writes
  shm_wake(mine.arrived, mine.sleepers);
}

void shm_wake(std::atomic<uint32_t>& word, const std::atomic<uint32_t>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(word);
}

void shm_fail(ShmHeader& mine) {
  mine.failed.store(1, std::memory_order_seq_cst);
  futex_wake_all(mine.arrived);
}

ShmWait shm_wait(const ShmHeader& peer, uint32_t step, Clock::time_point& deadline,
                 std::chrono::milliseconds timeout, std::chrono::microseconds spin) {
  return shm_wait(peer.arrived, const_cast<std::atomic<uint32_t>&>(peer.sleepers), step, peer,
                  deadline, timeout, spin);
}

ShmWait shm_wait(const std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                 uint32_t target, const ShmHeader& peer, Clock::time_point& deadline,
                 std::chrono::milliseconds timeout, std::chrono::microseconds spin) {
  // Spin first: when both ranks are in the collective, the step comes within microseconds, and
  // a sleep would cost more than the copy (a futex wake-up takes tens of microseconds). Past
  // `spin` (20 µs), yield between checks, so a rank that shares this core with the peer lets it
  // run; past 1 ms, sleep, so a rank waiting for a peer that is still computing leaves the core
  // to others. A `spin` of zero (the ranks outnumber the cores: Open MPI's yield_when_idle)
  // yields at every check, since the peer this rank waits for may be waiting for this core.
  const bool yield_always = spin.count() == 0;
  Clock::time_point start;
  for (int i = 0;; ++i) {
    if (reached(word, target)) return ShmWait::kReached;
    if (yield_always)
      sched_yield();
    else
      detail::cpu_relax();
    if ((i & 63) != 63) continue;
    if (i == 63) {  // late: now the clock
      start = Clock::now();
      if (deadline == Clock::time_point{}) deadline = start + timeout;
      continue;
    }
    const auto waited = Clock::now() - start;
    if (waited > std::chrono::milliseconds(1)) break;
    if (waited > spin) sched_yield();
  }
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (int32_t(seen - target) < 0) futex_wait(word, seen, 1'000'000);  // 1 ms, then check
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(word, target)) return ShmWait::kReached;
    if (peer.failed.load(std::memory_order_acquire) != 0) return ShmWait::kFailed;
    if (!process_alive(peer.pid)) return ShmWait::kDied;
    if (Clock::now() > deadline) return ShmWait::kTimedOut;
  }
}

bool process_alive(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed child stays a zombie until its parent reaps it: kill() still finds it.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ||
         (line[paren + 2] != 'Z' && line[paren + 2] != 'X');
}

}  // namespace tandem::parallel
