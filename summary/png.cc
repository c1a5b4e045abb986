#include "summary/png.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "core/error.h"

namespace chorus::summary {

namespace {

constexpr std::array<std::uint32_t, 256> make_crc32_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kCrc32Table = make_crc32_table();

void put_be32(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

void put_chunk(std::string& out, std::string_view type, std::string_view data) {
  put_be32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.append(type);
  out.append(data);
  put_be32(out, crc32(out.data() + start, out.size() - start));
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = kCrc32Table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t adler32(const void* data, std::size_t n, std::uint32_t adler) {
  constexpr std::uint32_t kMod = 65521;
  // 5552 is the largest run for which the 32-bit sums cannot overflow before the modulo (zlib's NMAX).
  constexpr std::size_t kRun = 5552;
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint32_t a = adler & 0xffff, b = adler >> 16;
  while (n > 0) {
    const std::size_t run = std::min(n, kRun);
    for (std::size_t i = 0; i < run; ++i) {
      a += p[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
    p += run;
    n -= run;
  }
  return (b << 16) | a;
}

int png_color_type(int channels) {
  switch (channels) {
    case 1: return 0;
    case 2: return 4;
    case 3: return 2;
    case 4: return 6;
    default:
      throw InvalidArgumentError(chorus::internal::str_cat(
          "PNG images have 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA) channels, got ", channels));
  }
}

std::string encode_png(const std::uint8_t* pixels, std::int64_t height, std::int64_t width, int channels) {
  const int color_type = png_color_type(channels);
  constexpr std::int64_t kMaxDim = 0x7fffffff;
  CHORUS_REQUIRE(height > 0 && width > 0 && height <= kMaxDim && width <= kMaxDim, InvalidArgumentError,
                 "PNG image size ", height, "x", width, " is invalid (each side 1 to 2^31-1)");
  CHORUS_REQUIRE(pixels != nullptr, InvalidArgumentError, "encode_png: pixels is null");

  // The raw scanlines: filter type 0 (None) then the row's bytes.
  const auto row_bytes = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  std::string raw;
  raw.reserve(static_cast<std::size_t>(height) * (row_bytes + 1));
  for (std::int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels) + static_cast<std::size_t>(y) * row_bytes, row_bytes);
  }

  // zlib stream of stored deflate blocks.
  constexpr std::size_t kMaxStored = 65535;
  std::string z;
  z.reserve(raw.size() + raw.size() / kMaxStored * 5 + 16);
  z.push_back(static_cast<char>(0x78));  // CM 8 (deflate), CINFO 7 (32 KiB window)
  z.push_back(static_cast<char>(0x01));  // FLEVEL 0, no dictionary; 0x7801 is a multiple of 31
  std::size_t pos = 0;
  do {
    const std::size_t len = std::min(kMaxStored, raw.size() - pos);
    const bool final = pos + len == raw.size();
    z.push_back(static_cast<char>(final ? 1 : 0));  // BFINAL, BTYPE 00 (stored), padded to the byte
    z.push_back(static_cast<char>(len & 0xff));
    z.push_back(static_cast<char>(len >> 8));
    z.push_back(static_cast<char>(~len & 0xff));
    z.push_back(static_cast<char>((~len >> 8) & 0xff));
    z.append(raw, pos, len);
    pos += len;
  } while (pos < raw.size());
  put_be32(z, adler32(raw.data(), raw.size()));

  std::string ihdr;
  put_be32(ihdr, static_cast<std::uint32_t>(width));
  put_be32(ihdr, static_cast<std::uint32_t>(height));
  ihdr.push_back(8);  // bit depth
  ihdr.push_back(static_cast<char>(color_type));
  ihdr.append(3, '\0');  // compression 0, filter 0, interlace 0

  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", ihdr);
  // A chunk holds at most 2^31 - 1 bytes; the zlib stream may continue over several IDATs.
  constexpr std::size_t kMaxChunk = std::size_t{1} << 30;
  for (std::size_t at = 0; at < z.size(); at += kMaxChunk)
    put_chunk(png, "IDAT", std::string_view(z).substr(at, kMaxChunk));
  put_chunk(png, "IEND", {});
  return png;
}

}  // namespace chorus::summary
