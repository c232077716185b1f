// tests/parallel/ddp_grads_test.cpp — what DDP leaves in .grad beyond the average of one step:
// a gradient kept from an earlier step is never written again, and a gradient accumulated under
// no_sync() for a parameter the synced backward does not use still joins the average. Ranks are
// threads on cpu:0 and cpu:1.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

constexpr int64_t kGradsRows = 8;  // per rank

// A gradient from an earlier step is never written again: if the caller keeps a .grad and the
// next backward starts from set_to_none, DDP's averages of that backward land elsewhere (as in
// PyTorch without gradient_as_bucket_view). A reducer that handed its bucket over as .grad and
// reused it would overwrite the kept one.
TEST(DDP, AGradientKeptFromAnEarlierStepIsNeverWrittenAgain) {
  constexpr int kWorld = 2;
  auto models = tandem::testing::mlps_on_devices(kWorld, kFloat64, 0);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        tandem::testing::Mlp& model = *models[size_t(rank)];
        DistributedDataParallel ddp(model, {.group = group});
        auto backward = [&](double value) {
          for (Tensor& p : model.parameters()) p.set_grad(Tensor());  // zero_grad(set_to_none)
          const Tensor x =
              full({kGradsRows, 784}, value * (rank + 1), {.dtype = kFloat64, .device = dev});
          cross_entropy(ddp(x), zeros({kGradsRows}, {.dtype = kInt64, .device = dev})).backward();
        };
        backward(0.01);
        const Tensor held = model.fc1.weight.grad();
        const Tensor before = held.clone();
        backward(0.02);
        using tandem::testing::values;
        EXPECT_TRUE(values(held) == values(before)) << "rank " << rank << ": a gradient changed";
        EXPECT_FALSE(values(model.fc1.weight.grad()) == values(before)) << "rank " << rank;
      },
      kWorld);
}

// Two layers; the second takes part only when asked (a branch some micro-batches skip).
struct BranchyNet : nn::Module {
  nn::Linear a{8, 4}, b{8, 4};
  void visit(nn::Visitor& v) override {
    v("a", a);
    v("b", b);
  }
  Tensor forward(const Tensor& x, bool use_b) { return use_b ? a(x) + b(x) : a(x); }
};

// find_unused_parameters with no_sync(): `b` gets its gradient only in the micro-batch under
// no_sync(), not in the synced one. That accumulated gradient is still this rank's part of the
// average (PyTorch's reducer copies a defined .grad of an unused parameter), so every rank ends
// with the average over the ranks, as for `a`.
TEST(DDP, FindUnusedAveragesAGradientAccumulatedUnderNoSync) {
  constexpr int kWorld = 2;
  auto models = tandem::testing::modules_on_devices<BranchyNet>(kWorld, kFloat64, 0);
  manual_seed(1);
  const Tensor x = randn({2 * kWorld, 3, 8}, {.dtype = kFloat64});  // [micro-batch·rank][rows]
  auto loss = [](const Tensor& out) { return (out * out).mean(); };
  // Expected: on one device, each rank's two micro-batches' gradients, then their mean.
  manual_seed(0);
  BranchyNet one;
  one.to(kFloat64);
  for (int r = 0; r < kWorld; ++r) {
    loss(one.forward(x.select(0, r), true)).backward();
    loss(one.forward(x.select(0, kWorld + r), false)).backward();
  }
  std::vector<std::vector<Tensor>> got(kWorld);  // per rank, every parameter's .grad
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        BranchyNet& model = *models[size_t(r)];
        DistributedDataParallel ddp(model, {.group = group, .find_unused_parameters = true});
        {
          auto quiet = ddp.no_sync();
          loss(ddp(x.select(0, r).to(dev), true)).backward();
        }
        loss(ddp(x.select(0, kWorld + r).to(dev), false)).backward();  // b unused here
        for (Tensor& p : model.parameters()) got[size_t(r)].push_back(p.grad());
      },
      kWorld);
  const std::vector<Tensor> sums = one.parameters();  // .grad: the sum over ranks
  for (int r = 0; r < kWorld; ++r)
    for (size_t k = 0; k < sums.size(); ++k) {
      ASSERT_TRUE(got[size_t(r)][k].defined()) << "rank " << r << ", parameter " << k;
      EXPECT_TRUE(tandem::testing::all_close(got[size_t(r)][k].to(Device::cpu()) * double(kWorld),
                                             sums[k].grad(), 1e-12, 1e-10))
          << "rank " << r << ", parameter " << k;
    }
}

// reduce_gradients(): every micro-batch's backward under no_sync() (as a pipeline stage runs
// them), then one reduction outside backward gives the average a synced last backward would.
// Called inside no_sync() it is an error, and a parameter with no gradient on this rank is named
// as backward's reduction names it.
TEST(DDP, ReduceGradientsAveragesWhatNoSyncAccumulated) {
  constexpr int kWorld = 2;
  auto models = tandem::testing::modules_on_devices<BranchyNet>(kWorld, kFloat64, 0);
  manual_seed(1);
  const Tensor x = randn({2 * kWorld, 3, 8}, {.dtype = kFloat64});
  auto loss = [](const Tensor& out) { return (out * out).mean(); };
  manual_seed(0);
  BranchyNet one;
  one.to(kFloat64);
  for (int k = 0; k < 2 * kWorld; ++k) loss(one.forward(x.select(0, k), true)).backward();
  std::vector<std::vector<Tensor>> got(kWorld);
  std::vector<std::string> errors(kWorld);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        BranchyNet& model = *models[size_t(r)];
        DistributedDataParallel ddp(model, {.group = group});
        {
          auto quiet = ddp.no_sync();
          for (int k : {r, kWorld + r}) loss(ddp(x.select(0, k).to(dev), true)).backward();
          errors[size_t(r)] =
              tandem::testing::error_message<ValueError>([&] { ddp.reduce_gradients(); });
        }
        ddp.reduce_gradients();
        for (Tensor& p : model.parameters()) got[size_t(r)].push_back(p.grad());
        model.b.weight.set_grad(Tensor());  // no gradient for b on either rank: named
        const std::string missing =
            tandem::testing::error_message<DistributedError>([&] { ddp.reduce_gradients(); });
        EXPECT_NE(missing.find("no gradient for 1 parameter(s): b.weight"), std::string::npos)
            << missing;
      },
      kWorld);
  const std::vector<Tensor> sums = one.parameters();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(errors[size_t(r)].find("reduce_gradients: called inside no_sync()"),
              std::string::npos)
        << errors[size_t(r)];
    for (size_t k = 0; k < sums.size(); ++k)
      EXPECT_TRUE(tandem::testing::all_close(got[size_t(r)][k].to(Device::cpu()) * double(kWorld),
                                             sums[k].grad(), 1e-12, 1e-10))
          << "rank " << r << ", parameter " << k;
  }
}

}  // namespace
}  // namespace tandem::parallel
