// data/text_dataset.cpp — reading, splitting and sampling a text corpus.
#include <tandem/core/check.h>
#include <tandem/data/shuffle.h>
#include <tandem/data/text_dataset.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tandem::data {
namespace fs = std::filesystem;

std::vector<std::string> fortunes_files() {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(kFortunesDir, ec))
    for (const fs::directory_entry& e : fs::directory_iterator(kFortunesDir, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8")
        files.push_back(e.path().string());
    }
  TD_CHECK_AS(DataError, !files.empty(), "the default corpus ", kFortunesDir,
              " is missing (Debian's fortunes package)\n  hint: run scripts/setup.sh, or "
              "apt-get install fortunes, or pass --text FILE");
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

std::string read_file(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it: say what it is instead of "empty".
  std::error_code ec;
  TD_CHECK_AS(DataError, !fs::is_directory(path, ec), path,
              ": is a directory, not a text file (give a UTF-8 file such as input.txt)");
  std::ifstream in(path, std::ios::binary);
  TD_CHECK_AS(DataError, in.good(), path, ": cannot open the text file");
  std::ostringstream s;
  s << in.rdbuf();
  TD_CHECK_AS(DataError, !in.bad(), path, ": cannot read the text file");
  return s.str();
}

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  return from_vector(std::vector<int64_t>(ids.begin() + long(begin), ids.begin() + long(end)),
                     {int64_t(end - begin)});
}

}  // namespace

TextCorpus load_text_corpus(const std::vector<std::string>& paths,
                            const CharTokenizer* vocabulary) {
  TD_CHECK_VALUE(!paths.empty(), "load_text_corpus: no files given");
  std::u32string text;
  for (const std::string& path : paths) text += decode_utf8(read_file(path), path);
  const std::string source = paths.size() == 1 ? paths[0]
                                               : str(fs::path(paths[0]).parent_path().string(),
                                                     " (", paths.size(), " files)");
  TD_CHECK_AS(DataError, !text.empty(), source, ": the text is empty");
  CharTokenizer tokenizer = vocabulary ? *vocabulary : CharTokenizer::from_text(text);
  const std::vector<int64_t> ids = tokenizer.encode(text, source);
  const size_t n = ids.size(), cut = size_t(double(n) * 0.9);  // nanoGPT's int(n * 0.9)
  return {source, std::move(tokenizer), ids_tensor(ids, 0, cut), ids_tensor(ids, cut, n)};
}

void check_fits_windows(const TextCorpus& c, int64_t block_size) {
  for (const auto& [name, t] : {std::pair{"training", c.train}, std::pair{"validation", c.val}})
    TD_CHECK_VALUE(t.numel() >= block_size + 1, c.source, ": the ", name, " split has ", t.numel(),
                   " characters, fewer than one window of block size + 1 = ", block_size + 1,
                   "\n  hint: a longer text, or a smaller --block-size");
}

std::pair<Tensor, Tensor> random_windows(const Tensor& tokens, int64_t batch, int64_t block_size,
                                         uint64_t seed) {
  const int64_t n = tokens.numel();
  TD_CHECK_VALUE(n >= block_size + 1, "random_windows: ", n,
                 " tokens are fewer than one window of ", block_size + 1);
  const Tensor src = tokens.contiguous();
  const int64_t* ids = src.data<int64_t>();
  Tensor x = empty({batch, block_size}, {.dtype = kInt64}),
         y = empty({batch, block_size}, {.dtype = kInt64});
  int64_t *px = x.data<int64_t>(), *py = y.data<int64_t>();
  SplitMix64 rng(seed);
  const uint64_t offsets = uint64_t(n - block_size);  // windows that fit: [0, n − T − 1]
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t o = int64_t(rng.next() % offsets);
    std::copy(ids + o, ids + o + block_size, px + b * block_size);
    std::copy(ids + o + 1, ids + o + 1 + block_size, py + b * block_size);
  }
  return {x, y};
}

}  // namespace tandem::data
