// parallel/pipeline/schedule.h — a pipeline schedule as data: for each rank, the list of actions
// it runs in order. The model is cut into S stages (consecutive modules); rank r holds some of
// them (PipelineOrder::stage_ranks) and every action names its stage and micro-batch, in the
// notation of torch.distributed.pipelining ("1F3": stage 1's forward of micro-batch 3):
//
//   F  forward                          I  backward of the input (what the stage before waits for)
//   B  backward, input and weights      W  backward of the weights (dW = dyᵀ·x, waited for by
//                                          nobody until the optimizer: zero-bubble's filler)
//   SEND_F / RECV_F  an activation to / from the next / previous stage's rank
//   SEND_B / RECV_B  a gradient to / from the previous / next stage's rank
//
// The generators (schedules.cpp) make the compute actions of each schedule; with_communication()
// adds the sends and receives a rank needs where a neighbouring stage lives on another rank; the
// check (schedule_check.h) refuses an order that would hang; the simulator (schedule_sim.h)
// predicts its timeline, bubble and memory; both pipelines (pipeline.h: one process's devices,
// distributed_pipeline.h: ranks) run any valid order, the user's own included.
//
//   schedule     stages   rank r holds        rank 0's actions, p = 2 ranks, m = 4 micro-batches
//   gpipe        p        stage r             0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0
//   1f1b         p        stage r             0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3
//   interleaved  v·p      stages r, r+p, …    Megatron's virtual pipeline: v chunks per rank
//   zb-h1        p        stage r             1F1B with B split into I and W, the W's filling the
//                                             bubble at 1F1B's memory (Qi et al. 2023)
//   zb-v         2p       stages r, 2p−1−r    the V: the model goes down the ranks and back up
//   dualpipev    2p       stages r, 2p−1−r    DeepSeek-V3's DualPipe folded onto p ranks
//
// GPipe and 1F1B leave (p−1)/(m+p−1) of each rank idle; interleaving divides that bubble by v
// at v× the messages; the zero-bubble schedules fill it with W's. docs/parallelism.md draws each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::parallel {

enum class PipelineSchedule {
  GPipe,
  OneFOneB,
  Interleaved1F1B,
  ZeroBubbleH1,
  ZeroBubbleV,
  DualPipeV
};

struct PipelineAction {
  enum Kind {
    Forward,
    Backward,        // input and weights, as outside a pipeline
    BackwardInput,   // the input's gradient; the weights' is left to BackwardWeight
    BackwardWeight,  // micro_batch kAll: every one the stage has left, in one product each
    SendForward,
    RecvForward,
    SendBackward,
    RecvBackward
  } kind;
  int64_t stage = 0;
  int64_t micro_batch = 0;
  static constexpr int64_t kAll = -1;
  bool operator==(const PipelineAction&) const = default;
  bool is_compute() const { return kind <= BackwardWeight; }
};

/// A whole schedule: which rank runs each stage, and each rank's actions.
struct PipelineOrder {
  int64_t micro_batches = 0;
  std::vector<int> stage_ranks;                    // stage s runs on rank stage_ranks[s]
  std::vector<std::vector<PipelineAction>> ranks;  // rank r's actions, in order
  int64_t stages() const { return int64_t(stage_ranks.size()); }
  int world() const { return int(ranks.size()); }
  /// The stages rank r holds, in model order.
  std::vector<int64_t> stages_of(int rank) const;
};

/// How many stages `schedule` cuts the model into over `ranks` ranks: p, v·p (interleaved) or 2p.
int64_t stage_count(PipelineSchedule schedule, int64_t ranks, int64_t virtual_stages = 1);
/// How many stages each rank holds: 1, v (interleaved; 0 means its default, 2) or 2 (V shapes).
int64_t stages_per_rank(PipelineSchedule schedule, int64_t virtual_stages = 0);
/// Which rank holds each stage — the one rule make_order and pipeline_devices share:
/// s mod p (round robin, interleaved's chunks r, r+p, …), or down and back up for the V shapes
/// (rank r holds stages r and 2p−1−r, so the last stage sits beside the first).
std::vector<int> stage_ranks(PipelineSchedule schedule, int64_t ranks, int64_t virtual_stages = 0);

/// `schedule`'s compute actions for `ranks` ranks and `micro_batches` micro-batches
/// (`virtual_stages`: interleaved's v, ≥ 2). With `deferred_weight_grads` (GPipe and 1F1B), each
/// backward is an I and every stage ends with one W of all its micro-batches. ValueError naming
/// the sizes when the schedule cannot be built for them (DualPipeV: m ≥ 2p; interleaved: m a
/// multiple of p).
PipelineOrder make_order(PipelineSchedule schedule, int64_t ranks, int64_t micro_batches,
                         int64_t virtual_stages = 0, bool deferred_weight_grads = false);

/// `order` with the sends and receives its ranks need: after each F whose next stage is on
/// another rank, a SEND_F; before each F whose previous stage is, a RECV_F (and SEND_B / RECV_B
/// for the backwards, the other way). Communication already in `order` is kept as it is.
PipelineOrder with_communication(const PipelineOrder& order);
bool has_communication(const PipelineOrder& order);

/// The sizes of the micro-batches a batch of n samples is cut into, m of them, differing by at
/// most one, larger first (torch.tensor_split's rule: 10 in 4 → 3 3 2 2).
std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m);

/// "1F3", "0SEND_B2", "0W*"; a list joined by spaces. parse_actions reads them back (ValueError
/// naming the word it cannot read).
std::string to_string(const PipelineAction& action);
std::string to_string(const std::vector<PipelineAction>& actions);
std::vector<PipelineAction> parse_actions(const std::string& text);
/// One line per rank: "rank 0: 0F0 0F1 …".
std::string to_string(const PipelineOrder& order);

/// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"; parse_schedule takes these
/// (ValueError naming the choices otherwise).
std::string to_string(PipelineSchedule schedule);
PipelineSchedule parse_schedule(const std::string& name);

}  // namespace tandem::parallel
