// tests/parallel/rehearsal_comm_test.cpp — the communicator of a rehearsal on the meta device
// (tools/plan/): a collective over meta tensors completes at once, without its peers, allocating
// nothing, and is counted as the real one would be; one over host tensors still meets the peers
// and moves their values (the collective suite passes); sub-groups and messages work the same.
#include <tandem/parallel/comm/rehearsal_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>

#include "parallel/collective_suite.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::require;

void rehearse(const std::function<void(RehearsalCommunicator&)>& fn, int ranks) {
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        RehearsalCommunicator comm(group);
        fn(comm);
      },
      ranks);
}

TEST(RehearsalComm, HostCollectivesPassTheCollectiveSuite) {
  rehearse([](RehearsalCommunicator& comm) { tandem::testing::check_collectives(comm); }, 3);
}

TEST(RehearsalComm, MetaCollectivesCompleteAtOnceAllocatingNothing) {
  rehearse(
      [](RehearsalCommunicator& comm) {
        if (comm.rank() == 1) return;  // a peer that never comes: meta needs none
        const Device m = Device::meta(comm.rank());
        Tensor t = empty({1000}, {.device = m});
        std::vector<Tensor> outs = {empty({1000}, {.device = m}), empty({1000}, {.device = m})};
        Tensor chunk = empty({500}, {.device = m});
        const int64_t held = memory_stats(m).allocated_bytes;
        std::vector<WorkPtr> works = {comm.all_reduce(t),
                                      comm.broadcast(t),
                                      comm.all_gather(outs, t),
                                      comm.reduce_scatter(chunk, t),
                                      comm.send(t, 1 - comm.rank()),
                                      comm.recv(t, 1 - comm.rank())};
        for (const WorkPtr& w : works) require(w->is_completed(), w->description());
        require(memory_stats(m).allocated_bytes == held, "a meta collective allocated");
        // Counted as the real collectives count their bytes on the wire (2 ranks): all_reduce
        // 2(n-1)/n of the tensor, all_gather (n-1) times it, reduce_scatter (n-1)/n.
        const CommStats s = comm.stats();
        require(s.ops.at("all_reduce").bytes == 4000, "all_reduce bytes");
        require(s.ops.at("all_gather").bytes == 4000, "all_gather bytes");
        require(s.ops.at("reduce_scatter").bytes == 2000, "reduce_scatter bytes");
        require(s.ops.at("send").calls == 1 && s.ops.at("recv").calls == 1, "messages");
      },
      2);
}

TEST(RehearsalComm, SubGroupsAndHostMessagesMeetThePeers) {
  rehearse(
      [](RehearsalCommunicator& comm) {
        std::shared_ptr<Communicator> pair = comm.new_group({0, 1});
        if (comm.rank() == 2) return require(pair == nullptr, "rank 2 is not in {0, 1}");
        require(pair && pair->backend() == "rehearsal over threads", "sub-group's backend");
        // A pipeline's header: a host message whose values the receiver reads.
        if (pair->rank() == 0) {
          pair->send(from_vector(std::vector<int64_t>{7, 8}, {2}), 1)->wait();
        } else {
          Tensor header = empty({2}, {.dtype = kInt64});
          pair->recv(header, 0)->wait();
          require(header.to_vector<int64_t>() == std::vector<int64_t>{7, 8}, "header values");
        }
        Tensor sum = ones({3}) * double(pair->rank() + 1);
        pair->all_reduce(sum)->wait();
        require(sum.to_vector<float>() == std::vector<float>{3, 3, 3}, "host all_reduce");
        // A sub-group's meta collectives count in its parent's wire(): a mesh's rank says all
        // it sends, whichever of its groups sends it.
        Tensor grads = empty({1000}, {.device = Device::meta(comm.rank())});
        pair->all_reduce(grads)->wait();
        require(comm.stats().ops.count("all_reduce") == 0, "the parent sent nothing itself");
        require(comm.wire().ops.at("all_reduce").bytes == 4000, "the sub-group's bytes");
      },
      3);
}

}  // namespace
}  // namespace tandem::parallel
