// parallel/heartbeat.cpp — the beat, the watch over one neighbour, and what a lost rank does to
// the others (heartbeat.h).
#include <tandem/core/check.h>
#include <tandem/parallel/failure_record.h>
#include <tandem/parallel/heartbeat.h>
#include <cstdio>
#include <cstdlib>

namespace tandem::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string beat_key(int rank) { return "beat/" + std::to_string(rank); }
std::string left_key(int rank) { return "left/" + std::to_string(rank); }
constexpr char kLostCount[] = "lost";      // > 0 once any rank has found a lost one
constexpr char kLostRank[] = "lost/rank";  // which, and why (set before the count moves)
constexpr char kLostWhy[] = "lost/why";

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Heartbeat::Heartbeat(std::shared_ptr<Store> store, int rank, int world, HeartbeatOptions options)
    : store_(std::move(store)),
      rank_(rank),
      world_(world),
      next_((rank + 1) % std::max(world, 1)),
      options_(std::move(options)) {
  TD_CHECK_VALUE(store_ != nullptr && world >= 1 && rank >= 0 && rank < world, "Heartbeat: rank ",
                 rank, " of ", world, " needs a store and 0 <= rank < world");
  TD_CHECK_VALUE(options_.interval.count() > 0 && options_.deadline > 2 * options_.interval,
                 "Heartbeat: the deadline (", options_.deadline.count(),
                 " ms) must be more than two intervals (", options_.interval.count(), " ms)");
  next_changed_ = last_ok_ = Clock::now();
  if (world_ > 1) thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() { leave(); }

void Heartbeat::leave() {
  if (!thread_.joinable()) return;
  try {
    store_->add(left_key(rank_), 1);  // first: the watcher must not see silence without it
    if (rank_ == 0) await_goodbyes();
  } catch (const std::exception&) {
    // The store is gone (rank 0 ended first): there is no one left to tell.
  }
  stop();
}

void Heartbeat::halt() { stop(); }

void Heartbeat::await_goodbyes() {
  // Rank 0 serves the store, which may end with it: first every other rank must have left, or
  // read "left/0" (three beats after it was written: the last of them began after it), or it
  // would take the store's end for rank 0's death. At most the deadline.
  std::vector<int64_t> start(size_t(world_), 0);
  for (int r = 1; r < world_; ++r) start[size_t(r)] = store_->add(beat_key(r), 0);
  const Clock::time_point until = Clock::now() + options_.deadline;
  for (int r = 1; r < world_ && Clock::now() < until;) {
    if (store_->check({left_key(r)}) || store_->add(beat_key(r), 0) >= start[size_t(r)] + 3)
      ++r;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Heartbeat::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Heartbeat::loop() {
  Clock::time_point last = Clock::now();
  std::unique_lock lk(mu_);
  while (!stop_) {
    lk.unlock();
    // A wake-up that came late means this process (or the whole machine) stalled: not the
    // neighbour's fault, so its silence is counted from that much later.
    const Clock::time_point now = Clock::now();
    const Clock::duration late = now - last - options_.interval;
    if (late > options_.interval) next_changed_ += late;
    last = now;
    beat_once();
    lk.lock();
    wake_.wait_for(lk, options_.interval, [this] { return stop_; });
  }
}

void Heartbeat::beat_once() {
  int lost_rank = -1;
  std::string why;
  try {
    store_->add(beat_key(rank_), 1);
    if (store_->add(kLostCount, 0) > 0) {  // another rank found one: end with its message
      const int who = std::atoi(store_->get_string(kLostRank).c_str());
      return lost(who, store_->get_string(kLostWhy));
    }
    if (rank_ != 0 && !rank0_left_) rank0_left_ = store_->check({left_key(0)});
    last_ok_ = Clock::now();
    if (store_->check({left_key(next_)})) return;  // it ended normally: nothing to watch
    const int64_t count = store_->add(beat_key(next_), 0);
    const Clock::time_point now = Clock::now();
    if (count != next_count_) {
      next_count_ = count;
      next_changed_ = now;
      return;
    }
    if (now - next_changed_ < options_.deadline) return;
    lost_rank = next_;
    why = str("no heartbeat for ", seconds(now - next_changed_), " s (it died, froze, or its host ",
              "left the network; noticed by rank ", rank_, ")");
  } catch (const std::exception& e) {
    if (rank0_left_) {  // rank 0 ended normally and took its store along: nothing to watch
      std::lock_guard lk(mu_);
      stop_ = true;
      return;
    }
    // A slow reply is not a death: only a store unreachable for the whole deadline is.
    const Clock::duration silent = Clock::now() - last_ok_;
    if (silent < options_.deadline) return;
    lost_rank = 0;
    why = str("the rendezvous store it serves has not answered for ", seconds(silent), " s (",
              e.what(), "; noticed by rank ", rank_, ")");
  }
  try {  // tell the others before ending: they may watch no one who died
    store_->set(kLostRank, std::to_string(lost_rank));
    store_->set(kLostWhy, why);
    store_->add(kLostCount, 1);
  } catch (const std::exception&) {
  }
  lost(lost_rank, why);
}

void Heartbeat::lost(int rank, const std::string& why) {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  if (reported_.exchange(true)) return;
  detail::record_peer_failure(rank);
  const std::string message =
      str("rank ", rank, " of ", world_, " is lost: ", why, "; ending rank ", rank_,
          " instead of waiting out its collectives' timeout\n  hint: `tandem launch "
          "--max-restarts N` restarts the group, and `tandem train` resumes from its checkpoint");
  if (options_.on_lost) return options_.on_lost(message, rank);
  std::fprintf(stderr, "tandem: error: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(kLostRankExitCode);
}

}  // namespace tandem::parallel
