// parallel/store/tcp_store_server.h — the server half of TCPStore, run by rank 0 on a thread of
// its own. One poll(2) loop serves every connection, so requests are applied in arrival order
// without locks; a WAIT is answered later, when a SET or ADD completes its keys.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace tandem::parallel::detail {

class StoreProtocol;

class TCPStoreServer {
 public:
  /// Listens on host:port (port 0: a free port) and starts serving.
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();  // stops the loop and closes every connection
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }
  /// Open client connections now (rank 0 lingers until the others have gone).
  size_t connections() const { return connections_.load(); }

 private:
  void loop();

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};                   // a pipe: writing to it ends the loop
  std::unique_ptr<StoreProtocol> protocol_;  // the store's data and every connection's buffers
  std::atomic<size_t> connections_{0};
  std::thread thread_;
};

}  // namespace tandem::parallel::detail
