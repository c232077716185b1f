// tools/train/models.h — the three models `tandem train --model` offers, written as a user would
// write them (design 2.3): plain nn::Module structs whose visit() names their layers, with
// PyTorch's parameter names ("conv1.weight", "bn1.running_mean") so checkpoints load in torch.
// Each takes the image size, so a user directory of other-than-28×28 images still fits.
#pragma once

#include <tandem/nn/activation_checkpoint.h>
#include <tandem/nn/nn.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem::tools {

/// A model that maps images [N, 1, H, W] to logits [N, 10].
struct Classifier : nn::Module {
  virtual Tensor forward(const Tensor& x) = 0;
  /// --activation-checkpointing: each block keeps only its input in forward and is recomputed in
  /// backward (nn/activation_checkpoint.h); the head, last, is not.
  bool activation_checkpointing = false;
  /// The layers in forward's order as a Sequential (copies sharing the tensors; a Flatten where
  /// forward flattens), for --pipeline. ValueError for a model that cannot be cut into stages.
  virtual nn::Sequential as_sequential() = 0;

 protected:
  /// fn(x), checkpointed when asked. fn runs again in backward, after a DataParallel replica is
  /// gone, so it must hold copies of its layers (the same tensors), not `this`.
  template <typename Fn>
  Tensor block(Fn fn, const Tensor& x) {
    return activation_checkpointing ? nn::activation_checkpoint(std::move(fn), x) : fn(x);
  }
};

/// mlp: 784-512-256-10 with ReLU (for 28×28 inputs).
struct Mlp : Classifier {
  Mlp(int64_t rows, int64_t cols);
  nn::Linear fc1, fc2, fc3;
  Tensor forward(const Tensor& x) override;
  nn::Sequential as_sequential() override;
  void visit(nn::Visitor& v) override;
};

/// cnn: the reference CNN (Keras mnist_cnn without dropout): conv 1→32 3×3, ReLU, max-pool 2,
/// conv 32→64 3×3, ReLU, max-pool 2, flatten, fc 1600→128, ReLU, fc 128→10.
struct Cnn : Classifier {
  Cnn(int64_t rows, int64_t cols);
  nn::Conv2d conv1, conv2;
  nn::Linear fc1, fc2;
  Tensor forward(const Tensor& x) override;
  nn::Sequential as_sequential() override;
  void visit(nn::Visitor& v) override;
};

/// cnn-bn, the default: two VGG-style blocks of two padded 3×3 convs with batch norm, each block
/// ending in a max-pool (28 → 14 → 7), then fc 3136→128 with batch norm and dropout 0.3, fc →10.
struct CnnBn : Classifier {
  CnnBn(int64_t rows, int64_t cols);
  nn::Conv2d conv1, conv2, conv3, conv4;
  nn::BatchNorm2d bn1, bn2, bn3, bn4;
  nn::Linear fc1;
  nn::BatchNorm1d bn5;
  nn::Dropout dropout;
  nn::Linear fc2;
  Tensor forward(const Tensor& x) override;
  nn::Sequential as_sequential() override;
  void visit(nn::Visitor& v) override;
};

/// The model called `name` ("mlp", "cnn", "cnn-bn") for rows × cols images; ValueError naming
/// the choices otherwise, or when the images are too small for the model's pooling.
std::unique_ptr<Classifier> make_model(const std::string& name, int64_t rows, int64_t cols);

/// The forward pass of `model` (one of make_model's, on devices[0]) through
/// parallel::DataParallel over `devices`. The wrapper holds a shallow copy of the model, whose
/// tensors are the model's own: the optimizer over model.parameters() trains it, and a checkpoint
/// of `model` is the trained one. The copy follows the model's train/eval mode at each call.
std::function<Tensor(const Tensor&)> data_parallel_forward(Classifier& model,
                                                           const std::vector<Device>& devices);

/// --pipeline: `model` cut into one stage per device (balanced by parameter count) and wrapped in
/// a parallel::Pipeline. The model's own tensors move to the stages' devices: an optimizer over
/// model.parameters() made afterwards trains the pipeline, and a checkpoint of `model` is the
/// trained one. ValueError for a model without as_sequential (cnn-bn).
std::unique_ptr<parallel::Pipeline> make_pipeline(Classifier& model,
                                                  const std::vector<Device>& devices,
                                                  parallel::PipelineOptions options);

}  // namespace tandem::tools
