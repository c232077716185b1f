// tests/parallel/kill_peer.h — the fault every process backend must survive: rank 1 of 2 kills
// itself with SIGKILL while an all-reduce is in flight, and rank 0 reports what its next
// collectives said and how long they took to say it.
#pragma once

#include <gtest/gtest.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include "data/temp_dir.h"

namespace tandem::testing {

struct KillReport {
  double seconds = -1;      // from rank 0's first failing call to its error
  std::string error;        // rank 0's error
  std::string spawn_error;  // what spawn said about rank 1
};

inline KillReport kill_rank_1_mid_all_reduce(const std::string& backend) {
  using namespace std::chrono_literals;
  TempDir dir;
  const std::string report = dir.file("rank0.txt");
  KillReport out;
  try {
    parallel::spawn(
        [&](int rank) {
          // The backend's own detection, without the heartbeat's (heartbeat_test.cpp).
          auto comm = parallel::init_process_group(
              {.backend = backend, .timeout = 60s, .heartbeat = std::nullopt});
          Tensor big = ones({4 << 20});  // 16 MiB: a few ms in flight
          if (rank == 1) {
            comm->all_reduce(big)->wait();
            // Die while a later all-reduce is in flight.
            std::thread([] {
              std::this_thread::sleep_for(2ms);
              std::raise(SIGKILL);
            }).detach();
            for (;;) comm->all_reduce(big)->wait();
          }
          std::string msg = "no error";
          const auto t0 = std::chrono::steady_clock::now();
          try {
            for (int i = 0; i < 1000; ++i) comm->all_reduce(big)->wait();
          } catch (const DistributedError& e) {
            msg = e.what();
          }
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::ofstream(report) << secs << "\n" << msg;
          std::_Exit(0);  // skip the exit-time goodbye: its peer is gone
        },
        2, {.stop_others_on_failure = false});
    ADD_FAILURE() << "spawn should report rank 1's death";
  } catch (const DistributedError& e) {
    out.spawn_error = e.what();
  }
  std::ifstream in(report);
  in >> out.seconds;
  out.error.assign(std::istreambuf_iterator<char>(in), {});
  return out;
}

}  // namespace tandem::testing
