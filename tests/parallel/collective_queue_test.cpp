// tests/parallel/collective_queue_test.cpp — the collectives' queue when a peer dies. Gloo's TCP
// transport wakes the operations still queued on a dead peer's pair, but not a transfer already
// on the wire: a rank waiting on one sat out its whole timeout. The queue's watchdog asks the
// store which ranks have gone and fails the Work at once. Here the "transport call" is a task
// that blocks until released, and the store is a function the test flips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/parallel/comm/blocked_time.h>
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

// Releases a blocked task however the test ends, so the queue's destructor does not wait on it.
struct Release {
  std::atomic<bool>& flag;
  ~Release() { flag = true; }
};

TEST(CollectiveQueue, AWatchdogFailsACollectiveWhosePeerLeftWhileItWaited) {
  std::atomic<bool> gone{false}, release{false};
  CollectiveQueue queue("gloo", 0, [&] {
    return gone ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{};  // 0: this rank, not named
  });
  Release at_end{release};
  auto stuck = all_reduce_work(7);
  queue.push(
      stuck,
      [&](uint32_t) {
        while (!release) std::this_thread::sleep_for(1ms);  // a transfer the transport never wakes
      },
      7);
  auto queued = all_reduce_work(8);  // waits behind it
  queue.push(
      queued, [](uint32_t) { ADD_FAILURE() << "a collective ran after a failure"; }, 8);
  std::this_thread::sleep_for(200ms);
  gone = true;
  // Without the watchdog this wait ends at its own 20 s timeout, with that error instead.
  const std::string error = wait_error(*stuck, 20s);
  EXPECT_THAT(error, HasSubstr("gloo all_reduce #7"));
  EXPECT_THAT(error, HasSubstr("a peer left while it was in flight"));
  EXPECT_THAT(error, HasSubstr("rank 1 has exited or crashed"));
  EXPECT_THAT(error, Not(HasSubstr("rank 0 has")));
  // The group is broken: the queued collective and a new one fail with the first error, unrun,
  // while the transport's call has not returned.
  EXPECT_EQ(wait_error(*queued, 20s), error);
  auto next = all_reduce_work(9);
  queue.push(
      next, [](uint32_t) { ADD_FAILURE() << "a collective ran after a failure"; }, 9);
  EXPECT_EQ(wait_error(*next, 20s), error);
  release = true;  // the transport's call returns at last: its completion changes nothing
  auto after = all_reduce_work(10);  // and after it returned
  queue.push(
      after, [](uint32_t) { ADD_FAILURE() << "a collective ran after a failure"; }, 10);
  EXPECT_EQ(wait_error(*after, 20s), error);
  EXPECT_EQ(wait_error(*stuck, 20s), error);
}

TEST(CollectiveQueue, OneLookAtTheStoreIsNotEnoughToFailACollective) {
  // The store names rank 1 once (as TCPStore does for rank 0 when a reply is late), then nobody:
  // the collective, which finishes once the watchdog has looked a few times, is left alone.
  std::atomic<int> asked{0};
  CollectiveQueue queue(
      "gloo", 0, [&] { return ++asked == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{}; });
  auto slow = all_reduce_work(1);
  queue.push(
      slow,
      [&](uint32_t) {
        // Until the watchdog has looked 3 times (the cap only ends a broken test).
        for (int i = 0; i < 20000 && asked < 3; ++i) std::this_thread::sleep_for(1ms);
      },
      1);
  EXPECT_EQ(wait_error(*slow, 30s), "no error");
  EXPECT_GE(asked.load(), 3);
}

// What `tandem train --predict` measures of a rank's step: the time its thread is held up by
// communication, whether the collective ran in that thread (shared memory's small ones) or the
// thread waited on it.
TEST(BlockedTime, CountsWaitsAndCollectivesRunInTheCallersThread) {
  CollectiveQueue queue("shm", 0, {}, /*inline_when_idle=*/true);
  record_blocked_spans(true);
  const double before = blocked_seconds();
  auto ran_here = all_reduce_work(1);
  queue.push(
      ran_here, [](uint32_t) { std::this_thread::sleep_for(20ms); }, 1);
  EXPECT_TRUE(ran_here->is_completed());  // inline: done when push returns
  std::atomic<bool> release{false};
  std::thread releaser;
  auto waited = all_reduce_work(2);
  // Released only once the wait has begun, so that it surely blocks.
  waited->on_wait([&] {
    releaser = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      release = true;
    });
  });
  queue.push(
      waited,
      [&](uint32_t) {
        while (!release) std::this_thread::sleep_for(1ms);
      },
      2, /*may_inline=*/false);
  waited->wait();
  releaser.join();
  const std::vector<BlockedSpan> spans = blocked_spans();
  record_blocked_spans(false);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_GE(spans[0].end - spans[0].start, 0.02);  // the inline run, its sleep included
  EXPECT_GE(spans[1].end - spans[1].start, 0.01);  // the wait
  EXPECT_LE(spans[0].end, spans[1].start);
  EXPECT_GE(blocked_seconds() - before, 0.03);
}

}  // namespace
}  // namespace tandem::parallel
