// parallel/store/tcp_store_wire.h — the TCPStore protocol. Every message, both ways, is a
// little-endian u32 length followed by that many bytes; a request's first byte is its op.
// Strings are u32 length + bytes, integers i64. A message longer than kMaxMessageBytes, an unknown
// op or a field running past the message end is malformed: the server answers with an error
// and closes that one connection.
#pragma once

#include <tandem/parallel/store/store.h>
#include <cstdint>
#include <cstring>
#include <string>

namespace tandem::parallel::wire {

inline constexpr uint32_t kMaxMessageBytes = 16u << 20;  // 16 MiB: addresses and ids, not tensors

enum Op : uint8_t {
  kSet = 1,       // key, value             -> ok
  kGet = 2,       // key                    -> found(u8), value
  kAdd = 3,       // key, delta(i64)        -> ok, sum(i64) | error, text
  kCheck = 4,     // n(u32), keys           -> all present(u8)
  kDelete = 5,    // key                    -> existed(u8)
  kWait = 6,      // n(u32), keys           -> ok, sent once all exist
  kHello = 7,     // rank(i64)              -> ok  (names this connection's rank)
  kBye = 8,       // —                      -> ok  (a clean exit, not a departure)
  kDeparted = 9,  // —                      -> n(u32), ranks(i64): closed without saying bye
};

enum Status : uint8_t { kOk = 0, kNo = 1, kError = 0xFF };

class Writer {
 public:
  Writer& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Writer& i64(int64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(uint64_t(v) >> (8 * i)));
    return *this;
  }
  Writer& bytes(const uint8_t* p, size_t n) {
    u32(uint32_t(n));
    buf_.insert(buf_.end(), p, p + n);
    return *this;
  }
  Writer& str(const std::string& s) {
    return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  Writer& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  /// The framed message: length prefix + body.
  Bytes framed() const {
    const uint32_t n = uint32_t(buf_.size());
    Bytes out(4 + buf_.size());
    for (int i = 0; i < 4; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
    if (n > 0) std::memcpy(out.data() + 4, buf_.data(), n);
    return out;
  }

 private:
  Bytes buf_;
};

/// Reads fields from one message body; every read checks bounds and returns false past the end.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool u8(uint8_t& v) {
    if (end_ - p_ < 1) return false;
    v = *p_++;
    return true;
  }
  bool u32(uint32_t& v) {
    if (end_ - p_ < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p_[i]) << (8 * i);
    p_ += 4;
    return true;
  }
  bool i64(int64_t& v) {
    if (end_ - p_ < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= uint64_t(p_[i]) << (8 * i);
    v = int64_t(u);
    p_ += 8;
    return true;
  }
  bool bytes(Bytes& out) {
    uint32_t n = 0;
    if (!u32(n) || size_t(end_ - p_) < n) return false;
    out.assign(p_, p_ + n);
    p_ += n;
    return true;
  }
  bool str(std::string& out) {
    Bytes b;
    if (!bytes(b)) return false;
    out.assign(b.begin(), b.end());
    return true;
  }
  bool at_end() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace tandem::parallel::wire
