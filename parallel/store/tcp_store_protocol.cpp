// parallel/store/tcp_store_protocol.cpp — how the TCPStore server applies requests (the wire
// format is in tcp_store_wire.h). Requests are applied in arrival order; a WAIT whose keys are
// missing parks its connection until a SET or ADD completes them.
#include <tandem/parallel/store/tcp_store_protocol.h>
#include <tandem/parallel/store/tcp_store_wire.h>
#include <new>

namespace tandem::parallel::detail {

namespace {

void reply(StoreConn& c, const wire::Writer& w) {
  const Bytes m = w.framed();
  c.out.insert(c.out.end(), m.begin(), m.end());
}

// A protocol fault: one error reply, then the connection closes (nothing more is read from it).
void reject(StoreConn& c, const std::string& why) {
  if (c.close_after_flush) return;
  reply(c, wire::Writer().u8(wire::kError).str("TCPStore server: " + why));
  c.close_after_flush = true;
  c.waiting.clear();
  c.in.clear();
}

}  // namespace

size_t StoreProtocol::connect(int fd) {
  conns_.push_back(StoreConn{.fd = fd});
  return conns_.size() - 1;
}

void StoreProtocol::receive(size_t i, const uint8_t* p, size_t n) {
  StoreConn& c = conns_.at(i);
  if (c.close_after_flush) return;
  // A client blocked in WAIT sends nothing until it is answered; one that keeps sending could
  // otherwise grow this buffer without end.
  if (c.in.size() + n > 4 + size_t(wire::kMaxMessageBytes)) {
    reject(c, "more than " + std::to_string(wire::kMaxMessageBytes) +
                  " bytes sent before the last request was answered");
    return;
  }
  c.in.insert(c.in.end(), p, p + n);
  try {
    drain_input(c);
  } catch (const std::bad_alloc&) {  // the server lives on; this one client is dropped
    reject(c, "out of memory applying a request");
  }
  if (c.out.size() > kMaxPendingReplyBytes) {
    c.out.clear();  // so the error itself is the next thing it reads
    reject(c, "more than " + std::to_string(kMaxPendingReplyBytes >> 20) +
                  " MiB of replies not read: the client must read each reply");
  }
}

void StoreProtocol::closed(size_t i) {
  StoreConn& c = conns_.at(i);
  if (c.rank >= 0 && !c.bye) departed_.insert(c.rank);
  c.fd = -1;
}

void StoreProtocol::remove_closed() {
  std::erase_if(conns_, [](const StoreConn& c) { return c.fd < 0; });
}

bool StoreProtocol::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

// Applies one request. Returns false if the message was malformed (the connection is closing).
bool StoreProtocol::handle(StoreConn& c, const uint8_t* body, size_t n) {
  wire::Reader r(body, n);
  uint8_t op = 0;
  std::string key;
  if (!r.u8(op)) return reject(c, "empty message"), false;
  switch (op) {
    case wire::kSet: {
      Bytes value;
      if (!r.str(key) || !r.bytes(value) || !r.at_end()) break;
      data_[key] = std::move(value);
      reply(c, wire::Writer().u8(wire::kOk));
      return true;
    }
    case wire::kGet: {
      if (!r.str(key) || !r.at_end()) break;
      auto it = data_.find(key);
      if (it == data_.end())
        reply(c, wire::Writer().u8(wire::kNo).bytes(Bytes{}));
      else
        reply(c, wire::Writer().u8(wire::kOk).bytes(it->second));
      return true;
    }
    case wire::kAdd: {
      int64_t delta = 0;
      if (!r.str(key) || !r.i64(delta) || !r.at_end()) break;
      int64_t sum = 0;
      try {
        const auto it = data_.find(key);
        sum = counter_plus(key, it != data_.end() ? &it->second : nullptr, delta);
      } catch (const std::exception& e) {
        reply(c, wire::Writer().u8(wire::kError).str(e.what()));
        return true;  // a well-formed request on a non-counter: an error, not a protocol fault
      }
      data_[key] = counter_bytes(sum);
      reply(c, wire::Writer().u8(wire::kOk).i64(sum));
      return true;
    }
    case wire::kCheck:
    case wire::kWait: {
      uint32_t count = 0;
      // Each key takes at least its 4-byte length, so a count beyond that is a lie; checked
      // before the keys are allocated.
      if (!r.u32(count) || count > (n - 5) / 4) break;
      std::vector<std::string> keys(count);
      bool ok = true;
      for (auto& k : keys) ok = ok && r.str(k);
      if (!ok || !r.at_end()) break;
      if (op == wire::kCheck)
        reply(c, wire::Writer().u8(has_all(keys) ? wire::kOk : wire::kNo));
      else if (has_all(keys))
        reply(c, wire::Writer().u8(wire::kOk));
      else
        c.waiting = std::move(keys);
      return true;
    }
    case wire::kDelete:
      if (!r.str(key) || !r.at_end()) break;
      reply(c, wire::Writer().u8(data_.erase(key) ? wire::kOk : wire::kNo));
      return true;
    case wire::kHello:
      if (!r.i64(c.rank) || !r.at_end()) break;
      departed_.erase(c.rank);  // a restarted rank is back
      reply(c, wire::Writer().u8(wire::kOk));
      return true;
    case wire::kBye:
      if (!r.at_end()) break;
      c.bye = true;
      reply(c, wire::Writer().u8(wire::kOk));
      return true;
    case wire::kDeparted: {
      if (!r.at_end()) break;
      wire::Writer w;
      w.u8(wire::kOk).u32(uint32_t(departed_.size()));
      for (int64_t rank : departed_) w.i64(rank);
      reply(c, w);
      return true;
    }
    default:
      reject(c, "unknown op " + std::to_string(op));
      return false;
  }
  reject(c, "malformed message for op " + std::to_string(op));
  return false;
}

// Handles every whole message in c.in, unless the connection is blocked in a WAIT.
void StoreProtocol::drain_input(StoreConn& c) {
  size_t pos = 0;
  while (c.waiting.empty() && !c.close_after_flush && c.in.size() - pos >= 4) {
    wire::Reader head(c.in.data() + pos, 4);
    uint32_t len = 0;
    head.u32(len);
    if (len == 0 || len > wire::kMaxMessageBytes) {
      reject(c, "message of " + std::to_string(len) + " bytes (the limit is " +
                    std::to_string(wire::kMaxMessageBytes) + ")");
      return;
    }
    if (c.in.size() - pos - 4 < len) break;
    const bool changed_data = c.in[pos + 4] == wire::kSet || c.in[pos + 4] == wire::kAdd;
    if (!handle(c, c.in.data() + pos + 4, len)) return;
    pos += 4 + len;
    if (changed_data) wake_waiters();
  }
  c.in.erase(c.in.begin(), c.in.begin() + std::ptrdiff_t(pos));
}

void StoreProtocol::wake_waiters() {
  for (StoreConn& w : conns_) {
    if (!w.waiting.empty() && has_all(w.waiting)) {
      w.waiting.clear();
      reply(w, wire::Writer().u8(wire::kOk));
    }
  }
}

}  // namespace tandem::parallel::detail
