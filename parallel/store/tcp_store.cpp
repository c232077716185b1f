// parallel/store/tcp_store.cpp — the client half of TCPStore: blocking request/reply over one
// connection, each with a deadline. A timeout or an I/O error closes the connection (a late reply
// would otherwise be read as the answer to the next request); the next call reconnects.
#include <tandem/core/check.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/store/tcp_store.h>
#include <tandem/parallel/store/tcp_store_server.h>
#include <tandem/parallel/store/tcp_store_wire.h>
#include <unistd.h>
#include <thread>

namespace tandem::parallel {

namespace {
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string where(const TCPStoreOptions& o) {
  return "the TCPStore server at " + o.host + ":" + std::to_string(o.port);
}
}  // namespace

TCPStore::TCPStore(TCPStoreOptions options) : options_(std::move(options)) {
  timeout_ = options_.timeout;
  if (options_.is_server) {
    server_ = std::make_unique<detail::TCPStoreServer>(options_.host, options_.port);
    options_.port = server_->port();
  }
  std::lock_guard lk(main_.mu);
  connect(main_);
}

TCPStore::~TCPStore() {
  if (waits_.fd >= 0) ::close(waits_.fd);
  const int fd_ = main_.fd;
  if (fd_ >= 0) {
    try {
      const auto deadline = steady_clock::now() + milliseconds(1000);
      const Bytes bye = wire::Writer().u8(wire::kBye).framed();
      detail::send_all(fd_, bye.data(), bye.size(), deadline, where(options_));
      uint8_t reply[5];
      detail::recv_all(fd_, reply, sizeof(reply), deadline, where(options_));
    } catch (const std::exception&) {
      // The server may already be gone; there is no one to tell.
    }
    ::close(fd_);
  }
  if (server_) {
    // Other ranks may still be finishing a call (a last barrier, a departed-ranks query): give
    // them up to 10 s to leave before the server goes.
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    while (server_->connections() > 0 && steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(10));
  }
  server_.reset();
}

void TCPStore::connect(Connection& conn) {
  int& fd_ = conn.fd;
  fd_ = detail::connect_to(options_.host, options_.port, steady_clock::now() + timeout_);
  if (options_.rank >= 0 && &conn == &main_) {  // only the main connection names the rank
    const Bytes hello = wire::Writer().u8(wire::kHello).i64(options_.rank).framed();
    const auto deadline = steady_clock::now() + timeout_;
    detail::send_all(fd_, hello.data(), hello.size(), deadline, where(options_));
    uint8_t reply[5];
    detail::recv_all(fd_, reply, sizeof(reply), deadline, where(options_));
  }
}

Bytes TCPStore::call(Connection& conn, const Bytes& request, milliseconds timeout, const char* op) {
  std::lock_guard lk(conn.mu);
  int& fd_ = conn.fd;
  try {
    if (fd_ < 0) connect(conn);
    const auto deadline = steady_clock::now() + timeout;
    detail::send_all(fd_, request.data(), request.size(), deadline, where(options_));
    uint8_t head[4];
    detail::recv_all(fd_, head, 4, deadline, where(options_));
    uint32_t len = 0;
    wire::Reader(head, 4).u32(len);
    TD_CHECK_AS(DistributedError, len >= 1 && len <= wire::kMaxMessageBytes,
                "TCPStore: malformed reply of ", len, " bytes from ", where(options_));
    Bytes body(len);
    detail::recv_all(fd_, body.data(), len, deadline, where(options_));
    if (body[0] == wire::kError) {
      std::string why;
      wire::Reader r(body.data() + 1, body.size() - 1);
      r.str(why);
      ::tandem::detail::fail<DistributedError>("TCPStore ", op, ": ", why);
    }
    return body;
  } catch (const DistributedError& e) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw DistributedError(std::string("TCPStore ") + op + ": " + e.what());
  }
}

void TCPStore::set(const std::string& key, const Bytes& value) {
  call(main_, wire::Writer().u8(wire::kSet).str(key).bytes(value).framed(), timeout_, "set");
}

Bytes TCPStore::get(const std::string& key) {
  wait({key});
  const Bytes body = call(main_, wire::Writer().u8(wire::kGet).str(key).framed(), timeout_, "get");
  wire::Reader r(body.data() + 1, body.size() - 1);
  Bytes value;
  TD_CHECK_AS(DistributedError, body[0] == wire::kOk && r.bytes(value), "TCPStore get: key '", key,
              "' was deleted while this rank waited for it");
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const Bytes body =
      call(main_, wire::Writer().u8(wire::kAdd).str(key).i64(delta).framed(), timeout_, "add");
  int64_t sum = 0;
  wire::Reader(body.data() + 1, body.size() - 1).i64(sum);
  return sum;
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  wire::Writer w;
  w.u8(wire::kCheck).u32(uint32_t(keys.size()));
  for (const auto& k : keys) w.str(k);
  return call(main_, w.framed(), timeout_, "check")[0] == wire::kOk;
}

bool TCPStore::delete_key(const std::string& key) {
  return call(main_, wire::Writer().u8(wire::kDelete).str(key).framed(), timeout_,
              "delete_key")[0] == wire::kOk;
}

void TCPStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  wire::Writer w;
  w.u8(wire::kWait).u32(uint32_t(keys.size()));
  for (const auto& k : keys) w.str(k);
  try {
    call(waits_, w.framed(), timeout, "wait");
  } catch (const DistributedError& e) {
    ::tandem::detail::fail<DistributedError>(e.what(), "\n  (waited up to ",
                                             timeout.count() / 1000.0, " s for ",
                                             detail::quote_keys(keys), ")");
  }
}

std::vector<int64_t> TCPStore::departed_ranks() {
  std::vector<int64_t> out;
  try {
    const Bytes body = call(main_, wire::Writer().u8(wire::kDeparted).framed(), milliseconds(2000),
                            "departed_ranks");
    wire::Reader r(body.data() + 1, body.size() - 1);
    uint32_t n = 0;
    r.u32(n);
    for (uint32_t i = 0; i < n; ++i) {
      int64_t rank = -1;
      if (r.i64(rank)) out.push_back(rank);
    }
  } catch (const DistributedError&) {
    out = {0};  // the server is rank 0's: unreachable means rank 0 is gone
  }
  return out;
}

}  // namespace tandem::parallel
