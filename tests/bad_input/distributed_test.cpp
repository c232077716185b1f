// tests/bad_input/distributed_test.cpp — the bad-input table, part 3: starting ranks and
// rendezvous. A launcher given a program that does not exist, a MASTER_PORT that is taken,
// malformed rendezvous settings, a store client sending garbage, and ranks whose models differ.
#include <netinet/in.h>
#include <sys/socket.h>
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
};

class Distributed : public ::testing::TestWithParam<Row> {};
TEST_P(Distributed, GivesAClearErrorAndLosesNothing) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(BadInput, Distributed, ::testing::ValuesIn(kRows), row_name);

}  // namespace
}  // namespace tandem::bad_input
