// tests/parallel/spawn_test.cpp — spawn forks only a process with one thread: it ends Tandem's own
// idle threads first (they come back on next use), and refuses, naming it, a thread it does not
// own. A fork of a process with other threads leaves their locks held in the child for good, and
// ThreadSanitizer refuses to start threads there (scripts/sanitize.sh thread runs these).
#include <dirent.h>
#include <pthread.h>
#include <tandem/autograd/device_workers.h>
#include <tandem/core/thread_pool.h>
#include <tandem/parallel/spawn.h>
#include <latch>
#include <thread>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"
#include "support/sanitizer.h"

namespace tandem::parallel {
namespace {

// ThreadSanitizer runs a thread of its own in the processes it watches.
constexpr int kRuntimeThreads = tandem::testing::kThreadSanitizer ? 1 : 0;

int threads_of_this_process() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/task");
  while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n - kRuntimeThreads;
}

// Work that starts the CPU pool's workers and the backward worker of cpu:1.
Tensor compute_with_threads() {
  manual_seed(1);
  const Tensor a = randn({256, 256}, {.dtype = kFloat64}),
               b = randn({256, 256}, {.dtype = kFloat64});
  Tensor x = randn({64, 64}, {.device = Device::cpu(1)}).requires_grad_(true);
  (x * 2.0).sum().backward();
  return a.matmul(b);
}

TEST(Spawn, EndsTandemsIdleThreadsBeforeItForksAndTheyComeBack) {
  set_num_threads(3);
  const Tensor expected = compute_with_threads();
  ASSERT_GE(threads_of_this_process(), 3) << "the pool's two workers and cpu:1's backward thread";

  DeviceWorkers::release_all_threads();
  tandem::detail::release_threads();
  // A joined thread can stay listed for a moment while the kernel finishes its exit.
  for (int tries = 0; tries < 200 && threads_of_this_process() > 1; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(threads_of_this_process(), 1) << "nothing but the caller is left to fork";

  // spawn does the same itself; each child computes with threads again, as does the parent after.
  tandem::testing::TempDir dir;
  spawn(
      [&](int rank) {
        const Tensor c = compute_with_threads();
        tandem::testing::write_doubles(dir.file("rank" + std::to_string(rank)),
                                       tandem::testing::values(c.sum({1})));
      },
      2);
  // The children split the product over one thread each (spawn shares the cores), so their sums
  // may round differently.
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(tandem::testing::all_close(
        from_vector(tandem::testing::read_doubles(dir.file("rank" + std::to_string(r))), {256}),
        expected.sum({1}), 1e-9, 1e-12));
  EXPECT_EQ(get_num_threads(), 3) << "the pool comes back with the size it was given";
  EXPECT_EQ(tandem::testing::values(compute_with_threads()), tandem::testing::values(expected));
  EXPECT_GE(threads_of_this_process(), 3);
  set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(Spawn, RefusesAProcessWithAThreadItDoesNotOwnAndNamesIt) {
  std::latch release(1);
  std::thread mine([&] { release.wait(); });
  pthread_setname_np(mine.native_handle(), "user-loader");
  const std::string msg =
      tandem::testing::error_message<DistributedError>([] { spawn([](int) {}, 2); });
  EXPECT_THAT(msg, ::testing::HasSubstr(
                       "spawn: this process runs 1 thread(s) besides the caller (user-loader)"));
  EXPECT_THAT(msg, ::testing::HasSubstr("spawn_threads"));
  EXPECT_THAT(msg, ::testing::HasSubstr("tandem launch"));
  release.count_down();
  mine.join();
  spawn([](int) {}, 2);  // with the thread gone, it forks
}

}  // namespace
}  // namespace tandem::parallel
