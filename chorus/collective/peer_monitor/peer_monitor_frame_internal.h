// Internal to collective/: the wire format of the peer monitor (peer_monitor.h), the one place it
// is defined. Every message between two monitors is one fixed 32-byte frame, big-endian:
//
//   bytes  0..3    magic 0x43484d31 ("CHM1")
//   bytes  4..7    kind (FrameKind; on an open connection an unknown kind counts as a heartbeat)
//   bytes  8..11   the sender's rank (two's complement)
//   bytes 12..15   the sender's pid (low 32 bits)
//   bytes 16..23   token: the receiver's token, which only the address exchange told the sender
//   bytes 24..31   echo: in a hello, the sender's own token, for the acknowledgement; in a goodbye,
//                  the length of the error text that follows the frame (0: a clean end); else 0
//
// A goodbye of a process that leaves because of an error (set_process_failure, peer_monitor.h) is
// followed by `echo` bytes of its error message (at most kMaxGoodbyeText, not NUL-terminated).
//
// The handshake: the lower rank connects and sends kHello; the acceptor checks the token and
// answers kHelloAck; the connector's first kHeartbeat tells the acceptor that the connection is
// open at both ends. Then kHeartbeat every heartbeat_interval, and kGoodbye before a graceful end.
//
// encode/decode are pure functions, safe from any thread. decode checks only the size and the magic
// number: which kinds, ranks and tokens are acceptable is the connection's business
// (peer_monitor_connection.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace chorus::collective::peer_monitor_detail {

constexpr std::uint32_t kMagic = 0x43484d31;  // "CHM1"
constexpr std::size_t kFrameBytes = 32;
constexpr std::size_t kMaxGoodbyeText = 1024;  // a goodbye's error text; longer ones are cut there
enum FrameKind : std::uint32_t { kHello = 1, kHelloAck = 2, kHeartbeat = 3, kGoodbye = 4 };

struct Frame {
  std::uint32_t kind = 0;
  std::int32_t rank = -1;
  std::uint32_t pid = 0;
  std::uint64_t token = 0;  // the receiver's token
  std::uint64_t echo = 0;   // hello: the sender's token, for the acknowledgement
};

// The frame's kFrameBytes bytes on the wire (the magic number included).
std::array<unsigned char, kFrameBytes> encode(const Frame& f);

// The frame in the first kFrameBytes bytes of `bytes` (more may follow: the next frames).
// nullopt when fewer than kFrameBytes bytes are given or the magic number is wrong. Never throws.
std::optional<Frame> decode(std::span<const unsigned char> bytes);

}  // namespace chorus::collective::peer_monitor_detail
