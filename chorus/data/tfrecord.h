// TFRecord files (tf.io.TFRecordWriter, tf.data.TFRecordDataset): the record framing TensorFlow
// uses for tf.Example files and TensorBoard event files (docs/formats.md A2), uncompressed or,
// as tf.io.TFRecordOptions(compression_type="ZLIB" / "GZIP"), inside one zlib or gzip stream.
//
//   {
//     chorus::data::TFRecordWriter w("/tmp/x.tfrecord");   // truncates
//     w.write("hello");
//   }                                                      // closed (and flushed) here
//   for (auto it = chorus::data::tfrecord_dataset({"/tmp/x.tfrecord"}).make_iterator(); auto e = it.next();)
//     std::string bytes = (*e)[0].item<std::string>();   // a scalar string tensor
//
// Framing of one record, all integers little-endian:
//   uint64 length | uint32 masked_crc32c(length's 8 bytes) | data[length] | uint32 masked_crc32c(data)
// with core/crc32c.h's CRC-32C and TF's mask. Compressed files hold the same bytes deflated as one
// stream (ZLIB: RFC 1950, GZIP: RFC 1952, what TensorFlow's ZlibOutputBuffer writes; several gzip
// members one after another are read as one stream). Offsets (offset(), seek(), the dataset's
// iterator state) count uncompressed bytes; seeking a compressed file reads it from the start.
//
// Errors:
//   - a file that cannot be opened → NotFoundError (missing) or PermissionDeniedError, with the path;
//     a full disk (ENOSPC, EDQUOT, EFBIG) → ResourceExhaustedError; other I/O failures →
//     UnknownError with the path and the OS's message;
//   - a CRC mismatch → DataLossError "corrupted record at offset N in <path>" saying which CRC
//     (length or data) and both values;
//   - a file ending inside a record (a header, data or footer cut short, or a length pointing past
//     the end) → DataLossError "truncated record at offset N in <path>". A clean end (no bytes left
//     at a record boundary) is the end of the file, not an error.
//   - compressed: a corrupt stream, a file that ends inside the stream, or bytes after the end of a
//     ZLIB stream → DataLossError naming the path; a record length that the compressed bytes left
//     could not hold even at deflate's best ratio (1032:1) → DataLossError before any allocation.
//   - a record whose (CRC-checked) length is over TFRecordOptions::max_record_bytes (256 MiB by
//     default) → ResourceExhaustedError before any allocation, naming the offset, the path, the
//     length, the option and its value; the position stays at that record. (A length the file
//     could not hold is a DataLossError first: that file is broken, not merely big.)
//   - an uncompressed read of a GZIP or ZLIB file fails its first CRC; the message then says the
//     file looks compressed and which compression_type to pass.
// Nothing is trusted before its CRC is checked: a corrupt length never allocates its value, and a
// record (compressed or not) grows only as its bytes arrive, its data CRC computed chunk by chunk,
// so a cut-short file or a decompression bomb never makes an allocation larger than the bytes that
// really arrived (and never one over max_record_bytes).
// Thread-safety: a reader or writer is used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/data/dataset.h>
#include <chorus/data/stdio_file.h>

namespace chorus::data {

namespace internal {
class ZlibReader;
class ZlibWriter;
}  // namespace internal

// The framing sizes (docs/formats.md A2).
inline constexpr std::size_t kTFRecordHeaderBytes = 12;  // length + its masked CRC
inline constexpr std::size_t kTFRecordFooterBytes = 4;   // masked CRC of the data

// tf.io.TFRecordOptions: how the file is compressed.
enum class TFRecordCompression { kNone, kZlib, kGzip };
// The default ceiling on one record's length when reading (TFRecordOptions::max_record_bytes).
inline constexpr std::uint64_t kDefaultMaxRecordBytes = std::uint64_t{256} << 20;

struct TFRecordOptions {
  TFRecordCompression compression = TFRecordCompression::kNone;
  int compression_level = -1;  // writing: zlib's 0 (none) .. 9 (best), -1 its default (6), as TF's
  // Reading: the longest record accepted, in bytes (chorus's own; TF has no such bound). A longer
  // one → ResourceExhaustedError before anything is allocated for it. A GZIP file of a few MB can
  // inflate to a record of 4 GiB; raise this for data sets whose records really are that large.
  std::uint64_t max_record_bytes = kDefaultMaxRecordBytes;
  // TensorFlow's compression_type strings: "" (or "NONE"), "ZLIB", "GZIP"; anything else →
  // InvalidArgumentError listing them.
  static TFRecordOptions from_compression_type(std::string_view type);
};

class TFRecordWriter {
 public:
  // Creates or truncates `path`. A compression_level outside -1..9 → InvalidArgumentError.
  explicit TFRecordWriter(std::string path, TFRecordOptions options = {});
  // Creates `path`, which must not exist: O_CREAT | O_EXCL | O_NOFOLLOW, so a file or a symbolic
  // link planted there is never followed, truncated or written (AlreadyExistsError naming it;
  // other errors as core/file_io.h maps errno). For temporary files (cache(filename)).
  static TFRecordWriter create_new(std::string path, TFRecordOptions options = {});
  ~TFRecordWriter();  // closes; an error at this point is logged, not thrown
  TFRecordWriter(TFRecordWriter&&) noexcept;
  TFRecordWriter& operator=(TFRecordWriter&&) noexcept;

  void write(std::string_view record);
  // Hands written records to the OS (fflush); in a compressed file they become decodable too
  // (a zlib sync flush), so a reader sees them before close.
  void flush();
  // Flushes and closes; later write/flush → FailedPreconditionError. Idempotent.
  void close();
  const std::string& path() const { return path_; }

 private:
  TFRecordWriter(std::string path, StdioFile file, TFRecordOptions options);
  std::string path_;
  StdioFile file_;
  std::unique_ptr<internal::ZlibWriter> zlib_;  // compressed files only
};

class TFRecordReader {
 public:
  // Opens `path` (NotFoundError / PermissionDeniedError naming it).
  explicit TFRecordReader(std::string path, TFRecordOptions options = {});
  ~TFRecordReader();
  TFRecordReader(TFRecordReader&&) noexcept;
  TFRecordReader& operator=(TFRecordReader&&) noexcept;

  // The next record's bytes, or nullopt at the end of the file. On DataLossError the position
  // stays at the bad record (calling again throws again).
  std::optional<std::string> read();
  // Byte offset of the next record.
  std::uint64_t offset() const { return offset_; }
  // Continues at `offset` (a record boundary previously returned by offset()); past the end →
  // InvalidArgumentError.
  void seek(std::uint64_t offset);
  // The file's size on disk (compressed bytes for a compressed file).
  std::uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::optional<std::string> read_compressed();
  [[noreturn]] void throw_compressed_truncated(const char* what);
  void check_ceiling(std::uint64_t length) const;
  std::string path_;
  std::uint64_t max_record_bytes_ = kDefaultMaxRecordBytes;
  StdioFile file_;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
  std::unique_ptr<internal::ZlibReader> zlib_;  // compressed files only
  bool resync_ = false;                         // compressed: after an error, read again from the start up to offset_
};

// Every record of one file (throws as TFRecordReader::read).
std::vector<std::string> read_tfrecord_file(const std::string& path, TFRecordOptions options = {});
// Writes `records` to `path` (truncating it).
void write_tfrecord_file(const std::string& path, const std::vector<std::string>& records,
                         TFRecordOptions options = {});

// tf.data.TFRecordDataset(filenames): the records of the files in order, each element one scalar
// string tensor (as TF's) on the pipeline device, or on CPU:0 when that is a GPU (string tensors
// live on the host). Cardinality unknown. Files are opened when the iterator reaches them
// (NotFoundError from next()). After a DataLossError, or a ResourceExhaustedError for a record
// over options.max_record_bytes, the iterator continues with the next file: the rest of a file
// with a broken frame cannot be located (each such error is thrown once, never silently). State: file index and byte
// offset. `options`: TFRecordDataset's compression_type, the same for every file.
Dataset tfrecord_dataset(std::vector<std::string> filenames, TFRecordOptions options = {});

}  // namespace chorus::data
