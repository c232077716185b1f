// tests/parallel/ddp_models.h — the models and the training loop the DDP equivalence tests run:
// the same code trains on one process (the reference, full batch) and on N ranks (each its
// share), so any difference is DDP's.
#pragma once

#include <gtest/gtest.h>
#include <tandem/tandem.h>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem::testing {

struct Mlp : nn::Module {  // 784-64-32-10, small enough for quick tests, the reference shape
  nn::Linear fc1{784, 64}, fc2{64, 32}, fc3{32, 10};
  void visit(nn::Visitor& v) override {
    v("fc1", fc1);
    v("fc2", fc2);
    v("fc3", fc3);
  }
  Tensor forward(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x.flatten(1)))))); }
};

// The Mlp (same layers, so the same initial weights) with fc1-fc2 activation-checkpointed. The
// function is kept for backward's recompute, so it holds copies of the layers (the same tensors),
// not `this`: a DataParallel replica is gone by then.
struct CheckpointedMlp : Mlp {
  Tensor forward(const Tensor& x) {
    return fc3(nn::activation_checkpoint(
        [fc1 = fc1, fc2 = fc2](const Tensor& in) mutable {
          return relu(fc2(relu(fc1(in.flatten(1)))));
        },
        x));
  }
};

struct Cnn : nn::Module {  // the reference CNN, narrower: conv 1→8, conv 8→16, fc 400→32→10
  nn::Conv2d conv1{1, 8, 3}, conv2{8, 16, 3};
  nn::Linear fc1{400, 32}, fc2{32, 10};
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv1(x)), {});
    h = max_pool2d(relu(conv2(h)), {});
    return fc2(relu(fc1(h.flatten(1))));
  }
};

struct WithUnused : nn::Module {  // `spare` never takes part in the loss
  nn::Linear fc{784, 10}, spare{10, 10};
  void visit(nn::Visitor& v) override {
    v("fc", fc);
    v("spare", spare);
  }
  Tensor forward(const Tensor& x) { return fc(x.flatten(1)); }
};

struct WithAuxiliary : nn::Module {  // `side` is trained only by a backward inside backward
  nn::Linear fc{784, 10}, side{784, 4};
  void visit(nn::Visitor& v) override {
    v("fc", fc);
    v("side", side);
  }
  Tensor forward(const Tensor& x) { return fc(x.flatten(1)); }
};

/// One M per rank on cpu:0..n-1, in `dtype`, each from manual_seed(seed) if seed >= 0. Made
/// before any rank thread starts: construction draws from the global generator, which threads
/// drawing at once would interleave.
template <typename M>
std::vector<std::unique_ptr<M>> modules_on_devices(int n, DType dtype, int64_t seed = -1) {
  std::vector<std::unique_ptr<M>> out;
  for (int r = 0; r < n; ++r) {
    if (seed >= 0) manual_seed(uint64_t(seed));
    out.push_back(std::make_unique<M>());
    out.back()->to(dtype);
    out.back()->to(Device::cpu(r));
  }
  return out;
}
inline std::vector<std::unique_ptr<Mlp>> mlps_on_devices(int n, DType dtype = kFloat32,
                                                         int64_t seed = -1) {
  return modules_on_devices<Mlp>(n, dtype, seed);
}

/// One Sequential per rank from make(), on cpu:0..n-1 in `dtype`, rank r's from manual_seed(r)
/// (so a test shows that rank 0's values reach the others). Made before the rank threads start.
template <typename Make>
std::vector<nn::Sequential> sequentials_on_devices(int n, DType dtype, Make&& make) {
  std::vector<nn::Sequential> out;
  for (int r = 0; r < n; ++r) {
    manual_seed(uint64_t(r));
    out.push_back(make());
    out.back().to(dtype);
    out.back().to(Device::cpu(r));
  }
  return out;
}

/// A fixed synthetic dataset: images [n, 1, 28, 28] and labels [n], the same in every process.
inline std::pair<Tensor, Tensor> synthetic_data(int64_t n) {
  manual_seed(1234);
  Tensor x = randn({n, 1, 28, 28});
  std::vector<int64_t> labels(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = (i * 7 + i / 3) % 10;
  return {x, from_vector(labels, {n})};
}

/// The optimizers the equivalence tests train with: SGD with momentum 0.9, or Adam.
inline std::unique_ptr<optim::Optimizer> make_optimizer(nn::Module& m, bool adam) {
  if (adam) return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
  return std::make_unique<optim::SGD>(m.parameters(),
                                      optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

/// Flat parameters that agree to 1e-10 absolute + 1e-8 relative; the worst difference otherwise.
inline void expect_same_params(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - b[i]);
    worst = std::max(worst, err);
    if (err > 1e-10 + 1e-8 * std::abs(b[i])) ++bad;
  }
  EXPECT_EQ(bad, 0u) << "of " << a.size() << " parameters; worst |difference| " << worst;
}

/// All parameters, flattened and concatenated, as doubles (what the tests compare).
inline std::vector<double> flat_params(nn::Module& m) {
  std::vector<double> out;
  for (Tensor& p : m.parameters()) {
    const auto v = p.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline void write_doubles(const std::string& path, const std::vector<double>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(double)));
}

inline std::vector<double> read_doubles(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<double> v;
  double d;
  while (in.read(reinterpret_cast<char*>(&d), sizeof(d))) v.push_back(d);
  return v;
}

}  // namespace tandem::testing
