// parallel/pipeline/schedule.cpp — the order as data: its text, and the sends and receives a
// compute order implies.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <algorithm>
#include <cctype>
#include <sstream>

namespace tandem::parallel {

std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m) {
  std::vector<int64_t> sizes(static_cast<size_t>(m), n / m);
  for (int64_t i = 0; i < n % m; ++i) ++sizes[size_t(i)];
  return sizes;
}

std::vector<int64_t> PipelineOrder::stages_of(int rank) const {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < stages(); ++s)
    if (stage_ranks[size_t(s)] == rank) out.push_back(s);
  return out;
}

bool has_communication(const PipelineOrder& order) {
  for (const auto& actions : order.ranks)
    for (const PipelineAction& a : actions)
      if (!a.is_compute()) return true;
  return false;
}

PipelineOrder with_communication(const PipelineOrder& order) {
  if (has_communication(order)) return order;
  PipelineOrder out = order;
  const int64_t S = order.stages();
  const auto remote = [&](int64_t from, int64_t to) {
    return to >= 0 && to < S && order.stage_ranks[size_t(from)] != order.stage_ranks[size_t(to)];
  };
  using A = PipelineAction;
  for (size_t r = 0; r < order.ranks.size(); ++r) {
    std::vector<A>& list = out.ranks[r];
    list.clear();
    for (const A& a : order.ranks[r]) {
      const int64_t s = a.stage, i = a.micro_batch;
      const bool backward = a.kind == A::Backward || a.kind == A::BackwardInput;
      // The receive just before the action that needs it: a rank posts it no earlier than its
      // own schedule reaches that point (receives block; sends do not, see pipeline runtime).
      if (a.kind == A::Forward && remote(s, s - 1)) list.push_back({A::RecvForward, s, i});
      if (backward && remote(s, s + 1)) list.push_back({A::RecvBackward, s, i});
      list.push_back(a);
      if (a.kind == A::Forward && remote(s, s + 1)) list.push_back({A::SendForward, s, i});
      if (backward && remote(s, s - 1)) list.push_back({A::SendBackward, s, i});
    }
  }
  return out;
}

namespace {

constexpr const char* kWords[] = {"F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

}  // namespace

std::string to_string(const PipelineAction& a) {
  std::string out = std::to_string(a.stage) + kWords[a.kind];
  out += a.micro_batch == PipelineAction::kAll ? "*" : std::to_string(a.micro_batch);
  return out;
}

std::string to_string(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

std::string to_string(const PipelineOrder& order) {
  std::string out;
  for (size_t r = 0; r < order.ranks.size(); ++r)
    out += "rank " + std::to_string(r) + ": " + to_string(order.ranks[r]) + "\n";
  return out;
}

std::vector<PipelineAction> parse_actions(const std::string& text) {
  std::vector<PipelineAction> out;
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    size_t digits = 0;
    while (digits < word.size() && std::isdigit(static_cast<unsigned char>(word[digits]))) ++digits;
    bool read = false;
    // No kind's word is the start of another's, so the first that fits is the one.
    for (int k = 0; k < 8 && !read && digits > 0; ++k) {
      const std::string kind = kWords[k];
      if (word.compare(digits, kind.size(), kind) != 0) continue;
      const std::string rest = word.substr(digits + kind.size());
      const bool all = rest == "*" && k == PipelineAction::BackwardWeight;
      if (!all && (rest.empty() || !std::all_of(rest.begin(), rest.end(), [](char c) {
                     return std::isdigit(static_cast<unsigned char>(c));
                   })))
        continue;
      out.push_back({PipelineAction::Kind(k), std::stoll(word.substr(0, digits)),
                     all ? PipelineAction::kAll : std::stoll(rest)});
      read = true;
    }
    TD_CHECK_VALUE(read, "pipeline: cannot read the action \"", word,
                   "\" (write stage, kind, micro-batch: 1F3, 0I2, 2W0, 1SEND_F3, 0RECV_B1, 0W*)");
  }
  return out;
}

std::string to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::GPipe:
      return "gpipe";
    case PipelineSchedule::OneFOneB:
      return "1f1b";
    case PipelineSchedule::Interleaved1F1B:
      return "interleaved";
    case PipelineSchedule::ZeroBubbleH1:
      return "zb-h1";
    case PipelineSchedule::ZeroBubbleV:
      return "zb-v";
    case PipelineSchedule::DualPipeV:
      return "dualpipev";
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name) {
  for (PipelineSchedule s :
       {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved1F1B,
        PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV, PipelineSchedule::DualPipeV})
    if (to_string(s) == name) return s;
  ::tandem::detail::fail<ValueError>(
      "pipeline: unknown schedule \"", name,
      "\" (choose gpipe, 1f1b, interleaved, zb-h1, zb-v or dualpipev)");
}

int64_t stage_count(PipelineSchedule schedule, int64_t ranks, int64_t virtual_stages) {
  switch (schedule) {
    case PipelineSchedule::Interleaved1F1B:
      return ranks * virtual_stages;
    case PipelineSchedule::ZeroBubbleV:
    case PipelineSchedule::DualPipeV:
      return 2 * ranks;
    default:
      return ranks;
  }
}

int64_t stages_per_rank(PipelineSchedule schedule, int64_t virtual_stages) {
  if (schedule == PipelineSchedule::Interleaved1F1B) return virtual_stages ? virtual_stages : 2;
  return stage_count(schedule, 1);
}

std::vector<int> stage_ranks(PipelineSchedule schedule, int64_t ranks, int64_t virtual_stages) {
  const bool v_shaped =
      schedule == PipelineSchedule::ZeroBubbleV || schedule == PipelineSchedule::DualPipeV;
  const int64_t p = ranks;
  std::vector<int> out;
  for (int64_t s = 0; s < p * stages_per_rank(schedule, virtual_stages); ++s)
    out.push_back(int(v_shaped && s >= p ? 2 * p - 1 - s : s % p));
  return out;
}

}  // namespace tandem::parallel
