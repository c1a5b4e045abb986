#include <chorus/core/crc32c.h>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace chorus {
namespace {

constexpr std::uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

std::uint32_t software(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  static const Tables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
          t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
// The operator that advances a CRC over `len` zero bytes (len a power of two), as a 32x32 matrix
// over GF(2) applied a byte of the CRC at a time through four tables (Mark Adler's construction,
// zlib's crc32_combine): crc(A || B) = zeros_|B|(crc(A)) ^ crc_from_0(B), so independent streams
// over consecutive blocks can be joined.
struct ZerosOperator {
  std::array<std::array<std::uint32_t, 256>, 4> t{};

  static std::uint32_t times(const std::uint32_t* mat, std::uint32_t vec) {
    std::uint32_t sum = 0;
    for (; vec != 0; vec >>= 1, ++mat)
      if (vec & 1) sum ^= *mat;
    return sum;
  }
  static void square(std::uint32_t* out, const std::uint32_t* mat) {
    for (int n = 0; n < 32; ++n) out[n] = times(mat, mat[n]);
  }
  explicit ZerosOperator(std::size_t len) {
    std::uint32_t odd[32], even[32];
    odd[0] = kPoly;  // one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = std::uint32_t{1} << (n - 1);
    square(even, odd);  // two zero bits
    square(odd, even);  // four
    const std::uint32_t* op = nullptr;
    for (;;) {  // eight zero bits (one byte) in even, then doubling
      square(even, odd);
      len >>= 1;
      if (len == 0) {
        op = even;
        break;
      }
      square(odd, even);
      len >>= 1;
      if (len == 0) {
        op = odd;
        break;
      }
    }
    for (std::uint32_t b = 0; b < 256; ++b)
      for (int k = 0; k < 4; ++k) t[k][b] = times(op, b << (8 * k));
  }
  std::uint32_t apply(std::uint32_t crc) const {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

// Three independent streams over three consecutive blocks of `kBlock` bytes, joined with the
// zeros operator: the crc32 instruction has a latency of 3 cycles and a throughput of 1, so one
// dependent chain runs at a third of its speed. 512 KiB in L2 (a restore's read piece), 2-core EPYC
// VM, 2026-11-27: one stream 7.6 GB/s, three streams 29-31 GB/s (from memory both ~7 GB/s).
template <std::size_t kBlock>
__attribute__((target("sse4.2"))) std::uint64_t three_streams(const unsigned char*& p, std::size_t& n,
                                                              std::uint64_t c) {
  static const ZerosOperator shift(kBlock);
  while (n >= 3 * kBlock) {
    std::uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < kBlock; i += 8) {
      std::uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kBlock + i, 8);
      std::memcpy(&v2, p + 2 * kBlock + i, 8);
      c = _mm_crc32_u64(c, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
    }
    c = shift.apply(static_cast<std::uint32_t>(c)) ^ static_cast<std::uint32_t>(c1);
    c = shift.apply(static_cast<std::uint32_t>(c)) ^ static_cast<std::uint32_t>(c2);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return c;
}

__attribute__((target("sse4.2"))) std::uint32_t hardware(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  std::uint64_t c = crc;
  c = three_streams<4096>(p, n, c);
  c = three_streams<256>(p, n, c);
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (have_sse42()) return ~hardware(p, n, crc);
#endif
  return ~software(p, n, crc);
}

bool crc32c_uses_hardware() {
#if defined(__x86_64__)
  return have_sse42();
#else
  return false;
#endif
}

namespace internal {
// Tests only: the table implementation, to check it against the hardware one.
std::uint32_t crc32c_software_for_testing(const void* data, std::size_t n, std::uint32_t crc) {
  return ~software(static_cast<const unsigned char*>(data), n, ~crc);
}
}  // namespace internal

}  // namespace chorus
