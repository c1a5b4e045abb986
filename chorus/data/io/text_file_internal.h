// Internal to data/io/: the byte input under the text readers (text_line.h, csv.h). Not installed.
//
// TextFileSource reads one file, plain or as a "ZLIB" / "GZIP" stream (data/zlib_stream.h), and is
// bounded two ways: a plain file is read up to the size it had when it was opened (a file that
// grows, a FIFO or a device is never read forever; FIFOs, directories and devices are refused at
// open by io::File::open_for_read), and a compressed one up to `max_inflated_bytes` uncompressed
// bytes. BufferedInput puts a buffer of buffer_size bytes over a ByteSource and counts offsets in
// the uncompressed stream; those offsets are what the iterators save, and TextFileSource::skip_to
// comes back to one (a compressed file is read again from its start, as TFRecord's are).
//
// Errors:
//   - open: NotFoundError / PermissionDeniedError naming the path; a directory, FIFO, device or
//     socket → InvalidArgumentError naming it (data/internal.h's open_file);
//   - compressed: a corrupt stream → DataLossError naming the path and the compressed byte offset
//     (zlib's message); a file that ends inside the stream, or bytes after a ZLIB stream →
//     DataLossError naming the path, the file's size and the uncompressed offset reached, thrown by
//     the read after the one that delivered the last bytes (so what is complete in them is used);
//     more than max_inflated_bytes → ResourceExhaustedError naming the path, the ceiling and the
//     option, with at most one buffer of memory in use;
//   - skip_to past the end → InvalidArgumentError.
// Thread-safety: one thread at a time per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/data/stdio_file.h>

namespace chorus::data::internal {

class ZlibReader;

enum class TextCompression { kNone, kZlib, kGzip };
// TF's compression_type strings: "" (or "NONE"), "ZLIB", "GZIP"; else InvalidArgumentError naming
// `op` and listing them.
TextCompression parse_text_compression(std::string_view type, const char* op);

// Where bytes come from: a file, or a string in tests and fuzz targets.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` bytes into `out`; 0 only at the end. May throw (see the top of the file).
  virtual std::size_t read(char* out, std::size_t n) = 0;
  // The name errors use (the path).
  virtual const std::string& name() const = 0;
};

class StringSource final : public ByteSource {
 public:
  explicit StringSource(std::string bytes, std::string name = "<string>")
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  std::size_t read(char* out, std::size_t n) override;
  const std::string& name() const override { return name_; }

 private:
  std::string bytes_;
  std::string name_;
  std::size_t at_ = 0;
};

class TextFileSource final : public ByteSource {
 public:
  TextFileSource(std::string path, TextCompression compression, std::uint64_t max_inflated_bytes);
  ~TextFileSource() override;
  std::size_t read(char* out, std::size_t n) override;
  const std::string& name() const override { return path_; }
  // Reads and drops the first `offset` (uncompressed) bytes: the position an iterator saved.
  void skip_to(std::uint64_t offset);

 private:
  std::string path_;
  std::uint64_t max_inflated_bytes_;
  StdioFile file_;
  std::uint64_t size_ = 0;      // on disk, at open
  std::uint64_t position_ = 0;  // uncompressed bytes delivered
  std::unique_ptr<ZlibReader> zlib_;
  [[noreturn]] void throw_truncated() const;
  bool ended_ = false;      // compressed: the stream ended cleanly
  bool truncated_ = false;  // compressed: it did not; the next read throws
};

class BufferedInput {
 public:
  // buffer_size >= 1: the bytes each read of the source asks for (and the buffer's size).
  BufferedInput(std::unique_ptr<ByteSource> source, std::size_t buffer_size, std::uint64_t start_offset = 0);
  // The offset of the next unread byte in the (uncompressed) stream.
  std::uint64_t offset() const { return base_ + pos_; }
  // The unread bytes of the buffer, refilled when it is used up; empty only at the end.
  std::string_view window() {
    if (pos_ == size_) fill();
    return {buf_.data() + pos_, size_ - pos_};
  }
  void consume(std::size_t n) { pos_ += n; }
  // The next byte (0..255), or -1 at the end.
  int get() {
    if (pos_ == size_ && !fill()) return -1;
    return static_cast<unsigned char>(buf_[pos_++]);
  }
  int peek() {
    if (pos_ == size_ && !fill()) return -1;
    return static_cast<unsigned char>(buf_[pos_]);
  }
  const std::string& name() const { return source_->name(); }

 private:
  bool fill();
  std::unique_ptr<ByteSource> source_;
  std::vector<char> buf_;
  std::size_t pos_ = 0, size_ = 0;
  std::uint64_t base_ = 0;  // offset of buf_[0]
};

// "1 MiB" style sizes for messages: "268435456 (256 MiB)".
std::string describe_bytes(std::uint64_t n);

}  // namespace chorus::data::internal
