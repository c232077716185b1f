// data/text_dataset.h — a text corpus for a language model, as nanoGPT's shakespeare_char reads
// one: the characters of UTF-8 files become ids (char_tokenizer.h), the first 90 % train and the
// last 10 % validate, and a batch is B random windows of block_size + 1 characters: x the first
// block_size, y the same shifted by one (each position's next character).
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/data/char_tokenizer.h>
#include <string>
#include <vector>

namespace tandem::data {

/// Where Debian's `fortunes` package keeps its cookie files: the default corpus (about 2.6 MB of
/// English quotations, jokes and verse).
inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";

/// The text files of the fortunes package, sorted by name (the .dat indexes and the .u8 links
/// left out). DataError with the install hint when the package is missing.
std::vector<std::string> fortunes_files();

struct TextCorpus {
  std::string source;       // the file, or "<dir> (N files)": for messages and the report
  CharTokenizer tokenizer;  // the corpus's characters
  Tensor train, val;        // int64 ids: the first 90 % and the last 10 %
};

/// Reads `paths` (UTF-8, concatenated in order) and splits them. With `vocabulary` (a saved
/// tokenizer: a resumed run), every character must be in it; otherwise the corpus's own
/// characters are the vocabulary. DataError naming the file for unreadable or non-UTF-8 data.
TextCorpus load_text_corpus(const std::vector<std::string>& paths,
                            const CharTokenizer* vocabulary = nullptr);

/// ValueError, naming the corpus and the sizes, when a split is shorter than one window of
/// block_size + 1 characters.
void check_fits_windows(const TextCorpus& corpus, int64_t block_size);

/// B windows of `tokens`: x [B, T] and y [B, T], y the same windows one character later, at
/// offsets drawn uniformly from [0, n − T − 1] by splitmix64 from `seed` alone, so that a batch
/// is a function of (seed, step): a resumed run and every DDP rank draw the same batches.
std::pair<Tensor, Tensor> random_windows(const Tensor& tokens, int64_t batch, int64_t block_size,
                                         uint64_t seed);

}  // namespace tandem::data
