// tests/parallel/device_mesh_test.cpp — sub-groups and meshes. new_group over threads, shared
// memory and Gloo: the members' collectives reach only them, with their own ranks and numbering,
// the others get none; bad rank lists are errors that say why. A 2 × 2 mesh gives each rank the
// groups torch's init_device_mesh gives (row-major). (TP × DP training on a mesh:
// tp_gpt_test.cpp.)
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/prefix_store.h>

#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::error_message;
using ::testing::HasSubstr;

// On every rank of `world`: sub-groups {0, 2} and {1, 2} (rank 2 in both); each member
// all-reduces its world rank + 1 and must get the sum over its group's members alone.
void check_subgroups(Communicator& world) {
  const int r = world.rank();
  auto even = world.new_group({0, 2});
  auto odd = world.new_group({1, 2});
  EXPECT_EQ(even != nullptr, r == 0 || r == 2);
  EXPECT_EQ(odd != nullptr, r == 1 || r == 2);
  for (auto [group, members] :
       {std::pair{even, std::vector{0, 2}}, std::pair{odd, std::vector{1, 2}}}) {
    if (!group) continue;
    EXPECT_EQ(group->size(), 2);
    EXPECT_EQ(group->rank(), r == members[0] ? 0 : 1);
    EXPECT_EQ(group->backend(), world.backend());
    Tensor t = full({3}, r + 1.0);
    group->all_reduce(t)->wait();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, float(members[0] + members[1] + 2)));
  }
  // The parent still works, and its sequence numbers were not disturbed.
  Tensor t = full({1}, 1.0);
  world.all_reduce(t)->wait();
  EXPECT_EQ(t.to_vector<float>()[0], float(world.size()));
}

TEST(NewGroup, OverThreadsReachesOnlyItsMembers) {
  spawn_threads([](std::shared_ptr<Communicator> world) { check_subgroups(*world); }, 3);
}

TEST(NewGroup, OverSharedMemoryAndGlooReachesOnlyItsMembers) {
  spawn(
      [](int rank) {
        auto store = detail::make_store("env://", rank, 60s);
        ShmCommunicator shm(std::make_shared<PrefixStore>("shm", store), rank, 3, {.timeout = 60s});
        check_subgroups(shm);
        GlooCommunicator gloo(std::make_shared<PrefixStore>("gloo", store), rank, 3,
                              {.timeout = 60s});
        check_subgroups(gloo);
      },
      3);
}

TEST(NewGroup, BadRankListsAreErrors) {
  spawn_threads(
      [](std::shared_ptr<Communicator> world) {
        EXPECT_THAT(error_message<ValueError>([&] { world->new_group({}); }),
                    HasSubstr("no ranks"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      world->new_group({1, 0});
                    }),
                    HasSubstr("ascending, without repeats, in [0, 2); got 0 at position 1"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      world->new_group({0, 2});
                    }),
                    HasSubstr("got 2 at position 1"));
      },
      2);
}

TEST(DeviceMesh, TwoByTwoIsRowMajorWithAGroupPerLine) {
  spawn_threads(
      [](std::shared_ptr<Communicator> world) {
        const DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
        const int r = world->rank();
        EXPECT_EQ(mesh.coordinate("dp"), r / 2);
        EXPECT_EQ(mesh.coordinate("tp"), r % 2);
        EXPECT_EQ(mesh.group("tp")->rank(), r % 2);
        EXPECT_EQ(mesh.group("dp")->rank(), r / 2);
        EXPECT_EQ(mesh.size("tp"), 2);
        // tp groups are {0, 1} and {2, 3}; dp groups {0, 2} and {1, 3}.
        Tensor t = full({1}, double(r));
        mesh.group("tp")->all_reduce(t)->wait();
        EXPECT_EQ(t.to_vector<float>()[0], float(r / 2 * 4 + 1));
        Tensor u = full({1}, double(r));
        mesh.group("dp")->all_reduce(u)->wait();
        EXPECT_EQ(u.to_vector<float>()[0], float(2 * (r % 2) + 2));
        EXPECT_THAT(mesh.str(), HasSubstr("2 x 2 mesh (dp, tp); rank"));
        EXPECT_THAT(error_message<ValueError>([&] { mesh.group("pp"); }),
                    HasSubstr("no dimension 'pp'"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      DeviceMesh(world, {3, 2}, {"dp", "tp"});
                    }),
                    HasSubstr("a mesh of 6 ranks over a group of 4"));
      },
      4);
}

TEST(DeviceMesh, FlattenJoinsTheNamedDimensionsKeepingTheOthers) {
  spawn_threads(
      [](std::shared_ptr<Communicator> world) {
        // 2 x 2 x 2 (dp, cp, tp): rank = 4·dp + 2·cp + tp. dp × cp joins the ranks of one tp
        // coordinate: {0, 2, 4, 6} and {1, 3, 5, 7}.
        DeviceMesh mesh(world, {2, 2, 2}, {"dp", "cp", "tp"});
        const int r = world->rank();
        const auto dp_cp = mesh.flatten({"dp", "cp"});
        ASSERT_NE(dp_cp, nullptr);
        EXPECT_EQ(dp_cp->size(), 4);
        EXPECT_EQ(dp_cp->rank(), r / 2);
        Tensor t = full({1}, double(r));
        dp_cp->all_reduce(t)->wait();
        EXPECT_EQ(t.to_vector<float>()[0], float(r % 2 == 0 ? 0 + 2 + 4 + 6 : 1 + 3 + 5 + 7));
        EXPECT_EQ(mesh.flatten({"tp"}), mesh.group("tp"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      mesh.flatten({"cp", "cp"});
                    }),
                    HasSubstr("'cp' named twice"));
      },
      8);
}

}  // namespace
}  // namespace tandem::parallel
