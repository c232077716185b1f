// parallel/pipeline/schedule_check.cpp — the order's structure first (clear names for the common
// mistakes), then the walk (schedule_sim.cpp) for what only running it shows.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule_check.h>
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <map>
#include <set>
#include <tuple>

namespace tandem::parallel {
namespace {

using A = PipelineAction;

std::string what(int rank, const A& a) { return str("rank ", rank, "'s ", to_string(a)); }

// Item 1: the order's sizes, and each action's stage, rank and micro-batch.
std::string shape_problem(const PipelineOrder& o) {
  if (o.world() < 1 || o.stages() < 1 || o.micro_batches < 1)
    return str("the order has ", o.world(), " ranks, ", o.stages(), " stages and ", o.micro_batches,
               " micro-batches; each needs at least one");
  for (int64_t s = 0; s < o.stages(); ++s) {
    const int r = o.stage_ranks[size_t(s)];
    if (r < 0 || r >= o.world())
      return str("stage ", s, " is placed on rank ", r, ", but the order has ranks 0 to ",
                 o.world() - 1);
  }
  for (int r = 0; r < o.world(); ++r) {
    if (o.stages_of(r).empty()) return str("rank ", r, " holds no stage");
    for (const A& a : o.ranks[size_t(r)]) {
      if (a.stage < 0 || a.stage >= o.stages())
        return str(what(r, a), " names stage ", a.stage, ", but the model has stages 0 to ",
                   o.stages() - 1);
      if (o.stage_ranks[size_t(a.stage)] != r)
        return str(what(r, a), " is stage ", a.stage, "'s, which runs on rank ",
                   o.stage_ranks[size_t(a.stage)]);
      const bool all = a.kind == A::BackwardWeight && a.micro_batch == A::kAll;
      if (!all && (a.micro_batch < 0 || a.micro_batch >= o.micro_batches))
        return str(what(r, a), " names micro-batch ", a.micro_batch, " of ", o.micro_batches);
      if ((a.kind == A::RecvForward || a.kind == A::SendBackward) && a.stage == 0)
        return str(what(r, a), ": stage 0 has no stage before it");
      if ((a.kind == A::SendForward || a.kind == A::RecvBackward) && a.stage + 1 == o.stages())
        return str(what(r, a), ": the last stage has no stage after it");
    }
  }
  return "";
}

// Item 2: each (stage, micro-batch) forward once and backward once, and W only after an I.
std::string count_problem(const PipelineOrder& o, bool forward_only) {
  std::map<std::tuple<int, int64_t, int64_t>, int> seen;  // kind, stage, micro-batch -> count
  std::set<int64_t> all_w;                                // stages with a W*
  for (int r = 0; r < o.world(); ++r)
    for (const A& a : o.ranks[size_t(r)]) {
      if (++seen[{a.kind, a.stage, a.micro_batch}] == 2) return str(what(r, a), " appears twice");
      if (a.kind == A::BackwardWeight && a.micro_batch == A::kAll) all_w.insert(a.stage);
      if (forward_only && a.kind != A::Forward && a.is_compute())
        return str(what(r, a), ": an evaluation runs forwards only");
    }
  const auto has = [&](A::Kind k, int64_t s, int64_t i) { return seen.count({k, s, i}) != 0; };
  for (int64_t s = 0; s < o.stages(); ++s) {
    const int r = o.stage_ranks[size_t(s)];
    for (int64_t i = 0; i < o.micro_batches; ++i) {
      if (!has(A::Forward, s, i))
        return str("no rank runs ", to_string({A::Forward, s, i}), " (stage ", s,
                   "'s forward of micro-batch ", i, ", on rank ", r, ")");
      if (forward_only) continue;
      const bool b = has(A::Backward, s, i), in = has(A::BackwardInput, s, i);
      const bool w = has(A::BackwardWeight, s, i) || all_w.count(s);
      if (b && (in || has(A::BackwardWeight, s, i)))
        return str("rank ", r, " runs both ", to_string({A::Backward, s, i}),
                   " and the I/W halves of the same backward");
      if (!b && !in)
        return str("no rank runs the backward of stage ", s, ", micro-batch ", i, " (",
                   to_string({A::Backward, s, i}), ", or ", to_string({A::BackwardInput, s, i}),
                   " and a W, on rank ", r, ")");
      if (in && !w)
        return str("rank ", r, " runs ", to_string({A::BackwardInput, s, i}), " but no ",
                   to_string({A::BackwardWeight, s, i}), " or ", s,
                   "W*: the weights' gradients would be missing");
      if (has(A::BackwardWeight, s, i) && all_w.count(s))
        return str("rank ", r, " runs both ", to_string({A::BackwardWeight, s, i}), " and ", s,
                   "W*, which covers it");
    }
  }
  return "";
}

// Item 3: messages pair up, and each is received before the action that needs it.
std::string message_problem(const PipelineOrder& o) {
  std::set<std::tuple<int, int64_t, int64_t>> present;
  for (int r = 0; r < o.world(); ++r)
    for (const A& a : o.ranks[size_t(r)]) present.insert({a.kind, a.stage, a.micro_batch});
  const auto has = [&](A::Kind k, int64_t s, int64_t i) { return present.count({k, s, i}) != 0; };
  const auto rank_of = [&](int64_t s) { return o.stage_ranks[size_t(s)]; };
  for (int r = 0; r < o.world(); ++r) {
    std::set<std::tuple<int, int64_t, int64_t>> received;  // on this rank, so far
    for (const A& a : o.ranks[size_t(r)]) {
      const int64_t s = a.stage, i = a.micro_batch;
      switch (a.kind) {
        case A::RecvForward:
          if (rank_of(s - 1) == r)
            return str(what(r, a), ": stage ", s - 1, " is on this rank too; nothing travels");
          if (!has(A::SendForward, s - 1, i))
            return str(what(r, a), " receives what no rank sends: rank ", rank_of(s - 1),
                       " has no ", to_string({A::SendForward, s - 1, i}));
          received.insert({a.kind, s, i});
          break;
        case A::RecvBackward:
          if (rank_of(s + 1) == r)
            return str(what(r, a), ": stage ", s + 1, " is on this rank too; nothing travels");
          if (!has(A::SendBackward, s + 1, i))
            return str(what(r, a), " receives what no rank sends: rank ", rank_of(s + 1),
                       " has no ", to_string({A::SendBackward, s + 1, i}));
          received.insert({a.kind, s, i});
          break;
        case A::SendForward:
          if (!has(A::RecvForward, s + 1, i))
            return str(what(r, a), " sends what no rank receives: rank ", rank_of(s + 1),
                       " has no ", to_string({A::RecvForward, s + 1, i}));
          break;
        case A::SendBackward:
          if (!has(A::RecvBackward, s - 1, i))
            return str(what(r, a), " sends what no rank receives: rank ", rank_of(s - 1),
                       " has no ", to_string({A::RecvBackward, s - 1, i}));
          break;
        case A::Forward:
          if (s > 0 && rank_of(s - 1) != r && !received.count({A::RecvForward, s, i}))
            return str(what(r, a), " needs the activation of stage ", s - 1, " from rank ",
                       rank_of(s - 1), " but does not receive it before (",
                       to_string({A::RecvForward, s, i}), ")");
          break;
        case A::Backward:
        case A::BackwardInput:
          if (s + 1 < o.stages() && rank_of(s + 1) != r && !received.count({A::RecvBackward, s, i}))
            return str(what(r, a), " needs the gradient of stage ", s + 1, " from rank ",
                       rank_of(s + 1), " but does not receive it before (",
                       to_string({A::RecvBackward, s, i}), ")");
          break;
        default:
          break;
      }
    }
  }
  return "";
}

}  // namespace

std::string order_problem(const PipelineOrder& order, OrderLimits limits) {
  if (order.ranks.empty()) return "the order has no ranks";
  for (const auto& check :
       {shape_problem(order), count_problem(order, limits.forward_only), message_problem(order)})
    if (!check.empty()) return check;
  const Simulation sim = simulate(order, {}, limits.max_in_flight);
  if (!sim.blocked.empty()) return "deadlock: " + sim.blocked;
  if (!sim.over_limit.empty()) return sim.over_limit;
  return "";
}

void check_order(const PipelineOrder& order, OrderLimits limits) {
  const std::string problem = order_problem(order, limits);
  TD_CHECK_VALUE(problem.empty(), "pipeline schedule: ", problem);
}

PipelineOrder pipeline_order(PipelineSchedule schedule, int64_t ranks, int64_t micro_batches,
                             int64_t virtual_stages, bool deferred_weight_grads,
                             const std::optional<PipelineOrder>& custom, OrderLimits limits) {
  if (custom) {
    TD_CHECK_VALUE(custom->world() == ranks && custom->micro_batches == micro_batches,
                   "pipeline: the order given is for ", custom->world(), " ranks and ",
                   custom->micro_batches, " micro-batches, but the pipeline has ", ranks,
                   " ranks and ", micro_batches, " micro-batches (chunks)");
  }
  PipelineOrder order = with_communication(
      custom ? *custom
             : make_order(schedule, ranks, micro_batches, virtual_stages, deferred_weight_grads));
  check_order(order, limits);
  return order;
}

}  // namespace tandem::parallel
