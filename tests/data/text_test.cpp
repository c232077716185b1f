// Text data: UTF-8 decoding and its errors, the character tokenizer both ways, the 90/10 split,
// random windows (shifted targets, a function of the seed alone), and the corpus-too-short error.
#include <filesystem>
#include <fstream>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::ScratchDir;
using ::testing::HasSubstr;

TEST(Utf8, RoundTripsAndNamesTheFirstBadByte) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  const std::u32string chars = data::decode_utf8(text, "t");
  EXPECT_EQ(chars, (std::u32string{U'a', U'\u00e9', U'\u20ac', U'\U0001F600', U'z'}));
  EXPECT_EQ(data::encode_utf8(chars), text);
  EXPECT_THAT(error_message<DataError>([] { data::decode_utf8("ab\xFF", "f.txt"); }),
              HasSubstr("f.txt: not UTF-8 text: an invalid byte sequence at byte 2 (byte 0xff)"));
  EXPECT_THAT(error_message<DataError>([] { data::decode_utf8("\xC0\xAF", "f"); }),  // overlong
              HasSubstr("at byte 0"));
  EXPECT_THAT(error_message<DataError>([] { data::decode_utf8("x\xE2\x82", "f"); }),  // cut off
              HasSubstr("at byte 1"));
  EXPECT_THAT(
      error_message<DataError>([] { data::decode_utf8("\xED\xA0\x80", "f"); }),  // surrogate
      HasSubstr("at byte 0"));
}

TEST(CharTokenizer, SortedCharactersBothWaysAndClearErrors) {
  const auto tok = data::CharTokenizer::from_text(data::decode_utf8("hello, world", "t"));
  EXPECT_EQ(tok.to_string(), " ,dehlorw");
  EXPECT_EQ(tok.vocab_size(), 9);
  const std::vector<int64_t> ids = tok.encode(data::decode_utf8("hold", "t"), "prompt");
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 6, 5, 2}));
  EXPECT_EQ(tok.decode(ids), "hold");
  const auto again = data::CharTokenizer::from_string(tok.to_string(), "model.safetensors");
  EXPECT_EQ(again.encode(data::decode_utf8("world", "t"), "p"),
            tok.encode(data::decode_utf8("world", "t"), "p"));
  EXPECT_THAT(error_message<ValueError>([&] { tok.encode(U"hex", "the prompt"); }),
              HasSubstr("the prompt: the character 'x' at position 2 is not in the model's "
                        "vocabulary of 9 characters"));
  EXPECT_THAT(error_message<IndexError>([&] { tok.decode({9}); }), HasSubstr("id 9"));
  EXPECT_THAT(error_message<DataError>([] { data::CharTokenizer::from_string("ba", "m"); }),
              HasSubstr("m: the vocabulary is not sorted distinct characters"));
}

TEST(TextCorpus, SplitsNinetyTenAndDrawsShiftedWindowsFromTheSeedAlone) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + i % 26);
  std::ofstream(dir.file("t.txt")) << text;
  const data::TextCorpus c = data::load_text_corpus({dir.file("t.txt")});
  EXPECT_EQ(c.tokenizer.vocab_size(), 26);
  EXPECT_EQ(c.train.numel(), 90);
  EXPECT_EQ(c.val.numel(), 10);
  EXPECT_EQ(c.val.to_vector<int64_t>()[0], 90 % 26);
  auto [x, y] = data::random_windows(c.train, 4, 8, 17);
  EXPECT_EQ(x.shape(), (Shape{4, 8}));
  const std::vector<int64_t> xv = x.to_vector<int64_t>(), yv = y.to_vector<int64_t>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(yv[i], (xv[i] + 1) % 26);  // the next letter
  auto [x2, y2] = data::random_windows(c.train, 4, 8, 17);
  EXPECT_EQ(x2.to_vector<int64_t>(), xv);
  auto [x3, y3] = data::random_windows(c.train, 4, 8, 18);
  EXPECT_NE(x3.to_vector<int64_t>(), xv);
  EXPECT_THAT(error_message<ValueError>([&] { data::check_fits_windows(c, 10); }),
              HasSubstr("the validation split has 10 characters, fewer than one window of block "
                        "size + 1 = 11"));
  data::check_fits_windows(c, 9);
  // A saved vocabulary: characters outside it are errors naming the file.
  const auto small = data::CharTokenizer::from_string("abc", "model");
  EXPECT_THAT(
      error_message<ValueError>([&] { data::load_text_corpus({dir.file("t.txt")}, &small); }),
      HasSubstr("the character 'd' at position 3"));
  std::ofstream(dir.file("bad.txt")) << "ok\xFE";
  EXPECT_THAT(error_message<DataError>([&] { data::load_text_corpus({dir.file("bad.txt")}); }),
              HasSubstr("bad.txt: not UTF-8 text"));
  EXPECT_THAT(error_message<DataError>([&] { data::load_text_corpus({dir.file("none.txt")}); }),
              HasSubstr("none.txt: cannot open"));
}

TEST(TextCorpus, TheDefaultCorpusIsTheFortunesPackage) {
  if (!std::filesystem::is_directory(data::kFortunesDir))
    GTEST_SKIP() << "Debian's fortunes package is not installed (scripts/setup.sh installs it)";
  const data::TextCorpus c = data::load_text_corpus(data::fortunes_files());
  EXPECT_GT(c.train.numel() + c.val.numel(), 2'000'000);
  EXPECT_GT(c.tokenizer.vocab_size(), 90);  // English letters, digits, punctuation, a few more
  EXPECT_THAT(c.source, HasSubstr(data::kFortunesDir));
}
