// tools/train/step.h — one training step and one evaluation forward, for every way a run can use
// its devices, over the model as setup.h's make_setup() placed and wrapped it. train_step() has
// one short case per mode, as llm.c's step names its reduction (gpt2_backward_and_reduce) and
// torch's pipeline schedule.step(x, target=y) returns the unscaled loss:
//   None, DDP, DataParallel: forward through the model or its wrapper, the loss, backward
//                            (DDP reduces the gradients inside backward; --tp's model is the cut
//                            one, its partial gradients summed after);
//   --pp:                    DistributedPipeline::step, micro-batch by micro-batch, inside DDP's
//                            no_sync() whose reduction then runs once (reduce_gradients);
//   Pipeline:                Pipeline::step does forward and backward micro-batch by micro-batch.
// Autocast covers the forward and the loss; under --amp fp16 backward starts from the loss times
// the gradient scaler's scale, and the loss returned is unscaled in every mode.
#pragma once

#include "setup.h"
#include "setup_state.h"

namespace tandem::tools {

struct StepResult {
  Tensor loss;    // the batch's mean loss, unscaled, detached
  Tensor logits;  // [N, classes], on the device that computed them
};
/// Forward, loss and backward of one batch: gradients accumulate into the model's .grad.
StepResult train_step(Setup& s, const Tensor& x, const Tensor& y);

/// Whether every rank evaluates: under --zero 3 and --tp the forward's collectives need every
/// rank, so the ranks evaluate together (rank 0 reports); otherwise rank 0 alone.
inline bool everyone_evaluates(const Setup& s) {
  return s.fsdp != nullptr || s.tp != nullptr || s.cp != nullptr;
}

/// Clips the gradients' global norm to max_norm, one device's norm whatever the layout
/// (parallel::clip_grad_norm_ over the placement table); returns the norm before clipping.
double clip_gradients(Setup& s, double max_norm);

/// The model's logits for x without recording a graph, through the same path as training (a DDP
/// rank evaluates alone, on its own model: no collective; under --zero 3 through the sharded
/// model, collectively).
Tensor predict(Setup& s, const Tensor& x);

/// The loss of the model's output for x against y, without a graph (evaluation). Under --pp
/// every rank calls it: the last stage computes it and every stage returns it.
double eval_loss(Setup& s, const Tensor& x, const Tensor& y);

}  // namespace tandem::tools
