// tf.data.TextLineDataset: the lines of text files, each element one scalar string tensor.
//
//   auto ds = chorus::data::text_line_dataset({"/data/a.txt.gz", "/data/b.txt.gz"}, {.compression_type = "GZIP"});
//   for (auto it = ds.make_iterator(); auto e = it.next();) std::string line = (*e)[0].item<std::string>();
//
// Lines: TensorFlow's rules, checked against TF 2.21 (text_line_internal.h has them in full): a
// line ends at '\n'; every '\r' is dropped ("\r\n" ends a line as "\n" does, a lone '\r' is
// dropped, not a line end); empty lines are elements; the text after the last '\n' is a line when
// something is left of it; an empty file has no lines; NUL and any other byte are kept as they are.
// Files are read in order, each opened when the iterator reaches it.
//
// compression_type: "" (or "NONE"), "ZLIB" or "GZIP", the same for every file (a GZIP file may hold
// several members one after another, as gzip(1) writes them).
//
// Bounds (chorus's own; TF has none): a line longer than max_line_bytes → ResourceExhaustedError
// naming the file and the line's byte offset, with at most max_line_bytes of it ever held in memory;
// a compressed file inflating past max_inflated_bytes → ResourceExhaustedError, with one buffer in
// memory. A plain file is read up to its size when it was opened.
//
// Errors (from next()):
//   - a missing file → NotFoundError; unreadable → PermissionDeniedError (naming the path);
//     a directory, FIFO, device (/dev/zero) or socket → InvalidArgumentError naming it (TF: a
//     directory is FailedPreconditionError; a FIFO or /dev/zero makes TF wait or read forever);
//   - a corrupt compressed stream → DataLossError naming the file and the compressed byte offset; a
//     file that ends inside its compressed stream (cut short) → DataLossError naming the file, its
//     size and the uncompressed offset reached (TF returns the lines read so far and a partial last
//     line without an error; chorus returns the complete lines, then the error);
//   - after a DataLossError or ResourceExhaustedError the iterator goes on with the next file (the
//     rest of that file is not read); each such error is thrown once. An error opening a file is
//     thrown again by the next next() (TF and tfrecord_dataset do the same).
// Building the dataset: a bad compression_type, buffer_size < 0 or > 64 MiB → InvalidArgumentError.
//
// Iterator state: the file index and the (uncompressed) byte offset of the next line. Restoring
// seeks a plain file; a compressed one is read again from its start up to the offset (as TFRecord).
// Cardinality: unknown (TF's too).
// Thread-safety: as dataset.h (the Dataset may be shared; each iterator is used by one thread at a
// time). String components are scalar tf.string tensors in host memory (core/tensor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/data/dataset.h>

namespace chorus::data {

// The default ceilings (TextLineOptions, CsvOptions).
inline constexpr std::uint64_t kDefaultMaxLineBytes = std::uint64_t{256} << 20;     // 256 MiB
inline constexpr std::uint64_t kDefaultMaxInflatedBytes = std::uint64_t{64} << 30;  // 64 GiB per file
// TF's default read size for TextLineDataset (buffer_size = 0 picks it) and chorus's largest.
inline constexpr std::int64_t kTextLineDefaultBufferBytes = 256 << 10;
inline constexpr std::int64_t kTextMaxBufferBytes = 64 << 20;

struct TextLineOptions {
  std::string compression_type;  // "", "NONE", "ZLIB", "GZIP"
  std::int64_t buffer_size = 0;  // bytes per read: 0 = 256 KiB (TF's), 1..64 MiB
  std::uint64_t max_line_bytes = kDefaultMaxLineBytes;
  std::uint64_t max_inflated_bytes = kDefaultMaxInflatedBytes;  // compressed files only
};

// tf.data.TextLineDataset(filenames, compression_type, buffer_size). See the top of the file.
Dataset text_line_dataset(std::vector<std::string> filenames, TextLineOptions options = {});

}  // namespace chorus::data
