// tests/parallel/supervisor_test.cpp — which failure the supervisor names as the root cause. Rank 1
// fails; rank 0 sees it gone and fails a few milliseconds later. The supervisor may reap rank 0
// first (both in one pass, in rank order), so the order it reaps them in cannot decide: a worker
// that gave up because of a failed peer says so in its error file (TANDEM_ERROR_FILE), and the
// peer is named. The workers here are functions in forked children; rank 0 fails first in time,
// which is the order a one-pass reap can see.
#include <tandem/parallel/failure_record.h>
#include <tandem/parallel/supervisor.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "data/temp_dir.h"

namespace tandem::parallel::detail {
namespace {

using std::chrono::milliseconds;

// Rank 0 ends at once with exit code 2 (blaming rank 1 when `blame`), rank 1 exits with 3 after
// 300 ms: the supervisor reaps rank 0 first.
SupervisorResult run_pair(bool blame) {
  std::vector<WorkerSpec> workers(2);
  workers[0] = {.rank = 0, .local_rank = 0, .env = {}, .run = [blame] {
                  if (blame) record_peer_failure(1);
                  return 2;
                }};
  workers[1] = {.rank = 1, .local_rank = 1, .env = {}, .run = [] {
                  std::this_thread::sleep_for(milliseconds(300));
                  return 3;
                }};
  // The others run on, so rank 1's own exit code is what the supervisor reaps.
  return supervise(workers, {.prefix_output = true,
                             .kill_grace = milliseconds(2000),
                             .program = "pair",
                             .stop_others_on_failure = false});
}

TEST(Supervisor, NamesTheRankAFailedWorkerBlamesNotTheFirstReaped) {
  const SupervisorResult r = run_pair(/*blame=*/true);
  ASSERT_TRUE(r.first_failure.has_value());
  EXPECT_EQ(r.first_failure->rank, 1) << r.report;
  EXPECT_EQ(r.first_failure->exit_code, 3);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.report, ::testing::HasSubstr("rank: 1 (local_rank: 1)"));
  EXPECT_THAT(r.report, ::testing::HasSubstr("rank 0: exitcode 2"));  // among the others
}

// The control: without the record the first failure reaped is named, so the test above can fail.
TEST(Supervisor, WithoutABlameRecordNamesTheFirstFailureReaped) {
  const SupervisorResult r = run_pair(/*blame=*/false);
  ASSERT_TRUE(r.first_failure.has_value());
  EXPECT_EQ(r.first_failure->rank, 0) << r.report;
  EXPECT_EQ(r.exit_code, 2);
}

// Two ranks fail the same check; the supervisor reaps one and stops the other with SIGTERM while
// it is exiting with its own error (here: recorded, then slow to exit). The report says so,
// rather than "stopped by signal 15", which read as if the launcher had caused it.
TEST(Supervisor, ARankStoppedWhileExitingWithItsOwnErrorIsReportedByItsCode) {
  std::vector<WorkerSpec> workers(2);
  workers[0] = {.rank = 0, .local_rank = 0, .env = {}, .run = [] {
                  std::this_thread::sleep_for(milliseconds(500));  // after rank 1's record
                  return 1;
                }};
  workers[1] = {.rank = 1, .local_rank = 1, .env = {}, .run = [] {
                  record_own_exit(1);
                  std::this_thread::sleep_for(milliseconds(5000));  // the SIGTERM lands here
                  return 1;
                }};
  const SupervisorResult r =
      supervise(workers, {.prefix_output = true, .kill_grace = milliseconds(2000), .program = "p"});
  ASSERT_TRUE(r.first_failure.has_value());
  EXPECT_EQ(r.first_failure->rank, 0) << r.report;
  EXPECT_THAT(r.report, ::testing::HasSubstr("rank 1: exitcode 1 (its own error"));
  EXPECT_THAT(r.report, ::testing::Not(::testing::HasSubstr("signal")));
}

// Every worker gets its own error file in a private directory, which is gone afterwards.
TEST(Supervisor, GivesEachWorkerAnErrorFileAndRemovesThemAfterwards) {
  const ::tandem::testing::TempDir dir;
  const std::string seen = dir.file("seen");
  std::vector<WorkerSpec> workers;
  for (int r = 0; r < 2; ++r)
    workers.push_back({.rank = r, .local_rank = r, .env = {}, .run = [r, seen] {
                         const char* path = std::getenv(kErrorFileEnv);
                         std::ofstream(seen + std::to_string(r)) << (path ? path : "");
                         record_peer_failure(1 - r);
                         return 0;
                       }});
  const SupervisorResult r = supervise(workers, {});
  EXPECT_EQ(r.exit_code, 0) << r.report;
  std::string path0, path1;
  std::ifstream(seen + "0") >> path0;
  std::ifstream(seen + "1") >> path1;
  ASSERT_FALSE(path0.empty());
  EXPECT_NE(path0, path1);
  EXPECT_EQ(std::filesystem::path(path0).parent_path(), std::filesystem::path(path1).parent_path());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(path0).parent_path()));
}

}  // namespace
}  // namespace tandem::parallel::detail
