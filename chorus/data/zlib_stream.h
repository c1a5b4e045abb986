// Internal to data/: the zlib streams under compressed TFRecord files (data/tfrecord.h), the formats
// of TensorFlow's io::ZlibOutputBuffer / ZlibInputStream: "ZLIB" is a zlib stream (RFC 1950),
// "GZIP" a gzip member (RFC 1952), both deflate. Reading also accepts several gzip members one
// after another (what `cat a.gz b.gz` makes), as gzip(1) does.
//
// Errors: bytes that are not such a stream, a checksum that does not match, a stream that ends
// inside the file or a file that ends inside the stream → DataLossError naming the path, the
// compressed byte offset and zlib's message; I/O failures → the errors of data/internal.h;
// zlib out of memory → ResourceExhaustedError.
// Thread-safety: one thread at a time per object.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace chorus::data::internal {

enum class ZlibFormat { kZlib, kGzip };

// The most bytes deflate can produce per compressed byte (its maximum ratio is about 1032:1), plus
// what a stream may hold back: the bound that lets a reader refuse a record length no remaining
// compressed bytes could deliver instead of waiting for them.
inline constexpr std::uint64_t kMaxInflateRatio = 1032;
inline constexpr std::uint64_t kInflateSlackBytes = 1 << 16;

class ZlibReader {
 public:
  // Reads the compressed bytes of `file` (owned by the caller, positioned at the stream's start)
  // of `file_size` bytes; `path` names it in errors.
  ZlibReader(std::FILE* file, std::uint64_t file_size, std::string path, ZlibFormat format);
  ~ZlibReader();
  ZlibReader(const ZlibReader&) = delete;
  ZlibReader& operator=(const ZlibReader&) = delete;

  // Up to `n` uncompressed bytes into `out`; fewer only at the end of the stream (then
  // at_clean_end() says whether it ended properly). Throws DataLossError on a corrupt stream.
  std::size_t read(void* out, std::size_t n);
  // True once the stream (all its members) ended exactly at the end of the file.
  bool at_clean_end();
  // Uncompressed bytes delivered so far.
  std::uint64_t position() const { return position_; }
  // The most uncompressed bytes the rest of the file could still hold (kMaxInflateRatio).
  std::uint64_t max_remaining() const;
  // Back to the stream's start (rewinds the file).
  void rewind();
  // Reads and drops `n` bytes; false when the stream ends first.
  bool skip(std::uint64_t n);

 private:
  bool fill();  // more compressed input; false at the end of the file
  void init();
  std::FILE* file_;
  std::uint64_t file_size_;
  std::string path_;
  ZlibFormat format_;
  z_stream z_{};
  bool initialized_ = false;
  bool stream_end_ = false;     // the current member ended
  std::uint64_t consumed_ = 0;  // compressed bytes read from the file
  std::uint64_t position_ = 0;
  unsigned char in_[1 << 16];
};

class ZlibWriter {
 public:
  // Writes the compressed stream to `file` (owned by the caller); `path` names it in errors.
  ZlibWriter(std::FILE* file, std::string path, ZlibFormat format, int level = Z_DEFAULT_COMPRESSION);
  ~ZlibWriter();
  ZlibWriter(const ZlibWriter&) = delete;
  ZlibWriter& operator=(const ZlibWriter&) = delete;

  void write(std::string_view bytes);
  // Everything written so far becomes decodable (Z_SYNC_FLUSH) and is handed to stdio.
  void flush();
  // Ends the stream (Z_FINISH). Later writes → FailedPreconditionError. Idempotent.
  void finish();

 private:
  void deflate_all(const void* data, std::size_t n, int flush);
  std::FILE* file_;
  std::string path_;
  z_stream z_{};
  bool finished_ = false;
};

}  // namespace chorus::data::internal
