// bench/two_processes.h — a benchmark's case run by 2 shared-memory processes, one thread each
// (spawn): fn(group, out) on every rank, rank 0 writing its result lines to `out`, which are
// printed here once both have ended. The parent process computes nothing, so its threads and
// memory stay out of the ranks' timings.
#pragma once

#include <tandem/tandem.h>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

namespace bench {

inline void in_two_processes(
    const std::function<void(tandem::parallel::Communicator&, std::ofstream&)>& fn) {
  using namespace tandem;
  const std::string out = "/tmp/tandem-bench-" + std::to_string(::getpid()) + ".txt";
  std::remove(out.c_str());
  parallel::spawn(
      [&](int) {
        set_num_threads(1);
        auto group =
            parallel::init_process_group({.backend = "shm", .timeout = std::chrono::seconds(300)});
        std::ofstream o(out, std::ios::app);
        fn(*group, o);
        group.reset();
        parallel::destroy_process_group();
      },
      2);
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) std::printf("%s\n", line.c_str());
  std::remove(out.c_str());
}

}  // namespace bench
