// parallel/ep/dispatch.h — how tokens reach experts held on other ranks (expert parallelism's
// dispatch and combine, Megatron-Core's MoEAlltoAllTokenDispatcher): one all_to_all_v out, the
// experts, one back. Rank r of an ep group of P holds experts [r·L, (r+1)·L), L = E/P.
//
//   rank 0's tokens, sorted by expert       rank 1's tokens
//   ┌ e0 e0 e1 │ e2 e3 e3 ┐                 ┌ e1 │ e2 e2 e3 ┐
//   └──to 0────┴──to 1────┘                 └to 0┴──to 1────┘
//        all_to_all_v (sizes from an all-gather of every rank's counts)
//   rank 0 receives: from 0: e0 e0 e1, from 1: e1    -> regrouped by expert: e0 e0 | e1 e1
//   rank 1 receives: from 0: e2 e3 e3, from 1: e2 e2 e3 -> e2 e2 e2 | e3 e3 e3
//   each expert one GEMM over its rows; the rows put back in arrival order; all_to_all_v back
//
// Each step is differentiable: the all_to_all_v's backward is the all_to_all_v of the swapped
// sizes, the regrouping's a row gather whose backward adds the rows back.
#pragma once

#include <tandem/nn/experts.h>
#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <vector>

namespace tandem::parallel::ep {

/// x's rows (dim 0) sent input_splits[i] to rank i; receives output_splits[j] rows from rank j
/// (Communicator::all_to_all_v), recorded for autograd: its backward sends the gradient's rows
/// back the way they came. Collective over `group`.
Tensor all_to_all_v(const Tensor& x, const std::shared_ptr<Communicator>& group,
                    const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits);

/// This rank's tokens [M, C] sorted by expert, counts[e] of them for each of the group's E
/// experts, through the experts that hold them: `local` holds this rank's E/P. Returns their
/// outputs [M, C] in the tokens' order. Collective over `group` (every rank calls it, with its
/// own tokens, for the same layer).
Tensor dispatch_to_experts(const Tensor& tokens, const std::vector<int64_t>& counts,
                           const nn::Experts& local, const std::shared_ptr<Communicator>& group);

}  // namespace tandem::parallel::ep
