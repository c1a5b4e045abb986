// The TCP store's wire protocol (collective/store/store_protocol.h): round trips split at every byte,
// and every way a frame can be wrong — each a DataLossError before anything is allocated for it.
#include <chorus/collective/store/store_protocol.h>

#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::collective::store_protocol {
namespace {

StoreMessage request(StoreOp op, std::int64_t number, std::vector<std::string> fields) {
  return {.kind = static_cast<std::uint8_t>(op), .number = number, .fields = std::move(fields)};
}

std::vector<StoreMessage> decode_all(const std::string& bytes, std::size_t chunk) {
  StoreFrameDecoder d("test peer");
  std::vector<StoreMessage> out;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    d.feed(std::string_view(bytes).substr(at, chunk));
    while (auto m = d.next()) out.push_back(*m);
  }
  EXPECT_EQ(d.pending(), 0u);
  return out;
}

TEST(StoreProtocolTest, RoundTripInAnyChunking) {
  const std::vector<StoreMessage> msgs = {request(StoreOp::kSet, 0, {"rank/1", std::string("\0\xff value", 8)}),
                                          request(StoreOp::kGet, 30000, {"k"}),
                                          request(StoreOp::kAdd, -5, {"counter"}),
                                          request(StoreOp::kWait, 7, {"a", "b", "c"}),
                                          request(StoreOp::kCheck, 0, {}),
                                          {.kind = 103, .number = INT64_MIN, .fields = {}}};
  std::string stream;
  for (const auto& m : msgs) stream += encode(m);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{8}, stream.size()})
    EXPECT_EQ(decode_all(stream, chunk), msgs) << "chunk " << chunk;
  for (const auto& m : msgs)
    if (m.kind < 100) {
      EXPECT_NO_THROW(check_request(m, "p"));
    }
}

TEST(StoreProtocolTest, HeaderLayoutIsLittleEndianWithMagicAndVersion) {
  const std::string f = encode(request(StoreOp::kGet, 1, {"k"}));
  ASSERT_EQ(f.size(), 8u + 13u + 4u + 1u);
  EXPECT_EQ(f.substr(0, 3), "CST");
  EXPECT_EQ(f[3], static_cast<char>(kStoreProtocolVersion));
  EXPECT_EQ(static_cast<unsigned char>(f[4]), 18u);  // body length, low byte first
  EXPECT_EQ(f[5], 0);
}

TEST(StoreProtocolTest, GarbageIsDataLossAtTheFirstBadByte) {
  StoreFrameDecoder d("tcp store 10.0.0.1:29500");
  d.feed("HTTP/1.1 200 OK\r\n");
  EXPECT_THROW_WITH(d.next(), DataLossError, "10.0.0.1:29500", "not a chorus store", "HTTP/1.1");
  StoreFrameDecoder one("p");
  one.feed("X");  // one byte is enough to know
  EXPECT_THROW(one.next(), DataLossError);
}

TEST(StoreProtocolTest, WrongVersionAndOversizedLengthsAreRejectedBeforeAllocating) {
  std::string f = encode(request(StoreOp::kGet, 1, {"k"}));
  std::string v2 = f;
  v2[3] = 2;
  StoreFrameDecoder d("p");
  d.feed(v2);
  EXPECT_THROW_WITH(d.next(), DataLossError, "version 2");
  std::string huge = f.substr(0, 4) + std::string("\xff\xff\xff\xff", 4);  // 4 GiB body claimed, 0 sent
  StoreFrameDecoder h("p");
  h.feed(huge);
  EXPECT_THROW_WITH(h.next(), DataLossError, "4294967295 bytes");
  // A field count far beyond what the body can hold.
  std::string many = f;
  many[8 + 9] = '\xff';
  many[8 + 10] = '\x0f';
  StoreFrameDecoder m("p");
  m.feed(many);
  EXPECT_THROW(m.next(), DataLossError);
}

TEST(StoreProtocolTest, FieldLengthsMustAddUpToTheBody) {
  std::string f = encode(request(StoreOp::kSet, 0, {"key", "value"}));
  std::string longer = f;
  longer[8 + 13] = 50;  // the key claims 50 bytes
  StoreFrameDecoder d("p");
  d.feed(longer);
  EXPECT_THROW_WITH(d.next(), DataLossError, "claims 50 bytes");
  std::string shorter = f;
  shorter[8 + 13] = 2;  // leaves bytes after the last field
  StoreFrameDecoder s("p");
  s.feed(shorter);
  EXPECT_THROW(s.next(), DataLossError);
  StoreFrameDecoder t("p");
  t.feed(f.substr(0, f.size() - 1));  // truncated: not an error yet, just more to come
  EXPECT_FALSE(t.next().has_value());
}

TEST(StoreProtocolTest, RequestsAndRepliesAreCheckedForTheirKind) {
  EXPECT_THROW(check_request(request(StoreOp::kSet, 0, {"k"}), "p"), DataLossError);
  EXPECT_THROW(check_request(request(StoreOp::kGet, 0, {""}), "p"), DataLossError);
  EXPECT_THROW(check_request(request(StoreOp::kGet, -1, {"k"}), "p"), DataLossError);
  EXPECT_THROW(check_request({.kind = 99, .number = 0, .fields = {}}, "p"), DataLossError);
  EXPECT_THROW(check_request(request(StoreOp::kAdd, 0, {std::string(Store::kMaxKeyBytes + 1, 'k')}), "p"),
               DataLossError);
  const auto value = [](std::vector<std::string> f) {
    return StoreMessage{.kind = static_cast<std::uint8_t>(StoreReply::kValue), .number = 0, .fields = std::move(f)};
  };
  EXPECT_NO_THROW(check_reply(value({"v"}), StoreOp::kGet, "p"));
  EXPECT_THROW(check_reply(value({"v"}), StoreOp::kSet, "p"), DataLossError);
  EXPECT_THROW(check_reply(value({}), StoreOp::kGet, "p"), DataLossError);
  EXPECT_THROW(check_reply({.kind = static_cast<std::uint8_t>(StoreReply::kNumber), .number = 2, .fields = {}},
                           StoreOp::kCheck, "p"),
               DataLossError);
}

}  // namespace
}  // namespace chorus::collective::store_protocol
