// tests/parallel/pipeline_schedule_test.cpp — schedules as data (schedule.h), their check
// (schedule_check.h) and their simulator (schedule_sim.h), with no model: each generator's
// order matches the tables of torch.distributed.pipelining's tests and the papers (p = 2,
// m = 4); every schedule passes the check for p = 1…5 and every m it accepts; the simulator
// gives GPipe's and 1F1B's textbook bubble (p−1)/(m+p−1) and 1F1B's in-flight bound p − r; the
// zero-bubble schedules beat 1F1B's bubble at no more memory; and eight broken schedules are
// refused, each naming the rank and the action.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule_check.h>
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <tandem/parallel/pipeline/schedule_svg.h>
#include <functional>

#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;
using S = PipelineSchedule;
constexpr S kSchedules[] = {S::GPipe,        S::OneFOneB,    S::Interleaved1F1B,
                            S::ZeroBubbleH1, S::ZeroBubbleV, S::DualPipeV};

std::string rank_list(S schedule, int64_t p, int64_t m, int rank, bool deferred = false) {
  return to_string(make_order(schedule, p, m, 0, deferred).ranks.at(size_t(rank)));
}

TEST(PipelineSchedule, GeneratorsMatchTheReferenceTables) {
  EXPECT_EQ(rank_list(S::GPipe, 2, 4, 0), "0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0");
  EXPECT_EQ(rank_list(S::OneFOneB, 2, 4, 0), "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3");
  EXPECT_EQ(rank_list(S::OneFOneB, 2, 4, 1), "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3");
  EXPECT_EQ(rank_list(S::OneFOneB, 4, 2, 0), "0F0 0F1 0B0 0B1");
  // Deferred weight gradients: each B an I, and one W of every micro-batch at the end.
  EXPECT_EQ(rank_list(S::GPipe, 2, 3, 1, true), "1F0 1F1 1F2 1I2 1I1 1I0 1W*");
  EXPECT_EQ(rank_list(S::OneFOneB, 2, 2, 1, true), "1F0 1I0 1F1 1I1 1W*");
  // torch's ScheduleInterleaved1F1B (its None steps dropped): stages 0 and 2 on rank 0.
  EXPECT_EQ(rank_list(S::Interleaved1F1B, 2, 4, 0),
            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
  // The ZB-H1 hand schedule of Qi et al.: rank r's W's r micro-batches behind its I's.
  EXPECT_EQ(rank_list(S::ZeroBubbleH1, 2, 4, 0), "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0F3 0I2 0W2 0I3 0W3");
  EXPECT_EQ(rank_list(S::ZeroBubbleH1, 2, 4, 1), "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1F3 1I3 1W2 1W3");
  // torch's ScheduleZBVZeroBubble: stages 0 and 3 on rank 0, the V's turn on rank 1.
  EXPECT_EQ(rank_list(S::ZeroBubbleV, 2, 4, 0),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 "
            "0I2 0W2 0I3 0W3");
  // DeepSeek's DualPipeV, its overlapped forward-and-backward pairs run one after the other.
  EXPECT_EQ(rank_list(S::DualPipeV, 2, 4, 0),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3");
  // The V schedules put stage s on rank s for the way down and 2p−1−s for the way up.
  EXPECT_EQ(make_order(S::ZeroBubbleV, 3, 6).stage_ranks, (std::vector<int>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(make_order(S::Interleaved1F1B, 2, 4, 3).stage_ranks,
            (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

TEST(PipelineSchedule, NotationRoundTrips) {
  const PipelineOrder o = with_communication(make_order(S::ZeroBubbleV, 3, 6));
  for (const auto& actions : o.ranks) EXPECT_EQ(parse_actions(to_string(actions)), actions);
  EXPECT_EQ(to_string(parse_actions("2SEND_F3 0W* 1RECV_B0")), "2SEND_F3 0W* 1RECV_B0");
  EXPECT_THAT(error_message<ValueError>([] { parse_actions("0F1 0X2"); }), HasSubstr("0X2"));
  for (S s : kSchedules) EXPECT_EQ(parse_schedule(to_string(s)), s);
  EXPECT_THAT(error_message<ValueError>([] { parse_schedule("zb"); }),
              HasSubstr("gpipe, 1f1b, interleaved, zb-h1, zb-v or dualpipev"));
  EXPECT_EQ(micro_batch_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
}

// fn(schedule, p, m, its order) for every schedule, p = 1…5 and m = 1…12 it accepts.
void for_every_order(const std::function<void(S, int64_t, int64_t, const PipelineOrder&)>& fn) {
  for (S s : kSchedules)
    for (int64_t p = 1; p <= 5; ++p)
      for (int64_t m = 1; m <= 12; ++m) {
        PipelineOrder o;
        try {
          o = make_order(s, p, m);
        } catch (const ValueError&) {
          continue;  // sizes the schedule refuses (checked below)
        }
        fn(s, p, m, o);
      }
}

TEST(PipelineSchedule, EveryScheduleIsRunnableForEverySizeItAccepts) {
  for_every_order([](S s, int64_t p, int64_t m, const PipelineOrder& o) {
    const PipelineOrder full = with_communication(o);
    EXPECT_EQ(order_problem(full), "") << to_string(s) << " p=" << p << " m=" << m;
    EXPECT_EQ(full.world(), p);
    EXPECT_EQ(full.stages(), stage_count(s, p, s == S::Interleaved1F1B ? 2 : 1));
  });
  // The sizes that must build: every m for the single-stage schedules, m ≥ 2p for DualPipeV.
  for (int64_t p = 1; p <= 4; ++p)
    for (int64_t m = 1; m <= 8; ++m) {
      for (S s : {S::GPipe, S::OneFOneB, S::ZeroBubbleH1, S::ZeroBubbleV})
        EXPECT_NO_THROW(make_order(s, p, m)) << to_string(s) << " p=" << p << " m=" << m;
      if (m >= 2 * p) {
        EXPECT_NO_THROW(make_order(S::DualPipeV, p, m));
      }
      if (m % p == 0) {
        EXPECT_NO_THROW(make_order(S::Interleaved1F1B, p, m, 2));
      }
    }
  EXPECT_THAT(error_message<ValueError>([] { make_order(S::DualPipeV, 4, 6); }),
              HasSubstr("6 micro-batches over 4 ranks; DualPipeV needs at least 2p = 8"));
  EXPECT_THAT(error_message<ValueError>([] { make_order(S::Interleaved1F1B, 2, 5, 2); }),
              HasSubstr("5 micro-batches over 2 ranks"));
  // Weight gradients deferred to one W* per stage: still a valid order.
  for (S s : {S::GPipe, S::OneFOneB})
    EXPECT_EQ(order_problem(with_communication(make_order(s, 3, 5, 0, true))), "");
}

// A rank's last backward (B or I) of the step has its W last too: a wrapper told "last" before
// that backward (fully_sharded_stages.h) reduces when its callbacks run, which for an I is after
// its W (deferred_weight_grads.h), so every weight gradient of the rank is in by then.
TEST(PipelineSchedule, TheLastBackwardsWeightsComeLast) {
  using A = PipelineAction;
  for_every_order([](S s, int64_t p, int64_t m, const PipelineOrder& o) {
    for (int r = 0; r < o.world(); ++r) {
      const std::vector<A>& a = o.ranks[size_t(r)];
      size_t last = 0;
      for (size_t k = 0; k < a.size(); ++k)
        if (a[k].kind == A::Backward || a[k].kind == A::BackwardInput) last = k;
      if (a[last].kind != A::BackwardInput) continue;
      size_t its_w = 0, last_w = 0;
      for (size_t k = 0; k < a.size(); ++k)
        if (a[k].kind == A::BackwardWeight) {
          last_w = k;
          if (a[k].stage == a[last].stage && a[k].micro_batch == a[last].micro_batch) its_w = k;
        }
      EXPECT_EQ(its_w, last_w) << to_string(s) << " p=" << p << " m=" << m << " rank " << r << ": "
                               << to_string(a);
    }
  });
}

TEST(PipelineSchedule, SimulatorGivesTheTextbookBubbleAndMemory) {
  // Unit costs, F = B: GPipe and 1F1B idle (p−1)/(m+p−1) of the step on every rank.
  const ActionCosts unit{.stages = {{.forward = 1, .backward_input = 1, .backward_weight = 1}}};
  for (S s : {S::GPipe, S::OneFOneB})
    for (int64_t p : {2, 4})
      for (int64_t m : {4, 8, 16}) {
        const Simulation sim = simulate(with_communication(make_order(s, p, m)), unit);
        EXPECT_TRUE(sim.blocked.empty());
        EXPECT_NEAR(sim.length, 3.0 * double(m + p - 1), 1e-12);
        for (const SimulatedRank& r : sim.ranks)
          EXPECT_NEAR(r.idle_share, double(p - 1) / double(m + p - 1), 1e-12);
        // GPipe holds all m; 1F1B holds p − r on rank r.
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(sim.ranks[size_t(r)].peak_in_flight, s == S::GPipe ? m : std::min(m, p - r));
      }
  // F = I = W: ZB-H1 and ZB-V fill most of 1F1B's bubble without holding more activations on
  // any rank (ZB-V's stages are half the model: half the time, half the activations each).
  const int64_t p = 4, m = 8;
  const ActionCosts half{
      .stages = {
          {.forward = 0.5, .backward_input = 0.5, .backward_weight = 0.5, .activation = 0.5}}};
  const Simulation one = simulate(with_communication(make_order(S::OneFOneB, p, m)), unit);
  for (S s : {S::ZeroBubbleH1, S::ZeroBubbleV}) {
    const Simulation zb =
        simulate(with_communication(make_order(s, p, m)), s == S::ZeroBubbleV ? half : unit);
    EXPECT_LT(zb.bubble(), one.bubble() / 2) << to_string(s);
    for (int r = 0; r < p; ++r)
      EXPECT_LE(zb.ranks[size_t(r)].peak_memory, one.ranks[0].peak_memory) << to_string(s);
  }
  // ZB-V with F = I = W and m ≥ 2p: no bubble but the first forward's and the last W's way.
  EXPECT_LT(simulate(with_communication(make_order(S::ZeroBubbleV, p, m)), half).bubble(), 0.1);
  // Interleaving divides 1F1B's bubble by about v (its stages cost half as much each).
  const Simulation inter =
      simulate(with_communication(make_order(S::Interleaved1F1B, p, m, 2)), half);
  EXPECT_NEAR(inter.bubble(), one.bubble() / 2, 0.03);
}

TEST(PipelineSchedule, DrawsTheSimulatedTimeline) {
  const Simulation sim = simulate(with_communication(make_order(S::ZeroBubbleV, 2, 4)));
  const std::string svg = schedule_svg(timelines(sim), "zb-v <p = 2>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("zb-v &lt;p = 2&gt;"));
  EXPECT_THAT(svg, HasSubstr("rank 1</text>"));
  EXPECT_THAT(svg, HasSubstr("<title>3W2</title>"));  // every compute action has its box
  EXPECT_THAT(svg, ::testing::Not(HasSubstr("RECV")));
}

// A valid order to break: 1F1B over 2 ranks, 2 micro-batches, with its messages.
PipelineOrder valid_order() { return with_communication(make_order(S::OneFOneB, 2, 2)); }

std::string refusal(const PipelineOrder& o, OrderLimits limits = {}) {
  return error_message<ValueError>([&] { check_order(o, limits); });
}

TEST(PipelineSchedule, CheckRefusesBrokenSchedulesNamingRankAndAction) {
  {  // 1. A send left out: rank 1 waits for an activation nobody sends.
    PipelineOrder o = valid_order();
    auto& r0 = o.ranks[0];
    r0.erase(std::find(r0.begin(), r0.end(), PipelineAction{PipelineAction::SendForward, 0, 1}));
    EXPECT_THAT(refusal(o), HasSubstr("rank 1's 1RECV_F1 receives what no rank sends: rank 0"));
  }
  {  // 2. A receive with no send, written by hand.
    PipelineOrder o = valid_order();
    o.ranks[1].insert(o.ranks[1].begin(), {PipelineAction::RecvForward, 1, 1});
    EXPECT_THAT(refusal(o), HasSubstr("rank 1's 1RECV_F1 appears twice"));
  }
  {  // 3. A cycle: rank 0 receives its first gradient before sending the activation it needs.
    PipelineOrder o;
    o.micro_batches = 1;
    o.stage_ranks = {0, 1};
    o.ranks = {parse_actions("0F0 0RECV_B0 0SEND_F0 0B0"),
               parse_actions("1RECV_F0 1F0 1B0 1SEND_B0")};
    const std::string e = refusal(o);
    EXPECT_THAT(e, HasSubstr("deadlock"));
    EXPECT_THAT(e, HasSubstr("rank 0 at 0RECV_B0"));
    EXPECT_THAT(e, HasSubstr("rank 1 at 1RECV_F0"));
  }
  {  // 4. An action on a rank that does not hold its stage.
    PipelineOrder o = valid_order();
    o.ranks[0].push_back({PipelineAction::Forward, 1, 0});
    EXPECT_THAT(refusal(o), HasSubstr("rank 0's 1F0 is stage 1's, which runs on rank 1"));
  }
  {  // 5. A backward missing.
    PipelineOrder o = valid_order();
    auto& r1 = o.ranks[1];
    r1.erase(std::find(r1.begin(), r1.end(), PipelineAction{PipelineAction::Backward, 1, 0}));
    EXPECT_THAT(refusal(o), HasSubstr("no rank runs the backward of stage 1, micro-batch 0"));
  }
  {  // 6. An I whose W never runs: the weights would miss a gradient.
    PipelineOrder o;
    o.micro_batches = 1;
    o.stage_ranks = {0};
    o.ranks = {parse_actions("0F0 0I0")};
    EXPECT_THAT(refusal(o), HasSubstr("rank 0 runs 0I0 but no 0W0"));
  }
  {  // 7. A backward before its own forward.
    PipelineOrder o;
    o.micro_batches = 2;
    o.stage_ranks = {0};
    o.ranks = {parse_actions("0F0 0B1 0F1 0B0")};
    const std::string e = refusal(o);
    EXPECT_THAT(e, HasSubstr("rank 0 at 0B1"));
  }
  {  // 8. More activations held than allowed: GPipe keeps all 8 where 2 are allowed.
    const PipelineOrder o = with_communication(make_order(S::GPipe, 2, 8));
    EXPECT_THAT(refusal(o, {.max_in_flight = 2}),
                HasSubstr("rank 0's 0F2 would hold 3 micro-batches' activations, more than the 2"));
    EXPECT_EQ(
        order_problem(with_communication(make_order(S::OneFOneB, 2, 8)), {.max_in_flight = 2}), "");
  }
  {  // 9. A forward that runs before the activation it needs has arrived.
    PipelineOrder o = valid_order();
    auto& r1 = o.ranks[1];
    std::swap(r1[0], r1[1]);  // 1F0 before 1RECV_F0
    EXPECT_THAT(refusal(o), HasSubstr("rank 1's 1F0 needs the activation of stage 0 from rank 0"));
  }
}

}  // namespace
}  // namespace tandem::parallel
