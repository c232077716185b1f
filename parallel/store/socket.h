// parallel/store/socket.h — the few blocking TCP helpers the store needs, each with a deadline so
// no call can hang past the store's timeout. Errors are DistributedErrors naming host:port.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace tandem::parallel::detail {

using Deadline = std::chrono::steady_clock::time_point;

/// A listening socket bound to host:port (port 0: any free port, reported in *bound_port).
int listen_on(const std::string& host, int port, int* bound_port);
/// Connects to host:port, retrying refused connections (the server may not be up yet) until
/// `deadline`.
int connect_to(const std::string& host, int port, Deadline deadline);
/// Sends or receives exactly `n` bytes before `deadline`; `what` names the peer in errors.
void send_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& what);
void recv_all(int fd, void* data, size_t n, Deadline deadline, const std::string& what);
void set_nonblocking(int fd);
/// A free TCP port on `host` now (for --standalone); another process may take it later.
int free_port(const std::string& host);

}  // namespace tandem::parallel::detail
