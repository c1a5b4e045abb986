// Internal to collective/store/: the wire protocol of the TCP store (tcp_store.h) — what a client
// and the server say to each other, and the one decoder of it, kept apart so that it is fuzzed
// (tests/fuzz/store_protocol_fuzz.cc) and unit-tested without sockets.
//
// A frame (all integers little-endian):
//   magic    4 bytes  "CST" then the protocol version (kStoreProtocolVersion)
//   length   u32      bytes of the body that follows; at most kMaxStoreBodyBytes
//   body     kind u8, number i64, count u32, then `count` fields, each u32 length + bytes
// A request's kind is an op (StoreOp); number is the timeout in milliseconds (get, wait) or the
// delta (add). A reply's kind is a StoreReply; number is add's result or check's verdict (0/1).
//   request                       fields                  reply (ok)
//   kSet                          key, value              kOk
//   kGet    number=timeout ms     key                     kValue  value
//   kAdd    number=delta          key                     kNumber number=result
//   kWait   number=timeout ms     key...                  kOk
//   kCheck                        key...                  kNumber number=0|1
// Any request may get kTimeout (fields: the keys still missing) or kError (number: the ErrorCode,
// field: the message).
//
// Limits, checked before anything is allocated: a body of at most kMaxStoreBodyBytes, at most
// kMaxStoreFields fields, each field within the body; a key at most Store::kMaxKeyBytes, a value at
// most Store::kMaxValueBytes. Anything else — wrong magic or version, a length past a limit, a body
// whose fields do not add up to its length, an unknown kind, the wrong field count for the kind —
// is DataLossError naming what was wrong and `peer` (the client and the server both treat it as
// "this is not a chorus store").
//
// Thread-safety: a StoreFrameDecoder belongs to one connection (one thread); the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/collective/store/store.h>

namespace chorus::collective::store_protocol {

inline constexpr std::uint8_t kStoreProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 8;
inline constexpr std::size_t kMaxStoreFields = 4096;  // keys of one wait/check
// A set of the largest value under the largest key, with room for the fixed fields.
inline constexpr std::size_t kMaxStoreBodyBytes = Store::kMaxValueBytes + Store::kMaxKeyBytes + 64;

enum class StoreOp : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kCheck = 5 };
enum class StoreReply : std::uint8_t { kOk = 101, kValue = 102, kNumber = 103, kTimeout = 104, kError = 105 };

struct StoreMessage {
  std::uint8_t kind = 0;  // a StoreOp or a StoreReply
  std::int64_t number = 0;
  std::vector<std::string> fields;
  bool operator==(const StoreMessage&) const = default;
};

// The frame of `m` (header and body). InvalidArgumentError when it breaks a limit above (callers
// check keys and values first, so this is a bug guard).
std::string encode(const StoreMessage& m);

// Splits a byte stream into messages. feed() appends what was received; next() returns the next
// whole message, or nullopt when more bytes are needed, and throws DataLossError (naming `peer`)
// at the first byte that cannot be the protocol. Memory: at most one frame's body plus what was fed
// beyond it.
class StoreFrameDecoder {
 public:
  explicit StoreFrameDecoder(std::string peer) : peer_(std::move(peer)) {}
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  std::optional<StoreMessage> next();
  // Bytes fed and not yet returned as a message.
  std::size_t pending() const { return buffer_.size() - start_; }

 private:
  std::string peer_;
  std::string buffer_;
  std::size_t start_ = 0;  // where the next frame begins in buffer_
};

// DataLossError (naming `peer`) unless `m` is a request the server can run: a known op with its
// fields (keys non-empty and within Store::kMaxKeyBytes, values within Store::kMaxValueBytes).
void check_request(const StoreMessage& m, std::string_view peer);
// The same for a reply to `op`: kTimeout/kError anywhere, else the one reply `op` expects.
void check_reply(const StoreMessage& m, StoreOp op, std::string_view peer);

}  // namespace chorus::collective::store_protocol
