// data/char_tokenizer.h — a character-level tokenizer, as nanoGPT's shakespeare_char/prepare.py
// builds one: the vocabulary is the sorted set of the characters (Unicode code points) of a
// corpus, and a character's id is its place in that list. It travels with the model (to_string /
// from_string), since a model's ids mean nothing without it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

/// The code points of UTF-8 text; DataError naming `source` and the byte offset of the first
/// invalid sequence (an overlong form, a surrogate, a stray continuation byte, a cut-off end).
std::u32string decode_utf8(std::string_view text, std::string_view source);
/// UTF-8 for code points (each a valid scalar value).
std::string encode_utf8(std::u32string_view text);

class CharTokenizer {
 public:
  /// The vocabulary of `text`: its distinct characters, sorted by code point.
  static CharTokenizer from_text(std::u32string_view text);
  /// A vocabulary given as its characters in id order (UTF-8, as to_string() writes it);
  /// DataError naming `source` when a character is repeated or the text is not UTF-8.
  static CharTokenizer from_string(std::string_view vocabulary, std::string_view source);

  int64_t vocab_size() const { return int64_t(chars_.size()); }
  /// The vocabulary as UTF-8, character i being id i.
  std::string to_string() const { return encode_utf8(chars_); }

  /// Ids of `text`; ValueError naming a character not in the vocabulary, its position and
  /// `what` ("the prompt").
  std::vector<int64_t> encode(std::u32string_view text, std::string_view what) const;
  /// Text of ids; IndexError naming an id outside [0, vocab_size).
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  explicit CharTokenizer(std::u32string chars) : chars_(std::move(chars)) {}
  std::u32string chars_;  // sorted: a character's id is found by binary search
};

}  // namespace tandem::data
