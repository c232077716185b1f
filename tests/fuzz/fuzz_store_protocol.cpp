// tests/fuzz/fuzz_store_protocol.cpp — libFuzzer target: the bytes the TCPStore server accepts
// from its sockets, fed to its protocol (parallel/store/tcp_store_protocol.h) without a network.
// The input is a script for three clients: each step is [client, flags, length, bytes...];
// flags say whether that client then reads its replies, or hangs up. Checked after every step:
// nothing crashes or throws, and no buffer a client fills grows past its bound.
#include <tandem/parallel/store/tcp_store_protocol.h>
#include <tandem/parallel/store/tcp_store_wire.h>
#include <cstdlib>

using tandem::parallel::detail::StoreProtocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  StoreProtocol p;
  for (int fd = 0; fd < 3; ++fd) p.connect(fd);
  size_t pos = 0;
  while (pos + 3 <= size && !p.conns().empty()) {
    const size_t i = data[pos] % p.conns().size();
    const uint8_t flags = data[pos + 1];
    const size_t len = std::min<size_t>(data[pos + 2], size - pos - 3);
    p.receive(i, data + pos + 3, len);
    pos += 3 + len;
    auto& c = p.conns()[i];
    if (c.in.size() > 4 + size_t(tandem::parallel::wire::kMaxMessageBytes)) std::abort();
    if (c.out.size() > StoreProtocol::kMaxPendingReplyBytes + 4096) std::abort();
    if (flags & 1) c.out.clear();  // the client read its replies
    if ((flags & 2) || (c.close_after_flush && c.out.empty())) {
      p.closed(i);
      p.remove_closed();
    }
  }
  return 0;
}
