// PNG for image summaries: the house's one PNG encoder is data::encode_png (libpng,
// chorus/data/io/png.h, tf.io.encode_png's settings); this header keeps summary's spelling of it and
// the two zlib checksums the summary tests and tools use.
//
// The checksums are the PNG/zlib ones — CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320) and
// Adler-32, computed by zlib — not the CRC-32C of TFRecords. Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::summary {

// CRC-32 as zlib's crc32(): crc32("123456789") == 0xCBF43926. `crc` continues a previous value
// (0 to start).
std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);
// Adler-32 as zlib's adler32(): adler32("Wikipedia") == 0x11E60398. `adler` continues a previous
// value (1 to start).
std::uint32_t adler32(const void* data, std::size_t n, std::uint32_t adler = 1);

// PNG colour type for `channels` (1 gray → 0, 2 gray+alpha → 4, 3 RGB → 2, 4 RGBA → 6).
int png_color_type(int channels);

// Encodes `pixels` (height × width × channels bytes, row-major, channels interleaved) as an 8-bit
// PNG: data::encode_png(pixels, height, width, channels) (zlib level 6, libpng's adaptive row
// filters, one IDAT per 8 KiB of compressed data as libpng writes them). InvalidArgumentError for
// channels outside 1–4, a non-positive height or width, or a dimension above 2^31 − 1 (the PNG limit).
std::string encode_png(const std::uint8_t* pixels, std::int64_t height, std::int64_t width, int channels);

}  // namespace chorus::summary
