// tools/train/moe_setup.cpp — the MoE flags' checks, the expert-parallel plan over the mesh, and
// the routing's summaries.
#include <tandem/core/check.h>
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "config.h"
#include "moe_setup.h"

namespace tandem::tools {

void check_experts(const TrainOptions& o) {
  const GptOptions& g = o.gpt;
  TD_CHECK_VALUE(o.ep >= 1, "train: --ep must be at least 1, but got ", o.ep);
  if (g.n_experts == 0) {
    for (const char* flag :
         {"--top-k", "--moe-every", "--capacity-factor", "--moe-ffn-hidden-size", "--ep"})
      TD_CHECK_VALUE(!given(o, flag), "train: ", flag,
                     " describes a mixture of experts: it needs --n-experts E");
    return;
  }
  TD_CHECK_VALUE(o.model == "gpt", "train: --n-experts puts experts in a GPT's blocks: it needs ",
                 "--model gpt, not ", o.model);
  TD_CHECK_VALUE(g.n_experts >= 1, "train: --n-experts must be at least 1, but got ", g.n_experts);
  TD_CHECK_VALUE(g.top_k >= 1 && g.top_k <= g.n_experts, "train: --top-k ", g.top_k,
                 " must be between 1 and --n-experts (", g.n_experts, ")");
  TD_CHECK_VALUE(g.moe_every >= 1, "train: --moe-every must be at least 1, but got ", g.moe_every);
  TD_CHECK_VALUE(g.moe_ffn_hidden_size >= 0, "train: --moe-ffn-hidden-size must be >= 0, but got ",
                 g.moe_ffn_hidden_size);
  TD_CHECK_VALUE(g.capacity_factor > 0 || !given(o, "--capacity-factor"),
                 "train: --capacity-factor ", g.capacity_factor,
                 " would drop every token\n  hint: give a positive factor (1.25 is Switch's), or "
                 "leave it out for dropless routing");
  TD_CHECK_VALUE(g.n_experts % o.ep == 0, "train: --ep ", o.ep, " splits the experts over the ",
                 "ranks, and --n-experts ", g.n_experts, " does not divide by it");
  // What the MoE layer does not compose with yet, named rather than trained wrong.
  const std::pair<const char*, bool> others[] = {
      {"--sequence-parallel", o.sequence_parallel},
      {"--pp", o.pp > 1},
      {"--cp", o.cp > 1},
      {"--pipeline", !o.pipeline.empty()},
      {"--data-parallel", !o.data_parallel.empty()},
      {"--activation-checkpointing", o.activation_checkpointing}};
  for (const auto& [flag, on] : others)
    TD_CHECK_VALUE(
        !on, "train: --n-experts with ", flag,
        " is not supported yet (the MoE layer trains with --ddp, --ep, --tp and --zero)");
}

void add_experts(nlohmann::ordered_json& j, const GptOptions& g) {
  if (g.n_experts == 0) return;  // a dense run's config reads as before
  j.update({{"n_experts", g.n_experts},
            {"top_k", g.top_k},
            {"moe_every", g.moe_every},
            {"capacity_factor", g.capacity_factor},
            {"moe_ffn_hidden_size", g.moe_ffn_hidden_size}});
}

void read_experts(const nlohmann::json& j, GptOptions& g) {
  g.n_experts = j.value("n_experts", int64_t{0});
  g.top_k = j.value("top_k", int64_t{2});
  g.moe_every = j.value("moe_every", int64_t{1});
  g.capacity_factor = j.value("capacity_factor", 0.0);
  g.moe_ffn_hidden_size = j.value("moe_ffn_hidden_size", int64_t{0});
}

nn::Sequential expert_parallel_gpt(const nn::Sequential& model, parallel::DeviceMesh& mesh,
                                   std::shared_ptr<parallel::PlacementTable> placements) {
  const auto rows = mesh.size("dp") > 1 ? mesh.flatten({"dp", "ep"}) : mesh.group("ep");
  return parallel::ep::expert_parallel(model, mesh.group("ep"),
                                       {.rows = rows, .placements = std::move(placements)});
}

std::string routing_line(nn::Module& model) {
  int64_t lo = -1, hi = 0, total = 0, dropped = 0, n = 0;
  for (auto& [name, m] : nn::moe_layers(model)) {
    for (int64_t c : m->tokens_per_expert)
      lo = lo < 0 ? c : std::min(lo, c), hi = std::max(hi, c), total += c, ++n;
    dropped += m->dropped;
  }
  if (n == 0) return "";
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%",
                100.0 * double(dropped) / double(std::max<int64_t>(total, 1)));
  return str("experts ", lo, "-", hi, " tokens (mean ", total / n, "), ", dropped, " dropped (",
             share, ")");
}

std::string routing_table(nn::Module& model) {
  std::string out;
  for (auto& [name, m] : nn::moe_layers(model)) {
    out += (out.empty() ? "" : "; ") + name + ":";
    for (int64_t c : m->tokens_per_expert) out += str(" ", c);
    out += str(" (", m->dropped, " dropped)");
  }
  return out;
}

WholeBatchRouting::WholeBatchRouting(nn::Module& model) {
  for (auto& [name, m] : nn::moe_layers(model)) {
    saved_.emplace_back(m, m->share_counts);
    m->share_counts = nullptr;
  }
}

WholeBatchRouting::~WholeBatchRouting() {
  for (auto& [m, share] : saved_) m->share_counts = std::move(share);
}

}  // namespace tandem::tools
