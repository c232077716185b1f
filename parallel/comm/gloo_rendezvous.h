// parallel/comm/gloo_rendezvous.h — how a GlooCommunicator's ranks find each other: the address
// each listens on, Gloo's store interface forwarded to Tandem's, and the full mesh of TCP pairs.
#pragma once

#include <signal.h>
#include <tandem/parallel/store/store.h>
#include <chrono>
#include <memory>
#include <string>

namespace gloo::rendezvous {
class Context;
}

namespace tandem::parallel {

/// The local address a socket to `peer` would use (how a rank finds the interface to listen on);
/// 127.0.0.1 for loopback or an unknown peer.
std::string local_address_towards(const std::string& peer);

/// Gloo's full mesh of `size` ranks on TCP, connected through `store` (every rank calls this with
/// the same store namespace), listening on `hostname`. DistributedError naming the rank and the
/// address if the others do not arrive within `timeout`.
std::shared_ptr<gloo::rendezvous::Context> connect_full_mesh(std::shared_ptr<Store> store, int rank,
                                                             int size, const std::string& hostname,
                                                             std::chrono::milliseconds timeout);

/// Blocks SIGPIPE on the calling thread for the scope, and so in the threads it starts meanwhile.
/// Gloo writes to its sockets with writev(2), which raises SIGPIPE when the peer has died; its
/// default action would kill the rank silently instead of letting it report the dead peer. Blocked
/// on the threads that write (Gloo's device loop, the collectives' worker), the write fails with
/// EPIPE and Gloo reports it; the process's own SIGPIPE handling is left as the program set it.
class BlockSigpipe {
 public:
  BlockSigpipe();
  ~BlockSigpipe();
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace tandem::parallel
