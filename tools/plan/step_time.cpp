// tools/plan/step_time.cpp — the ranks' traces played on one clock (step_time.h).
#include <tandem/core/check.h>
#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include "step_time.h"

namespace tandem::tools {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Adds [start, end) to a rank's timeline, extending the last span where it continues it.
void add_span(RankTime& t, TimeSpan::Kind kind, double start, double end) {
  if (end <= start) return;
  if (!t.spans.empty() && t.spans.back().kind == kind && t.spans.back().end >= start) {
    t.spans.back().end = end;
    return;
  }
  t.spans.push_back({kind, start, end});
}

std::string group_key(const std::vector<int>& members) {
  std::string key;
  for (int m : members) key += std::to_string(m) + ",";
  return key;
}

// A collective of a group (every member takes part) or a message (its send's and recv's).
struct Transfer {
  bool message = false;
  std::string op, key;
  std::vector<int> members;  // a collective's, by world rank
  double seconds = 0;        // how long it takes once started
  double start = kNever, end = kNever;
};

struct Op {
  TraceItem::Kind kind;
  double work = 0;  // Kernel: the run of kernels' seconds
  int transfer = 0;
  bool sends = false;  // Issue of a message: this rank sends it
};

struct Rank {
  std::vector<Op> ops;
  size_t pc = 0;
  enum class State { Ready, Computing, Blocked, Done } state = State::Ready;
  double remaining = 0, blocked_since = 0;
  std::map<std::string, std::deque<int>> lanes;  // per group: its collectives in issue order
  RankTime time;
};

class Simulation {
 public:
  Simulation(const std::vector<RankTrace>& traces, const std::vector<double>& seconds,
             const HostProfile& profile)
      : profile_(profile), ranks_(traces.size()) {
    std::map<std::string, int> ids;  // a transfer's identity on every rank that takes part
    for (size_t r = 0; r < traces.size(); ++r) {
      std::map<std::string, int> ordinal;
      std::vector<int> local(traces[r].collectives.size());
      for (size_t c = 0; c < traces[r].collectives.size(); ++c) {
        const parallel::RehearsedCollective& rc = traces[r].collectives[c];
        const std::string key = group_key(rc.members);
        const bool message = rc.op == "send" || rc.op == "recv";
        const int from = rc.op == "recv" ? rc.peer : int(r),
                  to = rc.op == "recv" ? int(r) : rc.peer;
        const std::string id =
            message ? key + " " + std::to_string(from) + ">" + std::to_string(to) : key;
        const std::string nth = id + "#" + std::to_string(ordinal[id]++);
        auto [it, fresh] = ids.emplace(nth, int(transfers_.size()));
        if (fresh)
          transfers_.push_back({.message = message,
                                .op = message ? "message" : rc.op,
                                .key = key,
                                .members = rc.members});
        Transfer& t = transfers_[size_t(it->second)];
        TD_INTERNAL_ASSERT(t.op == (message ? "message" : rc.op), "plan: rank ", r, " has ", rc.op,
                           " where another rank of its group has ", t.op, " (", nth, ")");
        t.seconds = std::max(t.seconds, message ? profile_.message.seconds(double(rc.bytes))
                                                : profile_.collective.seconds(double(rc.wire)));
        local[c] = it->second;
      }
      Rank& rank = ranks_[r];
      for (const TraceItem& item : traces[r].items) {
        if (item.kind == TraceItem::Kind::Kernel) {
          if (rank.ops.empty() || rank.ops.back().kind != TraceItem::Kind::Kernel)
            rank.ops.push_back({TraceItem::Kind::Kernel});
          rank.ops.back().work += seconds[size_t(item.index)];
          continue;
        }
        const parallel::RehearsedCollective& rc = traces[r].collectives[size_t(item.index)];
        rank.ops.push_back({item.kind, 0, local[size_t(item.index)], rc.op == "send"});
      }
    }
  }

  StepTime run() {
    for (;;) {
      for (bool moved = true; moved;) {
        moved = false;
        for (size_t r = 0; r < ranks_.size(); ++r) moved = advance(int(r)) || moved;
        moved = start_collectives() || moved;
      }
      if (std::all_of(ranks_.begin(), ranks_.end(),
                      [](const Rank& r) { return r.state == Rank::State::Done; }))
        break;
      step_clock();
    }
    StepTime out;
    for (Rank& r : ranks_) {
      out.step = std::max(out.step, r.time.end);
      out.ranks.push_back(r.time);
    }
    return out;
  }

 private:
  // When the transfer a Wait names is over on this rank's side (kNever: not known yet).
  double over(const Transfer& t) const { return t.end; }

  // Moves rank r through everything that takes no time; true if it moved.
  bool advance(int r) {
    Rank& rank = ranks_[size_t(r)];
    bool moved = false;
    while (rank.state == Rank::State::Ready || rank.state == Rank::State::Blocked) {
      if (rank.pc == rank.ops.size()) {
        rank.state = Rank::State::Done;
        rank.time.end = now_;
        return true;
      }
      const Op& op = rank.ops[rank.pc];
      if (op.kind == TraceItem::Kind::Kernel) {
        rank.state = Rank::State::Computing;
        rank.remaining = op.work;
        ++rank.pc;
        return true;
      }
      Transfer& t = transfers_[size_t(op.transfer)];
      if (op.kind == TraceItem::Kind::Issue) {
        if (!t.message) {
          rank.lanes[t.key].push_back(op.transfer);
          pending_.push_back(op.transfer);
        } else if (op.sends) {  // posted: it arrives a link's time later
          t.start = now_;
          t.end = now_ + t.seconds;
        }
        ++rank.pc;
        moved = true;
        continue;
      }
      if (over(t) > now_) {  // a Wait on what has not ended
        if (rank.state != Rank::State::Blocked) rank.blocked_since = now_, moved = true;
        rank.state = Rank::State::Blocked;
        return moved;
      }
      if (rank.state == Rank::State::Blocked) {  // it ended now: say where the wait went
        const double from = rank.blocked_since, began = std::clamp(t.start, from, now_);
        rank.time.idle += began - from;
        rank.time.communication += now_ - began;
        add_span(rank.time, TimeSpan::Kind::Idle, from, began);
        add_span(rank.time, TimeSpan::Kind::Communication, began, now_);
      }
      rank.state = Rank::State::Ready;
      ++rank.pc;
      moved = true;
    }
    return moved;
  }

  // Starts each collective every member has at the head of its group's queue.
  bool start_collectives() {
    bool started = false;
    for (size_t i = 0; i < pending_.size();) {
      Transfer& t = transfers_[size_t(pending_[i])];
      const bool ready = std::all_of(t.members.begin(), t.members.end(), [&](int m) {
        const std::deque<int>& lane = ranks_[size_t(m)].lanes[t.key];
        return !lane.empty() && lane.front() == pending_[i];
      });
      if (!ready || t.start != kNever) {
        i += t.start != kNever ? 0 : 1;
        if (t.start != kNever) pending_.erase(pending_.begin() + long(i));
        continue;
      }
      t.start = now_;
      t.end = now_ + t.seconds;
      running_.push_back(pending_[i]);
      pending_.erase(pending_.begin() + long(i));
      started = true;
    }
    return started;
  }

  // Runs the clock to the next thing that happens: a run of kernels or a transfer ending.
  void step_clock() {
    int computing = 0;
    for (const Rank& r : ranks_) computing += r.state == Rank::State::Computing;
    const double rate = profile_.rate(computing);
    double next = kNever;
    for (const Rank& r : ranks_)
      if (r.state == Rank::State::Computing) next = std::min(next, now_ + r.remaining / rate);
    for (const Transfer& t : transfers_)
      if (t.end > now_) next = std::min(next, t.end);
    TD_INTERNAL_ASSERT(next < kNever, "plan: the ranks' traces cannot finish: ", stuck());
    const double dt = next - now_;
    for (Rank& r : ranks_) {
      if (r.state != Rank::State::Computing) continue;
      r.time.compute += dt;
      add_span(r.time, TimeSpan::Kind::Compute, now_, next);
      r.remaining -= rate * dt;
      if (r.remaining <= 1e-12 * rate) r.state = Rank::State::Ready;
    }
    now_ = next;
    for (size_t i = 0; i < running_.size();) {  // collectives over: off their queues
      const Transfer& t = transfers_[size_t(running_[i])];
      if (t.end > now_) {
        ++i;
        continue;
      }
      for (int m : t.members) ranks_[size_t(m)].lanes[t.key].pop_front();
      running_.erase(running_.begin() + long(i));
    }
  }

  std::string stuck() const {
    std::string out;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Rank& rank = ranks_[r];
      if (rank.state != Rank::State::Blocked) continue;
      const Transfer& t = transfers_[size_t(rank.ops[rank.pc].transfer)];
      out += str("rank ", r, " waits on a ", t.op, " of group ", t.key, "; ");
    }
    return out;
  }

  const HostProfile& profile_;
  std::vector<Rank> ranks_;
  std::vector<Transfer> transfers_;
  std::vector<int> pending_, running_;  // collectives issued and not started; started
  double now_ = 0;
};

}  // namespace

double StepTime::communication_share() const {
  double comm = 0, all = 0;
  for (const RankTime& r : ranks)
    comm += r.communication, all += r.compute + r.communication + r.idle;
  return all > 0 ? comm / all : 0;
}

StepTime simulate_step(const std::vector<RankTrace>& traces, const std::vector<double>& seconds,
                       const HostProfile& profile) {
  return Simulation(traces, seconds, profile).run();
}

}  // namespace tandem::tools
