// The peer monitor's wire format (collective/peer_monitor/peer_monitor_frame_internal.h): a frame survives
// encode/decode with every field at its extremes, lies on the wire as the header's table says
// (expected bytes written from that table, not from the encoder), and decode rejects what is too
// short or has the wrong magic number, while leaving kinds, ranks and tokens to the connection.
#include <chorus/collective/peer_monitor/peer_monitor_frame_internal.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace chorus::collective::peer_monitor_detail {
namespace {

void expect_same(const Frame& a, const Frame& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.echo, b.echo);
}

TEST(PeerMonitorFrame, EveryFieldSurvivesARoundTrip) {
  const std::vector<Frame> frames = {
      {.kind = kHello, .rank = 0, .pid = 1, .token = 1, .echo = 2},
      {.kind = kHelloAck, .rank = 7, .pid = 4242, .token = 0x0123456789abcdefULL, .echo = 0},
      {.kind = kHeartbeat,
       .rank = std::numeric_limits<std::int32_t>::max(),
       .pid = std::numeric_limits<std::uint32_t>::max(),
       .token = std::numeric_limits<std::uint64_t>::max(),
       .echo = std::numeric_limits<std::uint64_t>::max()},
      {.kind = kGoodbye, .rank = -1, .pid = 0, .token = 0, .echo = 0},
      {.kind = 0xdeadbeef, .rank = std::numeric_limits<std::int32_t>::min(), .pid = 5, .token = 6, .echo = 7},
  };
  for (const Frame& f : frames) {
    const auto bytes = encode(f);
    const auto back = decode(bytes);
    ASSERT_TRUE(back.has_value()) << "kind " << f.kind;
    expect_same(f, *back);
  }
}

TEST(PeerMonitorFrame, BytesAreBigEndianInTheHeadersOrder) {
  const Frame f{
      .kind = kGoodbye, .rank = -2, .pid = 0x01020304, .token = 0x1112131415161718ULL, .echo = 0x2122232425262728ULL};
  const auto b = encode(f);
  const std::vector<unsigned char> expected = {
      'C',  'H',  'M',  '1',                           // magic
      0x00, 0x00, 0x00, 0x04,                          // kind: kGoodbye
      0xff, 0xff, 0xff, 0xfe,                          // rank -2, two's complement
      0x01, 0x02, 0x03, 0x04,                          // pid
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // token
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,  // echo
  };
  ASSERT_EQ(expected.size(), kFrameBytes);
  EXPECT_EQ(std::vector<unsigned char>(b.begin(), b.end()), expected);
}

TEST(PeerMonitorFrame, ATruncatedFrameIsRejected) {
  const auto bytes = encode({.kind = kHeartbeat, .rank = 1, .pid = 2, .token = 3});
  for (std::size_t n = 0; n < kFrameBytes; ++n)
    EXPECT_FALSE(decode(std::span<const unsigned char>(bytes.data(), n)).has_value()) << n << " bytes";
}

TEST(PeerMonitorFrame, AWrongMagicNumberIsRejected) {
  for (std::size_t i = 0; i < 4; ++i) {
    auto bytes = encode({.kind = kHello, .rank = 1, .pid = 2, .token = 3, .echo = 4});
    bytes[i] ^= 0x01;
    EXPECT_FALSE(decode(bytes).has_value()) << "magic byte " << i << " changed";
  }
  // A stranger on the port: a web request, or zeros.
  const std::string http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ASSERT_GE(http.size(), kFrameBytes);
  EXPECT_FALSE(decode(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(http.data()), http.size()))
                   .has_value());
  const std::vector<unsigned char> zeros(kFrameBytes, 0);
  EXPECT_FALSE(decode(zeros).has_value());
}

TEST(PeerMonitorFrame, DecodeReadsTheFirstFrameOfSeveral) {
  const Frame first{.kind = kHelloAck, .rank = 3, .pid = 30, .token = 300};
  const Frame second{.kind = kGoodbye, .rank = 4, .pid = 40, .token = 400};
  std::vector<unsigned char> stream;
  for (const Frame& f : {first, second}) {
    const auto b = encode(f);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  stream.push_back(0x43);  // the start of a third, not yet arrived
  const auto a = decode(stream);
  ASSERT_TRUE(a.has_value());
  expect_same(first, *a);
  const auto b = decode(std::span<const unsigned char>(stream).subspan(kFrameBytes));
  ASSERT_TRUE(b.has_value());
  expect_same(second, *b);
  EXPECT_FALSE(decode(std::span<const unsigned char>(stream).subspan(2 * kFrameBytes)).has_value());
}

}  // namespace
}  // namespace chorus::collective::peer_monitor_detail
