// parallel/comm/gloo_rendezvous.cpp — the listening address, the store adapter, the mesh.
#include <arpa/inet.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/gloo_rendezvous.h>
#include <unistd.h>

namespace tandem::parallel {
namespace {

// Gloo's rendezvous speaks its own Store interface; this forwards it to ours.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<parallel::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes b = store_->get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    store_->wait(keys, t);
  }

 private:
  std::shared_ptr<parallel::Store> store_;
};

}  // namespace

std::string local_address_towards(const std::string& peer) {
  if (peer.empty() || peer == "localhost" || peer.rfind("127.", 0) == 0 || peer == "::1")
    return "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &ai) != 0) return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // A UDP connect sends nothing; it only asks the kernel which local address routes to the peer.
  if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char buf[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, buf, sizeof(buf), nullptr, 0,
                      NI_NUMERICHOST) == 0)
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(ai);
  return out;
}

std::shared_ptr<gloo::rendezvous::Context> connect_full_mesh(std::shared_ptr<Store> store, int rank,
                                                             int size, const std::string& hostname,
                                                             std::chrono::milliseconds timeout) {
  BlockSigpipe quiet;  // the device's loop thread, started here, keeps the mask
  gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    GlooStoreAdapter adapter(std::move(store));
    context->connectFullMesh(adapter, device);
    return context;
  } catch (const std::exception& e) {
    ::tandem::detail::fail<DistributedError>(
        "gloo: rank ", rank, " of ", size, " could not connect to the other ranks (listening on ",
        hostname, "): ", e.what(),
        "\n  hint: every rank must start, with the same WORLD_SIZE and MASTER_ADDR/MASTER_PORT, "
        "within the timeout (",
        double(timeout.count()) / 1000.0, " s)");
  }
}

BlockSigpipe::BlockSigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &previous_);
}

BlockSigpipe::~BlockSigpipe() {
  // A write of this thread's to a dead peer left a SIGPIPE pending: take it before unblocking,
  // or unblocking would deliver it.
  sigset_t pending, pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
    const timespec now{};
    sigtimedwait(&pipe, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace tandem::parallel
