// tests/parallel/drawn_gpt.h — the small GPT the composition tests train: 2 layers, 4 heads of
// width 4, a block of 8, in float64, and a vocabulary of 37 that divides by nothing, its table
// padded to 40 rows (tp::padded_vocab_size(37, 4): any TP size up to 4, the padding never read).
#pragma once

#include <tandem/tandem.h>
#include <mutex>

namespace tandem::testing {

inline constexpr int64_t kDrawnT = 8, kDrawnVocab = 37;

/// The model drawn from `seed` (with `dropout` everywhere nanoGPT has it; `heads` of 16 / heads),
/// the same on every call.
/// Ranks (threads) draw one at a time: the default generator is no thread's own. Keep no tensor of
/// it in a static: the accounting tests read the devices' bytes.
inline nn::Sequential drawn_gpt(uint64_t seed, double dropout = 0, int64_t heads = 4) {
  static std::mutex drawing;
  std::lock_guard lock(drawing);
  manual_seed(seed);
  return nn::gpt({.block_size = kDrawnT,
                  .vocab_size = kDrawnVocab,
                  .padded_vocab_size = parallel::tp::padded_vocab_size(kDrawnVocab, 4),
                  .n_layer = 2,
                  .n_head = heads,
                  .n_embd = 16,
                  .dropout = dropout,
                  .bias = true,
                  .tensor = {.dtype = kFloat64}});
}

/// `model` with each block wrapped in nn::Checkpointed (the same weights), as `tandem train
/// --activation-checkpointing` wraps them.
inline nn::Sequential with_checkpointed_blocks(const nn::Sequential& model) {
  nn::Sequential wrapped;
  for (const nn::NamedModule& m : model.items()) {
    const bool block = dynamic_cast<const nn::Block*>(&m.module.get()) != nullptr;
    wrapped.push_back(
        m.name, block ? nn::AnyModule(nn::Checkpointed(m.module.shared())) : m.module.shared());
  }
  return wrapped;
}

}  // namespace tandem::testing
