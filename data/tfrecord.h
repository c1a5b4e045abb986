// TFRecord files (tf.io.TFRecordWriter, tf.data.TFRecordDataset): the record framing TensorFlow
// uses for tf.Example files and TensorBoard event files (docs/formats.md A2). Uncompressed only.
//
//   {
//     chorus::data::TFRecordWriter w("/tmp/x.tfrecord");   // truncates
//     w.write("hello");
//   }                                                      // closed (and flushed) here
//   for (auto it = chorus::data::tfrecord_dataset({"/tmp/x.tfrecord"}).make_iterator(); auto e = it.next();)
//     std::string bytes = chorus::data::record_string((*e)[0]);
//
// Framing of one record, all integers little-endian:
//   uint64 length | uint32 masked_crc32c(length's 8 bytes) | data[length] | uint32 masked_crc32c(data)
// with core/crc32c.h's CRC-32C and TF's mask.
//
// Errors:
//   - a file that cannot be opened → NotFoundError (missing) or PermissionDeniedError, with the path;
//     other I/O failures → UnknownError with the path and the OS's message;
//   - a CRC mismatch → DataLossError "corrupted record at offset N in <path>" saying which CRC
//     (length or data) and both values;
//   - a file ending inside a record (a header, data or footer cut short, or a length pointing past
//     the end) → DataLossError "truncated record at offset N in <path>". A clean end (no bytes left
//     at a record boundary) is the end of the file, not an error.
// Nothing is trusted before its CRC is checked: a corrupt length never allocates its value.
// Thread-safety: a reader or writer is used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/stdio_file.h"

namespace chorus::data {

// The framing sizes (docs/formats.md A2).
inline constexpr std::size_t kTFRecordHeaderBytes = 12;  // length + its masked CRC
inline constexpr std::size_t kTFRecordFooterBytes = 4;   // masked CRC of the data

class TFRecordWriter {
 public:
  // Creates or truncates `path`.
  explicit TFRecordWriter(std::string path);
  ~TFRecordWriter();  // closes; an error at this point is logged, not thrown
  TFRecordWriter(TFRecordWriter&&) noexcept = default;
  TFRecordWriter& operator=(TFRecordWriter&&) noexcept = default;

  void write(std::string_view record);
  // Hands written records to the OS (fflush).
  void flush();
  // Flushes and closes; later write/flush → FailedPreconditionError. Idempotent.
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  StdioFile file_;
};

class TFRecordReader {
 public:
  // Opens `path` (NotFoundError / PermissionDeniedError naming it).
  explicit TFRecordReader(std::string path);

  // The next record's bytes, or nullopt at the end of the file. On DataLossError the position
  // stays at the bad record (calling again throws again).
  std::optional<std::string> read();
  // Byte offset of the next record.
  std::uint64_t offset() const { return offset_; }
  // Continues at `offset` (a record boundary previously returned by offset()); past the end →
  // InvalidArgumentError.
  void seek(std::uint64_t offset);
  std::uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  StdioFile file_;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
};

// Every record of one file (throws as TFRecordReader::read).
std::vector<std::string> read_tfrecord_file(const std::string& path);
// Writes `records` to `path` (truncating it).
void write_tfrecord_file(const std::string& path, const std::vector<std::string>& records);

// tf.data.TFRecordDataset(filenames): the records of the files in order, each element one uint8
// tensor of shape [length] on the pipeline device (chorus has no string dtype; record_string turns
// it back into bytes). Cardinality unknown. Files are opened when the iterator reaches them
// (NotFoundError from next()). After a DataLossError the iterator continues with the next file:
// the rest of a file with a broken frame cannot be located. State: file index and byte offset.
Dataset tfrecord_dataset(std::vector<std::string> filenames);
// The bytes of a record tensor (uint8, rank 1).
std::string record_string(const Tensor& record);

}  // namespace chorus::data
