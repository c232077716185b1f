// parallel/pipeline/schedules.cpp — the generators: each schedule's compute actions per rank, as
// the papers and torch.distributed.pipelining lay them out (the orders below were checked
// against torch's tests' tables; docs/parallelism.md draws them).
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <algorithm>
#include <deque>
#include <map>

namespace tandem::parallel {
namespace {

using A = PipelineAction;

// One rank's list, with a counter per stage for each kind: "the next forward of stage s" is
// micro-batch next_forward[s], and so on.
struct RankList {
  std::vector<A> actions;
  std::map<int64_t, int64_t> forwards, backwards, weights;
  std::deque<A> pending_w;  // I's whose W has not run, oldest first
  void f(int64_t s) { actions.push_back({A::Forward, s, forwards[s]++}); }
  void b(int64_t s) { actions.push_back({A::Backward, s, backwards[s]++}); }
  void i(int64_t s) {
    actions.push_back({A::BackwardInput, s, backwards[s]});
    pending_w.push_back({A::BackwardWeight, s, backwards[s]++});
  }
  // The oldest I's W (DualPipeV's one queue over both stages).
  void w_oldest() {
    actions.push_back(pending_w.front());
    pending_w.pop_front();
  }
  // Stage s's next W (ZB-V keeps one order per stage).
  void w(int64_t s) {
    const int64_t i = weights[s]++;
    actions.push_back({A::BackwardWeight, s, i});
    pending_w.erase(std::find(pending_w.begin(), pending_w.end(), A{A::BackwardWeight, s, i}));
  }
};

// GPipe: all forwards, then all backwards, latest first (each backward right after the forward
// that ends the batch on the last stage).
void gpipe(RankList& l, int64_t s, int64_t m) {
  for (int64_t i = 0; i < m; ++i) l.f(s);
  for (int64_t i = m - 1; i >= 0; --i) l.actions.push_back({A::Backward, s, i});
}

// 1F1B (PipeDream-Flush): rank r runs p−r−1 forwards to fill the pipeline, then alternates one
// forward and one backward (oldest first), then drains: it holds at most p−r micro-batches.
void one_f_one_b(RankList& l, int64_t r, int64_t p, int64_t m) {
  const int64_t warmup = std::min(p - r - 1, m);
  for (int64_t i = 0; i < warmup; ++i) l.f(r);
  for (int64_t i = warmup; i < m; ++i) l.f(r), l.b(r);
  for (int64_t i = m - warmup; i < m; ++i) l.b(r);
}

// ZB-H1 (Qi et al. 2023, the authors' hand schedule): 1F1B's forwards and the input halves of
// its backwards, each W right after its I on rank 0 and r micro-batches later on rank r, the last
// r W's at the end, where 1F1B's cooldown leaves the later ranks idle. Same in-flight count as
// 1F1B; the bubble shrinks to about a third of it when F, I and W cost alike.
void zb_h1(RankList& l, int64_t r, int64_t p, int64_t m) {
  const int64_t warmup = std::min(p - r - 1, m);
  for (int64_t i = 0; i < warmup; ++i) l.f(r);
  for (int64_t i = 0; i < m; ++i) {
    if (warmup + i < m) l.f(r);
    l.i(r);
    if (i >= r) l.w_oldest();
  }
  while (!l.pending_w.empty()) l.w_oldest();
}

// Interleaved 1F1B (Megatron's virtual pipeline; torch's ScheduleInterleaved1F1B): rank r holds
// stages r, r+p, …, r+(v−1)p. Forwards go round the rank's stages a group of `per_round`
// micro-batches at a time (p of them when m is a multiple of p); backwards the same, from the
// last stage down. Warm-up: enough forwards that the first backward's gradient can arrive.
void interleaved(RankList& l, int64_t r, int64_t p, int64_t m, int64_t v) {
  const int64_t rounds = std::max<int64_t>(1, m / p), per_round = m / rounds;
  const int64_t total = m * v, warmup = std::min((v - 1) * per_round + 2 * (p - 1 - r), total);
  const auto forward_stage = [&](int64_t k) { return ((k / per_round) % v) * p + r; };
  const auto backward_stage = [&](int64_t k) { return (v - 1 - (k / per_round) % v) * p + r; };
  for (int64_t k = 0; k < warmup; ++k) l.f(forward_stage(k));
  for (int64_t k = warmup; k < total; ++k) l.f(forward_stage(k)), l.b(backward_stage(k - warmup));
  for (int64_t k = total - warmup; k < total; ++k) l.b(backward_stage(k));
}

// ZB-V (Qi et al.; torch's ScheduleZBVZeroBubble): the V placement, rank r holding stage r (down)
// and 2p−1−r (up); forwards of the down stage fill the pipe, then each step does a down forward
// and an up F, I, W, so the W's fill what would be the bubble, at 1F1B's memory.
void zb_v(RankList& l, int64_t r, int64_t p, int64_t m) {
  const int64_t down = r, up = 2 * p - 1 - r, n = std::max(2 * p - 1, m);
  for (int64_t k = 0; k < 2 * (p - r) - 1; ++k) l.f(down);
  for (int64_t k = 0; k < r; ++k) l.f(up), l.f(down);
  for (int64_t k = 0; k < p - r; ++k) l.f(up), l.i(up), l.w(up);
  while (l.forwards[up] < l.forwards[down] || l.forwards[down] < n) {
    if (l.forwards[down] < n) l.f(down);
    l.i(down), l.w(down), l.f(up), l.i(up), l.w(up);
  }
  for (int64_t k = 0; k < r; ++k) l.i(down), l.i(up);
  for (int64_t k = 0; k < p - r; ++k) l.i(down), l.w(down);
  while (l.weights[up] < l.backwards[up]) l.w(up);
  while (l.weights[down] < l.backwards[down]) l.w(down);
  // With fewer micro-batches than 2p − 1 the pattern runs on phantom ones: drop them.
  std::erase_if(l.actions, [&](const A& a) { return a.micro_batch >= m; });
}

// DualPipeV (DeepSeek-V3's DualPipe folded onto p ranks: deepseek-ai/DualPipe's dualpipev.py,
// torch's ScheduleDualPipeV), V placement. Its eight phases pair a forward of one stage with a
// backward of the other (which DeepSeek overlaps with the other's all-to-all; here they run one
// after the other), and split the last backwards into I and W to fill the drain.
void dualpipe_v(RankList& l, int64_t r, int64_t p, int64_t m) {
  const int64_t s0 = r, s1 = 2 * p - 1 - r;
  for (int64_t k = 0; k < 2 * (p - r - 1); ++k) l.f(s0);                               // 1
  for (int64_t k = 0; k < r + 1; ++k) l.f(s0), l.f(s1);                                // 2
  for (int64_t k = 0; k < p - r - 1; ++k) l.i(s1), l.w_oldest(), l.f(s1);              // 3
  for (int64_t k = 0; k < m - 2 * p + r + 1; ++k) l.f(s0), l.b(s1), l.f(s1), l.b(s0);  // 4
  for (int64_t k = 0; k < p - r - 1; ++k) l.b(s1), l.f(s1), l.b(s0);                   // 5
  bool split = false;                                                                  // 6
  const auto x = [&](int64_t s) { split ? l.i(s) : l.b(s); };
  for (int64_t k = 0; k < r + 1; ++k) {
    if (k == (r + 1) / 2 && r % 2 == 1) split = true;
    x(s1);
    if (k == (r + 1) / 2 && r % 2 == 0) split = true;
    x(s0);
  }
  for (int64_t k = 0; k < p - r - 1; ++k) l.w_oldest(), l.i(s0);  // 7
  while (!l.pending_w.empty()) l.w_oldest();                      // 8
}

}  // namespace

PipelineOrder make_order(PipelineSchedule schedule, int64_t ranks, int64_t micro_batches,
                         int64_t virtual_stages, bool deferred_weight_grads) {
  const int64_t p = ranks, m = micro_batches;
  const std::string name = to_string(schedule);
  TD_CHECK_VALUE(p >= 1 && m >= 1, "pipeline ", name, ": ", p, " ranks and ", m,
                 " micro-batches; each must be at least 1");
  const bool v_shaped =
      schedule == PipelineSchedule::ZeroBubbleV || schedule == PipelineSchedule::DualPipeV;
  const int64_t v = virtual_stages ? virtual_stages : stages_per_rank(schedule);
  if (schedule == PipelineSchedule::Interleaved1F1B) {
    TD_CHECK_VALUE(v >= 2, "pipeline interleaved: ", v,
                   " stages per rank; interleaving needs at least 2 (1 is 1f1b)");
    const int64_t rounds = std::max<int64_t>(1, m / p);
    TD_CHECK_VALUE(m % rounds == 0, "pipeline interleaved: ", m, " micro-batches over ", p,
                   " ranks; they go round the ranks in m / p = ", rounds,
                   " equal rounds (torch's rule), which ", m,
                   " does not divide: choose a multiple of ", p, " or fewer than ", p);
  } else {
    TD_CHECK_VALUE(v == (v_shaped ? 2 : 1), "pipeline ", name, ": asked for ", v,
                   " stages per rank, but this schedule holds ", v_shaped ? 2 : 1,
                   " (virtual stages are interleaved's choice)");
  }
  if (schedule == PipelineSchedule::DualPipeV)
    TD_CHECK_VALUE(m >= 2 * p, "pipeline dualpipev: ", m, " micro-batches over ", p,
                   " ranks; DualPipeV needs at least 2p = ", 2 * p);
  TD_CHECK_VALUE(!deferred_weight_grads || schedule == PipelineSchedule::GPipe ||
                     schedule == PipelineSchedule::OneFOneB,
                 "pipeline ", name,
                 ": deferring every weight gradient to one W is for gpipe and "
                 "1f1b (the zero-bubble schedules place their W's themselves)");

  PipelineOrder order;
  order.micro_batches = m;
  order.stage_ranks = stage_ranks(schedule, p, v);
  for (int64_t r = 0; r < p; ++r) {
    RankList l;
    switch (schedule) {
      case PipelineSchedule::GPipe:
        gpipe(l, r, m);
        break;
      case PipelineSchedule::OneFOneB:
        one_f_one_b(l, r, p, m);
        break;
      case PipelineSchedule::Interleaved1F1B:
        interleaved(l, r, p, m, v);
        break;
      case PipelineSchedule::ZeroBubbleH1:
        zb_h1(l, r, p, m);
        break;
      case PipelineSchedule::ZeroBubbleV:
        zb_v(l, r, p, m);
        break;
      case PipelineSchedule::DualPipeV:
        dualpipe_v(l, r, p, m);
        break;
    }
    if (deferred_weight_grads) {  // every B an I, and one W of them all at the end
      for (A& a : l.actions)
        if (a.kind == A::Backward) a.kind = A::BackwardInput;
      l.actions.push_back({A::BackwardWeight, r, A::kAll});
    }
    order.ranks.push_back(std::move(l.actions));
  }
  return order;
}

}  // namespace tandem::parallel
