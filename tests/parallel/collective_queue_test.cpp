// tests/parallel/collective_queue_test.cpp — the collectives' queue when a peer dies. Gloo's TCP
// transport wakes the operations still queued on a dead peer's pair, but not a transfer already
// on the wire: a rank waiting on one sat out its whole timeout. The queue's watchdog asks the
// store which ranks have gone and fails the Work at once. Here the "transport call" is a task
// that blocks until released, and the store is a function the test flips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <atomic>
#include <chrono>
#include <thread>

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

std::string wait_error(Work& work, std::chrono::milliseconds timeout) {
  try {
    work.wait(timeout);
  } catch (const DistributedError& e) {
    return e.what();
  }
  return "no error";
}

WorkPtr all_reduce_work(uint64_t seq) {
  return std::make_shared<Work>(CollectiveInfo{.op = "all_reduce", .seq = seq, .size = 2}, 60s);
}

TEST(CollectiveQueue, AWatchdogFailsACollectiveWhosePeerLeftWhileItWaited) {
  std::atomic<bool> gone{false}, release{false};
  CollectiveQueue queue("gloo", 0, [&] {
    return gone ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{};  // 0: this rank, not named
  });
  auto stuck = all_reduce_work(7);
  queue.push(
      stuck,
      [&](uint32_t) {
        while (!release) std::this_thread::sleep_for(1ms);  // a transfer the transport never wakes
      },
      7);
  std::this_thread::sleep_for(200ms);
  gone = true;
  // Without the watchdog this wait ends at its own 20 s timeout, with that error instead.
  const std::string error = wait_error(*stuck, 20s);
  EXPECT_THAT(error, HasSubstr("gloo all_reduce #7"));
  EXPECT_THAT(error, HasSubstr("a peer left while it was in flight"));
  EXPECT_THAT(error, HasSubstr("rank 1 has exited or crashed"));
  EXPECT_THAT(error, Not(HasSubstr("rank 0 has")));
  release = true;  // the transport's call returns at last: its completion changes nothing
  EXPECT_EQ(wait_error(*stuck, 20s), error);

  // The group is broken: the next collective fails at once with the first error, unrun.
  auto next = all_reduce_work(8);
  queue.push(
      next, [](uint32_t) { ADD_FAILURE() << "a collective ran after a failure"; }, 8);
  EXPECT_EQ(wait_error(*next, 20s), error);
}

TEST(CollectiveQueue, ASlowCollectiveWithEveryPeerPresentIsLeftToFinish) {
  std::atomic<int> asked{0};
  CollectiveQueue queue("gloo", 0, [&] {
    ++asked;
    return std::vector<int64_t>{};
  });
  auto slow = all_reduce_work(1);
  queue.push(
      slow, [](uint32_t) { std::this_thread::sleep_for(1600ms); }, 1);
  EXPECT_EQ(wait_error(*slow, 20s), "no error");
  EXPECT_GE(asked.load(), 1) << "the watchdog looked while it ran past a second";
}

}  // namespace
}  // namespace tandem::parallel
