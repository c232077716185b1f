// tools/train/models.cpp — forward passes and visit() of the `tandem train` models. The feature
// sizes feeding the first fully connected layer follow from the image size: unpadded 3×3 convs
// take 2 pixels off each side pair, 2×2 max-pools halve (rounding down, as PyTorch).
#include <tandem/core/check.h>
#include <tandem/parallel/data_parallel/data_parallel.h>

#include "models.h"

namespace tandem::tools {
namespace {

constexpr int64_t kClasses = 10;
const Pool2dParams kPool2{};  // 2×2 window, stride 2 (the defaults)

// Spatial size after the reference CNN's conv(3) → pool(2) → conv(3) → pool(2).
int64_t cnn_side(int64_t n) { return ((n - 2) / 2 - 2) / 2; }

}  // namespace

Mlp::Mlp(int64_t rows, int64_t cols) : fc1(rows * cols, 512), fc2(512, 256), fc3(256, kClasses) {}

Tensor Mlp::forward(const Tensor& x) {
  const Tensor h = block(
      [fc1 = fc1, fc2 = fc2](const Tensor& in) mutable {
        return relu(fc2(relu(fc1(in.flatten(1)))));  // [N, 256]
      },
      x);
  return fc3(h);
}

nn::Sequential Mlp::as_sequential() {
  return nn::Sequential(nn::Flatten(), fc1, nn::ReLU(), fc2, nn::ReLU(), fc3);
}

void Mlp::visit(nn::Visitor& v) {
  v("fc1", fc1);
  v("fc2", fc2);
  v("fc3", fc3);
}

Cnn::Cnn(int64_t rows, int64_t cols)
    : conv1(1, 32, 3),
      conv2(32, 64, 3),
      fc1(64 * cnn_side(rows) * cnn_side(cols), 128),
      fc2(128, kClasses) {}

Tensor Cnn::forward(const Tensor& x) {
  Tensor h = block(
      [conv1 = conv1, conv2 = conv2](const Tensor& in) mutable {
        // relu_max_pool2d: max_pool2d(relu(·)) in one pass (as_sequential keeps them apart)
        const Tensor a = relu_max_pool2d(conv1(in), kPool2);  // [N, 32, 13, 13] for 28×28
        return relu_max_pool2d(conv2(a), kPool2);             // [N, 64, 5, 5]
      },
      x);
  h = relu(fc1(h.flatten(1)));  // [N, 128]
  return fc2(h);
}

nn::Sequential Cnn::as_sequential() {
  return nn::Sequential(conv1, nn::ReLU(), nn::MaxPool2d(2), conv2, nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), fc1, nn::ReLU(), fc2);
}

void Cnn::visit(nn::Visitor& v) {
  v("conv1", conv1);
  v("conv2", conv2);
  v("fc1", fc1);
  v("fc2", fc2);
}

// Convs before batch norm carry no bias: BN's shift makes it redundant (as in ResNet/VGG-BN).
CnnBn::CnnBn(int64_t rows, int64_t cols)
    : conv1(1, 32, 3, {.padding = 1, .bias = false}),
      conv2(32, 32, 3, {.padding = 1, .bias = false}),
      conv3(32, 64, 3, {.padding = 1, .bias = false}),
      conv4(64, 64, 3, {.padding = 1, .bias = false}),
      bn1(32),
      bn2(32),
      bn3(64),
      bn4(64),
      fc1(64 * (rows / 4) * (cols / 4), 128, {.bias = false}),
      bn5(128),
      dropout(0.3),
      fc2(128, kClasses) {}

Tensor CnnBn::forward(const Tensor& x) {
  Tensor h = block(
      [conv1 = conv1, bn1 = bn1, conv2 = conv2, bn2 = bn2](const Tensor& in) mutable {
        const Tensor a = relu(bn1(conv1(in)));          // [N, 32, 28, 28]
        return relu_max_pool2d(bn2(conv2(a)), kPool2);  // [N, 32, 14, 14]
      },
      x);
  h = block(
      [conv3 = conv3, bn3 = bn3, conv4 = conv4, bn4 = bn4](const Tensor& in) mutable {
        const Tensor a = relu(bn3(conv3(in)));          // [N, 64, 14, 14]
        return relu_max_pool2d(bn4(conv4(a)), kPool2);  // [N, 64, 7, 7]
      },
      h);
  h = dropout(relu(bn5(fc1(h.flatten(1)))));  // [N, 128]
  return fc2(h);
}

nn::Sequential CnnBn::as_sequential() {
  detail::fail<ValueError>(
      "train: --pipeline needs --model mlp or cnn: cnn-bn's batch norm would normalise each "
      "micro-batch on its own, which trains a different model");
}

void CnnBn::visit(nn::Visitor& v) {
  v("conv1", conv1);
  v("bn1", bn1);
  v("conv2", conv2);
  v("bn2", bn2);
  v("conv3", conv3);
  v("bn3", bn3);
  v("conv4", conv4);
  v("bn4", bn4);
  v("fc1", fc1);
  v("bn5", bn5);
  v("dropout", dropout);
  v("fc2", fc2);
}

namespace {

template <typename M>
std::function<Tensor(const Tensor&)> wrap(M& model, const std::vector<Device>& devices) {
  // M's copy constructor copies tensor handles, not data: the wrapper's module is `model`.
  auto dp = std::make_shared<parallel::DataParallel<M>>(
      model, parallel::DataParallelOptions{.device_ids = devices});
  return [dp, &model](const Tensor& x) {
    dp->module().train(model.is_training());
    return dp->forward(x);
  };
}

}  // namespace

std::function<Tensor(const Tensor&)> data_parallel_forward(Classifier& model,
                                                           const std::vector<Device>& devices) {
  if (auto* m = dynamic_cast<Mlp*>(&model)) return wrap(*m, devices);
  if (auto* m = dynamic_cast<Cnn*>(&model)) return wrap(*m, devices);
  if (auto* m = dynamic_cast<CnnBn*>(&model)) return wrap(*m, devices);
  detail::fail<ValueError>("train: --data-parallel: not one of the models of make_model");
}

std::unique_ptr<parallel::Pipeline> make_pipeline(Classifier& model,
                                                  const std::vector<Device>& devices,
                                                  parallel::PipelineOptions options) {
  nn::Sequential layers = model.as_sequential();
  std::vector<parallel::Stage> stages = parallel::split(layers, devices);
  // split() moved the Sequential's copies of the layers; the model's members still hold the
  // tensors from before. Both visit the same tensors in the same order: point the model's at the
  // moved ones, so the model (its optimizer, its checkpoints) and the stages share them again.
  std::vector<Tensor*> mine, moved;
  nn::for_each_tensor(model, [&](const std::string&, Tensor& t, bool) { mine.push_back(&t); });
  nn::for_each_tensor(layers, [&](const std::string&, Tensor& t, bool) { moved.push_back(&t); });
  TD_CHECK(mine.size() == moved.size(), "make_pipeline: the model has ", mine.size(),
           " tensors but its as_sequential() ", moved.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    TD_CHECK(mine[i]->shape() == moved[i]->shape(), "make_pipeline: tensor ", i, " is ",
             mine[i]->shape(), " in the model but ", moved[i]->shape(), " in as_sequential()");
    *mine[i] = *moved[i];
  }
  return std::make_unique<parallel::Pipeline>(std::move(stages), options);
}

std::unique_ptr<Classifier> make_model(const std::string& name, int64_t rows, int64_t cols) {
  if (name == "mlp") return std::make_unique<Mlp>(rows, cols);
  if (name == "cnn") {
    TD_CHECK_VALUE(cnn_side(rows) >= 1 && cnn_side(cols) >= 1,
                   "train: --model cnn needs images "
                   "of at least 10×10 pixels, but the dataset's are ",
                   rows, "×", cols);
    return std::make_unique<Cnn>(rows, cols);
  }
  if (name == "cnn-bn") {
    TD_CHECK_VALUE(rows >= 4 && cols >= 4,
                   "train: --model cnn-bn needs images of at least 4×4 "
                   "pixels, but the dataset's are ",
                   rows, "×", cols);
    return std::make_unique<CnnBn>(rows, cols);
  }
  detail::fail<ValueError>("train: unknown model \"", name, "\" (choose mlp, cnn or cnn-bn)");
}

}  // namespace tandem::tools
