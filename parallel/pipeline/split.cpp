// parallel/pipeline/split.cpp — choosing the cut, checking a given one, and running the stages.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/split.h>
#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace tandem::parallel {

std::vector<int64_t> balance_by_parameters(nn::Sequential& seq, int64_t stages) {
  const int64_t n = int64_t(seq.size());
  TD_CHECK_VALUE(stages >= 1 && stages <= n, "split: ", stages, " stages for ", n,
                 " modules; each stage needs at least one module");
  std::vector<int64_t> prefix{0};  // parameters of modules [0, i)
  for (int64_t i = 0; i < n; ++i) {
    int64_t count = 0;
    for (const Tensor& p : seq[size_t(i)].parameters()) count += p.numel();
    prefix.push_back(prefix.back() + count);
  }
  // best[k][i]: the smallest possible largest stage when modules [0, i) form k stages; the
  // classic linear-partition recurrence, fine for the tens of modules a Sequential holds.
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(size_t(stages + 1),
                                         std::vector<int64_t>(size_t(n + 1), kInf));
  std::vector<std::vector<int64_t>> cut(size_t(stages + 1), std::vector<int64_t>(size_t(n + 1), 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= stages; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {  // the last stage is modules [j, i)
        if (best[size_t(k - 1)][size_t(j)] == kInf) continue;
        const int64_t worst =
            std::max(best[size_t(k - 1)][size_t(j)], prefix[size_t(i)] - prefix[size_t(j)]);
        if (worst < best[size_t(k)][size_t(i)]) {
          best[size_t(k)][size_t(i)] = worst;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  std::vector<int64_t> sizes(static_cast<size_t>(stages));
  for (int64_t k = stages, i = n; k >= 1; --k) {
    const int64_t j = cut[size_t(k)][size_t(i)];
    sizes[size_t(k - 1)] = i - j;
    i = j;
  }
  return sizes;
}

std::vector<int64_t> stage_sizes(nn::Sequential& seq, int64_t stages,
                                 std::vector<int64_t> balance) {
  const int64_t n = int64_t(seq.size());
  if (balance.empty()) return balance_by_parameters(seq, stages);
  TD_CHECK_VALUE(int64_t(balance.size()) == stages, "split: balance has ", balance.size(),
                 " stages but there are ", stages);
  int64_t total = 0;
  for (size_t k = 0; k < balance.size(); ++k) {
    TD_CHECK_VALUE(balance[k] >= 1, "split: balance[", k, "] = ", balance[k],
                   "; every stage needs at least one module");
    total += balance[k];
  }
  TD_CHECK_VALUE(total == n, "split: balance sums to ", total, " modules but the Sequential has ",
                 n);
  return balance;
}

std::vector<Stage> split(nn::Sequential& seq, const std::vector<Device>& devices,
                         std::vector<int64_t> balance) {
  TD_CHECK_VALUE(!devices.empty(), "split: no devices given");
  balance = stage_sizes(seq, int64_t(devices.size()), std::move(balance));
  // Which tensors more than one stage uses, by their first name, before the moves make copies.
  std::map<const TensorImpl*, std::string> first_name;
  std::map<std::string, std::set<size_t>> users;                 // first name -> stages
  std::vector<std::vector<std::string>> firsts(devices.size());  // per stage, per tensor
  std::vector<Stage> stages;
  int64_t begin = 0;
  for (size_t k = 0; k < devices.size(); ++k) {
    stages.push_back({seq.slice(size_t(begin), size_t(begin + balance[k])), devices[k]});
    for (auto& [name, t] : stages.back().modules.state_dict()) {
      firsts[k].push_back(first_name.try_emplace(&t.impl(), name).first->second);
      users[firsts[k].back()].insert(k);
    }
    begin += balance[k];
  }
  // seq's own modules move, a stage at a time (a tensor its modules share stays one tensor); the
  // stages share their tensors: training the stages trains seq.
  for (Stage& s : stages) s.modules.to(s.device);
  for (size_t k = 0; k < stages.size(); ++k) {
    const nn::StateDict moved = stages[k].modules.state_dict();  // the same order as before
    std::set<std::string> listed;
    for (size_t i = 0; i < moved.size(); ++i)
      if (users[firsts[k][i]].size() > 1 && listed.insert(firsts[k][i]).second)
        stages[k].tied.emplace_back(firsts[k][i], moved[i].second);
  }
  return stages;
}

Tensor run_stages(std::vector<Stage>& stages, const Tensor& x) {
  Tensor h = x;
  for (Stage& s : stages) h = s.modules(h.to(s.device));
  return h;
}

}  // namespace tandem::parallel
