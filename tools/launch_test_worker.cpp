// tools/launch_test_worker.cpp — the program launch_test.cpp runs under `tandem launch`: joins the
// group from the environment alone (as under torchrun), all-reduces its rank, and reports.
//   launch_test_worker ok            every rank prints "rank R of W: sum S"
//   launch_test_worker fail R CODE   rank R exits with CODE after the all-reduce
//   launch_test_worker sleep         every rank sleeps (to be stopped by a signal)
#include <tandem/tandem.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace tandem;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode == "sleep") {
    std::printf("sleeping\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  try {
    auto comm = parallel::init_process_group({.timeout = std::chrono::seconds(60)});
    Tensor t = full({1}, double(comm->rank()), {.dtype = kInt64});
    comm->all_reduce(t)->wait();
    std::printf("rank %d of %d: sum %lld\n", comm->rank(), comm->size(),
                (long long)t.data<int64_t>()[0]);
    std::fflush(stdout);
    if (mode == "fail" && comm->rank() == std::atoi(argv[2])) return std::atoi(argv[3]);
    comm->barrier()->wait();
    parallel::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
