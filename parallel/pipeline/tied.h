// parallel/pipeline/tied.h — a weight that two stages use. A GPT reads its token embedding twice:
// on the first stage to embed the ids, on the last as lm_head to make the logits. split() gives
// each of those stages its own copy on its device (Stage::tied), as Megatron-LM does; the copies
// stay equal because after backward each gets the sum of all their gradients — the gradient the
// one tied tensor gets on a single device — and an optimizer that holds every copy then steps
// each alike. The gradient norm counts the weight once (Megatron's param_is_not_shared).
//
//   auto r = pipe.step(x, y, loss);                   // sums the tied gradients itself
//   parallel::clip_grad_norm_(parallel::placements(pipe.stages()), 1.0);  // counted once
//   optimizer.step();                                 // holds every copy: model.parameters()
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/placement.h>
#include <map>
#include <string>
#include <vector>

namespace tandem::parallel {

/// The tied copies' gradients as they are (copies; undefined where none), taken before a
/// backward: when gradients accumulate over several steps, they hold the sum already made, which
/// sum_tied_gradients must not count once per copy again.
using TiedGradients = std::map<std::string, std::vector<Tensor>>;
TiedGradients tied_gradients_before(std::vector<Stage>& stages);

/// The one rule both pipelines follow for a weight that several stages hold: every copy ends
/// with what the copies held before the backward (`before`, one per copy, alike after the last
/// sum; undefined where none) plus the sum over all copies of what each gained since. `copies`:
/// those in this process (distinct tensors); `across`: the stages in other processes that hold
/// the others (DistributedPipeline's tied group; null when every copy is here). Collective over
/// `across`, where a copy that gained nothing takes part with zeros.
void sum_tied_copies(const std::vector<Tensor>& copies, const std::vector<Tensor>& before,
                     Communicator* across);

/// Gives every copy of each tied parameter the sum of what the copies' gradients gained since
/// `before` (moved between their devices), added to what they held then. Pipeline::step calls it
/// after its backward; call it after a backward through run_stages.
void sum_tied_gradients(std::vector<Stage>& stages, const TiedGradients& before = {});

/// Every stage's parameters as a placement table (one process: no mesh dimension), each tied
/// parameter's later copies marked as counted by its first stage's: what parallel::clip_grad_norm_
/// reads (the copies' gradients are equal after sum_tied_gradients, so they scale alike).
PlacementTable placements(std::vector<Stage>& stages);

}  // namespace tandem::parallel
