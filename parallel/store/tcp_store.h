// parallel/store/tcp_store.h — the store behind `env://` and `tcp://host:port`: rank 0 runs the
// server (tcp_store_server.h) and every rank, rank 0 included, talks to it through one client
// connection. Listens on MASTER_ADDR (loopback by default), so nothing is exposed unless an
// address is given. A rank that names itself (options.rank) lets the server notice when it dies.
#pragma once

#include <tandem/parallel/store/store.h>
#include <memory>
#include <mutex>

namespace tandem::parallel {

namespace detail {
class TCPStoreServer;
}

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // where the server listens and clients connect
  int port = 29500;                // 0 with is_server: any free port (see port())
  bool is_server = false;          // rank 0: serve the store in this process
  int64_t rank = -1;               // >= 0: say HELLO, so a crash of this rank can be reported
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
};

class TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  ~TCPStore() override;  // says BYE (a clean exit is not a departure), then closes

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::set;
  using Store::wait;

  /// Ranks that said HELLO and whose connection closed without BYE (crashed or killed), as the
  /// server sees them now. {0} when the server itself is unreachable: it lives in rank 0.
  std::vector<int64_t> departed_ranks();
  /// The port the server listens on (useful with port 0).
  int port() const { return options_.port; }
  const std::string& host() const { return options_.host; }

 private:
  // Sends one request and reads its reply before `timeout`; reconnects first if the last call
  // left the connection in an unknown state.
  // Waits go over a second connection, so another thread's set() is not stuck behind a wait.
  struct Connection {
    std::mutex mu;  // one request at a time
    int fd = -1;
  };
  Bytes call(Connection& conn, const Bytes& request, std::chrono::milliseconds timeout,
             const char* op);
  void connect(Connection& conn);

  TCPStoreOptions options_;
  std::unique_ptr<detail::TCPStoreServer> server_;
  Connection main_, waits_;
};

}  // namespace tandem::parallel
