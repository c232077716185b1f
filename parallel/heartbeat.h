// parallel/heartbeat.h — how the survivors of a lost rank find out in seconds, not at a
// collective's timeout. A rank that dies on another host, or freezes (a stopped process, a host
// that drops off the network), leaves its peers waiting inside a collective for as long as its
// timeout (30 minutes by default): nothing closes their sockets. So every rank beats through the
// rendezvous store and watches one neighbour:
//
//   every `interval`  rank r adds 1 to "beat/r", reads "beat/(r+1) mod n" and "lost";
//   a neighbour whose count has not moved for `deadline` (and that has not left) is lost: r writes
//                     its number under "lost", and every rank, reading "lost" on its next beat,
//                     calls on_lost (default: print the error and end the process, which
//                     `tandem launch --max-restarts` then restarts).
//
// A ring, not all-to-all: 3 store requests per rank per interval whatever the world size. A rank
// that ends normally writes "left/r" first (destroy_process_group, or its exit), so its silence
// is not mistaken for death. A watcher whose own beat came late (a machine stalled as a whole)
// gives its neighbour that much longer. Rank 0 serves the store: when it is unreachable, rank 0
// is the one lost, unless it left.
#pragma once

#include <tandem/parallel/store/store.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::parallel {

/// The exit code of a process the heartbeat ended (sysexits' EX_UNAVAILABLE).
inline constexpr int kLostRankExitCode = 69;

struct HeartbeatOptions {
  std::chrono::milliseconds interval{500};   // how often a rank beats and looks
  std::chrono::milliseconds deadline{2000};  // a neighbour silent this long is lost
  /// Called once per process, on the heartbeat's thread, with the error message and the lost
  /// rank. Empty: print the message to stderr and std::_Exit(kLostRankExitCode).
  std::function<void(const std::string& message, int lost_rank)> on_lost;
};

class Heartbeat {
 public:
  /// Starts beating as `rank` of `world` through `store` (give it a store of its own, or one
  /// whose requests are short: a beat waits behind any request in progress on it).
  Heartbeat(std::shared_ptr<Store> store, int rank, int world, HeartbeatOptions options = {});
  /// leave(), then stops.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Says this rank ends normally (its silence from now on is not a death) and stops beating.
  void leave();
  /// Stops beating without leaving, as a crash would (for tests).
  void halt();

 private:
  void loop();
  void beat_once();
  void lost(int rank, const std::string& why);
  void stop();
  void await_goodbyes();

  std::shared_ptr<Store> store_;
  const int rank_, world_, next_;
  const HeartbeatOptions options_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<bool> reported_{false};
  // The neighbour's last count, and when this rank saw it change (its own clock).
  int64_t next_count_ = -1;
  std::chrono::steady_clock::time_point next_changed_;
  std::chrono::steady_clock::time_point last_ok_;  // the store's last answer
  bool rank0_left_ = false;                        // rank 0, which serves the store, has left
  std::thread thread_;
};

}  // namespace tandem::parallel
