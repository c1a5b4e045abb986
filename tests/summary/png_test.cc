// The summary's PNG encoder (data::encode_png, libpng): CRC-32 / Adler-32 known answers, the
// file's structure, the deflated scanlines (zlib's uncompress; libpng's row filters undone here),
// a decode back to the pixels (data::decode_png), and a check by an independent implementation
// (Python's zlib.decompress, zlib.crc32 and the PNG filters written out) in the interop Python
// (tests/core/interop_python.h: skipped without it outside CI, FAILED under CI=true).
#include <chorus/summary/png.h>

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/summary/summary_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/png.h>

namespace chorus::summary {
namespace {

using testing::TempDir;
using testing::write_file;

std::uint32_t be32(const std::string& s, std::size_t at) {
  return (std::uint32_t(std::uint8_t(s[at])) << 24) | (std::uint32_t(std::uint8_t(s[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(s[at + 2])) << 8) | std::uint32_t(std::uint8_t(s[at + 3]));
}

struct Chunk {
  std::string type, data;
};

// Splits a PNG into chunks, checking the signature and every chunk's CRC-32.
std::vector<Chunk> chunks(const std::string& png) {
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::vector<Chunk> out;
  std::size_t at = 8;
  while (at < png.size()) {
    const std::uint32_t len = be32(png, at);
    Chunk c{png.substr(at + 4, 4), png.substr(at + 8, len)};
    EXPECT_EQ(be32(png, at + 8 + len), crc32(png.data() + at + 4, 4 + len)) << "CRC of chunk " << c.type;
    out.push_back(c);
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size());
  return out;
}

// The IDAT chunks' data, concatenated (libpng writes the zlib stream in 8 KiB chunks).
std::string idat(const std::vector<Chunk>& cs) {
  std::string z;
  for (const Chunk& c : cs)
    if (c.type == "IDAT") z += c.data;
  return z;
}

// Undoes the PNG row filters (None, Sub, Up, Average, Paeth; 8-bit samples, `bpp` bytes a pixel).
std::string unfilter(const std::string& raw, int h, int row_bytes, int bpp) {
  std::string out(static_cast<std::size_t>(h * row_bytes), '\0');
  auto at = [&](int y, int x) -> int {
    return (y < 0 || x < 0) ? 0 : std::uint8_t(out[std::size_t(y * row_bytes + x)]);
  };
  for (int y = 0; y < h; ++y) {
    const int type = std::uint8_t(raw[std::size_t(y * (row_bytes + 1))]);
    EXPECT_LE(type, 4) << "filter type of row " << y;
    for (int x = 0; x < row_bytes; ++x) {
      const int v = std::uint8_t(raw[std::size_t(y * (row_bytes + 1) + 1 + x)]);
      const int a = at(y, x - bpp), b = at(y - 1, x), c = at(y - 1, x - bpp);
      int pred = 0;
      if (type == 1) pred = a;
      if (type == 2) pred = b;
      if (type == 3) pred = (a + b) / 2;
      if (type == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
      }
      out[std::size_t(y * row_bytes + x)] = static_cast<char>((v + pred) & 255);
    }
  }
  return out;
}

// Inflates the IDAT zlib stream with zlib itself (which checks its Adler-32 too).
std::string inflate_stored(const std::string& z, std::size_t expected) {
  EXPECT_EQ((std::uint8_t(z[0]) * 256 + std::uint8_t(z[1])) % 31, 0) << "zlib header check bits";
  EXPECT_EQ(std::uint8_t(z[0]) & 0x0f, 8) << "deflate";
  std::string out(expected, '\0');
  uLongf size = static_cast<uLongf>(expected);
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(z.data()),
                       static_cast<uLong>(z.size())),
            Z_OK);
  EXPECT_EQ(size, expected);
  EXPECT_EQ(be32(z, z.size() - 4), adler32(out.data(), out.size()));
  return out;
}

TEST(Png, Crc32AndAdler32KnownAnswers) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32(check.data(), check.size()), 0xCBF43926u);  // CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32("", 0), 0u);
  // Continuing a CRC over a split input gives the CRC of the whole.
  EXPECT_EQ(crc32(check.data() + 4, 5, crc32(check.data(), 4)), 0xCBF43926u);
  // The IEND chunk's CRC, in every PNG file: crc32("IEND") = 0xAE426082.
  EXPECT_EQ(crc32("IEND", 4), 0xAE426082u);
  const std::string wiki = "Wikipedia";
  EXPECT_EQ(adler32(wiki.data(), wiki.size()), 0x11E60398u);  // Wikipedia's Adler-32 example
  EXPECT_EQ(adler32("", 0), 1u);
  // Long inputs exercise the deferred modulo: 1 MiB of 0xff, computed with the definition.
  const std::string ff(1 << 20, '\xff');
  std::uint64_t a = 1, b = 0;
  for (unsigned char c : ff) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(adler32(ff.data(), ff.size()), std::uint32_t((b << 16) | a));
}

TEST(Png, StructureAndPixelsRoundTripForEveryChannelCount) {
  std::mt19937 rng(7);
  for (int channels = 1; channels <= 4; ++channels) {
    SCOPED_TRACE(channels);
    const int h = 5, w = 7;
    std::vector<std::uint8_t> px(static_cast<std::size_t>(h * w * channels));
    for (auto& p : px) p = static_cast<std::uint8_t>(rng());
    const std::string png = encode_png(px.data(), h, w, channels);
    const std::vector<Chunk> cs = chunks(png);
    ASSERT_GE(cs.size(), 3u);
    EXPECT_EQ(cs[0].type, "IHDR");
    ASSERT_EQ(cs[0].data.size(), 13u);
    EXPECT_EQ(be32(cs[0].data, 0), std::uint32_t(w));
    EXPECT_EQ(be32(cs[0].data, 4), std::uint32_t(h));
    EXPECT_EQ(cs[0].data[8], 8) << "bit depth";
    EXPECT_EQ(cs[0].data[9], png_color_type(channels));
    EXPECT_EQ(cs[0].data.substr(10), std::string(3, '\0'));
    EXPECT_EQ(cs.back().type, "IEND");
    EXPECT_TRUE(cs.back().data.empty());
    const std::string raw = inflate_stored(idat(cs), static_cast<std::size_t>(h * (w * channels + 1)));
    EXPECT_EQ(unfilter(raw, h, w * channels, channels),
              std::string(reinterpret_cast<const char*>(px.data()), px.size()));
    EXPECT_EQ(data::decode_png_values(png).u8, px);
    EXPECT_EQ(data::decode_png_values(png).channels, channels);
  }
  EXPECT_EQ(png_color_type(1), 0);
  EXPECT_EQ(png_color_type(2), 4);
  EXPECT_EQ(png_color_type(3), 2);
  EXPECT_EQ(png_color_type(4), 6);
}

TEST(Png, ImagesAreCompressed) {
  // A 200 x 150 RGB image of 10-pixel squares (90,200 raw bytes; flat areas, as summary images
  // of digits or masks have) deflates to a small fraction of its size and decodes back.
  const int h = 200, w = 150, c = 3;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        px[static_cast<std::size_t>((y * w + x) * c + k)] = ((x / 10 + y / 10) % 2) ? 255 : 40 * k;
  const std::string png = encode_png(px.data(), h, w, c);
  const std::vector<Chunk> cs = chunks(png);
  const std::size_t raw_size = static_cast<std::size_t>(h * (w * c + 1));
  const std::string raw = inflate_stored(idat(cs), raw_size);
  EXPECT_EQ(unfilter(raw, h, w * c, c), std::string(reinterpret_cast<const char*>(px.data()), px.size()));
  EXPECT_EQ(data::decode_png_values(png).u8, px);
  EXPECT_LT(idat(cs).size(), raw_size / 4) << "the scanlines are deflated, not stored";
}

TEST(Png, BadArgumentsAreInvalidArgument) {
  std::uint8_t px[4] = {};
  EXPECT_THROW(encode_png(px, 1, 1, 0), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1, 1, 5), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 0, 1, 1), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1, -1, 1), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1LL << 31, 1, 1), InvalidArgumentError);
  EXPECT_THROW(encode_png(nullptr, 1, 1, 1), InvalidArgumentError);
}

TEST(Png, ZlibItselfAcceptsOurStreamAndCrcs) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "zlib");
  TempDir dir;
  const int h = 300, w = 120, c = 4;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(h * w * c));
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 7919) >> 3);
  write_file(dir.str("a.png"), encode_png(px.data(), h, w, c));
  write_file(dir.str("a.raw"), std::string(reinterpret_cast<const char*>(px.data()), px.size()));
  write_file(dir.str("check.py"), R"(import struct, sys, zlib
png = open(sys.argv[1], 'rb').read(); raw = open(sys.argv[2], 'rb').read()
w, h, c = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
assert png[:8] == b'\x89PNG\r\n\x1a\n'
at, idat = 8, b''
while at < len(png):
    n, = struct.unpack('>I', png[at:at + 4]); t = png[at + 4:at + 8]; d = png[at + 8:at + 8 + n]
    crc, = struct.unpack('>I', png[at + 8 + n:at + 12 + n])
    assert crc == zlib.crc32(t + d) & 0xffffffff, t
    if t == b'IDAT': idat += d
    at += 12 + n
data = zlib.decompress(idat)
stride = w * c + 1
assert len(data) == h * stride
out, prev = b'', bytearray(stride - 1)
for y in range(h):
    f, row = data[y * stride], bytearray(data[y * stride + 1:(y + 1) * stride])
    for x in range(len(row)):
        a = row[x - c] if x >= c else 0
        b = prev[x]
        cc = prev[x - c] if x >= c else 0
        if f == 1: row[x] = (row[x] + a) & 255
        elif f == 2: row[x] = (row[x] + b) & 255
        elif f == 3: row[x] = (row[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - cc; pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
            row[x] = (row[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else cc)) & 255
        else: assert f == 0, f
    out += bytes(row); prev = row
assert out == raw
)");
  const std::string cmd = "'" + python + "' " + dir.str("check.py") + " " + dir.str("a.png") + " " + dir.str("a.raw") +
                          " " + std::to_string(w) + " " + std::to_string(h) + " " + std::to_string(c);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace chorus::summary
