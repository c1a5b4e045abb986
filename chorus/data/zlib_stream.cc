#include <chorus/data/zlib_stream.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/data/internal.h>

namespace chorus::data::internal {

using chorus::internal::str_cat;

namespace {

const char* format_name(ZlibFormat f) { return f == ZlibFormat::kGzip ? "GZIP" : "ZLIB"; }
// deflate's window bits: 15 (a 32 KiB window) for a zlib stream, + 16 for a gzip wrapper.
int window_bits(ZlibFormat f) { return f == ZlibFormat::kGzip ? MAX_WBITS + 16 : MAX_WBITS; }

}  // namespace

// ---- ZlibReader ---------------------------------------------------------------------------------

ZlibReader::ZlibReader(std::FILE* file, std::uint64_t file_size, std::string path, ZlibFormat format)
    : file_(file), file_size_(file_size), path_(std::move(path)), format_(format) {
  init();
}

ZlibReader::~ZlibReader() {
  if (initialized_) inflateEnd(&z_);
}

void ZlibReader::init() {
  z_ = z_stream{};
  const int ret = inflateInit2(&z_, window_bits(format_));
  if (ret == Z_MEM_ERROR) throw ResourceExhaustedError(str_cat("zlib: out of memory opening ", path_));
  CHORUS_REQUIRE(ret == Z_OK, InternalError, "zlib: inflateInit2 failed (", ret, ") for ", path_);
  initialized_ = true;
}

bool ZlibReader::fill() {
  const std::size_t n = std::fread(in_, 1, sizeof in_, file_);
  if (n == 0) {
    if (std::ferror(file_)) throw_file_error(errno, "cannot read", path_);
    return false;
  }
  consumed_ += n;
  z_.next_in = in_;
  z_.avail_in = static_cast<uInt>(n);
  return true;
}

std::size_t ZlibReader::read(void* out, std::size_t n) {
  z_.next_out = static_cast<Bytef*>(out);
  z_.avail_out = static_cast<uInt>(n);
  while (z_.avail_out > 0) {
    if (stream_end_) {
      // A gzip member may be followed by another one; a zlib stream by nothing.
      if (format_ != ZlibFormat::kGzip || (z_.avail_in == 0 && !fill())) break;
      inflateReset(&z_);
      stream_end_ = false;
    }
    if (z_.avail_in == 0 && !fill()) break;  // the file ends inside the stream: the caller sees it
    const std::uint64_t at = consumed_ - z_.avail_in;
    const int ret = inflate(&z_, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) {
      stream_end_ = true;
    } else if (ret == Z_MEM_ERROR) {
      throw ResourceExhaustedError(str_cat("zlib: out of memory reading ", path_));
    } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
      throw DataLossError(str_cat("corrupt ", format_name(format_), " stream in ", path_, " near compressed byte ", at,
                                  ": ", z_.msg != nullptr ? z_.msg : "inflate error", " (zlib ", ret, ")"));
    }
  }
  const std::size_t got = n - z_.avail_out;
  position_ += got;
  return got;
}

bool ZlibReader::at_clean_end() {
  if (!stream_end_) return false;
  if (z_.avail_in > 0) return false;
  if (consumed_ < file_size_ && fill()) return false;  // more bytes after the stream
  return true;
}

std::uint64_t ZlibReader::max_remaining() const {
  const std::uint64_t left = (file_size_ > consumed_ ? file_size_ - consumed_ : 0) + z_.avail_in;
  return left * kMaxInflateRatio + kInflateSlackBytes;
}

void ZlibReader::rewind() {
  if (std::fseek(file_, 0, SEEK_SET) != 0) throw_file_error(errno, "cannot seek in", path_);
  inflateEnd(&z_);
  initialized_ = false;
  init();
  stream_end_ = false;
  consumed_ = 0;
  position_ = 0;
}

bool ZlibReader::skip(std::uint64_t n) {
  std::vector<unsigned char> scratch(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1 << 16)));
  while (n > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, scratch.size()));
    const std::size_t got = read(scratch.data(), want);
    n -= got;
    if (got < want) return false;
  }
  return true;
}

// ---- ZlibWriter ---------------------------------------------------------------------------------

ZlibWriter::ZlibWriter(std::FILE* file, std::string path, ZlibFormat format, int level)
    : file_(file), path_(std::move(path)) {
  // memLevel 9 and the default strategy, as TensorFlow's ZlibCompressionOptions.
  const int ret = deflateInit2(&z_, level, Z_DEFLATED, window_bits(format), 9, Z_DEFAULT_STRATEGY);
  if (ret == Z_MEM_ERROR) throw ResourceExhaustedError(str_cat("zlib: out of memory creating ", path_));
  CHORUS_REQUIRE(ret == Z_OK, InvalidArgumentError, "zlib: deflateInit2 failed (", ret, ") for ", path_,
                 " (compression level ", level, ")");
}

ZlibWriter::~ZlibWriter() { deflateEnd(&z_); }

void ZlibWriter::deflate_all(const void* data, std::size_t n, int flush) {
  z_.next_in = static_cast<Bytef*>(const_cast<void*>(data));
  z_.avail_in = static_cast<uInt>(n);
  unsigned char out[1 << 16];
  for (;;) {
    z_.next_out = out;
    z_.avail_out = sizeof out;
    const int ret = deflate(&z_, flush);
    CHORUS_REQUIRE(ret != Z_STREAM_ERROR, InternalError, "zlib: deflate failed for ", path_);
    const std::size_t produced = sizeof out - z_.avail_out;
    if (produced > 0 && std::fwrite(out, 1, produced, file_) != produced)
      throw_file_error(errno, "cannot write to", path_);
    if (flush == Z_FINISH ? ret == Z_STREAM_END : (z_.avail_in == 0 && z_.avail_out > 0)) return;
  }
}

void ZlibWriter::write(std::string_view bytes) {
  CHORUS_REQUIRE(!finished_, FailedPreconditionError, "write to a finished compressed stream ", path_);
  // zlib counts in uInt: feed very large records in pieces.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t at = 0; at < bytes.size(); at += kPiece)
    deflate_all(bytes.data() + at, std::min(kPiece, bytes.size() - at), Z_NO_FLUSH);
}

void ZlibWriter::flush() {
  CHORUS_REQUIRE(!finished_, FailedPreconditionError, "flush of a finished compressed stream ", path_);
  deflate_all(nullptr, 0, Z_SYNC_FLUSH);
}

void ZlibWriter::finish() {
  if (finished_) return;
  finished_ = true;
  deflate_all(nullptr, 0, Z_FINISH);
}

}  // namespace chorus::data::internal
