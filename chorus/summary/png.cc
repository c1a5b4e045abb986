#include <chorus/summary/png.h>

#include <zlib.h>

#include <algorithm>
#include <string_view>

#include <chorus/core/error.h>

namespace chorus::summary {

namespace {

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

namespace {
// Runs zlib's checksum `fn` (crc32 or adler32) over n bytes from `value`, in pieces its uInt
// lengths can count.
template <typename Fn>
std::uint32_t zlib_checksum(Fn fn, const void* data, std::size_t n, std::uint32_t value) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong v = value;
  for (std::size_t done = 0; done < n;) {
    const std::size_t piece = std::min<std::size_t>(n - done, std::size_t{1} << 30);
    v = fn(v, p + done, static_cast<uInt>(piece));
    done += piece;
  }
  return static_cast<std::uint32_t>(v);
}
}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) { return zlib_checksum(::crc32, data, n, crc); }

std::uint32_t adler32(const void* data, std::size_t n, std::uint32_t adler) {
  return zlib_checksum(::adler32, data, n, adler);
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

  // One zlib stream (zlib's compress2 at its default level 6).
  uLongf z_size = compressBound(static_cast<uLong>(raw.size()));
  std::string z(static_cast<std::size_t>(z_size), '\0');
  const int ret = compress2(reinterpret_cast<Bytef*>(z.data()), &z_size, reinterpret_cast<const Bytef*>(raw.data()),
                            static_cast<uLong>(raw.size()), Z_DEFAULT_COMPRESSION);
  if (ret == Z_MEM_ERROR) throw ResourceExhaustedError("encode_png: zlib out of memory");
  CHORUS_REQUIRE(ret == Z_OK, InternalError, "encode_png: zlib compress2 failed (", ret, ")");
  z.resize(static_cast<std::size_t>(z_size));

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
