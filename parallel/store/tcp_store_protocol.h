// parallel/store/tcp_store_protocol.h — the TCPStore server's rules, apart from its sockets: what
// it does with the bytes a connection sends. The server loop (tcp_store_server.cpp) only moves
// bytes between sockets and these buffers, so the protocol can be tested and fuzzed without a
// network (tests/fuzz/fuzz_store_protocol.cpp). Every buffer a client can fill is bounded: a
// client that breaks a bound gets an error reply and its connection is closed; the others are
// not affected.
#pragma once

#include <tandem/parallel/store/store.h>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tandem::parallel::detail {

/// One client connection: bytes received and not yet applied, replies not yet sent and, while it
/// waits, the keys it waits for.
struct StoreConn {
  int fd = -1;  // the server's socket; the protocol never touches it
  Bytes in, out;
  std::vector<std::string> waiting;  // non-empty: a WAIT not yet answered
  int64_t rank = -1;                 // named by HELLO
  bool bye = false;                  // said BYE: closing is a clean exit, not a departure
  bool close_after_flush = false;    // malformed: send what is in `out`, then close
};

class StoreProtocol {
 public:
  /// Replies a client has not read yet. Beyond this it is not reading them (pipelined GETs of a
  /// large value, say) and is disconnected rather than allowed to fill the server's memory.
  static constexpr size_t kMaxPendingReplyBytes = size_t(64) << 20;

  /// A new connection (its index in conns()).
  size_t connect(int fd);
  /// Bytes that arrived on conns()[i]: buffers them and applies every whole request.
  void receive(size_t i, const uint8_t* p, size_t n);
  /// conns()[i] was closed by its peer or the server: a rank that did not say BYE has departed.
  void closed(size_t i);
  /// Forgets the connections closed since the last call.
  void remove_closed();

  std::vector<StoreConn>& conns() { return conns_; }
  const std::map<std::string, Bytes>& data() const { return data_; }
  const std::set<int64_t>& departed() const { return departed_; }

 private:
  bool has_all(const std::vector<std::string>& keys) const;
  bool handle(StoreConn& c, const uint8_t* body, size_t n);
  void drain_input(StoreConn& c);
  void wake_waiters();

  std::map<std::string, Bytes> data_;
  std::vector<StoreConn> conns_;
  std::set<int64_t> departed_;
};

}  // namespace tandem::parallel::detail
