// tools/launch_test.cpp — `tandem launch` as a user runs it: environment, rank-prefixed output,
// the first failure named in the exit report, signal forwarding, and two nodes (two launches)
// meeting over loopback and over a veth pair between two network namespaces.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command, capturing stdout and stderr together.
Result run(const std::string& cmd) {
  Result r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  for (size_t k; (k = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.output.append(buf, k);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

const std::string kLaunch = TANDEM_CLI " launch";
const std::string kWorker = LAUNCH_TEST_WORKER;

int free_port() {
  static int next = 29600 + int(::getpid() % 2000);
  return next += 7;
}

TEST(Launch, RunsEveryRankWithTorchrunsEnvironmentAndPrefixesOutput) {
  const Result r = run(kLaunch + " --standalone --nproc-per-node 3 -- " + kWorker + " ok");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_THAT(r.output, ::testing::HasSubstr("[rank" + std::to_string(rank) + "]: rank " +
                                               std::to_string(rank) + " of 3: sum 3"));
  const Result env = run(kLaunch +
                         " --standalone --nproc-per-node 2 -- sh -c 'echo "
                         "R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE "
                         "G=$GROUP_RANK A=$MASTER_ADDR'");
  EXPECT_THAT(env.output, ::testing::HasSubstr("[rank1]: R=1 L=1 W=2 LW=2 G=0 A=127.0.0.1"));
}

// --max-restarts: rank 1 dies by SIGKILL on the first attempt; the whole group starts again
// with TANDEM_RESTART_COUNT=1, and this time finishes. Without restarts the job fails.
TEST(Launch, MaxRestartsStartsTheGroupAgainAfterAFailure) {
  const std::string body =
      " -- sh -c 'echo attempt $TANDEM_RESTART_COUNT; "
      "if [ $RANK = 1 ] && [ $TANDEM_RESTART_COUNT = 0 ]; then kill -9 $$; fi; echo done'";
  const Result r = run(kLaunch + " --standalone --nproc-per-node 2 --max-restarts 1" + body);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("signal 9"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("restarting it (restart 1 of 1)"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("[rank1]: attempt 1"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("[rank1]: done"));
  const Result none = run(kLaunch + " --standalone --nproc-per-node 2" + body);
  EXPECT_EQ(none.exit_code, 137) << none.output;
  const Result two_nodes =
      run(kLaunch + " --nnodes 2 --node-rank 0 --nproc-per-node 1 --max-restarts 1 -- true");
  EXPECT_NE(two_nodes.exit_code, 0);
  EXPECT_THAT(two_nodes.output, ::testing::HasSubstr("restarts the group of one node"));
}

TEST(Launch, AFailingRankStopsTheOthersAndIsNamed) {
  const Result r = run(kLaunch + " --standalone --nproc-per-node 2 -- " + kWorker + " fail 1 3");
  EXPECT_EQ(r.exit_code, 3) << "the first failure's exit code; " << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("Root Cause (first observed failure)"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("rank: 1 (local_rank: 1)"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("exitcode 3"));
  const Result missing = run(kLaunch + " --standalone --nproc-per-node 1 -- /nonexistent/prog");
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_THAT(missing.output, ::testing::HasSubstr("cannot run '/nonexistent/prog'"));
}

TEST(Launch, ForwardsSignalsToTheWorkers) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = run("(" + kLaunch + " --standalone --nproc-per-node 2 -- " + kWorker +
                       " sleep & pid=$!; sleep 1; kill -TERM $pid; wait $pid)");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("signal 15"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(Launch, TwoNodesMeetOverLoopback) {
  const std::string common = kLaunch +
                             " --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 "
                             "--master-port " +
                             std::to_string(free_port());
  Result node1;
  std::thread t([&] { node1 = run(common + " --node-rank 1 -- " + kWorker + " ok"); });
  const Result node0 = run(common + " --node-rank 0 -- " + kWorker + " ok");
  t.join();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 0) << node1.output;
  EXPECT_THAT(node0.output, ::testing::HasSubstr("rank 0 of 2: sum 1"));
  EXPECT_THAT(node1.output, ::testing::HasSubstr("rank 1 of 2: sum 1"));
}

// Two network namespaces joined by a veth pair (10.231.7.1 and 10.231.7.2): each node sees only
// its own address and the other's, as two machines on a link would.
TEST(Launch, TwoNodesMeetAcrossNetworkNamespaces) {
  const std::string ns = "tdlaunch" + std::to_string(::getpid());
  const Result setup =
      run("ip netns add " + ns + "a && ip netns add " + ns +
          "b && "
          "ip link add " +
          ns + "x netns " + ns + "a type veth peer name " + ns + "y netns " + ns +
          "b && "
          "ip -n " +
          ns + "a addr add 10.231.7.1/24 dev " + ns +
          "x && "
          "ip -n " +
          ns + "b addr add 10.231.7.2/24 dev " + ns +
          "y && "
          "ip -n " +
          ns + "a link set " + ns + "x up && ip -n " + ns + "a link set lo up && ip -n " + ns +
          "b link set " + ns + "y up && ip -n " + ns + "b link set lo up");
  auto cleanup = [&] { run("ip netns del " + ns + "a; ip netns del " + ns + "b"); };
  if (setup.exit_code != 0) {
    cleanup();
    GTEST_SKIP() << "cannot create network namespaces here (needs `ip` and CAP_SYS_ADMIN): "
                 << setup.output;
  }
  const std::string common = kLaunch +
                             " --nnodes 2 --nproc-per-node 1 --master-addr "
                             "10.231.7.1 --master-port 29555";
  Result node1;
  std::thread t([&] {
    node1 = run("ip netns exec " + ns + "b " + common + " --node-rank 1 -- " + kWorker + " ok");
  });
  const Result node0 =
      run("ip netns exec " + ns + "a " + common + " --node-rank 0 -- " + kWorker + " ok");
  t.join();
  cleanup();
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_EQ(node1.exit_code, 0) << node1.output;
  EXPECT_THAT(node1.output, ::testing::HasSubstr("rank 1 of 2: sum 1"));
}

}  // namespace
