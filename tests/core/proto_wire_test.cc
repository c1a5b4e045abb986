// Protobuf wire format by hand: the byte examples of the protobuf encoding guide
// (protobuf.dev/programming-guides/encoding), round trips, and malformed input → DataLossError.
#include <chorus/core/proto_wire.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <chorus/core/error.h>

namespace chorus::wire {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

TEST(ProtoWire, VarintsAsInTheEncodingGuide) {
  ProtoWriter w;
  w.add_varint(1, 150);  // the guide's "08 96 01"
  EXPECT_EQ(w.data(), bytes({0x08, 0x96, 0x01}));

  std::string s;
  append_varint(s, 0);
  append_varint(s, 1);
  append_varint(s, 127);
  append_varint(s, 128);
  append_varint(s, 300);
  EXPECT_EQ(s, bytes({0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02}));

  // Negative int64/int32 are sign-extended: ten bytes.
  ProtoWriter neg;
  neg.add_int64(1, -1);
  EXPECT_EQ(neg.data(), bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));

  std::string max;
  append_varint(max, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(max.size(), 10u);
}

TEST(ProtoWire, StringsFixedAndPackedAsInTheEncodingGuide) {
  ProtoWriter w;
  w.add_bytes(2, "testing");  // "12 07 74 65 73 74 69 6e 67"
  EXPECT_EQ(w.data(), bytes({0x12, 0x07}) + "testing");

  ProtoWriter p;
  const std::vector<std::int64_t> v{3, 270, 86942};  // "22 06 03 8e 02 9e a7 05"
  p.add_packed_varints(4, v);
  EXPECT_EQ(p.data(), bytes({0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05}));

  ProtoWriter f;
  f.add_double(1, 1.0);  // IEEE 754 1.0 = 0x3FF0000000000000, little-endian
  f.add_float(2, 1.0f);  // 0x3F800000
  EXPECT_EQ(f.data(), bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x15, 0, 0, 0x80, 0x3f}));

  ProtoWriter empty;
  empty.add_packed_doubles(6, {});
  EXPECT_TRUE(empty.data().empty()) << "an empty repeated field is absent";
}

TEST(ProtoWire, ReaderRoundTripsEveryWireTypeAndSkipsUnknownFields) {
  ProtoWriter inner;
  inner.add_bytes(1, "nested");
  ProtoWriter w;
  w.add_double(1, 1700000001.25);
  w.add_int64(2, -42);
  w.add_bytes(3, "brain.Event:2");
  w.add_float(4, 0.5f);
  w.add_message(5, inner);
  w.add_varint(99, 7);  // unknown to the caller below
  const std::vector<double> d{1.5, -2.25, 1e300};
  w.add_packed_doubles(6, d);
  const std::vector<float> fl{0.25f, -8.0f};
  w.add_packed_floats(7, fl);
  const std::vector<std::int64_t> iv{0, -1, 1LL << 40};
  w.add_packed_varints(8, iv);

  ProtoReader r(w.data());
  int seen = 0;
  std::vector<double> dd;
  std::vector<float> ff;
  std::vector<std::int64_t> ii;
  while (r.next()) {
    ++seen;
    switch (r.field()) {
      case 1: EXPECT_EQ(r.read_double(), 1700000001.25); break;
      case 2: EXPECT_EQ(r.read_int64(), -42); break;
      case 3: EXPECT_EQ(r.read_bytes(), "brain.Event:2"); break;
      case 4: EXPECT_EQ(r.read_float(), 0.5f); break;
      case 5: {
        ProtoReader n(r.read_bytes());
        ASSERT_TRUE(n.next());
        EXPECT_EQ(n.field(), 1);
        EXPECT_EQ(n.read_bytes(), "nested");
        EXPECT_FALSE(n.next());
        break;
      }
      case 6: read_repeated_doubles(r, dd); break;
      case 7: read_repeated_floats(r, ff); break;
      case 8: read_repeated_int64s(r, ii); break;
      default: break;  // not consumed: next() skips it
    }
  }
  EXPECT_EQ(seen, 9);
  EXPECT_EQ(dd, d);
  EXPECT_EQ(ff, fl);
  EXPECT_EQ(ii, iv);
}

TEST(ProtoWire, RepeatedFieldsAlsoAcceptTheUnpackedEncoding) {
  ProtoWriter w;
  w.add_double(6, 1.0);
  w.add_double(6, 2.0);
  w.add_varint(7, 5);
  w.add_int64(7, -3);
  ProtoReader r(w.data());
  std::vector<double> d;
  std::vector<std::int64_t> i;
  while (r.next()) {
    if (r.field() == 6)
      read_repeated_doubles(r, d);
    else
      read_repeated_int64s(r, i);
  }
  EXPECT_EQ(d, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(i, (std::vector<std::int64_t>{5, -3}));
}

void expect_data_loss(const std::string& data, const std::string& needle) {
  try {
    ProtoReader r(data, "test message");
    while (r.next()) {
      if (r.wire_type() == WireType::kLen)
        r.read_bytes();
      else
        r.skip();
    }
    FAIL() << "no DataLossError for " << needle;
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test message"), std::string::npos) << e.what();
  }
}

TEST(ProtoWire, MalformedInputThrowsDataLossNotUndefinedBehaviour) {
  expect_data_loss(bytes({0x08, 0x96}), "truncated varint");             // varint cut short
  expect_data_loss(bytes({0x12, 0x05, 'a', 'b'}), "runs past the end");  // length past end
  expect_data_loss(bytes({0x09, 1, 2, 3}), "truncated fixed64");
  expect_data_loss(bytes({0x15, 1, 2}), "truncated fixed32");
  expect_data_loss(bytes({0x0b}), "unsupported wire type 3");  // start group
  expect_data_loss(bytes({0x00, 0x01}), "invalid field number 0");
  expect_data_loss(std::string(11, '\xff'), "varint longer than 10 bytes");

  // Reading a field as the wrong type.
  ProtoWriter w;
  w.add_varint(1, 5);
  ProtoReader r(w.data());
  ASSERT_TRUE(r.next());
  EXPECT_THROW(r.read_double(), DataLossError);

  // A packed double field whose size is not a multiple of 8.
  ProtoWriter p;
  p.add_bytes(6, "123456789");
  ProtoReader pr(p.data());
  ASSERT_TRUE(pr.next());
  std::vector<double> out;
  EXPECT_THROW(read_repeated_doubles(pr, out), DataLossError);
}

}  // namespace
}  // namespace chorus::wire
