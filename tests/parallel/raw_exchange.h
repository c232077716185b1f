// tests/parallel/raw_exchange.h — talking to a TCPStore server as a misbehaving client would:
// raw bytes on a fresh connection, bypassing the client's framing.
#pragma once

#include <sys/socket.h>
#include <tandem/parallel/store/socket.h>
#include <unistd.h>
#include <chrono>
#include <string>

namespace tandem::testing {

/// Sends `bytes` on a fresh connection to 127.0.0.1:port and returns what comes back before the
/// server closes it (or 5 s pass).
inline std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = parallel::detail::connect_to(
      "127.0.0.1", port, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  char buf[4096];
  for (ssize_t k; (k = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(k));
  ::close(fd);
  return reply;
}

}  // namespace tandem::testing
