// tests/bad_input/distributed_test.cpp — the bad-input table, part 3: starting ranks and
// rendezvous. A launcher given a program that does not exist, a MASTER_PORT that is taken,
// malformed rendezvous settings, a store client sending garbage, ranks whose models differ, two
// launchers' variables at once, ranks told different world sizes, and the MPI backend started
// without mpirun.
#include <netinet/in.h>
#include <sys/socket.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/parallel/comm/mpi_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/store/tcp_store.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>

#include "bad_input/bad_input.h"
#include "parallel/raw_exchange.h"
#include "support/launcher_vars.h"
#include "support/sanitizer.h"

namespace tandem::bad_input {
namespace {
using namespace std::chrono_literals;
using testing::read_bytes;
using testing::write_bytes;

// A loopback port held by a listening socket of ours (which never answers).
struct TakenPort {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  TakenPort() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), n) != 0 || ::listen(fd, 8) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0)
      ADD_FAILURE() << "cannot hold a port";
    port = ntohs(a.sin_port);
  }
  ~TakenPort() { ::close(fd); }
};

// init_process_group with one environment variable set to `value` (restored afterwards).
Outcome with_env(const char* name, const char* value) {
  ::setenv(name, value, 1);
  const Outcome o = thrown(
      [] { parallel::init_process_group({.init_method = "file:///nonexistent", .timeout = 1s}); });
  ::unsetenv(name);
  return o;
}

// Runs fn(rank) in `n` processes that each write "rank<r>: <error>: <message>" to dir/rank<r> and
// exit non-zero on an error; returns spawn's own outcome followed by every rank's, and leaves the
// seconds it took in dir/seconds.
Outcome ranks_outcomes(const TempDir& d, int n, const std::function<void(int rank)>& fn) {
  const auto start = std::chrono::steady_clock::now();
  const Outcome spawned = thrown([&] {
    parallel::spawn(
        [&](int rank) {
          const Outcome o = thrown([&] { fn(rank); });
          write_bytes(d.file("rank" + std::to_string(rank)),
                      "rank" + std::to_string(rank) + ": " + o.error + ": " + o.message);
          if (o.error != "none") throw std::runtime_error(o.message);
        },
        n, {.stop_others_on_failure = false});
  });
  write_bytes(d.file("seconds"),
              std::to_string(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  std::string all = spawned.message;
  for (int r = 0; r < n; ++r) all += "\n" + read_bytes(d.file("rank" + std::to_string(r)));
  return {spawned.error, all};
}

const Row kRows[] = {
    {"LaunchAProgramThatDoesNotExist",
     [](const TempDir& d) {
       return tandem_cli(d, "launch --nproc-per-node 2 -- /nonexistent/prog --flag");
     },
     "exit 127",
     {"cannot run '/nonexistent/prog': no such file; no worker was started"},
     [](const TempDir& d) {  // said once, not once per rank
       const std::string log = read_bytes(d.file("cli.log"));
       EXPECT_EQ(log.find("cannot run"), log.rfind("cannot run")) << log;
     }},
    {"LaunchWithMasterPortTaken",
     [](const TempDir& d) {
       TakenPort taken;
       return tandem_cli(d, "launch --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " +
                                std::to_string(taken.port) + " --kill-grace 1 -- " +
                                LAUNCH_TEST_WORKER);
     },
     "exit 2",
     {"[rank0]", "cannot listen on 127.0.0.1:", "Address already in use"}},
    {"StoreServerOnATakenPort",
     [](const TempDir&) {
       TakenPort taken;
       return thrown([&] {
         parallel::TCPStore store({.host = "127.0.0.1", .port = taken.port, .is_server = true});
       });
     },
     "DistributedError",
     {"cannot listen on 127.0.0.1:", "Address already in use"}},
    {"StoreClientSendsGarbage",
     [](const TempDir& d) {
       parallel::TCPStore store({.port = 0, .is_server = true, .timeout = 5s});
       store.set("k", std::string("v"));
       const std::string reply =
           testing::raw_exchange(store.port(), std::string("\x05\0\0\0\x63junk", 9));
       // The server still serves everyone else.
       write_bytes(d.file("after"), store.get_string("k"));
       return Outcome{"none", reply};
     },
     "none",
     {"TCPStore server: unknown op 99"},
     [](const TempDir& d) { EXPECT_EQ(read_bytes(d.file("after")), "v"); }},
    {"RankIsNotANumber",
     [](const TempDir&) { return with_env("RANK", "one"); },
     "ValueError",
     {"environment variable RANK='one' is not an integer"}},
    {"RankDoesNotFitInAnInt",
     [](const TempDir&) { return with_env("RANK", "4294967296"); },
     "ValueError",
     {"RANK='4294967296' is out of range"}},
    {"RendezvousAddressWithJunkAfterThePort",
     [](const TempDir&) {
       return thrown([] {
         parallel::init_process_group(
             {.init_method = "tcp://127.0.0.1:29500x", .rank = 0, .world_size = 1});
       });
     },
     "ValueError",
     {"'127.0.0.1:29500x' is not host:port"}},
    {"RanksDisagreeOnTheModel",
     [](const TempDir& d) {
       parallel::spawn(
           [&](int rank) {
             parallel::init_process_group({.timeout = 60s});
             nn::Linear model(4, rank == 0 ? 3 : 5);
             const Outcome o = thrown([&] { parallel::DistributedDataParallel ddp(model); });
             if (rank == 1) write_bytes(d.file("rank1"), o.error + ": " + o.message);
             parallel::destroy_process_group();
           },
           2);
       const std::string got = read_bytes(d.file("rank1"));
       return Outcome{got.substr(0, got.find(':')), got};
     },
     "DistributedError",
     {"rank 1's model differs from rank 0's", "[5, 4]", "[3, 4]"}},
    // A rank from torchrun's variables and a world size from mpirun's would be a rank of no real
    // world: the sampler says which variable is missing instead.
    {"RankFromOneLauncherWorldSizeFromAnother",
     [](const TempDir&) {
       testing::LauncherVars vars{{"RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
       return thrown([] { data::DistributedSampler sampler(100); });
     },
     "ValueError",
     {"DistributedSampler: torchrun (RANK, WORLD_SIZE) sets no WORLD_SIZE"}},
    // RANK=0 WORLD_SIZE=2 beside RANK=1 WORLD_SIZE=3: both fail at once, each naming both values,
    // instead of waiting for a rank 2 until the timeout (20 s here, 30 minutes by default).
    {"RanksToldDifferentWorldSizes",
     [](const TempDir& d) {
       return ranks_outcomes(d, 2, [](int rank) {
         if (rank == 1) ::setenv("WORLD_SIZE", "3", 1);  // rank 0 keeps spawn's 2
         parallel::init_process_group({.timeout = 20s});
       });
     },
     "DistributedError",
     {"rank0: DistributedError: init_process_group: the ranks disagree on the world size: rank 1 "
      "was told a world of 3 (by torchrun (RANK, WORLD_SIZE)), rank 0 (this process) was told a "
      "world of 2",
      "rank1: DistributedError: init_process_group: the ranks disagree on the world size: rank 1 "
      "(this process) was told a world of 3 (by torchrun (RANK, WORLD_SIZE)), rank 0 was told a "
      "world of 2",
      "Other failures:\n  rank "},
     [](const TempDir& d) {
       EXPECT_LT(std::stod(read_bytes(d.file("seconds"))), 10.0) << "at once, not at the timeout";
     }},
};

class Distributed : public ::testing::TestWithParam<Row> {};
TEST_P(Distributed, GivesAClearErrorAndLosesNothing) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(BadInput, Distributed, ::testing::ValuesIn(kRows), row_name);

// `tandem launch` (RANK=0, WORLD_SIZE=2, no mpirun) with backend "mpi": MPI's world would be this
// process alone, and all_reduce would return its input. Refused, naming both worlds; in a child
// of its own, since MPI starts once per process.
TEST(BadInputMpi, BackendWithoutMpirunIsRefused) {
  if (!parallel::mpi_available()) GTEST_SKIP() << "this build has no MPI";
  // Open MPI is not run under a sanitizer (tests/CMakeLists.txt says why), here neither.
  if (tandem::testing::kSanitized) GTEST_SKIP() << "Open MPI under a sanitizer";
  check({"MpiBackendWithoutMpirun",
         [](const TempDir& d) {
           return ranks_outcomes(d, 1, [](int) {
             ::alarm(60);  // a safety net: the child ends even if MPI's start hangs
             testing::LauncherVars vars{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};
             parallel::init_process_group({.backend = "mpi", .timeout = 30s});
           });
         },
         "DistributedError",
         {"rank0: DistributedError: init_process_group: the environment says a world of 2 "
          "(torchrun (RANK, WORLD_SIZE)), but MPI_COMM_WORLD has 1 rank",
          "hint: start the program with `mpirun -np 2 <program>`"}});
}

}  // namespace
}  // namespace tandem::bad_input
