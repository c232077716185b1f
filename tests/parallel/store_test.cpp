// tests/parallel/store_test.cpp — the four stores: set/get/add/check/delete/wait with timeouts,
// the same contract for each; TCPStore across processes, with garbage on the wire, and telling
// which rank died.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/file_store.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/store/tcp_store.h>
#include <unistd.h>
#include <thread>

#include "data/temp_dir.h"
#include "parallel/raw_exchange.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::error_message;

enum class Kind { Hash, File, Prefix, Tcp };

class StoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::Hash:
        store_ = std::make_shared<HashStore>();
        break;
      case Kind::File:
        store_ = std::make_shared<FileStore>(dir_.file("store"));
        break;
      case Kind::Prefix:
        store_ = std::make_shared<PrefixStore>("run7", std::make_shared<HashStore>());
        break;
      case Kind::Tcp:
        store_ = std::make_shared<TCPStore>(TCPStoreOptions{.port = 0, .is_server = true});
        break;
    }
  }
  tandem::testing::TempDir dir_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetGetAddCheckDelete) {
  Store& s = *store_;
  s.set("a", std::string("hello"));
  EXPECT_EQ(s.get_string("a"), "hello");
  s.set("a", std::string("again"));
  EXPECT_EQ(s.get_string("a"), "again");
  s.set("empty", Bytes{});
  EXPECT_TRUE(s.get("empty").empty());
  EXPECT_EQ(s.add("n", 2), 2);
  EXPECT_EQ(s.add("n", 5), 7);
  EXPECT_EQ(s.add("n", -1), 6);
  EXPECT_EQ(s.get_string("n"), "6");
  EXPECT_TRUE(s.check({"a", "n"}));
  EXPECT_FALSE(s.check({"a", "missing"}));
  EXPECT_TRUE(s.delete_key("a"));
  EXPECT_FALSE(s.delete_key("a"));
  EXPECT_FALSE(s.check({"a"}));
  const std::string odd("key/with:odd\nbytes\0x", 20);
  s.set(odd, std::string("v"));
  EXPECT_EQ(s.get_string(odd), "v");
}

TEST_P(StoreContract, AddOnANonCounterIsAnError) {
  store_->set("text", std::string("abc"));
  EXPECT_THAT(error_message<DistributedError>([&] { store_->add("text", 1); }),
              ::testing::HasSubstr("text'"));
}

// Found by fuzzing (tests/fuzz/fuzz_store_protocol.cpp): the sum overflowed int64, undefined
// behaviour in the server, and a wrapped counter.
TEST_P(StoreContract, AddThatOverflowsIsAnErrorAndLeavesTheCounter) {
  store_->add("n", INT64_MAX - 1);
  EXPECT_THAT(error_message<DistributedError>([&] { store_->add("n", 2); }),
              ::testing::HasSubstr("overflows a 64-bit counter"));
  EXPECT_EQ(store_->add("n", 0), INT64_MAX - 1);
}

TEST_P(StoreContract, WaitTimesOutNamingTheKeys) {
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = error_message<DistributedError>([&] {
    store_->wait({"never", "nor-this"}, 200ms);
  });
  EXPECT_THAT(msg, ::testing::HasSubstr("never"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  store_->set_timeout(150ms);
  EXPECT_THROW(store_->get("never"), DistributedError);
}

TEST_P(StoreContract, GetWaitsForAKeySetLater) {
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    store_->set("late", std::string("here"));
  });
  EXPECT_EQ(store_->get_string("late"), "here");
  writer.join();
}

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  static const char* const names[] = {"Hash", "File", "Prefix", "Tcp"};
  return names[int(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract,
                         ::testing::Values(Kind::Hash, Kind::File, Kind::Prefix, Kind::Tcp),
                         kind_name);

TEST(PrefixStore, KeepsNamespacesApart) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", std::string("1"));
  b.set("k", std::string("2"));
  EXPECT_EQ(a.get_string("k"), "1");
  EXPECT_EQ(b.get_string("k"), "2");
  EXPECT_EQ(base->get_string("a/k"), "1");
}

TEST(TCPStore, CountersAndWaitsWorkAcrossProcesses) {
  const int port = detail::free_port("127.0.0.1");
  // Three processes, rank 0 serving: each adds to a counter, then waits for everyone's key.
  spawn(
      [port](int rank) {
        TCPStore s({.port = port, .is_server = rank == 0, .rank = rank, .timeout = 20s});
        s.add("arrived", 1);
        s.set("key" + std::to_string(rank), std::to_string(rank * 10));
        s.wait({"key0", "key1", "key2"});
        for (int r = 0; r < 3; ++r)
          if (s.get_string("key" + std::to_string(r)) != std::to_string(r * 10))
            throw std::runtime_error("wrong value for key" + std::to_string(r));
        if (s.get_string("arrived") != "3" && s.add("arrived", 0) < 3)
          throw std::runtime_error("counter below 3 after every key was set");
      },
      3, {.master_port = port});
}

TEST(TCPStore, GarbageClosesThatConnectionAndTheServerKeepsServing) {
  TCPStore store({.port = 0, .is_server = true, .timeout = 5s});
  store.set("k", std::string("v"));
  // A length over the 16 MiB limit, an unknown op, and a field running past its message.
  const std::string too_long("\xff\xff\xff\x7f", 4);
  const std::string unknown_op("\x01\x00\x00\x00\x63", 5);
  const std::string truncated_field("\x05\x00\x00\x00\x02\xff\x00\x00\x00", 9);
  for (const std::string& junk : {too_long, unknown_op, truncated_field}) {
    const std::string reply = testing::raw_exchange(store.port(), junk);
    EXPECT_THAT(reply, ::testing::HasSubstr("TCPStore server")) << "an error reply, then close";
  }
  // The server and this client's connection are unaffected.
  EXPECT_EQ(store.get_string("k"), "v");
  TCPStore other({.port = store.port(), .timeout = 5s});
  EXPECT_EQ(other.get_string("k"), "v");
}

TEST(TCPStore, ReportsARankWhoseConnectionDiedWithoutGoodbye) {
  TCPStore server({.port = 0, .is_server = true, .rank = 0, .timeout = 5s});
  const pid_t pid = ::fork();
  if (pid == 0) {
    TCPStore child({.port = server.port(), .rank = 3, .timeout = 5s});
    child.set("child-up", std::string("1"));
    ::_exit(0);  // no destructor: no BYE, like a crash
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  server.wait({"child-up"});
  std::vector<int64_t> departed;
  for (int i = 0; i < 100 && departed.empty(); ++i) {
    departed = server.departed_ranks();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(departed, std::vector<int64_t>{3});
}

TEST(TCPStore, ACleanExitIsNotADeparture) {
  TCPStore server({.port = 0, .is_server = true, .rank = 0, .timeout = 5s});
  { TCPStore client({.port = server.port(), .rank = 1, .timeout = 5s}); }
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(server.departed_ranks().empty());
}

TEST(TCPStore, NoServerIsAClearErrorWithinTheTimeout) {
  const int port = detail::free_port("127.0.0.1");
  EXPECT_THAT(
      error_message<DistributedError>([&] { TCPStore s({.port = port, .timeout = 300ms}); }),
      ::testing::HasSubstr("cannot connect to the store at 127.0.0.1:" + std::to_string(port)));
}

}  // namespace
}  // namespace tandem::parallel
