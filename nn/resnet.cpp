// nn/resnet.cpp — torchvision's ResNet with BasicBlocks: the blocks, the stem and the init.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/nn/activation.h>
#include <tandem/nn/init.h>
#include <tandem/nn/linear.h>
#include <tandem/nn/pooling.h>
#include <tandem/nn/resnet.h>

namespace tandem::nn {

namespace {

Conv2d conv3x3(int64_t in, int64_t out, int64_t stride, const TensorOptions& tensor) {
  return Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false, .tensor = tensor});
}

BatchNorm2d bn(int64_t channels, const TensorOptions& tensor) {
  return BatchNorm2d(channels, {.tensor = tensor});
}

// torchvision's: N(0, √(2 / fan_out)) for every convolution's weight.
void init_conv(Conv2d& c) {
  NoGradGuard no_grad;
  init::kaiming_normal_(c.weight, 0, init::FanMode::FanOut);
}

}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t channels, int64_t stride, const TensorOptions& tensor)
    : conv1(conv3x3(in, channels, stride, tensor)),
      bn1(bn(channels, tensor)),
      conv2(conv3x3(channels, channels, 1, tensor)),
      bn2(bn(channels, tensor)) {
  if (stride != 1 || in != channels) {
    downsample_conv.emplace(in, channels, 1,
                            Conv2dOptions{.stride = stride, .bias = false, .tensor = tensor});
    downsample_bn.emplace(bn(channels, tensor));
    init_conv(*downsample_conv);
  }
  init_conv(conv1);
  init_conv(conv2);
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor h = bn2(conv2(relu(bn1(conv1(x)))));
  const Tensor shortcut = downsample_conv ? (*downsample_bn)((*downsample_conv)(x)) : x;
  return relu(h + shortcut);
}

void BasicBlock::visit(Visitor& v) {
  v("conv1", conv1);
  v("bn1", bn1);
  v("conv2", conv2);
  v("bn2", bn2);
  if (downsample_conv) {
    v("downsample.0", *downsample_conv);
    v("downsample.1", *downsample_bn);
  }
}

Tensor GlobalAvgPool2d::forward(const Tensor& x) const {
  TD_CHECK_SHAPE(x.dim() == 4, "GlobalAvgPool2d: expected an input [N, C, H, W], but got ",
                 describe(x));
  return x.mean({2, 3});
}

Sequential resnet(const ResNetConfig& c) {
  TD_CHECK_VALUE(c.blocks.size() == 4 && c.width >= 1 && c.num_classes >= 1 && c.in_channels >= 1,
                 "resnet: expected 4 stages of blocks, width, num_classes and in_channels >= 1");
  for (int64_t n : c.blocks) TD_CHECK_VALUE(n >= 1, "resnet: every stage needs a block");
  Sequential model;
  Conv2d stem = c.small_images
                    ? conv3x3(c.in_channels, c.width, 1, c.tensor)
                    : Conv2d(c.in_channels, c.width, 7,
                             {.stride = 2, .padding = 3, .bias = false, .tensor = c.tensor});
  init_conv(stem);
  model.push_back("conv1", std::move(stem));
  model.push_back("bn1", bn(c.width, c.tensor));
  model.push_back("relu", ReLU());
  if (!c.small_images) model.push_back("maxpool", MaxPool2d(3, {.stride = 2, .padding = 1}));
  int64_t in = c.width;
  for (size_t stage = 0; stage < 4; ++stage) {
    const int64_t channels = c.width << stage;
    for (int64_t b = 0; b < c.blocks[stage]; ++b) {
      const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
      model.push_back(str("layer", stage + 1, ".", b), BasicBlock(in, channels, stride, c.tensor));
      in = channels;
    }
  }
  model.push_back("avgpool", GlobalAvgPool2d());
  model.push_back("fc", Linear(in, c.num_classes, {.tensor = c.tensor}));
  return model;
}

}  // namespace tandem::nn
