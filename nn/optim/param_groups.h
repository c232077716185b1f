// nn/optim/param_groups.h — weight decay as GPT training applies it (nanoGPT's
// configure_optimizers, Megatron's get_param_groups): tensors of 2 or more dims (matmul weights,
// embeddings) decay; biases and LayerNorm gains (1-D) do not, since pulling them towards zero only
// fights the normalisation.
#pragma once

#include <tandem/nn/module.h>
#include <tandem/nn/optim/adam.h>

namespace tandem::optim {

struct DecayGroups {
  std::vector<Tensor> decay, no_decay;
};

/// Splits parameters by dimension; a tied tensor listed twice is taken once.
DecayGroups weight_decay_groups(const nn::StateDict& named_parameters);

/// AdamW's two groups: the decaying ones with `options` (its weight_decay), the others with the
/// same options and weight_decay 0. Empty groups are left out, unless `keep_empty_groups`: a
/// pipeline stage's optimizer keeps both, so that every stage's groups line up with one device's
/// (parallel/optimizer_numbering.h).
std::vector<Adam::Group> adamw_groups(const nn::StateDict& named_parameters, AdamOptions options,
                                      bool keep_empty_groups = false);

}  // namespace tandem::optim
