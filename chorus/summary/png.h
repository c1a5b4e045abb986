// A minimal PNG encoder for image summaries: 8-bit gray, gray+alpha, RGB or RGBA, no filtering,
// the scanlines deflated by zlib (compress2, default level).
//
// Format (PNG spec, W3C REC-png; zlib RFC 1950):
//   "\x89PNG\r\n\x1a\n", then chunks: uint32 BE length, 4-byte type, data, uint32 BE CRC-32 of
//   type + data. IHDR (width, height, bit depth 8, colour type, 0, 0, 0), IDAT (one zlib stream
//   over as many IDATs as 1 GiB pieces need), IEND. The uncompressed bytes are each row preceded
//   by filter type 0.
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

// Encodes `pixels` (height × width × channels bytes, row-major, channels interleaved) as a PNG.
// InvalidArgumentError for channels outside 1–4, a non-positive height or width, or a dimension
// above 2^31 − 1 (the PNG limit).
std::string encode_png(const std::uint8_t* pixels, std::int64_t height, std::int64_t width, int channels);

}  // namespace chorus::summary
