// TFRecord framing, the container of TensorBoard event files (and of TF's .tfrecord datasets):
//
//   uint64  length                          little-endian
//   uint32  masked_crc32c(the 8 length bytes)
//   byte    data[length]
//   uint32  masked_crc32c(data)
//
// CRC-32C and TF's mask come from core/crc32c.h (docs/formats.md A2). A record is
// kRecordOverhead + length bytes.
//
// RecordReader walks a file record by record and verifies both CRCs of every record, as
// TensorBoard's Python reader does (docs/formats.md A7): a mismatch or a record cut short throws
// DataLossError naming the file, the byte offset of the record and what failed; the reader stays
// at that record's start (offset()), so a caller tailing a file that is still being written may
// catch DataLossError for a truncated tail and retry later with a new reader skipping to offset().
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/core/file_io.h>

namespace chorus::summary {

inline constexpr std::size_t kRecordHeaderSize = 12;  // length + its CRC
inline constexpr std::size_t kRecordOverhead = 16;    // header + data CRC

// Appends the framed record holding `data` to `out`.
void append_record(std::string& out, std::string_view data);
inline std::string frame_record(std::string_view data) {
  std::string out;
  append_record(out, data);
  return out;
}

class RecordReader {
 public:
  // Opens `path` (NotFoundError / PermissionDeniedError naming it). Starts at byte `offset`,
  // which must be the start of a record (0, or a value offset() returned).
  explicit RecordReader(const std::string& path, std::uint64_t offset = 0);

  // Reads the next record's data into `record`; false at a clean end of file (no bytes left).
  // Throws DataLossError on a CRC mismatch or a partial record ("truncated record"); after that
  // the reader is at the failed record's start and further calls throw again.
  bool read(std::string& record);

  // Byte offset of the next record to read.
  std::uint64_t offset() const { return offset_; }
  const std::string& path() const { return file_.path(); }

 private:
  io::File file_;
  std::uint64_t offset_ = 0;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace chorus::summary
