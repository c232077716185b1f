// parallel/store/tcp_store_server.cpp — the store's server loop. Each connection has an input
// buffer (bytes until a whole message is in), an output buffer (replies not yet sent) and, while
// it waits, the keys it waits for. A malformed message gets an error reply and that connection is
// closed once the reply is out; the others are not affected. A connection that said HELLO(rank)
// and closes without BYE is remembered as a departed rank, which is how survivors of a crash
// learn who died (TCPStore::departed_ranks).
#include <poll.h>
#include <sys/socket.h>
#include <tandem/core/check.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/store/tcp_store_server.h>
#include <tandem/parallel/store/tcp_store_wire.h>
#include <unistd.h>
#include <cerrno>
#include <map>
#include <set>
#include <vector>

namespace tandem::parallel::detail {

namespace {

struct Conn {
  int fd = -1;
  Bytes in, out;
  std::vector<std::string> waiting;  // non-empty: a WAIT not yet answered
  int64_t rank = -1;
  bool bye = false;
  bool close_after_flush = false;
};

}  // namespace

struct TCPStoreServer::State {
  std::map<std::string, Bytes> data;
  std::vector<Conn> conns;
  std::set<int64_t> departed;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }

  static void reply(Conn& c, const wire::Writer& w) {
    const Bytes m = w.framed();
    c.out.insert(c.out.end(), m.begin(), m.end());
  }

  static void reject(Conn& c, const std::string& why) {
    reply(c, wire::Writer().u8(wire::kError).str("TCPStore server: " + why));
    c.close_after_flush = true;
    c.in.clear();
  }

  // Applies one request. Returns false if the message was malformed (the connection is closing).
  bool handle(Conn& c, const uint8_t* body, size_t n) {
    wire::Reader r(body, n);
    uint8_t op = 0;
    std::string key;
    if (!r.u8(op)) return reject(c, "empty message"), false;
    switch (op) {
      case wire::kSet: {
        Bytes value;
        if (!r.str(key) || !r.bytes(value) || !r.at_end()) break;
        data[key] = std::move(value);
        reply(c, wire::Writer().u8(wire::kOk));
        return true;
      }
      case wire::kGet: {
        if (!r.str(key) || !r.at_end()) break;
        auto it = data.find(key);
        if (it == data.end())
          reply(c, wire::Writer().u8(wire::kNo).bytes(Bytes{}));
        else
          reply(c, wire::Writer().u8(wire::kOk).bytes(it->second));
        return true;
      }
      case wire::kAdd: {
        int64_t delta = 0;
        if (!r.str(key) || !r.i64(delta) || !r.at_end()) break;
        int64_t sum = delta;
        try {
          if (auto it = data.find(key); it != data.end()) sum += parse_counter(key, it->second);
        } catch (const std::exception& e) {
          reply(c, wire::Writer().u8(wire::kError).str(e.what()));
          return true;  // a well-formed request on a non-counter: an error, not a protocol fault
        }
        data[key] = counter_bytes(sum);
        reply(c, wire::Writer().u8(wire::kOk).i64(sum));
        return true;
      }
      case wire::kCheck:
      case wire::kWait: {
        uint32_t count = 0;
        if (!r.u32(count) || count > n) break;
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
        reply(c, wire::Writer().u8(data.erase(key) ? wire::kOk : wire::kNo));
        return true;
      case wire::kHello:
        if (!r.i64(c.rank) || !r.at_end()) break;
        departed.erase(c.rank);  // a restarted rank is back
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
        w.u8(wire::kOk).u32(uint32_t(departed.size()));
        for (int64_t rank : departed) w.i64(rank);
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
  void drain_input(Conn& c) {
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

  void wake_waiters() {
    for (Conn& w : conns) {
      if (!w.waiting.empty() && has_all(w.waiting)) {
        w.waiting.clear();
        reply(w, wire::Writer().u8(wire::kOk));
      }
    }
  }
};

TCPStoreServer::TCPStoreServer(const std::string& host, int port)
    : state_(std::make_unique<State>()) {
  listen_fd_ = listen_on(host, port, &port_);
  set_nonblocking(listen_fd_);
  if (::pipe(wake_) != 0) {
    ::close(listen_fd_);
    ::tandem::detail::fail<DistributedError>("TCPStore: cannot create a pipe");
  }
  thread_ = std::thread([this] { loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  const char c = 'x';
  [[maybe_unused]] ssize_t w = ::write(wake_[1], &c, 1);
  thread_.join();
  for (Conn& conn : state_->conns) ::close(conn.fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TCPStoreServer::loop() {
  State& s = *state_;
  std::vector<pollfd> fds;
  std::vector<uint8_t> chunk(64 * 1024);
  for (;;) {
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    for (const Conn& c : s.conns)
      fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // destructor
    if (fds[1].revents & POLLIN) {
      for (int fd;
           (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;)
        s.conns.push_back(Conn{.fd = fd});
    }
    // Connections appended above have no pollfd yet; they are served from the next round.
    for (size_t i = 0; i + 2 < fds.size(); ++i) {
      Conn& c = s.conns[i];
      bool dead = (fds[i + 2].revents & (POLLERR | POLLNVAL)) != 0;
      if (!dead && (fds[i + 2].revents & (POLLIN | POLLHUP))) {
        const ssize_t k = ::recv(c.fd, chunk.data(), chunk.size(), 0);
        if (k > 0) {
          if (!c.close_after_flush) c.in.insert(c.in.end(), chunk.begin(), chunk.begin() + k);
          s.drain_input(c);
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          dead = true;
        }
      }
      if (!dead && !c.out.empty()) {
        const ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) c.out.erase(c.out.begin(), c.out.begin() + k);
        if (k < 0 && errno != EAGAIN && errno != EINTR) dead = true;
      }
      if (!dead && c.close_after_flush && c.out.empty()) dead = true;
      if (dead) {
        if (c.rank >= 0 && !c.bye) s.departed.insert(c.rank);
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(s.conns, [](const Conn& c) { return c.fd < 0; });
    connections_ = s.conns.size();
  }
}

}  // namespace tandem::parallel::detail
