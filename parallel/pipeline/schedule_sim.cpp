// parallel/pipeline/schedule_sim.cpp — the walk: every rank takes its next action as soon as what
// it needs has happened somewhere, until all are done or none can move.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace tandem::parallel {
namespace {

using A = PipelineAction;
using Key = std::tuple<int, int64_t, int64_t>;  // kind, stage, micro-batch

Key key(A::Kind kind, int64_t stage, int64_t i) { return {int(kind), stage, i}; }

// When each action ended (a send: when it was posted), by what it is.
class Done {
 public:
  void add(const A& a, double end) { ends_[key(a.kind, a.stage, a.micro_batch)] = end; }
  std::optional<double> at(A::Kind kind, int64_t stage, int64_t i) const {
    const auto it = ends_.find(key(kind, stage, i));
    if (it == ends_.end()) return std::nullopt;
    return it->second;
  }
  // The backward of (stage, i) that frees the gradient it passes on: B or I, whichever ran.
  std::optional<double> backward(int64_t stage, int64_t i) const {
    if (auto b = at(A::Backward, stage, i)) return b;
    return at(A::BackwardInput, stage, i);
  }

 private:
  std::map<Key, double> ends_;
};

struct Need {
  std::optional<double> ready;  // when everything the action needs is there; nullopt: not yet
  std::string waits_for;        // what it waits for, for the blocked report
};

Need needs(const PipelineOrder& order, const A& a, int rank, const Done& done, double message) {
  const int64_t s = a.stage, i = a.micro_batch, S = order.stages();
  const auto local = [&](int64_t t) { return order.stage_ranks[size_t(t)] == rank; };
  const auto when = [](std::optional<double> t, const std::string& what) {
    return Need{t, t ? "" : what};
  };
  const auto with_message = [&](std::optional<double> t, const std::string& what) {
    return Need{t ? std::optional<double>(*t + message) : std::nullopt, t ? "" : what};
  };
  const std::string mine = str(" on rank ", rank);
  switch (a.kind) {
    case A::Forward:
      if (s == 0) return {0.0, ""};
      if (local(s - 1))
        return when(done.at(A::Forward, s - 1, i), to_string({A::Forward, s - 1, i}) + mine);
      return when(done.at(A::RecvForward, s, i), to_string({A::RecvForward, s, i}) + mine);
    case A::Backward:
    case A::BackwardInput: {
      if (!done.at(A::Forward, s, i)) return {std::nullopt, to_string({A::Forward, s, i}) + mine};
      if (s == S - 1) return when(done.at(A::Forward, s, i), "");
      if (local(s + 1))
        return when(done.backward(s + 1, i), str(s + 1, "B", i, " or ", s + 1, "I", i, mine));
      return when(done.at(A::RecvBackward, s, i), to_string({A::RecvBackward, s, i}) + mine);
    }
    case A::BackwardWeight: {
      if (i != A::kAll)
        return when(done.at(A::BackwardInput, s, i), to_string({A::BackwardInput, s, i}) + mine);
      double t = 0;
      for (int64_t j = 0; j < order.micro_batches; ++j) {
        const auto b = done.at(A::BackwardInput, s, j);
        if (!b) return {std::nullopt, to_string({A::BackwardInput, s, j}) + mine};
        t = std::max(t, *b);
      }
      return {t, ""};
    }
    case A::SendForward:
      return when(done.at(A::Forward, s, i), to_string({A::Forward, s, i}) + mine);
    case A::SendBackward:
      return when(done.backward(s, i), str(s, "B", i, " or ", s, "I", i, mine));
    case A::RecvForward: {
      const int from = s > 0 ? order.stage_ranks[size_t(s - 1)] : -1;
      return with_message(s > 0 ? done.at(A::SendForward, s - 1, i) : std::nullopt,
                          str(to_string({A::SendForward, s - 1, i}), " on rank ", from));
    }
    case A::RecvBackward: {
      const int from = s + 1 < S ? order.stage_ranks[size_t(s + 1)] : -1;
      return with_message(s + 1 < S ? done.at(A::SendBackward, s + 1, i) : std::nullopt,
                          str(to_string({A::SendBackward, s + 1, i}), " on rank ", from));
    }
  }
  return {};
}

double cost(const PipelineOrder& order, const A& a, const ActionCosts& c) {
  const StageCosts& s = c.of(a.stage);
  switch (a.kind) {
    case A::Forward:
      return s.forward;
    case A::Backward:
      return s.backward_input + s.backward_weight;
    case A::BackwardInput:
      return s.backward_input;
    case A::BackwardWeight:
      return s.backward_weight * double(a.micro_batch == A::kAll ? order.micro_batches : 1);
    default:
      return 0;
  }
}

}  // namespace

double Simulation::bubble() const {
  double sum = 0;
  for (const SimulatedRank& r : ranks) sum += r.idle_share;
  return ranks.empty() ? 0 : sum / double(ranks.size());
}

Simulation simulate(const PipelineOrder& order, const ActionCosts& costs, int64_t in_flight_limit) {
  const size_t world = order.ranks.size();
  Simulation sim;
  sim.ranks.resize(world);
  std::vector<size_t> next(world, 0);
  std::vector<double> clock(world, 0), memory(world, 0);
  std::vector<int64_t> in_flight(world, 0);
  Done done;
  double over_at = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < world; ++r) {
      SimulatedRank& rank = sim.ranks[r];
      while (next[r] < order.ranks[r].size()) {
        const A& a = order.ranks[r][next[r]];
        const Need need = needs(order, a, int(r), done, costs.message);
        if (!need.ready) break;
        const double start = a.kind == A::RecvForward || a.kind == A::RecvBackward
                                 ? clock[r]
                                 : std::max(clock[r], *need.ready);
        const double end = a.kind == A::RecvForward || a.kind == A::RecvBackward
                               ? std::max(clock[r], *need.ready)
                               : start + cost(order, a, costs);
        rank.timeline.push_back({a, start, end});
        if (a.is_compute()) rank.busy += end - start;
        clock[r] = end;
        done.add(a, end);
        // What the rank holds: a forward's activations until its B, or until its I but for
        // what its W still reads.
        const StageCosts& sc = costs.of(a.stage);
        const double w = sc.weight_inputs;
        const double count = a.micro_batch == A::kAll ? double(order.micro_batches) : 1;
        if (a.kind == A::Forward) memory[r] += sc.activation, ++in_flight[r];
        if (a.kind == A::Backward) memory[r] -= sc.activation, --in_flight[r];
        if (a.kind == A::BackwardInput) memory[r] -= sc.activation - w, --in_flight[r];
        if (a.kind == A::BackwardWeight) memory[r] -= w * count;
        rank.peak_memory = std::max(rank.peak_memory, memory[r]);
        rank.peak_in_flight = std::max(rank.peak_in_flight, in_flight[r]);
        if (in_flight_limit > 0 && in_flight[r] > in_flight_limit &&
            (sim.over_limit.empty() || end < over_at)) {
          over_at = end;
          sim.over_limit =
              str("rank ", r, "'s ", to_string(a), " would hold ", in_flight[r],
                  " micro-batches' activations, more than the ", in_flight_limit, " allowed");
        }
        ++next[r];
        moved = true;
      }
    }
  }
  for (size_t r = 0; r < world; ++r) {
    if (next[r] == order.ranks[r].size()) continue;
    const A& a = order.ranks[r][next[r]];
    if (!sim.blocked.empty()) sim.blocked += "; ";
    sim.blocked += str("rank ", r, " at ", to_string(a), " (action ", next[r] + 1, " of ",
                       order.ranks[r].size(), ") waits for ",
                       needs(order, a, int(r), done, costs.message).waits_for);
  }
  for (size_t r = 0; r < world; ++r) sim.length = std::max(sim.length, clock[r]);
  for (SimulatedRank& rank : sim.ranks)
    rank.idle_share = sim.length > 0 ? 1 - rank.busy / sim.length : 0;
  return sim;
}

std::vector<double> idle_shares(const std::vector<std::vector<TimedAction>>& timelines) {
  double first = 0, last = 0;
  bool any = false;
  for (const auto& t : timelines)
    for (const TimedAction& a : t) {
      first = any ? std::min(first, a.start) : a.start;
      last = any ? std::max(last, a.end) : a.end;
      any = true;
    }
  std::vector<double> out;
  for (const auto& t : timelines) {
    double busy = 0;
    for (const TimedAction& a : t)
      if (a.action.is_compute()) busy += a.end - a.start;
    out.push_back(last > first ? 1 - busy / (last - first) : 0);
  }
  return out;
}

ActionCosts measured_costs(const PipelineOrder& order,
                           const std::vector<std::vector<TimedAction>>& timelines) {
  const size_t S = size_t(order.stages());
  std::vector<std::vector<double>> f(S), i(S), w(S), b(S);
  for (const auto& t : timelines)
    for (const TimedAction& a : t) {
      const size_t s = size_t(a.action.stage);
      const double d = a.end - a.start;
      switch (a.action.kind) {
        case A::Forward:
          f[s].push_back(d);
          break;
        case A::BackwardInput:
          i[s].push_back(d);
          break;
        case A::BackwardWeight:
          w[s].push_back(a.action.micro_batch == A::kAll ? d / double(order.micro_batches) : d);
          break;
        case A::Backward:
          b[s].push_back(d);
          break;
        default:
          break;
      }
    }
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  ActionCosts c;
  c.stages.assign(S, StageCosts{});
  for (size_t s = 0; s < S; ++s) {
    const double fs = median(f[s]), is = median(i[s]), ws = median(w[s]), bs = median(b[s]);
    if (fs >= 0) c.stages[s].forward = fs;
    if (bs >= 0) c.stages[s].backward_input = c.stages[s].backward_weight = bs / 2;
    if (is >= 0) c.stages[s].backward_input = is;
    if (ws >= 0) c.stages[s].backward_weight = ws;
  }
  return c;
}

}  // namespace tandem::parallel
