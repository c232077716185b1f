// nn/optim/param_groups.cpp — decay and no-decay groups.
#include <tandem/nn/optim/param_groups.h>
#include <set>

namespace tandem::optim {

DecayGroups weight_decay_groups(const nn::StateDict& named_parameters) {
  DecayGroups groups;
  std::set<const TensorImpl*> seen;
  for (const auto& [name, p] : named_parameters) {
    if (!p.defined() || !seen.insert(&p.impl()).second) continue;
    (p.dim() >= 2 ? groups.decay : groups.no_decay).push_back(p);
  }
  return groups;
}

std::vector<Adam::Group> adamw_groups(const nn::StateDict& named_parameters, AdamOptions options,
                                      bool keep_empty_groups) {
  DecayGroups split = weight_decay_groups(named_parameters);
  std::vector<Adam::Group> groups;
  if (keep_empty_groups || !split.decay.empty())
    groups.push_back({std::move(split.decay), options});
  options.weight_decay = 0;
  if (keep_empty_groups || !split.no_decay.empty())
    groups.push_back({std::move(split.no_decay), options});
  return groups;
}

}  // namespace tandem::optim
