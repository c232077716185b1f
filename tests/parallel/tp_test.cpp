// tests/parallel/tp_test.cpp — tensor parallelism computes what one device computes. The region
// ops against their definitions (forward and backward, 3 ranks); an MLP block (Linear h→4h, GELU,
// Linear 4h→h: ColumnParallelLinear then RowParallelLinear) trained 3 AdamW steps with decay
// groups on TP = 2 and 4 ranks ends, its shards put back together, with one device's parameters
// in float64 to 1e-12 relative; errors name the padding and the shapes. Ranks are threads on
// cpu:0..t-1.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/tp/layers.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel::tp {
namespace mlp_test {  // its own names: tp_gpt_test.cpp may share its unity batch
namespace {

using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

constexpr int64_t kB = 3, kT = 5, kH = 8;
constexpr int kSteps = 3;

// Each rank's x is arange + 10·rank, so every rank's contribution is told apart.
Tensor rank_input(int rank, int64_t width) {
  return (arange(double(kB * width), {.dtype = kFloat64}) + 10.0 * rank)
      .reshape({kB, width})
      .to(Device::cpu(rank));
}

TEST(TensorParallelRegions, ForwardAndBackwardAreTheirDefinitions) {
  constexpr int kWorld = 3;
  spawn_threads(
      [](std::shared_ptr<Communicator> g) {
        const int r = g->rank();
        const Device dev = Device::cpu(r);
        // The gradient arriving at each op's output: ones times (rank + 1).
        auto upstream = [&](const Tensor& y) {
          return full(y.shape(), r + 1.0, {.dtype = kFloat64, .device = dev});
        };
        auto run = [&](auto op, int64_t width) {
          Tensor x = rank_input(r, width).requires_grad_();
          Tensor y = op(x, g);
          y.backward(upstream(y));
          return std::pair{y.detach(), x.grad()};
        };
        Tensor sum_x = zeros({kB, 6}, {.dtype = kFloat64});
        for (int q = 0; q < kWorld; ++q) sum_x = sum_x + rank_input(q, 6).to(Device::cpu());
        const double grad_sum = kWorld * (kWorld + 1) / 2.0;  // Σ (q + 1)

        auto [y1, g1] = run(copy_to_tensor_parallel_region, 6);
        EXPECT_TRUE(all_close(y1, rank_input(r, 6), 0, 0)) << "f forward: identity";
        EXPECT_TRUE(all_close(g1, full({kB, 6}, grad_sum, {.dtype = kFloat64}), 0, 0))
            << "f backward: all-reduce";

        auto [y2, g2] = run(reduce_from_tensor_parallel_region, 6);
        EXPECT_TRUE(all_close(y2, sum_x, 0, 0)) << "g forward: all-reduce";
        EXPECT_TRUE(all_close(g2, full({kB, 6}, r + 1.0, {.dtype = kFloat64}), 0, 0))
            << "g backward: identity";

        auto [y3, g3] = run(scatter_to_tensor_parallel_region, 6);
        EXPECT_TRUE(all_close(y3, rank_input(r, 6).narrow(1, 2 * r, 2), 0, 0)) << "scatter forward";
        // backward: every rank's gradient (q + 1) in its own columns.
        Tensor want3 = empty({kB, 6}, {.dtype = kFloat64});
        for (int q = 0; q < kWorld; ++q) want3.narrow(1, 2 * q, 2).fill_(q + 1.0);
        EXPECT_TRUE(all_close(g3, want3, 0, 0)) << "scatter backward: all-gather";

        auto [y4, g4] = run(gather_from_tensor_parallel_region, 2);
        std::vector<Tensor> parts;
        for (int q = 0; q < kWorld; ++q) parts.push_back(rank_input(q, 2).to(Device::cpu()));
        EXPECT_TRUE(all_close(y4, cat(parts, 1), 0, 0)) << "gather forward: all-gather";
        EXPECT_TRUE(all_close(g4, full({kB, 2}, r + 1.0, {.dtype = kFloat64}), 0, 0))
            << "gather backward: this rank's slice";
      },
      kWorld);
}

// The fused f + column product (whose backward overlaps the all-reduce) against f then linear:
// the same output and gradients, with and without a bias.
TEST(TensorParallelRegions, FusedColumnProductIsFThenLinear) {
  manual_seed(4);
  const Tensor x0 = randn({3, 5, 6}, {.dtype = kFloat64}), w0 = randn({4, 6}, {.dtype = kFloat64}),
               b0 = randn({4}, {.dtype = kFloat64}), dy = randn({3, 5, 4}, {.dtype = kFloat64});
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        for (bool bias : {true, false}) {
          auto run = [&](bool fused) {
            Tensor x = x0.to(dev).detach().requires_grad_(),
                   w = w0.to(dev).detach().requires_grad_(),
                   b = bias ? b0.to(dev).detach().requires_grad_() : Tensor();
            const Tensor y = fused ? column_parallel_linear(x, w, b, g)
                                   : linear(copy_to_tensor_parallel_region(x, g), w, b);
            y.backward(dy.to(dev) * double(g->rank() + 1));
            return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), bias ? b.grad() : Tensor()};
          };
          const auto fused = run(true), composed = run(false);
          for (size_t i = 0; i < 3 + size_t(bias); ++i)
            EXPECT_TRUE(all_close(fused[i], composed[i], 1e-15, 1e-13))
                << "tensor " << i << ", bias " << bias;
        }
      },
      2);
}

// ---- An MLP block, one device against tensor parallelism.
struct Block {
  nn::Linear fc1{kH, 4 * kH, {.tensor = {.dtype = kFloat64}}};
  nn::Linear fc2{4 * kH, kH, {.tensor = {.dtype = kFloat64}}};
};

Block initial_block() {
  manual_seed(11);
  return Block();
}

std::vector<std::pair<Tensor, Tensor>> batches() {  // before any rank thread starts
  manual_seed(12);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int s = 0; s < kSteps; ++s)
    out.emplace_back(randn({kB, kT, kH}, {.dtype = kFloat64}),
                     randn({kB, kT, kH}, {.dtype = kFloat64}));
  return out;
}

// Three AdamW steps (decay on the matrices) of `forward` over `params` on `dev`.
template <typename Forward>
void train(const std::vector<std::pair<Tensor, Tensor>>& data, const nn::StateDict& params,
           Device dev, Forward&& forward) {
  optim::AdamW opt(optim::adamw_groups(params, {.lr = 1e-2, .weight_decay = 0.1}));
  for (const auto& [x, target] : data) {
    opt.zero_grad();
    mse_loss(forward(x.to(dev)), target.to(dev)).backward();
    opt.step();
  }
}

std::vector<Tensor> one_device() {
  Block b = initial_block();
  train(batches(),
        {{"fc1.weight", b.fc1.weight},
         {"fc1.bias", b.fc1.bias},
         {"fc2.weight", b.fc2.weight},
         {"fc2.bias", b.fc2.bias}},
        Device::cpu(), [&](const Tensor& x) { return b.fc2(gelu(b.fc1(x))); });
  return {b.fc1.weight, b.fc1.bias, b.fc2.weight, b.fc2.bias};
}

// The block trained on `world` tensor-parallel ranks; the shards put back together.
std::vector<Tensor> tensor_parallel(int world) {
  const Block whole = initial_block();
  const auto data = batches();  // draws here, not in the rank threads
  std::vector<std::vector<Tensor>> shards(static_cast<size_t>(world));
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const int r = g->rank();
        ColumnParallelLinear fc1(whole.fc1, g);
        RowParallelLinear fc2(whole.fc2, g);
        fc1.to(Device::cpu(r));
        fc2.to(Device::cpu(r));
        train(data,
              {{"fc1.weight", fc1.weight},
               {"fc1.bias", fc1.bias},
               {"fc2.weight", fc2.weight},
               {"fc2.bias", fc2.bias}},
              Device::cpu(r), [&](const Tensor& x) { return fc2(gelu(fc1(x))); });
        for (Tensor* p : {&fc1.weight, &fc1.bias, &fc2.weight, &fc2.bias})
          shards[size_t(r)].push_back(p->detach().to(Device::cpu()));
      },
      world);
  std::vector<Tensor> w1, b1, w2;
  for (int r = 0; r < world; ++r) {
    w1.push_back(shards[size_t(r)][0]);
    b1.push_back(shards[size_t(r)][1]);
    w2.push_back(shards[size_t(r)][2]);
    EXPECT_TRUE(all_close(shards[size_t(r)][3], shards[0][3], 0, 0))
        << "the row layer's bias must stay the same on every rank (rank " << r << ")";
  }
  return {cat(w1, 0), cat(b1, 0), cat(w2, 1), shards[0][3]};
}

void expect_one_device(int world) {
  const std::vector<Tensor> want = one_device(), got = tensor_parallel(world);
  ASSERT_EQ(got.size(), want.size());
  const char* names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], 1e-14, 1e-12)) << names[i] << ", TP = " << world;
}

TEST(TensorParallel, MlpBlockOnTwoRanksTrainsAsOneDevice) { expect_one_device(2); }
TEST(TensorParallel, MlpBlockOnFourRanksTrainsAsOneDevice) { expect_one_device(4); }

TEST(TensorParallel, SizesThatDoNotDivideNameThePadding) {
  manual_seed(0);  // the layers before the rank threads (the global generator)
  const nn::Linear ten_out(6, 10), ten_in(10, 6), six_in(6, 8);
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        EXPECT_THAT(error_message<ValueError>([&] { ColumnParallelLinear c(ten_out, g); }),
                    HasSubstr("out_features (10) does not divide by the tensor-parallel size 4; "
                              "pad it by 2 to 12"));
        EXPECT_THAT(error_message<ValueError>([&] { RowParallelLinear c(ten_in, g); }),
                    HasSubstr("in_features (10) does not divide"));
        ColumnParallelLinear fine(six_in, g);
        EXPECT_THAT(error_message<ShapeError>([&] {
                      fine(zeros({2, 5}));
                    }),
                    HasSubstr("input [2, 5] does not end in in_features 6"));
        EXPECT_THAT(
            error_message<ValueError>([&] { copy_to_tensor_parallel_region(zeros({1}), nullptr); }),
            HasSubstr("no tensor-parallel group"));
      },
      4);
}

}  // namespace
}  // namespace mlp_test
}  // namespace tandem::parallel::tp
