// tests/nn/activation_checkpoint_test.cpp — activation checkpointing computes what the plain
// forward computes: float64 gradients bit for bit (dropout replayed, batch norm's statistics
// updated once, nested checkpoints), with inputs that do not require grad, partial backward and
// a second backward; misuse gets clear errors; and the peak memory of a deep MLP is lower.
#include <tandem/autograd/engine.h>
#include <tandem/core/cuda_device.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/nn/nn.h>

#include "support/expect.h"

namespace tandem::nn {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

// 6 blocks of Linear(16, 16) + Tanh, with dropout and batch norm in the middle: float64.
Sequential deep_model(bool with_batch_norm) {
  manual_seed(3);
  Sequential s;
  for (int i = 0; i < 6; ++i) {
    s.push_back(Linear(16, 16));
    s.push_back(Tanh());
    if (i == 2) s.push_back(Dropout(0.3));
    if (i == 3 && with_batch_norm) s.push_back(BatchNorm1d(16));
  }
  s.to(kFloat64);
  return s;
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  ASSERT_EQ(va.size(), vb.size()) << what;
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << what << " element " << i;
}

// One step's gradients (and batch norm's running statistics) of `forward`, from a fresh model.
std::vector<Tensor> step(bool with_batch_norm,
                         const std::function<Tensor(Sequential&, const Tensor&)>& forward) {
  Sequential model = deep_model(with_batch_norm);
  manual_seed(11);
  const Tensor x = randn({8, 16}, {.dtype = kFloat64});
  manual_seed(12);  // dropout's masks come from here, in both runs
  (forward(model, x) * forward(model, x)).sum().backward();
  std::vector<Tensor> out;
  for (Tensor& p : model.parameters()) out.push_back(p.grad());
  for (auto& [name, b] : model.named_buffers()) out.push_back(b.to(kFloat64));
  return out;
}

void expect_same_step(bool with_batch_norm,
                      const std::function<Tensor(Sequential&, const Tensor&)>& checkpointed) {
  const auto plain = step(with_batch_norm, [](Sequential& m, const Tensor& x) { return m(x); });
  const auto ckpt = step(with_batch_norm, checkpointed);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i)
    expect_bitwise_equal(ckpt[i], plain[i], "tensor " + std::to_string(i));
}

TEST(ActivationCheckpoint, CheckpointSequentialGivesTheSameBitsWithDropoutAndBatchNorm) {
  for (int segments : {1, 2, 3, 5})
    expect_same_step(true, [segments](Sequential& m, const Tensor& x) {
      return checkpoint_sequential(m, segments, x);
    });
}

TEST(ActivationCheckpoint, BatchNormCountsEachBatchOnce) {
  Sequential model = deep_model(true);
  const Tensor x = randn({8, 16}, {.dtype = kFloat64});
  checkpoint_sequential(model, 3, x).sum().backward();
  for (auto& [name, b] : model.named_buffers()) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(b.to(kFloat64).item(), 1.0) << name << ": the recompute counted the batch again";
    }
  }
}

TEST(ActivationCheckpoint, NestedCheckpointsGiveTheSameBits) {
  expect_same_step(false, [](Sequential& m, const Tensor& x) {
    // fn runs again in backward, so it captures by value what it uses.
    auto first = std::make_shared<Sequential>(m.slice(0, 5));
    auto rest = std::make_shared<Sequential>(m.slice(5, m.size()));
    return activation_checkpoint(
        [first, rest](const Tensor& in) {
          const Tensor h =
              activation_checkpoint([first](const Tensor& a) { return (*first)(a); }, in);
          return (*rest)(h);
        },
        x);
  });
}

// fn draws on a device none of its inputs is on (dropout after a move to cpu:2): that
// generator is replayed too, because the forward notes every generator fn draws from.
TEST(ActivationCheckpoint, ReplaysTheGeneratorOfADeviceFnMovesTo) {
  auto grad_of = [](bool checkpointed) {
    manual_seed(21);
    Linear l(8, 8);
    l.to(kFloat64);
    Dropout drop(0.5);
    const Tensor x = randn({6, 8}, {.dtype = kFloat64}).requires_grad_();
    auto fn = [l, drop](const Tensor& in) mutable {
      return drop(l(in).to(Device::cpu(2))).to(Device::cpu()).tanh();
    };
    (checkpointed ? activation_checkpoint(fn, x) : fn(x)).sum().backward();
    return std::make_pair(x.grad(), l.weight.grad());
  };
  const auto plain = grad_of(false), ckpt = grad_of(true);
  expect_bitwise_equal(ckpt.first, plain.first, "x.grad");
  expect_bitwise_equal(ckpt.second, plain.second, "weight.grad");
}

// A function that draws from a generator of its own (a tensor-parallel rank's stream, standing in
// for the device's through an unnoted scope) between two draws from the device's: the recompute
// replays both, and leaves the own generator where the forward left it.
TEST(ActivationCheckpoint, ReplaysAGeneratorOfTheFunctionsOwn) {
  auto run = [](bool checkpointed) {
    manual_seed(31);
    Generator stream(99);
    const Tensor x = randn({6, 8}, {.dtype = kFloat64}).requires_grad_();
    Dropout drop(0.5);
    auto fn = [drop, &stream](const Tensor& in) mutable {
      Tensor h = drop(in);  // the device's generator
      {
        Generator& own = own_generator(stream);
        ReplayGenerators scope({{Device::cpu(), own.get_state()}}, {}, /*noted=*/false);
        h = drop(h * 2);
        own.set_state(ReplayGenerators::find(Device::cpu())->get_state());
      }
      return drop(h).tanh();  // the device's again
    };
    (checkpointed ? activation_checkpoint(fn, x) : fn(x)).sum().backward();
    return std::make_pair(x.grad(), stream.get_state());
  };
  const auto plain = run(false), ckpt = run(true);
  expect_bitwise_equal(ckpt.first, plain.first, "x.grad");
  EXPECT_EQ(ckpt.second, plain.second) << "the recompute drew from a private copy of the stream";
  EXPECT_NE(plain.second, GeneratorState({99, 0}));
}

TEST(ActivationCheckpoint, WithoutRngReplayDropoutMasksDiffer) {
  const auto plain = step(false, [](Sequential& m, const Tensor& x) { return m(x); });
  const auto fresh = step(false, [](Sequential& m, const Tensor& x) {
    return checkpoint_sequential(m, 2, x, {.preserve_rng_state = false});
  });
  EXPECT_FALSE(tandem::testing::all_close(fresh[0], plain[0], 1e-12, 1e-12))
      << "recomputed dropout masks should differ without preserve_rng_state";
}

// The first checkpointed layer gets an input that does not require grad: its weights must still
// get their gradients (PyTorch's reentrant checkpoint loses them).
TEST(ActivationCheckpoint, AnInputWithoutGradStillTrainsTheWeightsInside) {
  Sequential model = deep_model(false);
  Linear& first = model.at<Linear>(0);
  const Tensor x = randn({4, 16}, {.dtype = kFloat64});
  ASSERT_FALSE(x.requires_grad());
  manual_seed(1);  // the same dropout masks in both runs
  checkpoint_sequential(model, 2, x).sum().backward();
  ASSERT_TRUE(first.weight.grad().defined());
  const Tensor ckpt = first.weight.grad().clone();
  model.zero_grad();
  manual_seed(1);
  model(x).sum().backward();
  EXPECT_TRUE(tandem::testing::all_close(ckpt, first.weight.grad(), 0, 0));
}

// Backward from one of two outputs, then a second backward of a retained graph.
TEST(ActivationCheckpoint, PartialAndRepeatedBackward) {
  manual_seed(5);
  Linear a(6, 6), b(6, 6);
  a.to(kFloat64);
  b.to(kFloat64);
  const Tensor x = randn({3, 6}, {.dtype = kFloat64}).requires_grad_();
  auto fn = [&](const Tensor& in) { return std::vector<Tensor>{a(in).tanh(), b(in).sigmoid()}; };
  const std::vector<Tensor> outs = activation_checkpoint(fn, x);
  outs[0].sum().backward(Tensor(), /*retain_graph=*/true);
  EXPECT_FALSE(b.weight.grad().defined()) << "b is not on the path from output 0";
  const Tensor once = a.weight.grad().clone(), x_once = x.grad().clone();
  outs[0].sum().backward();  // recomputes again
  EXPECT_TRUE(tandem::testing::all_close(a.weight.grad(), once * 2.0, 0, 1e-15));
  a.zero_grad();
  x.set_grad(Tensor());
  fn(x)[0].sum().backward();
  EXPECT_TRUE(tandem::testing::all_close(a.weight.grad(), once, 0, 0));
  EXPECT_TRUE(tandem::testing::all_close(x.grad(), x_once, 0, 0));
}

// autograd::grad through a checkpoint: the gradients of the input and of a weight inside, with
// no .grad written (PyTorch's reentrant checkpoint refuses this).
TEST(ActivationCheckpoint, WorksWithAutogradGrad) {
  Sequential model = deep_model(false);
  model.eval();  // no dropout: the plain and the checkpointed passes draw nothing
  const Tensor x = randn({4, 16}, {.dtype = kFloat64}).requires_grad_();
  Linear& first = model.at<Linear>(0);
  const std::vector<Tensor> plain = autograd::grad(model(x).sum(), {x, first.weight});
  const std::vector<Tensor> ckpt =
      autograd::grad(checkpoint_sequential(model, 3, x).sum(), {x, first.weight});
  EXPECT_FALSE(first.weight.grad().defined());
  for (size_t i = 0; i < plain.size(); ++i)
    expect_bitwise_equal(ckpt[i], plain[i], "gradient " + std::to_string(i));
}

TEST(ActivationCheckpoint, EarlyStopSkipsWhatBackwardDoesNotNeed) {
  for (bool early : {true, false}) {
    int calls_after = 0;
    Linear l(4, 4);
    const Tensor x = randn({2, 4});
    const Tensor y = activation_checkpoint(
        [&](const std::vector<Tensor>& in) {
          Tensor h = l(in[0]).tanh();  // the last op that saves a tensor
          ++calls_after;  // reached in the forward; in the recompute only without early stop
          return std::vector<Tensor>{h};
        },
        {x}, {.early_stop = early})[0];
    y.sum().backward();
    EXPECT_EQ(calls_after, early ? 1 : 2);
  }
}

TEST(ActivationCheckpoint, MisuseGetsClearErrors) {
  Linear l(4, 4);
  const Tensor x = randn({3, 4});
  EXPECT_THAT(error_message<ValueError>([&] {
                activation_checkpoint(
                    [&](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{l(in[0]), Tensor()};
                    },
                    {x});
              }),
              HasSubstr("output 1 of the checkpointed function is an undefined tensor"));
  int run = 0;  // the recompute sees another batch size: not deterministic in shape
  const Tensor y = activation_checkpoint(
      [&](const Tensor& in) { return l(in.narrow(0, 0, run++ == 0 ? 3 : 2)).tanh(); }, x);
  EXPECT_THAT(error_message<AutogradError>([&] { y.sum().backward(); }),
              HasSubstr("must compute the same shapes when it runs again"));
}

// The same on cuda:0 (dropout's Philox replayed on the GPU's generator), against the plain pass on
// cuda:0 and against the CPU. Skipped, visibly, without a GPU.
TEST(ActivationCheckpointCuda, CheckpointedGradientsOnCuda0MatchThePlainPassAndTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  auto grads = [](Device d, int segments) {
    Sequential model = deep_model(true);
    model.to(d);
    manual_seed(11);
    const Tensor x = randn({8, 16}, {.dtype = kFloat64}).to(d);
    manual_seed(12);
    (segments > 0 ? checkpoint_sequential(model, segments, x) : model(x)).sum().backward();
    std::vector<Tensor> out;
    for (Tensor& p : model.parameters()) out.push_back(p.grad().to(Device::cpu()));
    return out;
  };
  const auto gpu_plain = grads(Device::cuda(0), 0), gpu_ckpt = grads(Device::cuda(0), 3);
  const auto cpu = grads(Device::cpu(), 3);
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(tandem::testing::all_close(gpu_ckpt[i], gpu_plain[i], 1e-12, 1e-12)) << i;
    EXPECT_TRUE(tandem::testing::all_close(gpu_ckpt[i], cpu[i], 1e-9, 1e-7)) << i;
  }
}

// A deep float32 MLP on its own device (so the statistics count only this): the step's peak
// above its start drops with checkpoint_sequential. Deterministic, so it can be asserted.
TEST(ActivationCheckpoint, PeakMemoryIsLower) {
  const Device dev = Device::cpu(7);
  auto peak_above_start = [&](int segments) {
    manual_seed(0);
    Sequential model;
    for (int i = 0; i < 16; ++i) {
      model.push_back(Linear(64, 64));
      model.push_back(ReLU());
    }
    model.to(dev);
    const Tensor x = randn({512, 64}).to(dev);
    const int64_t start = memory_stats(dev).allocated_bytes;
    reset_peak_memory_stats(dev);
    (segments > 0 ? checkpoint_sequential(model, segments, x) : model(x)).sum().backward();
    return memory_stats(dev).peak_allocated_bytes - start;
  };
  const int64_t plain = peak_above_start(0), ckpt = peak_above_start(4);
  EXPECT_LT(ckpt * 2, plain) << "plain " << plain << " bytes, checkpointed " << ckpt;
}

}  // namespace
}  // namespace tandem::nn
