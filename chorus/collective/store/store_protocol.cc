#include <chorus/collective/store/store_protocol.h>

#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective::store_protocol {

using chorus::internal::str_cat;

namespace {

constexpr char kMagic[3] = {'C', 'S', 'T'};
constexpr std::size_t kBodyFixedBytes = 1 + 8 + 4;  // kind, number, count

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The printable start of the bytes that were not a header, for the message.
std::string show(std::string_view bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                   : str_cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  }
  return out;
}

// Parses one body (its length already bounded) into a message, every field length checked against
// what is left of it.
StoreMessage parse_body(std::string_view body, std::string_view peer) {
  CHORUS_REQUIRE(body.size() >= kBodyFixedBytes, DataLossError, "store protocol: a frame from ", peer,
                 " has a body of ", body.size(), " bytes, less than the ", kBodyFixedBytes,
                 " every message has (not a chorus store?)");
  StoreMessage m;
  m.kind = static_cast<std::uint8_t>(body[0]);
  m.number = static_cast<std::int64_t>(get_u64(body.data() + 1));
  const std::uint32_t count = get_u32(body.data() + 9);
  CHORUS_REQUIRE(count <= kMaxStoreFields, DataLossError, "store protocol: a frame from ", peer, " claims ", count,
                 " fields; at most ", kMaxStoreFields, " are allowed");
  std::size_t at = kBodyFixedBytes;
  // Each field takes at least its 4-byte length: bound the count by what is there before reserving.
  CHORUS_REQUIRE(count <= (body.size() - at) / 4, DataLossError, "store protocol: a frame from ", peer, " claims ",
                 count, " fields but its body has room for at most ", (body.size() - at) / 4);
  m.fields.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    CHORUS_REQUIRE(body.size() - at >= 4, DataLossError, "store protocol: field ", i, " of a frame from ", peer,
                   " is cut off in its length");
    const std::uint32_t n = get_u32(body.data() + at);
    at += 4;
    CHORUS_REQUIRE(n <= body.size() - at, DataLossError, "store protocol: field ", i, " of a frame from ", peer,
                   " claims ", n, " bytes but only ", body.size() - at, " are left in the frame");
    m.fields.emplace_back(body.substr(at, n));
    at += n;
  }
  CHORUS_REQUIRE(at == body.size(), DataLossError, "store protocol: a frame from ", peer, " has ", body.size() - at,
                 " bytes after its last field");
  return m;
}

void check_key(const std::string& key, std::string_view peer) {
  CHORUS_REQUIRE(!key.empty() && key.size() <= Store::kMaxKeyBytes, DataLossError, "store protocol: ", peer,
                 " sent a key of ", key.size(), " bytes (valid: 1..", Store::kMaxKeyBytes, ")");
}

}  // namespace

std::string encode(const StoreMessage& m) {
  std::size_t body = kBodyFixedBytes;
  for (const auto& f : m.fields) body += 4 + f.size();
  CHORUS_REQUIRE(m.fields.size() <= kMaxStoreFields && body <= kMaxStoreBodyBytes, InvalidArgumentError,
                 "store protocol: a message of ", m.fields.size(), " fields and ", body,
                 " bytes is past the protocol's limits (", kMaxStoreFields, " fields, ", kMaxStoreBodyBytes, " bytes)");
  std::string out;
  out.reserve(kFrameHeaderBytes + body);
  out.append(kMagic, 3);
  out.push_back(static_cast<char>(kStoreProtocolVersion));
  put_u32(out, static_cast<std::uint32_t>(body));
  out.push_back(static_cast<char>(m.kind));
  put_u64(out, static_cast<std::uint64_t>(m.number));
  put_u32(out, static_cast<std::uint32_t>(m.fields.size()));
  for (const auto& f : m.fields) {
    put_u32(out, static_cast<std::uint32_t>(f.size()));
    out += f;
  }
  return out;
}

std::optional<StoreMessage> StoreFrameDecoder::next() {
  const std::string_view avail = std::string_view(buffer_).substr(start_);
  // The magic is checked as soon as its bytes are there: garbage fails at once, not at a timeout.
  const std::size_t magic_seen = std::min<std::size_t>(avail.size(), 3);
  CHORUS_REQUIRE(std::memcmp(avail.data(), kMagic, magic_seen) == 0, DataLossError, "store protocol: ", peer_,
                 " sent bytes that do not start a chorus store frame (\"", show(avail),
                 "\"; expected \"CST\"): not a chorus store, or a different protocol on that port");
  if (avail.size() < kFrameHeaderBytes) return std::nullopt;
  const auto version = static_cast<std::uint8_t>(avail[3]);
  CHORUS_REQUIRE(version == kStoreProtocolVersion, DataLossError, "store protocol: ", peer_, " speaks version ",
                 int{version}, "; this chorus speaks version ", int{kStoreProtocolVersion},
                 " (every process of a job must run the same chorus)");
  const std::uint32_t length = get_u32(avail.data() + 4);
  CHORUS_REQUIRE(length <= kMaxStoreBodyBytes, DataLossError, "store protocol: a frame from ", peer_, " claims ",
                 length, " bytes; at most ", kMaxStoreBodyBytes, " are allowed");
  if (avail.size() - kFrameHeaderBytes < length) return std::nullopt;
  StoreMessage m = parse_body(avail.substr(kFrameHeaderBytes, length), peer_);
  start_ += kFrameHeaderBytes + length;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ > (std::size_t{1} << 16)) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  return m;
}

void check_request(const StoreMessage& m, std::string_view peer) {
  const auto op = static_cast<StoreOp>(m.kind);
  switch (op) {
    case StoreOp::kSet:
      CHORUS_REQUIRE(m.fields.size() == 2, DataLossError, "store protocol: ", peer, " sent a set with ",
                     m.fields.size(), " fields (expected key and value)");
      check_key(m.fields[0], peer);
      CHORUS_REQUIRE(m.fields[1].size() <= Store::kMaxValueBytes, DataLossError, "store protocol: ", peer,
                     " sent a value of ", m.fields[1].size(), " bytes (at most ", Store::kMaxValueBytes, ")");
      return;
    case StoreOp::kGet:
    case StoreOp::kAdd:
      CHORUS_REQUIRE(m.fields.size() == 1, DataLossError, "store protocol: ", peer, " sent a ",
                     op == StoreOp::kGet ? "get" : "add", " with ", m.fields.size(), " fields (expected one key)");
      check_key(m.fields[0], peer);
      CHORUS_REQUIRE(op == StoreOp::kAdd || m.number >= 0, DataLossError, "store protocol: ", peer,
                     " sent a negative timeout (", m.number, " ms)");
      return;
    case StoreOp::kWait:
    case StoreOp::kCheck:
      for (const auto& k : m.fields) check_key(k, peer);
      CHORUS_REQUIRE(m.number >= 0, DataLossError, "store protocol: ", peer, " sent a negative timeout (", m.number,
                     " ms)");
      return;
  }
  throw DataLossError(str_cat("store protocol: ", peer, " sent an unknown request kind ", int{m.kind}));
}

void check_reply(const StoreMessage& m, StoreOp op, std::string_view peer) {
  const auto kind = static_cast<StoreReply>(m.kind);
  if (kind == StoreReply::kTimeout) return;
  if (kind == StoreReply::kError) {
    CHORUS_REQUIRE(m.fields.size() == 1, DataLossError, "store protocol: ", peer, " sent an error reply with ",
                   m.fields.size(), " fields (expected the message)");
    return;
  }
  StoreReply expected = StoreReply::kOk;
  std::size_t fields = 0;
  if (op == StoreOp::kGet) {
    expected = StoreReply::kValue;
    fields = 1;
  } else if (op == StoreOp::kAdd || op == StoreOp::kCheck) {
    expected = StoreReply::kNumber;
  }
  CHORUS_REQUIRE(kind == expected && m.fields.size() == fields, DataLossError, "store protocol: ", peer,
                 " answered request kind ", int{static_cast<std::uint8_t>(op)}, " with reply kind ", int{m.kind},
                 " and ", m.fields.size(), " fields (expected kind ", int{static_cast<std::uint8_t>(expected)},
                 " with ", fields, ")");
  CHORUS_REQUIRE(op != StoreOp::kCheck || m.number == 0 || m.number == 1, DataLossError, "store protocol: ", peer,
                 " answered a check with ", m.number, " (expected 0 or 1)");
}

}  // namespace chorus::collective::store_protocol
