// tools/train/gpt_rank.cpp — the GPT drawn, cut and placed for one rank (gpt_rank.h).
#include <tandem/parallel/cp/plan.h>
#include <tandem/parallel/tp/gpt.h>

#include "gpt_rank.h"
#include "models.h"
#include "moe_setup.h"
#include "optim_setup.h"

namespace tandem::tools {

GptRank build_gpt_rank(const TrainOptions& o, int64_t characters, int64_t vocab,
                       const Placement& placement, std::shared_ptr<parallel::Communicator> group,
                       std::shared_ptr<parallel::DeviceMesh> mesh) {
  const GptOptions& g = o.gpt;
  const Device device = placement.device;
  GptRank r;
  // Every rank draws the same whole GPT from the seed, on the host (or, planning, on meta).
  manual_seed(o.seed);
  const Device drawn = device.is_meta() ? device : Device::cpu();
  auto model = std::make_shared<nn::Sequential>(
      make_gpt(g, characters, vocab, o.activation_checkpointing, drawn));
  r.rows = vocabulary_rows(*model, characters);  // a checkpoint's are unpadded
  r.parameters = model->parameter_count();       // before a pipeline's copies
  // Each pipeline stage its own dropout streams (Megatron's seed + 100 × stage): the stages'
  // processes would otherwise draw the same masks for different layers.
  if (o.pp > 1) manual_seed(o.seed + 100 * uint64_t(mesh->coordinate("pp")));
  // --cp: each context rank draws one device's dropout numbers at its positions, so all start
  // where one device's generator stands now (the model was drawn from the host's).
  if (o.cp > 1) default_generator(device).set_state(default_generator(drawn).get_state());
  auto placements = std::make_shared<parallel::PlacementTable>();  // every wrapper records here
  if (mesh) {  // each rank keeps its slices (all of the model's with --tp 1: a copy), and
    // make_setup its stage's of those with --pp
    r.tp_stream = parallel::tp::rank_stream(mesh->group("tp"), drawn);
    // (Not for --cp alone: the plan's copy would draw its dropout from the rank's stream, where
    // context parallelism draws one device's numbers.)
    if (o.tp > 1 || (o.cp == 1 && o.ep == 1))
      model = std::make_shared<nn::Sequential>(
          parallel::tp::tensor_parallel_gpt(*model, mesh->group("tp"),
                                            {.sequence_parallel = o.sequence_parallel,
                                             .placements = placements,
                                             .rank_stream = r.tp_stream}));
    if (o.cp > 1)  // its attention across the cp group, its embedding at this rank's positions
      model = std::make_shared<nn::Sequential>(parallel::cp::context_parallel(
          *model, mesh->group("cp"),
          {.algorithm = parallel::cp::parse_algorithm(o.cp_algorithm), .placements = placements}));
    if (o.ep > 1)  // this rank's experts of every MoE layer, the tokens sent to their holders
      model = std::make_shared<nn::Sequential>(expert_parallel_gpt(*model, *mesh, placements));
  }
  r.setup = make_setup(model, placement, o, mesh, placements, group);
  Setup& setup = r.setup;
  setup.moe = g.n_experts > 0;
  const int replicas = mesh ? mesh->size("dp") * o.ep : group ? group->size() : 1;
  if (setup.moe && o.ep == 1 && replicas > 1)  // the capacity counted over the batch's rows
    parallel::ep::share_routing(*setup.model, mesh ? mesh->group("dp") : group);
  setup.loss = [](const Tensor& logits, const Tensor& y) { return nn::gpt_loss(logits, y); };
  if (setup.tp)  // this rank's logits are its V/tp columns: never gathered
    setup.loss = [tp = setup.tp](const Tensor& logits, const Tensor& y) {
      return parallel::tp::gpt_loss(logits, y, tp);
    };
  r.optimizer = make_gpt_optimizer(o, setup.model->named_parameters(), g.beta2, setup);
  return r;
}

}  // namespace tandem::tools
