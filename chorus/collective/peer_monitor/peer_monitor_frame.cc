#include <chorus/collective/peer_monitor/peer_monitor_frame_internal.h>

namespace chorus::collective::peer_monitor_detail {
namespace {

void put(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * (bytes - 1 - i)));
}
std::uint64_t get(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::array<unsigned char, kFrameBytes> encode(const Frame& f) {
  std::array<unsigned char, kFrameBytes> b{};
  put(&b[0], kMagic, 4);
  put(&b[4], f.kind, 4);
  put(&b[8], static_cast<std::uint32_t>(f.rank), 4);
  put(&b[12], f.pid, 4);
  put(&b[16], f.token, 8);
  put(&b[24], f.echo, 8);
  return b;
}

std::optional<Frame> decode(std::span<const unsigned char> bytes) {
  if (bytes.size() < kFrameBytes) return std::nullopt;
  const unsigned char* b = bytes.data();
  if (get(b, 4) != kMagic) return std::nullopt;
  Frame f;
  f.kind = static_cast<std::uint32_t>(get(b + 4, 4));
  f.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(b + 8, 4)));
  f.pid = static_cast<std::uint32_t>(get(b + 12, 4));
  f.token = get(b + 16, 8);
  f.echo = get(b + 24, 8);
  return f;
}

}  // namespace chorus::collective::peer_monitor_detail
