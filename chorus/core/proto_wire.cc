#include <chorus/core/proto_wire.h>

#include <bit>
#include <cstring>

#include <chorus/core/error.h>

namespace chorus::wire {

static_assert(std::endian::native == std::endian::little, "the wire helpers assume a little-endian host");

void append_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void append_fixed32(std::string& out, std::uint32_t value) {
  char b[4];
  std::memcpy(b, &value, 4);
  out.append(b, 4);
}

void append_fixed64(std::string& out, std::uint64_t value) {
  char b[8];
  std::memcpy(b, &value, 8);
  out.append(b, 8);
}

// ---- ProtoWriter ----

void ProtoWriter::add_key(int field, WireType type) {
  append_varint(data_, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(type));
}

void ProtoWriter::add_varint(int field, std::uint64_t value) {
  add_key(field, WireType::kVarint);
  append_varint(data_, value);
}

void ProtoWriter::add_double(int field, double value) {
  add_key(field, WireType::kI64);
  append_fixed64(data_, std::bit_cast<std::uint64_t>(value));
}

void ProtoWriter::add_float(int field, float value) {
  add_key(field, WireType::kI32);
  append_fixed32(data_, std::bit_cast<std::uint32_t>(value));
}

void ProtoWriter::add_bytes(int field, std::string_view bytes) {
  add_key(field, WireType::kLen);
  append_varint(data_, bytes.size());
  data_.append(bytes);
}

void ProtoWriter::add_packed_doubles(int field, std::span<const double> values) {
  if (values.empty()) return;
  add_key(field, WireType::kLen);
  append_varint(data_, values.size() * 8);
  for (double v : values) append_fixed64(data_, std::bit_cast<std::uint64_t>(v));
}

void ProtoWriter::add_packed_floats(int field, std::span<const float> values) {
  if (values.empty()) return;
  add_key(field, WireType::kLen);
  append_varint(data_, values.size() * 4);
  for (float v : values) append_fixed32(data_, std::bit_cast<std::uint32_t>(v));
}

void ProtoWriter::add_packed_varints(int field, std::span<const std::int64_t> values) {
  if (values.empty()) return;
  std::string packed;
  for (std::int64_t v : values) append_varint(packed, static_cast<std::uint64_t>(v));
  add_bytes(field, packed);
}

// ---- ProtoReader ----

void ProtoReader::fail(const std::string& why) const {
  throw DataLossError(internal::str_cat("malformed ", what_, " (", data_.size(), " bytes): ", why, " at byte offset ",
                                        pos_, field_ > 0 ? " in field " : "",
                                        field_ > 0 ? std::to_string(field_) : std::string()));
}

std::uint64_t ProtoReader::parse_varint() {
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) fail("truncated varint");
    const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  fail("varint longer than 10 bytes");
}

bool ProtoReader::next() {
  if (pending_) skip();
  if (pos_ >= data_.size()) return false;
  field_ = 0;
  const std::uint64_t key = parse_varint();
  const auto type = static_cast<unsigned>(key & 7);
  const std::uint64_t field = key >> 3;
  if (field == 0 || field > 0x1fffffff) fail(internal::str_cat("invalid field number ", field));
  field_ = static_cast<int>(field);
  if (type != 0 && type != 1 && type != 2 && type != 5)
    fail(internal::str_cat("unsupported wire type ", type,
                           " (valid: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32)"));
  type_ = static_cast<WireType>(type);
  pending_ = true;
  return true;
}

void ProtoReader::expect(WireType type, const char* as) {
  if (!pending_) fail(internal::str_cat("read_", as, "() without a pending field (call next() first)"));
  if (type_ != type)
    fail(internal::str_cat("wire type ", static_cast<int>(type_), " cannot be read as ", as, " (needs wire type ",
                           static_cast<int>(type), ")"));
  pending_ = false;
}

std::uint64_t ProtoReader::read_varint() {
  expect(WireType::kVarint, "varint");
  return parse_varint();
}

double ProtoReader::read_double() {
  expect(WireType::kI64, "double");
  if (data_.size() - pos_ < 8) fail("truncated fixed64");
  std::uint64_t bits;
  std::memcpy(&bits, data_.data() + pos_, 8);
  pos_ += 8;
  return std::bit_cast<double>(bits);
}

float ProtoReader::read_float() {
  expect(WireType::kI32, "float");
  if (data_.size() - pos_ < 4) fail("truncated fixed32");
  std::uint32_t bits;
  std::memcpy(&bits, data_.data() + pos_, 4);
  pos_ += 4;
  return std::bit_cast<float>(bits);
}

std::string_view ProtoReader::read_bytes() {
  expect(WireType::kLen, "bytes");
  const std::uint64_t n = parse_varint();
  if (n > data_.size() - pos_)
    fail(internal::str_cat("length ", n, " runs past the end (", data_.size() - pos_, " bytes left)"));
  std::string_view out = data_.substr(pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return out;
}

void ProtoReader::skip() {
  if (!pending_) return;
  switch (type_) {
    case WireType::kVarint: read_varint(); break;
    case WireType::kI64: read_double(); break;
    case WireType::kI32: read_float(); break;
    case WireType::kLen: read_bytes(); break;
  }
}

// ---- repeated fields, packed or not ----

namespace {

template <typename T>
void read_fixed_repeated(ProtoReader& r, std::vector<T>& out) {
  const int field = r.field();
  const std::string_view packed = r.read_bytes();
  if (packed.size() % sizeof(T) != 0)
    throw DataLossError(internal::str_cat("malformed packed repeated field ", field, ": ", packed.size(),
                                          " bytes is not a multiple of the element size ", sizeof(T)));
  const std::size_t n = packed.size() / sizeof(T);
  const std::size_t old = out.size();
  out.resize(old + n);
  if (n > 0) std::memcpy(out.data() + old, packed.data(), packed.size());  // little-endian host
}

}  // namespace

void read_repeated_doubles(ProtoReader& r, std::vector<double>& out) {
  if (r.wire_type() == WireType::kLen) return read_fixed_repeated(r, out);
  out.push_back(r.read_double());  // unpacked: one value per field
}

void read_repeated_floats(ProtoReader& r, std::vector<float>& out) {
  if (r.wire_type() == WireType::kLen) return read_fixed_repeated(r, out);
  out.push_back(r.read_float());
}

void read_repeated_int64s(ProtoReader& r, std::vector<std::int64_t>& out) {
  if (r.wire_type() != WireType::kLen) {
    out.push_back(r.read_int64());
    return;
  }
  // A packed run of varints: values back to back, no keys.
  const std::string_view packed = r.read_bytes();
  std::size_t pos = 0;
  while (pos < packed.size()) {
    std::uint64_t value = 0;
    int shift = 0;
    for (;; shift += 7) {
      if (pos >= packed.size() || shift >= 64)
        throw DataLossError(internal::str_cat("malformed packed repeated field ", r.field(),
                                              ": truncated or overlong varint at byte ", pos, " of ", packed.size()));
      const auto byte = static_cast<std::uint8_t>(packed[pos++]);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    out.push_back(static_cast<std::int64_t>(value));
  }
}

}  // namespace chorus::wire
