// parallel/pipeline/schedule_check.h — refusing, before the first step, an order that would hang
// or compute something else than the model: hand-written schedules are where pipelines hang
// (a receive no rank sends to, two ranks each waiting for the other), and a hang names nothing.
// The check reads the order alone, no model and no message:
//
//   1. each action belongs to its rank (its stage runs there) and names a micro-batch there is;
//   2. every stage runs each micro-batch's forward once, and its backward once (B, or I then W);
//   3. every receive has its send on the neighbour's rank and every send its receive, a forward
//      or backward that needs a neighbour's message receives it before it runs;
//   4. walked as the runtime runs it (schedule_sim.h: sends do not wait, receives do), every
//      rank reaches its end: otherwise a deadlock, named by each stuck rank's action and what it
//      waits for;
//   5. optionally, no rank holds more than a given number of micro-batches' activations.
//
//   check_order(with_communication(make_order(PipelineSchedule::ZeroBubbleV, 4, 8)));
#pragma once

#include <tandem/parallel/pipeline/schedule.h>
#include <optional>
#include <string>

namespace tandem::parallel {

struct OrderLimits {
  /// Stage micro-batches a rank may hold between their forward and their B or I (0: any).
  int64_t max_in_flight = 0;
  /// A forward-only order (evaluation): no backward is expected.
  bool forward_only = false;
};

/// What is wrong with `order` (the first problem found, naming the rank and the action), or "".
std::string order_problem(const PipelineOrder& order, OrderLimits limits = {});

/// ValueError with order_problem's text when there is one.
void check_order(const PipelineOrder& order, OrderLimits limits = {});

/// The order a pipeline over `ranks` ranks runs: `custom` when given (ValueError unless it has
/// `ranks` ranks and `micro_batches` micro-batches), else make_order()'s; with its sends and
/// receives; checked.
PipelineOrder pipeline_order(PipelineSchedule schedule, int64_t ranks, int64_t micro_batches,
                             int64_t virtual_stages, bool deferred_weight_grads,
                             const std::optional<PipelineOrder>& custom, OrderLimits limits = {});

}  // namespace tandem::parallel
