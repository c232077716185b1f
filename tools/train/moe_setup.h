// tools/train/moe_setup.h — `tandem train --model gpt --n-experts E`: the flags' checks, expert
// parallelism over the mesh's "ep" (parallel/ep/plan.h), and what the progress line and the
// report say of the routing (tokens per expert, tokens dropped).
#pragma once

#include <tandem/nn/moe.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/ep/plan.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "../commands.h"

namespace tandem::tools {

/// --n-experts, --top-k, --moe-every, --capacity-factor and --ep: ValueError naming the flag for
/// a value out of range, and for the modes they do not compose with yet.
void check_experts(const TrainOptions& options);

/// The MoE flags in a run's config (none for a dense GPT), and back from a checkpoint's.
void add_experts(nlohmann::ordered_json& j, const GptOptions& g);
void read_experts(const nlohmann::json& j, GptOptions& g);

/// --ep N: the copy of `model` whose MoE layers hold this rank's experts of the mesh's "ep"
/// group, the routing counted over dp × ep (the batch's rows).
nn::Sequential expert_parallel_gpt(const nn::Sequential& model, parallel::DeviceMesh& mesh,
                                   std::shared_ptr<parallel::PlacementTable> placements);

/// The last step's routing over all MoE layers, for the progress line:
/// "experts 410-566 tokens (mean 512), 23 dropped (1.1%)". Empty without MoE layers.
std::string routing_line(nn::Module& model);
/// Each layer's tokens per expert and drops, one line per layer, for the report.
std::string routing_table(nn::Module& model);

/// For an evaluation in which every rank holds the whole batch: the MoE layers route as one
/// device does on it (each rank's counts alone), not as the rows of the training batch.
class WholeBatchRouting {
 public:
  explicit WholeBatchRouting(nn::Module& model);
  ~WholeBatchRouting();
  WholeBatchRouting(const WholeBatchRouting&) = delete;
  WholeBatchRouting& operator=(const WholeBatchRouting&) = delete;

 private:
  std::vector<std::pair<nn::MoE*, nn::ShareCounts>> saved_;
};

}  // namespace tandem::tools
