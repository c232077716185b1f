// parallel/pipeline/schedule_sim.h — what a schedule will do, before it runs: each rank walks its
// list in order; an action starts when the rank is free and what it needs is there (the stage
// before's activation, the stage after's gradient, its own forward), and lasts its cost. Sends
// are posted and the rank goes on (as the runtime's are); a receive lasts until the message
// arrives, `message` after its send. Out come each rank's timeline, its idle share (the bubble)
// and the activations it holds over the step — to set beside the measured ones
// (PipelineResult::timeline), and the one engine under check_order (schedule_check.h).
//
//   auto order = with_communication(make_order(PipelineSchedule::ZeroBubbleH1, 4, 8));
//   Simulation sim = simulate(order, {.stages = {{.forward = 1, .backward_input = 1,
//                                                 .backward_weight = 1}}});
//   sim.ranks[0].idle_share;  // 1F1B: (p−1)/(m+p−1) · … ; ZB-H1: a third of it
#pragma once

#include <tandem/parallel/pipeline/schedule.h>
#include <string>
#include <vector>

namespace tandem::parallel {

/// What one stage's actions cost, in any unit of time (B = I + W), and what they hold.
struct StageCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
  /// Memory, in any unit: what the stage's forward of one micro-batch keeps until its backward
  /// (the saved layer inputs, and the output the backward starts from), and what its W still
  /// reads after its I (the Linears' inputs and output gradients). The defaults count
  /// micro-batches held between F and their B or I.
  double activation = 1, weight_inputs = 0;
};

struct ActionCosts {
  /// Per stage; one entry: every stage alike.
  std::vector<StageCosts> stages = {StageCosts{}};
  double message = 0;  // from a send's post to its receive's end, at the earliest
  const StageCosts& of(int64_t stage) const {
    return stages.size() == 1 ? stages[0] : stages.at(size_t(stage));
  }
};

/// An action and when it ran (seconds or the costs' unit, from the step's start).
struct TimedAction {
  PipelineAction action;
  double start = 0, end = 0;
};

struct SimulatedRank {
  std::vector<TimedAction> timeline;  // every action, receives included (their wait)
  double busy = 0;                    // in compute actions
  double idle_share = 0;              // 1 − busy / the step's length
  int64_t peak_in_flight = 0;         // stage micro-batches forwarded and not yet through B or I
  double peak_memory = 0;             // the stages' activation and weight_inputs, at the most
};

struct Simulation {
  double length = 0;  // the step: the last action's end on any rank
  std::vector<SimulatedRank> ranks;
  /// Mean idle share over the ranks: the bubble.
  double bubble() const;
  /// Where the walk stopped, when it could not finish (empty when it did): each stuck rank's
  /// next action and what it waits for. check_order() turns it into its error.
  std::string blocked;
  /// The first action (in time) that took a rank past `in_flight_limit`, when one was given.
  std::string over_limit;
};

/// Walks `order` (with its sends and receives: with_communication) under `costs`. An order that
/// cannot finish returns with `blocked` saying where; nothing throws for a bad order (that is
/// check_order's). `in_flight_limit` (> 0): note the first action that holds more.
Simulation simulate(const PipelineOrder& order, const ActionCosts& costs = {},
                    int64_t in_flight_limit = 0);

/// Each stage's median F, I, W (and B, split evenly) from measured timelines (one per rank), for
/// simulate(): the costs the step really had. Stages with no such action keep the defaults'
/// ratios scaled by the others' forward.
ActionCosts measured_costs(const PipelineOrder& order,
                           const std::vector<std::vector<TimedAction>>& timelines);

/// Idle share per rank of measured timelines: 1 − compute time / the step's length.
std::vector<double> idle_shares(const std::vector<std::vector<TimedAction>>& timelines);

}  // namespace tandem::parallel
