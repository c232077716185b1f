// parallel/pipeline/fully_sharded_stages.cpp — see fully_sharded_stages.h.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/fully_sharded_stages.h>

#include <memory>

namespace tandem::parallel {

namespace {

// fully_shard reduces when the backward told "last" ends, and a split backward (I) ends with its
// W (deferred_weight_grads.h runs the backward's callbacks then): every W of the rank must be
// done by then. The generated schedules all place them so (pipeline_schedule_test.cpp); an
// order of one's own is checked.
void check_last_weights(const PipelineOrder& order, int rank) {
  using A = PipelineAction;
  const std::vector<A>& a = order.ranks.at(size_t(rank));
  size_t last = a.size();
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].kind == A::Backward || a[k].kind == A::BackwardInput) last = k;
  if (last == a.size() || a[last].kind != A::BackwardInput) return;
  for (size_t k = a.size(); k-- > 0;) {
    if (a[k].kind != A::BackwardWeight) continue;
    const bool its = a[k].stage == a[last].stage &&
                     (a[k].micro_batch == a[last].micro_batch || a[k].micro_batch == A::kAll);
    TD_CHECK_VALUE(its, "fully_shard_stages: rank ", rank, "'s last backward is ",
                   to_string(a[last]), " but its last weight gradient is ", to_string(a[k]),
                   "; fully_shard reduces when the last backward's W is done, so that W must "
                   "come last");
    return;
  }
}

}  // namespace

void fully_shard_stages(DistributedPipeline& pipe, FullyShardedModule& fsdp) {
  check_last_weights(pipe.order(), pipe.stage_index());
  // B or I runs once per held stage and micro-batch: the step's last is the rank's last of them.
  const int64_t backwards = int64_t(pipe.held_stages().size()) * pipe.order().micro_batches;
  pipe.run_through(
      [&fsdp, &pipe](const Tensor& x, int64_t stage) {
        const auto [first, end] = pipe.stage_items(stage);
        return fsdp.forward_items(x, first, end);
      },
      [&fsdp, backwards, left = std::make_shared<int64_t>(0)](int64_t, bool) {
        if (*left == 0) *left = backwards;  // a new step
        fsdp.set_is_last_backward(--*left == 0);
      });
}

}  // namespace tandem::parallel
