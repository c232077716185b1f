// tools/train/gpt_resume.h — what a GPT run takes from a checkpoint before and while it resumes:
// the vocabulary, which sizes the model, and the token embedding's rows fitted to this run's
// padding. A checkpoint holds its characters padded by its own --vocab-multiple (65 characters:
// 65 rows; with --vocab-multiple 2, 66), and a resume may pad differently (--tp 2 needs an even
// count), so the rows are fitted rather than refused as a shape mismatch.
#pragma once

#include <tandem/data/char_tokenizer.h>
#include <tandem/nn/module.h>
#include <string>

#include "checkpointing.h"

namespace tandem::tools {

/// The vocabulary of the checkpoint a resume of DIR reads, and the --vocab-multiple it was padded
/// by (read before the model is built: they size it). DataError naming the file when it has none.
struct SavedVocabulary {
  data::CharTokenizer tokenizer;
  int64_t multiple = 1;
};
SavedVocabulary saved_vocabulary(const std::string& dir);

/// `restore`, with the checkpoint's token-embedding rows fitted to `whole`'s (the one-device GPT
/// this run built, before any cut: the checkpoint's names and optimizer indices are its). A
/// checkpoint of R rows loads into V > R with V − R zero rows appended to transformer.wte.weight
/// (lm_head.weight, the same tensor) and to its AdamW moments: new padding ids, which never occur
/// in the data. V < R is refused, naming both: the rows past V were trained, and dropping them
/// would change the model.
Restore fit_vocabulary_rows(Restore restore, nn::Module& whole);

}  // namespace tandem::tools
