// Protocol-buffer wire format, by hand: just enough to write and read the handful of messages
// chorus exchanges with TensorFlow (TensorBoard events in summary/, checkpoint entries and object
// graphs in checkpoint/, tf.train.Example in launch/). No protobuf library.
//
// The wire format (protobuf.dev/programming-guides/encoding): a message is a sequence of fields,
// each a key varint (field_number << 3 | wire_type) followed by its payload:
//   wire type 0 VARINT   int32/int64/uint64/bool/enum, base-128, little-endian groups of 7 bits
//                        (negative int32/int64 are sign-extended to 64 bits: 10 bytes)
//   wire type 1 I64      double, fixed64: 8 bytes little-endian
//   wire type 2 LEN      string, bytes, embedded message, packed repeated scalars: varint length
//                        then the bytes
//   wire type 5 I32      float, fixed32: 4 bytes little-endian
// (3 and 4, the deprecated groups, are rejected by the reader.)
//
// ProtoWriter appends fields to a std::string; ProtoReader walks the fields of one serialized
// message. Both are plain values with no shared state: thread-safe as long as each object is used
// by one thread. The reader never reads past its input: malformed input (a truncated varint, a
// length past the end, a wire type the field cannot have) throws DataLossError naming the field
// number and byte offset — it is untrusted data from a file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::wire {

enum class WireType : std::uint8_t { kVarint = 0, kI64 = 1, kLen = 2, kI32 = 5 };

// Appends `value` as a base-128 varint (1–10 bytes).
void append_varint(std::string& out, std::uint64_t value);
// Appends `value` little-endian (4 / 8 bytes).
void append_fixed32(std::string& out, std::uint32_t value);
void append_fixed64(std::string& out, std::uint64_t value);

// Builds one message. Every add_* appends one field; proto3 "omit the default" is the caller's
// choice (TF omits a zero step, so event.cc does; the writer itself never omits anything).
class ProtoWriter {
 public:
  void add_varint(int field, std::uint64_t value);
  // int32/int64/enum: negative values are sign-extended (10-byte varint), as protobuf does.
  void add_int64(int field, std::int64_t value) { add_varint(field, static_cast<std::uint64_t>(value)); }
  void add_bool(int field, bool value) { add_varint(field, value ? 1 : 0); }
  void add_double(int field, double value);  // fixed64
  void add_float(int field, float value);    // fixed32
  // string, bytes, or an already serialized embedded message.
  void add_bytes(int field, std::string_view bytes);
  void add_message(int field, const ProtoWriter& message) { add_bytes(field, message.data()); }
  // Packed repeated fields (the proto3 default for scalar types): one LEN field holding the
  // values back to back. An empty span writes nothing (an empty repeated field is absent).
  void add_packed_doubles(int field, std::span<const double> values);
  void add_packed_floats(int field, std::span<const float> values);
  void add_packed_varints(int field, std::span<const std::int64_t> values);

  const std::string& data() const { return data_; }
  std::string release() { return std::move(data_); }

 private:
  void add_key(int field, WireType type);
  std::string data_;
};

// Iterates the fields of one serialized message, in order:
//
//   ProtoReader r(bytes);
//   while (r.next()) {
//     switch (r.field()) {
//       case 1: wall_time = r.read_double(); break;
//       case 5: decode_summary(r.read_bytes()); break;
//       default: r.skip();        // unknown fields are skipped, as protobuf does
//     }
//   }
//
// After next() returns true exactly one read_*() or skip() must consume the payload before the
// next call to next() (next() skips it if not). read_* check the wire type against what the
// caller asks for and throw DataLossError on a mismatch. The returned string_views point into
// the input, which must outlive them.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data, std::string_view what = "message") : data_(data), what_(what) {}

  // Advances to the next field; false at the end of the message.
  bool next();
  int field() const { return field_; }
  WireType wire_type() const { return type_; }

  std::uint64_t read_varint();
  std::int64_t read_int64() { return static_cast<std::int64_t>(read_varint()); }
  bool read_bool() { return read_varint() != 0; }
  double read_double();           // wire type I64
  float read_float();             // wire type I32
  std::string_view read_bytes();  // wire type LEN
  void skip();

  // Offset of the next unread byte (for error messages).
  std::size_t offset() const { return pos_; }

 private:
  [[noreturn]] void fail(const std::string& why) const;
  void expect(WireType type, const char* as);
  std::uint64_t parse_varint();

  std::string_view data_;
  std::string_view what_;
  std::size_t pos_ = 0;
  int field_ = 0;
  WireType type_ = WireType::kVarint;
  bool pending_ = false;  // a field's payload has not been consumed yet
};

// Decoders for packed repeated fields that also accept the unpacked encoding (one field per
// value), as protobuf parsers must. Call with the reader positioned on such a field; appends.
void read_repeated_doubles(ProtoReader& r, std::vector<double>& out);
void read_repeated_floats(ProtoReader& r, std::vector<float>& out);
void read_repeated_int64s(ProtoReader& r, std::vector<std::int64_t>& out);

}  // namespace chorus::wire
