#include <chorus/summary/png.h>

#include <zlib.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/data/io/png.h>

namespace chorus::summary {

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
  png_color_type(channels);  // the summary's message for a bad channel count
  return data::encode_png(pixels, height, width, channels, 8, -1);
}

}  // namespace chorus::summary
