// data/char_tokenizer.cpp — UTF-8 both ways, and the tokenizer.
#include <tandem/core/check.h>
#include <tandem/data/char_tokenizer.h>
#include <algorithm>

namespace tandem::data {

std::u32string decode_utf8(std::string_view text, std::string_view source) {
  std::u32string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    // The sequence length and the smallest code point it may encode (shorter forms are overlong).
    const int len = b < 0x80           ? 1
                    : (b >> 5) == 0x6  ? 2
                    : (b >> 4) == 0xE  ? 3
                    : (b >> 3) == 0x1E ? 4
                                       : 0;
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    bool ok = len > 0 && i + size_t(len) <= n;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      ok = (s[i + size_t(k)] & 0xC0) == 0x80;
      c = (c << 6) | (s[i + size_t(k)] & 0x3F);
    }
    ok = ok && c >= kMin[len] && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    if (!ok)
      ::tandem::detail::fail<DataError>(
          source, ": not UTF-8 text: an invalid byte sequence at byte ", i, " (byte 0x",
          "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15], ")");
    out.push_back(c);
    i += size_t(len);
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F));
      out += char(0x80 | (c & 0x3F));
    } else {
      out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
      out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

CharTokenizer CharTokenizer::from_text(std::u32string_view text) {
  std::u32string chars(text);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharTokenizer(std::move(chars));
}

CharTokenizer CharTokenizer::from_string(std::string_view vocabulary, std::string_view source) {
  std::u32string chars = decode_utf8(vocabulary, source);
  TD_CHECK_AS(DataError, !chars.empty(), source, ": the vocabulary is empty");
  for (size_t i = 1; i < chars.size(); ++i)
    TD_CHECK_AS(DataError, chars[i - 1] < chars[i], source,
                ": the vocabulary is not sorted distinct characters (at character ", i, ")");
  return CharTokenizer(std::move(chars));
}

namespace {

// How a character reads in a message: itself when printable ASCII, else U+XXXX.
std::string describe(char32_t c) {
  if (c >= 0x20 && c < 0x7F) return tandem::str("'", char(c), "'");
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", unsigned(c));
  return buf;
}

}  // namespace

std::vector<int64_t> CharTokenizer::encode(std::u32string_view text, std::string_view what) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto it = std::lower_bound(chars_.begin(), chars_.end(), text[i]);
    TD_CHECK_VALUE(it != chars_.end() && *it == text[i], what, ": the character ",
                   describe(text[i]), " at position ", i, " is not in the model's vocabulary of ",
                   chars_.size(), " characters");
    ids.push_back(int64_t(it - chars_.begin()));
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::u32string text;
  text.reserve(ids.size());
  for (const int64_t id : ids) {
    TD_CHECK_INDEX(id >= 0 && id < vocab_size(), "CharTokenizer: id ", id,
                   " is out of range for a vocabulary of ", vocab_size());
    text.push_back(chars_[size_t(id)]);
  }
  return encode_utf8(text);
}

}  // namespace tandem::data
