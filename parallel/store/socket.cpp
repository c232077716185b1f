// parallel/store/socket.cpp — getaddrinfo + poll(2) wrappers: blocking I/O with deadlines.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <tandem/core/check.h>
#include <tandem/parallel/store/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tandem::parallel::detail {
namespace {

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) ::freeaddrinfo(head);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string p = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &out.head);
  TD_CHECK_AS(DistributedError, rc == 0, "cannot resolve '", host, ":", port,
              "': ", ::gai_strerror(rc));
}

int remaining_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return int(std::max<int64_t>(0, left.count()));
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the read/write report the error
  }
}

}  // namespace

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int listen_on(const std::string& host, int port, int* bound_port) {
  AddrInfo ai;
  resolve(host, port, true, ai);
  std::string last_error = "no address";
  for (addrinfo* a = ai.head; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::tandem::detail::fail<DistributedError>("TCPStore: cannot listen on ", host, ":", port, ": ",
                                           last_error,
                                           "\n  hint: is another job using MASTER_PORT=", port,
                                           "? Pick another port, or --standalone for a free one");
}

int connect_to(const std::string& host, int port, Deadline deadline) {
  std::string last_error;
  do {
    AddrInfo ai;
    resolve(host, port, false, ai);
    for (addrinfo* a = ai.head; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    // Refused or unreachable: the serving rank may still be starting. Retry until the deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  ::tandem::detail::fail<DistributedError>(
      "TCPStore: cannot connect to the store at ", host, ":", port, " (", last_error,
      ") before the timeout\n  hint: rank 0 serves the store; check that it started and that "
      "MASTER_ADDR/MASTER_PORT are the same on every rank");
}

void send_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    TD_CHECK_AS(DistributedError, wait_for(fd, POLLOUT, deadline), "timed out sending to ", what);
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TD_CHECK_AS(DistributedError, k > 0, "lost the connection to ", what, " (",
                std::strerror(errno), ")");
    p += k;
    n -= size_t(k);
  }
}

void recv_all(int fd, void* data, size_t n, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    TD_CHECK_AS(DistributedError, wait_for(fd, POLLIN, deadline), "timed out waiting for ", what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TD_CHECK_AS(DistributedError, k > 0, "lost the connection to ", what, " (",
                k == 0 ? "closed by the other side" : std::strerror(errno), ")");
    p += k;
    n -= size_t(k);
  }
}

int free_port(const std::string& host) {
  int port = 0;
  const int fd = listen_on(host, 0, &port);
  ::close(fd);
  return port;
}

}  // namespace tandem::parallel::detail
