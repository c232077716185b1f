// Optimizers against the update rules of torch.optim written out in double precision, their state
// dicts, the LR schedules and gradient clipping.
#include <cmath>

#include <tandem/core/kernels/kernels.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

namespace {

const std::vector<std::vector<double>> kGrads = {
    {0.5, -1.0, 2.0}, {-0.3, 0.2, 1.0}, {1.5, 0.0, -0.5}};

Tensor param() { return tensor({1.0, -2.0, 0.5}, {.dtype = kFloat64}).requires_grad_(); }

// Runs `opt` for three steps with the fixed gradients.
template <typename Opt>
std::vector<double> run(Opt& opt, Tensor& p) {
  for (const auto& g : kGrads) {
    p.set_grad(from_vector(g, {3}));
    opt.step();
  }
  return values(p);
}

std::vector<double> reference_sgd(double lr, double mu, double damp, double wd, bool nesterov) {
  std::vector<double> p{1.0, -2.0, 0.5}, b(3);
  for (size_t s = 0; s < kGrads.size(); ++s)
    for (size_t i = 0; i < 3; ++i) {
      double g = kGrads[s][i] + wd * p[i];
      b[i] = s == 0 ? g : mu * b[i] + (1 - damp) * g;
      p[i] -= lr * (nesterov ? g + mu * b[i] : (mu != 0 ? b[i] : g));
    }
  return p;
}

std::vector<double> reference_adam(double lr, double wd, bool decoupled) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> p{1.0, -2.0, 0.5}, m(3), v(3);
  for (size_t s = 0; s < kGrads.size(); ++s)
    for (size_t i = 0; i < 3; ++i) {
      double g = kGrads[s][i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double t = double(s + 1);
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] /
              (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
    }
  return p;
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
}

}  // namespace

TEST(SGD, MatchesTorchUpdateRules) {
  for (auto [mu, damp, wd, nesterov] : std::vector<std::tuple<double, double, double, bool>>{
           {0, 0, 0, false}, {0.9, 0, 0, false}, {0.9, 0.1, 0.01, false}, {0.9, 0, 1e-3, true}}) {
    Tensor p = param();
    optim::SGD opt(
        {p},
        {.lr = 0.1, .momentum = mu, .dampening = damp, .weight_decay = wd, .nesterov = nesterov});
    expect_near(run(opt, p), reference_sgd(0.1, mu, damp, wd, nesterov));
  }
  EXPECT_THROW(optim::SGD({param()}, {.lr = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(optim::SGD({}, {}), ValueError);
}

TEST(Adam, MatchesTorchUpdateRulesWithAndWithoutDecoupledDecay) {
  Tensor p = param();
  optim::Adam adam({p}, {.lr = 0.01, .weight_decay = 0.1});
  expect_near(run(adam, p), reference_adam(0.01, 0.1, false));
  Tensor q = param();
  optim::AdamW adamw({q}, {.lr = 0.01, .weight_decay = 0.1});
  expect_near(run(adamw, q), reference_adam(0.01, 0.1, true));
}

TEST(Optimizer, StateDictRestoresTheExactTrajectory) {
  Tensor p = param();
  optim::Adam a({p}, {.lr = 0.01});
  p.set_grad(from_vector(kGrads[0], {3}));
  a.step();
  const optim::OptimizerState saved = a.state_dict();
  EXPECT_THAT(saved.param_groups_json, ::testing::HasSubstr("\"betas\":[0.9,0.999]"));
  Tensor q = p.detach().clone().requires_grad_();
  optim::Adam b({q}, {.lr = 0.5});  // different lr: the state dict brings 0.01 back
  b.load_state_dict(saved);
  EXPECT_DOUBLE_EQ(b.lr(0), 0.01);
  for (size_t s = 1; s < kGrads.size(); ++s) {
    p.set_grad(from_vector(kGrads[s], {3}));
    q.set_grad(from_vector(kGrads[s], {3}));
    a.step();
    b.step();
  }
  EXPECT_EQ(values(p), values(q));
  optim::OptimizerState wrong = saved;
  wrong.tensors[1].second = zeros({4}, {.dtype = kFloat64});
  EXPECT_THROW(b.load_state_dict(wrong), ValueError);
}

TEST(Optimizer, ParamGroupsHaveTheirOwnOptions) {
  Tensor a = param(), b = param();
  optim::SGD opt(std::vector<optim::SGD::Group>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.0}}});
  a.set_grad(ones({3}, {.dtype = kFloat64}));
  b.set_grad(ones({3}, {.dtype = kFloat64}));
  opt.step();
  EXPECT_NE(values(a), values(param()));
  EXPECT_EQ(values(b), values(param()));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(LRScheduler, StepCosineAndWarmup) {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) {
    step.step();
    lrs.push_back(opt.lr(0));
  }
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 0.5, 0.5, 0.25, 0.25}));
  optim::SGD opt2({param()}, {.lr = 1.0});
  optim::CosineAnnealingLR cos(opt2, 10, 0.1);
  cos.set_step(5);
  EXPECT_NEAR(opt2.lr(0), 0.55, 1e-12);
  cos.set_step(10);
  EXPECT_NEAR(opt2.lr(0), 0.1, 1e-12);
  optim::SGD opt3({param()}, {.lr = 2.0});
  optim::LinearWarmup warm(opt3, 4, 0.25, 8);
  EXPECT_NEAR(opt3.lr(0), 0.5, 1e-12);  // the starting lr is set at construction, as PyTorch's
  warm.set_step(0);
  EXPECT_NEAR(opt3.lr(0), 0.5, 1e-12);
  warm.set_step(2);
  EXPECT_NEAR(opt3.lr(0), 1.25, 1e-12);
  warm.set_step(4);
  EXPECT_NEAR(opt3.lr(0), 2.0, 1e-12);
  warm.set_step(6);
  EXPECT_NEAR(opt3.lr(0), 1.0, 1e-12);
}

// nanoGPT's get_lr(it), written out: warm-up, cosine to min_lr at decay_steps, then min_lr.
TEST(LRScheduler, WarmupCosineIsNanoGPTsGetLr) {
  optim::SGD opt({param()}, {.lr = 1e-3});
  optim::WarmupCosineLR sched(opt, 10, 100, 1e-4);
  const auto get_lr = [](int64_t it) {
    if (it < 10) return 1e-3 * double(it + 1) / 11.0;
    if (it > 100) return 1e-4;
    const double ratio = double(it - 10) / 90.0;
    return 1e-4 + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (1e-3 - 1e-4);
  };
  EXPECT_NEAR(opt.lr(0), get_lr(0), 1e-15);  // set at construction
  for (int64_t it = 1; it <= 120; ++it) {
    sched.step();
    EXPECT_NEAR(opt.lr(0), get_lr(it), 1e-15) << "iteration " << it;
  }
  sched.set_step(55);
  EXPECT_NEAR(opt.lr(0), 0.5 * (1e-3 + 1e-4), 1e-15);  // half way down the cosine
  EXPECT_THAT(error_message<ValueError>([&] { optim::WarmupCosineLR(opt, 10, 10, 0); }),
              HasSubstr("warmup_steps < decay_steps"));
}

TEST(ClipGradNorm, ScalesToTheMaximumNorm) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({3, 0}));
  b.set_grad(tensor({4}));
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(values(a.grad())[0], 0.6, 1e-5);
  EXPECT_NEAR(values(b.grad())[0], 0.8, 1e-5);
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0), 1.0, 1e-5);  // under the limit: unchanged
}

// The squares are summed per gradient on its device and read to the host once per device, then
// added in parameter order: the same double as reading each one, however the devices interleave.
TEST(ClipGradNorm, AddsTheSquaresInParameterOrderAcrossDevices) {
  manual_seed(2);
  const std::vector<Device> devices = {Device("cpu:1"), Device("cpu:2"), Device("cpu:1"),
                                       Device("cpu:3"), Device("cpu:2")};
  std::vector<Tensor> params;
  double want = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    Tensor p = zeros({int64_t(7 + i)}, {.dtype = kFloat64, .device = devices[i]}).requires_grad_();
    p.set_grad(randn({int64_t(7 + i)}, {.dtype = kFloat64}).to(devices[i]) * double(1 + 3 * i));
    Tensor alone = empty({1}, {.dtype = kFloat64, .device = devices[i]});
    const Tensor g = p.grad();
    kernels(devices[i]).square_sums({&g, 1}, alone);
    want += alone.item();  // each Σ g² read alone, added in order
    params.push_back(p);
  }
  EXPECT_EQ(optim::clip_grad_norm_(params, 1e9), std::sqrt(want));
}
