// nn/resnet.h — ResNet-18 and ResNet-34 (He et al., 2015) as torchvision builds them, with its
// parameter names, so a state dict loads into torchvision's model:
//
//   "conv1", "bn1", "relu"   the stem: 7×7 stride 2 then "maxpool" 3×3 stride 2 (ImageNet), or one
//                            3×3 stride 1 without max-pool (`small_images`: 32×32, as CIFAR
//                            recipes change it; the parameter names stay torchvision's)
//   "layer1.0" … "layer4.1"  BasicBlocks; the first of layers 2–4 halves the size and doubles the
//                            width, with a 1×1 convolution and batch norm on its shortcut
//                            ("downsample.0", "downsample.1")
//   "avgpool", "fc"          mean over the image, then Linear(8·width, num_classes)
//
// Flat, like nn::gpt, so that a pipeline can split it by position. Initialised as torchvision's:
// convolutions from kaiming_normal_(fan_out, relu), batch norms at weight 1 and bias 0, fc as
// PyTorch's Linear.
#pragma once

#include <tandem/nn/batchnorm.h>
#include <tandem/nn/container.h>
#include <tandem/nn/conv.h>
#include <optional>
#include <vector>

namespace tandem::nn {

struct ResNetConfig {
  std::vector<int64_t> blocks = {2, 2, 2, 2};  // per stage: ResNet-18; {3, 4, 6, 3}: ResNet-34
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  int64_t width = 64;         // channels of the first stage (torchvision: 64); each stage doubles
  bool small_images = false;  // the 3×3 stride-1 stem without max-pool, for 32×32 images
  TensorOptions tensor = {};
};

/// x [N, C, H, W] -> relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), where the shortcut is x,
/// or bn(conv1×1(x)) when the block changes the size or the width.
struct BasicBlock : Module {
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride, const TensorOptions& tensor);

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  std::optional<Conv2d> downsample_conv;     // "downsample.0"
  std::optional<BatchNorm2d> downsample_bn;  // "downsample.1"

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  void visit(Visitor& v) override;
};

/// x [N, C, H, W] -> the mean over H and W, [N, C]: torchvision's AdaptiveAvgPool2d((1, 1))
/// followed by its flatten.
struct GlobalAvgPool2d : Module {
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
};

Sequential resnet(const ResNetConfig& config);

/// ResNet-18; `small_images` for 32×32 inputs (CIFAR-10: resnet18({.num_classes = 10,
/// .small_images = true})).
inline Sequential resnet18(ResNetConfig config = {}) {
  config.blocks = {2, 2, 2, 2};
  return resnet(config);
}

}  // namespace tandem::nn
