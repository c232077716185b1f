// tests/parallel/store_protocol_test.cpp — the TCPStore server's protocol without sockets
// (parallel/store/tcp_store_protocol.h): the bounds on what one client can make the server hold,
// each found by reading the server against the fuzz target's checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/parallel/store/tcp_store_protocol.h>
#include <tandem/parallel/store/tcp_store_wire.h>
#include <string>

namespace {
using tandem::parallel::Bytes;
using tandem::parallel::detail::StoreProtocol;
namespace wire = tandem::parallel::wire;

void send(StoreProtocol& p, size_t conn, const wire::Writer& w) {
  const Bytes m = w.framed();
  p.receive(conn, m.data(), m.size());
}

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

TEST(StoreProtocol, AWaitClaimingMoreKeysThanItsBytesHoldIsRejectedBeforeAllocating) {
  StoreProtocol p;
  p.connect(3);
  // 4 billion keys claimed in a 9-byte message: once a vector of 4G strings (128 GiB).
  send(p, 0, wire::Writer().u8(wire::kWait).u32(0xFFFFFFFFu).u32(0));
  EXPECT_TRUE(p.conns()[0].close_after_flush);
  EXPECT_THAT(text(p.conns()[0].out), ::testing::HasSubstr("malformed message for op 6"));
}

TEST(StoreProtocol, AClientThatKeepsSendingWhileItWaitsIsDisconnected) {
  StoreProtocol p;
  p.connect(3);
  send(p, 0, wire::Writer().u8(wire::kWait).u32(1).str("never"));
  ASSERT_EQ(p.conns()[0].waiting.size(), 1u);
  const Bytes chunk(1 << 20, 0x01);
  for (int i = 0; i < 17 && !p.conns()[0].close_after_flush; ++i)
    p.receive(0, chunk.data(), chunk.size());
  EXPECT_TRUE(p.conns()[0].close_after_flush);
  EXPECT_LE(p.conns()[0].in.size(), size_t(4) + wire::kMaxMessageBytes);
  EXPECT_THAT(text(p.conns()[0].out), ::testing::HasSubstr("before the last request"));
}

TEST(StoreProtocol, AClientThatNeverReadsItsRepliesIsDisconnected) {
  StoreProtocol p;
  p.connect(3);
  p.connect(4);
  send(p, 1, wire::Writer().u8(wire::kSet).str("big").bytes(Bytes(8 << 20, 7)));
  for (int i = 0; i < 10 && !p.conns()[0].close_after_flush; ++i)
    send(p, 0, wire::Writer().u8(wire::kGet).str("big"));
  EXPECT_TRUE(p.conns()[0].close_after_flush);
  EXPECT_LT(p.conns()[0].out.size(), size_t(1) << 20);  // the error alone
  EXPECT_THAT(text(p.conns()[0].out), ::testing::HasSubstr("replies not read"));
  // The other client is unaffected.
  send(p, 1, wire::Writer().u8(wire::kCheck).u32(1).str("big"));
  EXPECT_FALSE(p.conns()[1].close_after_flush);
}

TEST(StoreProtocol, AnAddThatOverflowsIsAnErrorReplyNotAProtocolFault) {
  StoreProtocol p;
  p.connect(3);
  send(p, 0, wire::Writer().u8(wire::kAdd).str("n").i64(INT64_MAX));
  p.conns()[0].out.clear();
  send(p, 0, wire::Writer().u8(wire::kAdd).str("n").i64(1));
  EXPECT_FALSE(p.conns()[0].close_after_flush);
  EXPECT_THAT(text(p.conns()[0].out), ::testing::HasSubstr("overflows a 64-bit counter"));
  EXPECT_EQ(text(p.data().at("n")), std::to_string(INT64_MAX));
}

}  // namespace
