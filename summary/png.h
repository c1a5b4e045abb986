// A minimal PNG encoder for image summaries: 8-bit gray, gray+alpha, RGB or RGBA, no filtering,
// zlib stream of "stored" (uncompressed) deflate blocks. No libpng or zlib dependency; the
// files are larger than compressed ones (about height × (width × channels + 1) bytes plus 5 bytes
// per 64 KiB), which for summary images (thumbnails, a few per step) does not matter.
//
// Format (PNG spec, W3C REC-png; zlib RFC 1950; deflate RFC 1951 §3.2.4):
//   "\x89PNG\r\n\x1a\n", then chunks: uint32 BE length, 4-byte type, data, uint32 BE CRC-32 of
//   type + data. IHDR (width, height, bit depth 8, colour type, 0, 0, 0), one IDAT, IEND.
//   IDAT holds a zlib stream: 0x78 0x01, stored blocks (BFINAL/BTYPE=00 byte, LEN, ~LEN, up to
//   65,535 bytes), then the Adler-32 of the uncompressed bytes, big-endian. The uncompressed bytes
//   are each row preceded by filter type 0.
//
// The checksums are the PNG/zlib ones — CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320) and
// Adler-32 — not the CRC-32C of TFRecords. Pure functions: thread-safe.
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
