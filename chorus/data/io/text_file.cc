#include <chorus/data/io/text_file_internal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/data/internal.h>
#include <chorus/data/zlib_stream.h>

namespace chorus::data::internal {

using chorus::internal::str_cat;

TextCompression parse_text_compression(std::string_view type, const char* op) {
  if (type.empty() || type == "NONE") return TextCompression::kNone;
  if (type == "ZLIB") return TextCompression::kZlib;
  if (type == "GZIP") return TextCompression::kGzip;
  throw InvalidArgumentError(
      str_cat(op, ": unsupported compression_type '", type, "': use \"\" (none), \"ZLIB\" or \"GZIP\""));
}

std::string describe_bytes(std::uint64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return str_cat(n, " (", n >> 20, " MiB)");
  if (n >= (1 << 10) && n % (1 << 10) == 0) return str_cat(n, " (", n >> 10, " KiB)");
  return str_cat(n);
}

std::size_t StringSource::read(char* out, std::size_t n) {
  const std::size_t k = std::min(n, bytes_.size() - at_);
  std::memcpy(out, bytes_.data() + at_, k);
  at_ += k;
  return k;
}

// ---- TextFileSource ------------------------------------------------------------------------------

TextFileSource::TextFileSource(std::string path, TextCompression compression, std::uint64_t max_inflated_bytes)
    : path_(std::move(path)), max_inflated_bytes_(max_inflated_bytes) {
  file_ = open_file(path_, "rb", "cannot open text file");
  std::FILE* f = file_.get();
  if (std::fseek(f, 0, SEEK_END) != 0) throw_file_error(errno, "cannot seek in", path_);
  const long size = std::ftell(f);
  if (size < 0) throw_file_error(errno, "cannot size", path_);
  size_ = static_cast<std::uint64_t>(size);
  if (std::fseek(f, 0, SEEK_SET) != 0) throw_file_error(errno, "cannot seek in", path_);
  if (compression != TextCompression::kNone)
    zlib_ = std::make_unique<ZlibReader>(f, size_, path_,
                                         compression == TextCompression::kGzip ? ZlibFormat::kGzip : ZlibFormat::kZlib);
}

TextFileSource::~TextFileSource() = default;

std::size_t TextFileSource::read(char* out, std::size_t n) {
  if (!zlib_) {
    // Never past the size at open: a file that grows while it is read is not followed.
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, size_ - position_));
    if (want == 0) return 0;
    const std::size_t got = std::fread(out, 1, want, file_.get());
    if (got < want && std::ferror(file_.get())) throw_file_error(errno, "cannot read", path_);
    position_ += got;  // a file that shrank ends early: its bytes are all there is
    return got;
  }
  if (ended_) return 0;
  if (truncated_) throw_truncated();
  // Ask for at most one byte past the ceiling: reaching it proves the stream is longer, and the
  // memory in use stays one buffer whatever the stream's ratio.
  const std::uint64_t room = max_inflated_bytes_ - std::min(position_, max_inflated_bytes_);
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, room + 1));
  const std::size_t got = zlib_->read(out, want);
  position_ += got;
  if (position_ > max_inflated_bytes_)
    throw ResourceExhaustedError(
        str_cat("the compressed stream in ", path_, " (", size_,
                " bytes on disk) inflates past max_inflated_bytes = ", describe_bytes(max_inflated_bytes_),
                "; it was read up to there and no further (a decompression bomb, or a larger data set: then raise "
                "the option)"));
  if (got < want) {
    if (!zlib_->at_clean_end()) {
      // The bytes that did arrive are delivered first (the lines or records complete in them are
      // good); the next read reports the cut.
      truncated_ = true;
      if (got == 0) throw_truncated();
      return got;
    }
    ended_ = true;
  }
  return got;
}

void TextFileSource::throw_truncated() const {
  throw DataLossError(str_cat("truncated or trailing data in ", path_, ": the file (", size_,
                              " bytes) does not end exactly where its compressed stream does (cut short, a "
                              "writer not closed, or bytes after the stream), after ",
                              position_, " uncompressed bytes"));
}

void TextFileSource::skip_to(std::uint64_t offset) {
  if (zlib_) {
    zlib_->rewind();
    position_ = 0;
    ended_ = false;
    truncated_ = false;
  } else {
    if (std::fseek(file_.get(), 0, SEEK_SET) != 0) throw_file_error(errno, "cannot seek in", path_);
    position_ = 0;
    if (offset <= size_) {
      if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0)
        throw_file_error(errno, "cannot seek in", path_);
      position_ = offset;
      return;
    }
  }
  char scratch[1 << 14];
  while (position_ < offset) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(offset - position_, sizeof scratch));
    if (read(scratch, want) == 0) break;
  }
  CHORUS_REQUIRE(position_ == offset, InvalidArgumentError, "iterator state: offset ", offset, " is past the end of ",
                 path_, " (", position_, " bytes)");
}

// ---- BufferedInput -------------------------------------------------------------------------------

BufferedInput::BufferedInput(std::unique_ptr<ByteSource> source, std::size_t buffer_size, std::uint64_t start_offset)
    : source_(std::move(source)), buf_(std::max<std::size_t>(buffer_size, 1)), base_(start_offset) {}

bool BufferedInput::fill() {
  base_ += size_;
  pos_ = size_ = 0;
  size_ = source_->read(buf_.data(), buf_.size());
  return size_ > 0;
}

}  // namespace chorus::data::internal
