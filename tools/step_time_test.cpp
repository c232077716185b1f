// tools/plan/step_time.h: ranks' traces played on one clock. Hand-made traces whose step is known:
// collectives wait for every member, the cores are shared, a wait after compute hides a
// collective, a message arrives a link's time after its send, and traces that cannot finish say
// which rank waits on what.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/core/error.h>

#include <tuple>

#include "plan/step_time.h"

using namespace tandem;
using namespace tandem::tools;
using Kind = TraceItem::Kind;

namespace {

// Kernel i of the call table takes seconds[i]: 0 → 1 s, 1 → 3 s.
const std::vector<double> kSeconds = {1.0, 3.0};

HostProfile profile(double capacity) {
  HostProfile p;
  for (int k = 2; k <= 4; ++k) p.throughput[k] = std::min(double(k), capacity);
  p.collective = {.latency = 0.5, .bandwidth = 1e6};  // 1 MB: 1 s more
  p.message = {.latency = 0.25, .bandwidth = 1e6};
  return p;
}

parallel::RehearsedCollective all_reduce(uint64_t wire) {
  return {.op = "all_reduce", .bytes = wire, .wire = wire, .members = {0, 1}};
}

RankTrace trace(std::vector<TraceItem> items, std::vector<parallel::RehearsedCollective> c = {}) {
  return {std::move(items), std::move(c)};
}

}  // namespace

TEST(StepTime, ACollectiveStartsWhenItsLastMemberArrives) {
  const StepTime t = simulate_step(
      {trace({{Kind::Kernel, 0}, {Kind::Issue, 0}, {Kind::Wait, 0}}, {all_reduce(1000000)}),
       trace({{Kind::Kernel, 1}, {Kind::Issue, 0}, {Kind::Wait, 0}}, {all_reduce(1000000)})},
      kSeconds, profile(2));
  EXPECT_DOUBLE_EQ(t.step, 3 + 1.5);
  EXPECT_DOUBLE_EQ(t.ranks[0].compute, 1);
  EXPECT_DOUBLE_EQ(t.ranks[0].idle, 2);  // waiting for rank 1 to arrive
  EXPECT_DOUBLE_EQ(t.ranks[0].communication, 1.5);
  EXPECT_DOUBLE_EQ(t.ranks[1].idle, 0);
  EXPECT_DOUBLE_EQ(t.ranks[1].communication, 1.5);
  EXPECT_NEAR(t.communication_share(), 3.0 / (1 + 3 + 2 + 3), 1e-12);
  // The same as a timeline: compute [0, 1), idle [1, 3), communication [3, 4.5).
  using S = TimeSpan::Kind;
  const std::vector<std::tuple<S, double, double>> expected = {
      {S::Compute, 0, 1}, {S::Idle, 1, 3}, {S::Communication, 3, 4.5}};
  ASSERT_EQ(t.ranks[0].spans.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(t.ranks[0].spans[i].kind, std::get<0>(expected[i])) << i;
    EXPECT_DOUBLE_EQ(t.ranks[0].spans[i].start, std::get<1>(expected[i])) << i;
    EXPECT_DOUBLE_EQ(t.ranks[0].spans[i].end, std::get<2>(expected[i])) << i;
  }
  ASSERT_EQ(t.ranks[1].spans.size(), 2u);  // no idle span: it arrived last
}

TEST(StepTime, RanksComputingAtOnceShareTheCapacity) {
  const RankTrace one = trace({{Kind::Kernel, 0}});
  EXPECT_DOUBLE_EQ(simulate_step({one, one}, kSeconds, profile(2)).step, 1);
  EXPECT_DOUBLE_EQ(simulate_step({one, one}, kSeconds, profile(1)).step, 2);
  EXPECT_DOUBLE_EQ(simulate_step({one, one, one, one}, kSeconds, profile(2)).step, 2);
  // Three ranks on 1.5 cores: each at half speed while all three compute.
  EXPECT_DOUBLE_EQ(simulate_step({one, one, one}, kSeconds, profile(1.5)).step, 2);
}

TEST(StepTime, ComputeBetweenIssueAndWaitHidesTheCollective) {
  const RankTrace overlapped =
      trace({{Kind::Issue, 0}, {Kind::Kernel, 1}, {Kind::Wait, 0}}, {all_reduce(1000000)});
  const StepTime t = simulate_step({overlapped, overlapped}, kSeconds, profile(2));
  EXPECT_DOUBLE_EQ(t.step, 3);  // the all-reduce's 1.5 s ran under the 3 s of compute
  EXPECT_DOUBLE_EQ(t.ranks[0].communication, 0);
}

TEST(StepTime, AMessageArrivesALinksTimeAfterItsSend) {
  const parallel::RehearsedCollective send{
      .op = "send", .bytes = 500000, .wire = 500000, .members = {0, 1}, .peer = 1};
  const parallel::RehearsedCollective recv{
      .op = "recv", .bytes = 500000, .wire = 0, .members = {0, 1}, .peer = 0};
  const StepTime t =
      simulate_step({trace({{Kind::Kernel, 0}, {Kind::Issue, 0}}, {send}),
                     trace({{Kind::Issue, 0}, {Kind::Wait, 0}, {Kind::Kernel, 0}}, {recv})},
                    kSeconds, profile(2));
  EXPECT_DOUBLE_EQ(t.ranks[0].end, 1);   // a send is posted: its rank goes on
  EXPECT_DOUBLE_EQ(t.ranks[1].idle, 1);  // until the send
  EXPECT_DOUBLE_EQ(t.ranks[1].communication, 0.75);
  EXPECT_DOUBLE_EQ(t.step, 1 + 0.75 + 1);
}

TEST(StepTime, TracesThatCannotFinishNameTheWaitingRank) {
  try {
    simulate_step({trace({{Kind::Issue, 0}, {Kind::Wait, 0}}, {all_reduce(8)}), trace({})},
                  kSeconds, profile(2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank 0 waits on a all_reduce of group 0,1,"));
  }
}
