// The fuzz targets' independent oracle for compressed input: zlib's own inflate, written
// without chorus's data/zlib_stream.h, so a bug there cannot hide in its own check.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace chorus::fuzz {

// zlib's inflate of `file` as one stream (gzip: members one after another, as gzip(1) reads them),
// up to `cap` bytes; `complete` when the stream ended exactly at the end of the file.
inline std::string inflate_independently(std::string_view file, bool gzip, std::size_t cap, bool* complete) {
  *complete = false;
  std::string out;
  z_stream z{};
  if (inflateInit2(&z, gzip ? 31 : 15) != Z_OK) return out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(file.data()));
  z.avail_in = static_cast<uInt>(file.size());
  unsigned char buf[1 << 16];
  for (;;) {
    z.next_out = buf;
    z.avail_out = sizeof buf;
    const int ret = inflate(&z, Z_NO_FLUSH);
    out.append(reinterpret_cast<char*>(buf), sizeof buf - z.avail_out);
    if (out.size() > cap) break;
    if (ret == Z_STREAM_END) {
      if (z.avail_in == 0) {
        *complete = true;
        break;
      }
      if (!gzip) break;
      inflateReset(&z);
      continue;
    }
    if (ret != Z_OK) break;
    if (z.avail_in == 0 && z.avail_out != 0) break;  // the file ends inside the stream
  }
  inflateEnd(&z);
  return out;
}

}  // namespace chorus::fuzz
