// tools/train/gpt_vocabulary.h — a GPT's vocabulary in a run and in its checkpoints. The model's
// token table has a row per character, then padding: --vocab-multiple's, and whatever --tp needs
// to split the table into equal parts (nn::GPTConfig::padded_vocab_size). The padding is never
// read and stays zero, so a checkpoint holds the unpadded table, one device's model as nanoGPT
// loads it, and a resume pads it again for its own layout: a checkpoint resumes under any
// padding and any tensor-parallel size, exactly. A sharded checkpoint holds each rank's rows as
// they are, padding included, so its runs pad alike under every layout (table_rows).
#pragma once

#include <tandem/data/char_tokenizer.h>
#include <tandem/nn/module.h>
#include <string>

#include "../commands.h"
#include "checkpointing.h"

namespace tandem::tools {

/// The vocabulary of the checkpoint a resume of DIR reads (before the model is built: its size is
/// the model's). DataError naming the file when it has none.
data::CharTokenizer saved_vocabulary(const std::string& dir);

/// The token table's rows for `characters` characters: rounded up to --vocab-multiple and, under
/// --tp or with a sharded checkpoint (saved or resumed), to a multiple of n_head too, which every
/// tensor-parallel size divides: a sharded checkpoint, which holds the table as the run pads it,
/// then has the same rows under every layout and resumes under any other. A resume of a sharded
/// checkpoint keeps its rows (an older one's too, where --tp divides them).
int64_t table_rows(const GptOptions& gpt, int64_t characters, const TrainOptions& options);

/// The token embedding's rows in this run, and where its AdamW moments sit in one device's
/// optimizer state ("state.<j>.": AdamW's groups list the decaying tensors first, in the model's
/// order; make_gpt_optimizer).
struct VocabularyRows {
  int64_t tokens = 0;  // the characters
  int64_t rows = 0;    // the table: the tokens, then padding
  std::string optimizer_prefix;
};
/// Read off `whole`, the one-device GPT this run built (before any cut), of `tokens` characters.
VocabularyRows vocabulary_rows(nn::Module& whole, int64_t tokens);

/// `content` as a checkpoint holds it: the embedding (transformer.wte.weight, lm_head.weight)
/// and its AdamW moments cut to the tokens' rows.
void unpad(CheckpointContent& content, const VocabularyRows& vocabulary);

/// `restore`, with a checkpoint's embedding and its moments fitted to this run's rows: the
/// tokens' rows as saved, then zero rows (an older checkpoint's padding, trained as nanoGPT
/// trains it, is dropped: the model never reads it).
Restore fit_vocabulary_rows(Restore restore, const VocabularyRows& vocabulary);

/// The tensors of `state` that are the token embedding, fitted to `rows` the same way.
nn::StateDict fit_embedding_rows(nn::StateDict state, int64_t tokens, int64_t rows);

}  // namespace tandem::tools
