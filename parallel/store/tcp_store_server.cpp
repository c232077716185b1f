// parallel/store/tcp_store_server.cpp — the store's server loop: poll(2) over the listening
// socket and every connection, moving bytes between sockets and the protocol's buffers
// (tcp_store_protocol.h says what is done with them). A connection that said HELLO(rank) and
// closes without BYE is remembered as a departed rank, which is how survivors of a crash learn
// who died (TCPStore::departed_ranks).
#include <poll.h>
#include <sys/socket.h>
#include <tandem/core/check.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/store/tcp_store_protocol.h>
#include <tandem/parallel/store/tcp_store_server.h>
#include <unistd.h>
#include <cerrno>
#include <vector>

namespace tandem::parallel::detail {

TCPStoreServer::TCPStoreServer(const std::string& host, int port)
    : protocol_(std::make_unique<StoreProtocol>()) {
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
  for (const StoreConn& conn : protocol_->conns()) ::close(conn.fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TCPStoreServer::loop() {
  StoreProtocol& s = *protocol_;
  std::vector<pollfd> fds;
  std::vector<uint8_t> chunk(64 * 1024);
  for (;;) {
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    for (const StoreConn& c : s.conns())
      fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // destructor
    if (fds[1].revents & POLLIN) {
      for (int fd;
           (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;)
        s.connect(fd);
    }
    // Connections appended above have no pollfd yet; they are served from the next round.
    for (size_t i = 0; i + 2 < fds.size(); ++i) {
      StoreConn& c = s.conns()[i];
      bool dead = (fds[i + 2].revents & (POLLERR | POLLNVAL)) != 0;
      if (!dead && (fds[i + 2].revents & (POLLIN | POLLHUP))) {
        const ssize_t k = ::recv(c.fd, chunk.data(), chunk.size(), 0);
        if (k > 0) {
          s.receive(i, chunk.data(), size_t(k));
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
        ::close(c.fd);
        s.closed(i);
      }
    }
    s.remove_closed();
    connections_ = s.conns().size();
  }
}

}  // namespace tandem::parallel::detail
