// tests/parallel/heartbeat_test.cpp — a lost rank ends the others within the heartbeat's
// deadline, not at a collective's timeout: three in-process heartbeats over one store (a halted
// one is found by its watcher, and the third learns it from the store; one that leaves is not
// mistaken for dead), and two processes in a real group, where rank 1 freezes (SIGSTOP: alive,
// sockets open, so the shared-memory communicator alone would wait out its 120 s timeout) in the
// middle of an all-reduce.
#include <gmock/gmock.h>
#include <tandem/parallel/heartbeat.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/hash_store.h>
#include <csignal>
#include <fstream>
#include <thread>

#include "data/temp_dir.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

struct Reports {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lost;  // (lost rank, message), one per reporting rank
  HeartbeatOptions options() {
    return {.interval = 50ms,
            .deadline = 400ms,
            .on_lost = [this](const std::string& message, int rank) {
              std::lock_guard lk(mu);
              lost.emplace_back(rank, message);
            }};
  }
  size_t count() {
    std::lock_guard lk(mu);
    return lost.size();
  }
  // Ranks 0, 1 and 2 beating through one in-process store.
  std::vector<std::unique_ptr<Heartbeat>> three_ranks() {
    auto store = std::make_shared<HashStore>();
    std::vector<std::unique_ptr<Heartbeat>> beats;
    for (int r = 0; r < 3; ++r)
      beats.push_back(std::make_unique<Heartbeat>(store, r, 3, options()));
    return beats;
  }
};

TEST(Heartbeat, AHaltedRankIsFoundByItsWatcherAndTheOthersHearOfIt) {
  Reports reports;
  std::vector<std::unique_ptr<Heartbeat>> beats = reports.three_ranks();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(reports.count(), 0u) << "no rank is lost while all beat";
  beats[1]->halt();  // as a crash: no goodbye
  for (int i = 0; i < 200 && reports.count() < 2; ++i) std::this_thread::sleep_for(20ms);
  std::lock_guard lk(reports.mu);
  ASSERT_EQ(reports.lost.size(), 2u) << "ranks 0 and 2 each report once";
  for (const auto& [rank, message] : reports.lost) {
    EXPECT_EQ(rank, 1);
    EXPECT_THAT(message, HasSubstr("rank 1 of 3 is lost: no heartbeat for"));
    EXPECT_THAT(message, HasSubstr("noticed by rank 0"));  // its watcher; rank 2 heard of it
    EXPECT_THAT(message, HasSubstr("--max-restarts"));
  }
}

TEST(Heartbeat, ARankThatLeavesIsNotLost) {
  Reports reports;
  std::vector<std::unique_ptr<Heartbeat>> beats = reports.three_ranks();
  beats[1]->leave();
  beats[2].reset();                 // the destructor leaves too
  std::this_thread::sleep_for(1s);  // 2.5 deadlines
  EXPECT_EQ(reports.count(), 0u);
}

TEST(Heartbeat, ADeadlineOfTwoIntervalsOrLessIsAClearError) {
  auto store = std::make_shared<HashStore>();
  try {
    Heartbeat beat(store, 0, 2, {.interval = 500ms, .deadline = 1000ms});
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the deadline (1000 ms) must be more than two intervals"));
  }
}

// Rank 1 freezes mid-all-reduce; rank 0's heartbeat ends it with a message naming rank 1, and
// (here, in place of ending the process) kills the frozen rank so that the test can finish.
TEST(Heartbeat, AFrozenRankEndsTheGroupWithinTheDeadlineNotAtTheTimeout) {
  tandem::testing::TempDir dir;
  const std::string report = dir.file("rank0.txt"), pid_file = dir.file("rank1.pid");
  try {
    spawn(
        [&](int rank) {
          using Clock = std::chrono::steady_clock;
          HeartbeatOptions beat;  // the defaults: 0.5 s beats, 2 s deadline
          Clock::time_point since;
          beat.on_lost = [&](const std::string& message, int) {
            const double secs = std::chrono::duration<double>(Clock::now() - since).count();
            std::ofstream(report) << secs << "\n" << message;
            int pid = 0;
            std::ifstream(pid_file) >> pid;
            if (pid > 0) ::kill(pid, SIGKILL);
            std::_Exit(0);
          };
          auto comm = init_process_group({.backend = "shm", .timeout = 120s, .heartbeat = beat});
          Tensor t = ones({1 << 16});
          comm->all_reduce(t)->wait();
          if (rank == 1) {
            std::ofstream(pid_file) << ::getpid();
            std::raise(SIGSTOP);
          }
          since = Clock::now();
          for (;;) comm->all_reduce(t)->wait();  // rank 1 never joins: the heartbeat ends it
        },
        2);
    ADD_FAILURE() << "spawn should report rank 1's death";
  } catch (const DistributedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("signal 9"));
  }
  std::ifstream in(report);
  double seconds = -1;
  in >> seconds;
  const std::string message(std::istreambuf_iterator<char>(in), {});
  EXPECT_THAT(message, HasSubstr("rank 1 of 2 is lost: no heartbeat for"));
  EXPECT_GE(seconds, 0);
  EXPECT_LT(seconds, 30) << "the 2 s deadline, not the 120 s timeout, ends the wait";
  std::printf("a frozen rank ended the group after %.2f s\n", seconds);
}

}  // namespace
}  // namespace tandem::parallel
