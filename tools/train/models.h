// tools/train/models.h — the three models `tandem train --model` offers, each written once, as a
// user would write it: an nn::Sequential with named children, blocks as nested Sequentials. The
// names are the parameters' names in every mode and in the checkpoints ("block1.conv.weight",
// "block2.bn1.running_mean"), which PyTorch loads as they are. Every mode runs this same model:
// --data-parallel replicates it, --pipeline cuts it into stages (parallel::split), --ddp wraps it;
// --activation-checkpointing wraps each block in nn::Checkpointed, which keeps the names.
// Each takes the image size, so a user directory of other-than-28×28 images still fits.
#pragma once

#include <tandem/parallel/tp/plan.h>

#include <tandem/nn/nn.h>
#include <cstdint>
#include <string>

#include "../commands.h"

namespace tandem::tools {

/// The model called `name` for [N, 1, rows, cols] images, giving logits [N, 10]:
///   mlp:    784-512-256-10 with ReLU (for 28×28 inputs);
///   cnn:    the reference CNN (Keras mnist_cnn without dropout): two blocks of a 3×3 conv
///           (1→32, 32→64) and ReLU + 2×2 max-pool, then fc 1600→128, ReLU, fc 128→10;
///   cnn-bn: the default: two VGG-style blocks of two padded 3×3 convs with batch norm, each
///           ending in a max-pool (28 → 14 → 7), then fc 3136→128 with batch norm and dropout
///           0.3, fc →10.
/// With `checkpointed`, each block recomputes its activations in backward. ValueError naming the
/// choices for an unknown name, or when the images are too small for the model's pooling.
nn::Sequential make_model(const std::string& name, int64_t rows, int64_t cols, bool checkpointed);

/// --tp: the tensor-parallel plan of an image model (parallel/tp/plan.h), a column layer then a
/// row layer, as Megatron cuts an MLP: mlp's layer1.fc and layer2.fc (its head replicated),
/// cnn's fc1 and fc2 (the convolutions replicated). Every rank ends with the whole logits.
/// ValueError for cnn-bn (its batch norm normalises the column layer's features).
parallel::tp::Plan tensor_parallel_plan(const std::string& name);

/// --model gpt: the GPT the flags describe, for a vocabulary of `characters` tokens in a table of
/// `rows` (the padding never read: nn::GPTConfig::padded_vocab_size), initialised as nanoGPT's
/// unpadded model; with `checkpointed`, each block recomputes its activations in backward.
nn::GPTConfig gpt_config(const GptOptions& gpt, int64_t characters, int64_t rows);
/// The table's rows for `characters` characters: rounded up to a multiple of --vocab-multiple
/// and of the tensor-parallel size `tp` (equal parts per rank).
int64_t padded_vocab(const GptOptions& gpt, int64_t characters, int64_t tp = 1);
nn::Sequential make_gpt(const GptOptions& gpt, int64_t characters, int64_t rows, bool checkpointed,
                        Device where = Device::cpu());

}  // namespace tandem::tools
