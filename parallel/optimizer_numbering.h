// parallel/optimizer_numbering.h — one device's optimizer indices for the parameters every rank
// trains. A whole optimizer state (PyTorch's state_dict, a whole checkpoint's) numbers the
// parameters as one device's optimizer does: group by group, and within a group in the model's
// order. No rank holds that order, but each knows its part: the group of each parameter its
// optimizer holds, the parameter's place in its module, and, on a pipeline, its stage. Sorted by
// (group, stage, place), the parameters of every rank are one device's list:
//
//   one device   group 0 (decay):    wte  h.0.c_attn.w  h.0.c_fc.w  h.1.c_attn.w ...  → 0 1 2 3
//                group 1 (no decay): h.0.ln_1.w  h.0.c_attn.b  ...                    → 4 5 ...
//   pp 2         stage 0 holds wte, h.0.*; stage 1 h.1.*, ln_f, and lm_head (wte's copy, not
//                counted: it takes stage 0's index); a ZeRO rank lists only the parameters it
//                holds pieces of, and another rank of its stage the rest.
//
// It holds for optimizers made by a per-parameter rule in the model's order (optim::adamw_groups,
// a single group), with every group on every rank, empty or not (adamw_groups' keep_empty_groups).
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/placement.h>
#include <map>
#include <string>
#include <vector>

namespace tandem::parallel {

struct OptimizerNumbering {
  std::map<std::string, int64_t> index;      // one device's parameter name -> its index
  std::vector<std::vector<int64_t>> groups;  // one device's indices in each group
};

/// The numbering, on every rank, from every rank's `optimizer` (over `table`'s tensors: under
/// ZeRO its inner one) and `model` (this rank's module: its parameters' order). Collective over
/// `world` (null: this process alone, which holds every parameter). ValueError when the ranks'
/// optimizers disagree: another number of groups, or a parameter in two groups.
OptimizerNumbering number_parameters(const PlacementTable& table, nn::Module& model,
                                     const optim::Optimizer& optimizer, Communicator* world);

}  // namespace tandem::parallel
