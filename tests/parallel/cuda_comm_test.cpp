// tests/parallel/cuda_comm_test.cpp — collectives on CUDA tensors: Gloo staging them through the
// host (2 ranks sharing cuda:0) and NCCL (a single rank: NCCL refuses two ranks on one GPU).
// Skipped, visibly, without a GPU. CUDA is probed in a child process: a CUDA runtime initialised
// before fork() is unusable in the forked ranks.
#include <sys/wait.h>
#include <tandem/core/cuda_device.h>
#include <tandem/parallel/comm/nccl_communicator.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <unistd.h>
#if TANDEM_HAS_CUDA
#include <tandem/core/cuda/stream.h>
#endif

#include "data/temp_dir.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;

int cuda_devices_seen_by_a_child() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(std::min(cuda::device_count(), 100));
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

void check_or_throw(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

class CudaCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_devices_seen_by_a_child() == 0)
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_F(CudaCollectives, GlooReducesCudaTensorsThroughTheHost) {
  spawn(
      [](int rank) {
        auto comm = init_process_group({.backend = "gloo", .timeout = 60s});
        const Device gpu = Device::cuda(0);
        Tensor t = full({1000}, double(rank + 1), {.device = gpu});
        comm->all_reduce(t, ReduceOp::Sum)->wait();
        check_or_throw(t.device() == gpu, "stays on the GPU");
        check_or_throw(t.to(Device::cpu()).to_vector<float>() == std::vector<float>(1000, 3.f),
                       "sum");
        Tensor b = full({4}, rank == 0 ? 7.0 : 0.0, {.device = gpu});
        comm->broadcast(b, 0)->wait();
        check_or_throw(b.to(Device::cpu()).to_vector<float>() == std::vector<float>(4, 7.f),
                       "bcast");
        destroy_process_group();
      },
      2);
}

#if TANDEM_HAS_CUDA
TEST_F(CudaCollectives, GlooWaitsForTheSideStreamThatProducesTheTensor) {
  // The tensor is produced on a non-blocking side stream behind tens of milliseconds of work;
  // Gloo's worker thread copies it to the host on its own (default) stream, which must first wait
  // for the side stream, or it reads the memory before the values are there.
  spawn(
      [](int rank) {
        auto comm = init_process_group({.backend = "gloo", .timeout = 60s});
        const Device gpu = Device::cuda(0);
        cuda::Stream side(0);
        Tensor t;
        {
          cuda::StreamGuard on_side(side);
          Tensor a = full({2048, 2048}, 1.0 / 2048, {.device = gpu});
          for (int i = 0; i < 40; ++i) a = tanh(matmul(a, a));
          t = full({1000}, double(rank + 1), {.device = gpu}) + a.sum() * 0.0;
          comm->all_reduce(t, ReduceOp::Sum)->wait();
          check_or_throw(t.to(Device::cpu()).to_vector<float>() == std::vector<float>(1000, 3.f),
                         "the sum of the values the side stream produced");
        }
        destroy_process_group();
      },
      2);
}
#endif

TEST_F(CudaCollectives, NcclSingleRankRunsEveryCollective) {
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  tandem::testing::TempDir dir;
  spawn(
      [&](int) {
        auto comm = init_process_group({.backend = "nccl",
                                        .init_method = "file://" + dir.file("store"),
                                        .rank = 0,
                                        .world_size = 1,
                                        .device = Device::cuda(0),
                                        .timeout = 60s});
        check_or_throw(comm->backend() == "nccl", "backend");
        const Device gpu = Device::cuda(0);
        Tensor t = full({1 << 20}, 2.0, {.device = gpu});
        comm->all_reduce(t, ReduceOp::Mean)->wait();
        check_or_throw(t.to(Device::cpu()).to_vector<float>()[12345] == 2.f, "all_reduce avg");
        comm->broadcast(t, 0)->wait();
        std::vector<Tensor> outs{zeros({3}, {.device = gpu})};
        comm->all_gather(outs, full({3}, 5.0, {.device = gpu}))->wait();
        check_or_throw(outs[0].to(Device::cpu()).to_vector<float>() == std::vector<float>(3, 5.f),
                       "all_gather");
        Tensor out = zeros({3}, {.device = gpu});
        comm->reduce_scatter(out, full({3}, 4.0, {.device = gpu}))->wait();
        check_or_throw(out.to(Device::cpu()).to_vector<float>() == std::vector<float>(3, 4.f),
                       "reduce_scatter");
        comm->barrier()->wait();
        // A sub-group (ncclCommSplit) of the one rank reduces on its own.
        const std::shared_ptr<Communicator> sub = comm->new_group({0});
        check_or_throw(sub != nullptr && sub->backend() == "nccl" && sub->size() == 1, "new_group");
        Tensor s = full({5}, 3.0, {.device = gpu});
        sub->all_reduce(s)->wait();
        check_or_throw(s.to(Device::cpu()).to_vector<float>() == std::vector<float>(5, 3.f),
                       "new_group all_reduce");
        // A CPU tensor is a clear error naming both devices.
        Tensor cpu = ones({2});
        try {
          comm->all_reduce(cpu);
          check_or_throw(false, "a CPU tensor should be rejected");
        } catch (const DeviceError& e) {
          check_or_throw(std::string(e.what()).find("cuda:0") != std::string::npos, e.what());
        }
        destroy_process_group();
      },
      1);
}

}  // namespace
}  // namespace tandem::parallel
