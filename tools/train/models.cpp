// tools/train/models.cpp — the models. The feature sizes feeding the first fully connected layer
// follow from the image size: unpadded 3×3 convs take 2 pixels off each side pair, 2×2 max-pools
// halve (rounding down, as PyTorch).
#include <tandem/core/check.h>

#include <tandem/parallel/tp/gpt.h>

#include "models.h"

namespace tandem::tools {
namespace {

constexpr int64_t kClasses = 10;

// Spatial size after the reference CNN's conv(3) → pool(2) → conv(3) → pool(2).
int64_t cnn_side(int64_t n) { return ((n - 2) / 2 - 2) / 2; }

// A block, run checkpointed when asked (the names stay the same either way).
nn::AnyModule block(nn::Sequential layers, bool checkpointed) {
  if (checkpointed) return nn::Checkpointed(std::move(layers));
  return layers;
}

// fc → ReLU.
nn::Sequential dense(int64_t in, int64_t out) {
  return nn::Sequential{{"fc", nn::Linear(in, out)}, {"relu", nn::ReLU()}};
}

nn::Sequential mlp(int64_t rows, int64_t cols, bool checkpointed) {
  return nn::Sequential{{"flatten", nn::Flatten()},
                        {"layer1", block(dense(rows * cols, 512), checkpointed)},
                        {"layer2", block(dense(512, 256), checkpointed)},
                        {"head", nn::Linear(256, kClasses)}};
}

// conv → ReLU + 2×2 max-pool in one pass (relu_max_pool2d).
nn::Sequential conv_pool(int64_t in, int64_t out) {
  return nn::Sequential{{"conv", nn::Conv2d(in, out, 3)}, {"relu_pool", nn::ReLUMaxPool2d(2)}};
}

nn::Sequential cnn(int64_t rows, int64_t cols, bool checkpointed) {
  return nn::Sequential{{"block1", block(conv_pool(1, 32), checkpointed)},   // [N, 32, 13, 13]
                        {"block2", block(conv_pool(32, 64), checkpointed)},  // [N, 64, 5, 5]
                        {"flatten", nn::Flatten()},
                        {"fc1", nn::Linear(64 * cnn_side(rows) * cnn_side(cols), 128)},
                        {"relu", nn::ReLU()},
                        {"fc2", nn::Linear(128, kClasses)}};
}

// Two padded 3×3 convs with batch norm, ending in a max-pool. Convs before batch norm carry no
// bias: BN's shift makes it redundant (as in ResNet/VGG-BN).
nn::Sequential vgg_block(int64_t in, int64_t out) {
  const nn::Conv2dOptions padded{.padding = 1, .bias = false};
  return nn::Sequential{{"conv1", nn::Conv2d(in, out, 3, padded)},
                        {"bn1", nn::BatchNorm2d(out)},
                        {"relu1", nn::ReLU()},
                        {"conv2", nn::Conv2d(out, out, 3, padded)},
                        {"bn2", nn::BatchNorm2d(out)},
                        {"relu_pool", nn::ReLUMaxPool2d(2)}};
}

nn::Sequential cnn_bn(int64_t rows, int64_t cols, bool checkpointed) {
  return nn::Sequential{{"block1", block(vgg_block(1, 32), checkpointed)},   // [N, 32, 14, 14]
                        {"block2", block(vgg_block(32, 64), checkpointed)},  // [N, 64, 7, 7]
                        {"flatten", nn::Flatten()},
                        {"fc1", nn::Linear(64 * (rows / 4) * (cols / 4), 128, {.bias = false})},
                        {"bn", nn::BatchNorm1d(128)},
                        {"relu", nn::ReLU()},
                        {"dropout", nn::Dropout(0.3)},
                        {"fc2", nn::Linear(128, kClasses)}};
}

}  // namespace

nn::Sequential make_model(const std::string& name, int64_t rows, int64_t cols, bool checkpointed) {
  if (name == "mlp") return mlp(rows, cols, checkpointed);
  if (name == "cnn") {
    TD_CHECK_VALUE(cnn_side(rows) >= 1 && cnn_side(cols) >= 1,
                   "train: --model cnn needs images of at least 10×10 pixels, but the dataset's "
                   "are ",
                   rows, "×", cols);
    return cnn(rows, cols, checkpointed);
  }
  if (name == "cnn-bn") {
    TD_CHECK_VALUE(rows >= 4 && cols >= 4,
                   "train: --model cnn-bn needs images of at least 4×4 pixels, but the dataset's "
                   "are ",
                   rows, "×", cols);
    return cnn_bn(rows, cols, checkpointed);
  }
  detail::fail<ValueError>("train: unknown model \"", name, "\" (choose mlp, cnn or cnn-bn)");
}

parallel::tp::Plan tensor_parallel_plan(const std::string& name) {
  using parallel::tp::Cut;
  if (name == "mlp")
    return {{.name = "layer1.fc", .cut = Cut::Column}, {.name = "layer2.fc", .cut = Cut::Row}};
  if (name == "cnn") return {{.name = "fc1", .cut = Cut::Column}, {.name = "fc2", .cut = Cut::Row}};
  detail::fail<ValueError>("train: --tp has no plan for --model ", name,
                           " (plans: mlp, cnn and gpt)");
}

int64_t padded_vocab(const GptOptions& g, int64_t characters, int64_t tp) {
  return parallel::tp::padded_vocab_size(characters, tp, g.vocab_multiple);
}

nn::GPTConfig gpt_config(const GptOptions& g, int64_t characters, int64_t rows) {
  return {
      .block_size = g.block_size,
      .vocab_size = characters,
      .padded_vocab_size = rows,
      .n_layer = g.n_layer,
      .n_head = g.n_head,
      .n_embd = g.n_embd,
      .dropout = g.dropout,
      .bias = g.bias,
      .moe_every = g.n_experts > 0 ? g.moe_every : 0,
      .moe = {.n_experts = std::max<int64_t>(g.n_experts, 1),
              .top_k = std::min(g.top_k, std::max<int64_t>(g.n_experts, 1)),
              .capacity_factor =
                  g.capacity_factor > 0 ? std::optional<double>(g.capacity_factor) : std::nullopt,
              .ffn_hidden_size = g.moe_ffn_hidden_size}};
}

nn::Sequential make_gpt(const GptOptions& g, int64_t characters, int64_t rows, bool checkpointed,
                        Device where) {
  nn::GPTConfig config = gpt_config(g, characters, rows);
  config.tensor.device = where;
  nn::Sequential model = nn::gpt(config);
  if (!checkpointed) return model;
  // Each block recomputed in backward: the same modules (so the same weights) under the same
  // names, each wrapped.
  nn::Sequential wrapped;
  for (const nn::NamedModule& m : model.items()) {
    const bool is_block = dynamic_cast<const nn::Block*>(&m.module.get()) != nullptr;
    wrapped.push_back(
        m.name, is_block ? nn::AnyModule(nn::Checkpointed(m.module.shared())) : m.module.shared());
  }
  return wrapped;
}

}  // namespace tandem::tools
