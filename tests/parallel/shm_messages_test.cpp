// tests/parallel/shm_messages_test.cpp — point-to-point messages over shared memory
// (shm_channel.h), between processes: messages many times a channel's size stream through it,
// two ranks that send to each other before either receives do not wait for each other, many
// messages in flight arrive in order, a send owns a copy of its tensor, a message of the wrong
// size is an error naming both sizes. (A receiver that dies: shm_comm_test.cpp.)
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::require;

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && (a.numel() == 0 || abs(a - b).max().item() == 0);
}

TEST(ShmMessages, StreamInOrderBothWaysAndOwnTheirTensors) {
  spawn(
      [](int) {
        auto g = init_process_group({.backend = "shm", .timeout = 60s});
        const int r = g->rank(), peer = 1 - r;
        // 1.2 M floats each way (36 times a channel of 4 × 32 KiB), both sent before either
        // rank receives.
        Tensor big = arange(1.2e6) + 1e6 * r, got = zeros_like(big);
        WorkPtr sent = g->send(big, peer);
        big.fill_(-1.0);  // the send holds its own copy
        g->recv(got, peer)->wait();
        sent->wait();
        require(same(got, arange(1.2e6) + 1e6 * peer), "a large message each way");
        require(same(big, full_like(big, -1.0)), "the sender's tensor is its own again");
        // Many in flight, of sizes around a slot's and a channel's, in order.
        const std::vector<int64_t> sizes{0, 1, 8190, 8191, 8192, 32768, 40000, 3, 100'000};
        std::vector<WorkPtr> works;
        std::vector<Tensor> in;
        for (size_t i = 0; i < sizes.size(); ++i)
          works.push_back(g->send(full({sizes[i]}, double(i + 10 * r)), peer));
        for (size_t i = 0; i < sizes.size(); ++i) {
          in.push_back(zeros({sizes[i]}));
          works.push_back(g->recv(in.back(), peer));
        }
        for (const WorkPtr& w : works) w->wait();
        for (size_t i = 0; i < sizes.size(); ++i)
          require(same(in[i], full({sizes[i]}, double(i + 10 * peer))), str("message ", i));
        // The wrong size: an error naming both sizes (and the group is not used after it).
        if (r == 0) {
          g->send(zeros({5}), 1)->wait();
        } else {
          Tensor four = zeros({4});
          std::string e = "no error";
          try {
            g->recv(four, 0)->wait();
          } catch (const std::exception& x) {
            e = x.what();
          }
          require(e.find("rank 0 sent 20 bytes, but this rank expects") != std::string::npos, e);
        }
        destroy_process_group();
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel
