// tf.data.experimental.CsvDataset: the records of CSV files, each element one scalar tensor per
// selected column (int32, int64, float32, float64 or string), as TensorFlow 2.21 parses them.
//
//   using chorus::data::CsvColumn;
//   auto ds = chorus::data::csv_dataset(
//       {"/data/train.csv"},
//       {CsvColumn::required(DType::kFloat32),    // tf.float32: required
//        CsvColumn::optional(0.0f),               // tf.constant([0.0]): optional, default 0
//        CsvColumn::optional(std::string("?"))},  // tf.constant(["?"])
//       {.header = true});
//
// The format (TF's CSVDatasetV2 kernel, each rule checked against TF 2.21):
//   - a record ends at '\n', '\r' or "\r\n" (outside quotes), or at the end of the file; every line
//     is a record, an empty one too (one empty field); a final line break adds no record;
//   - fields are split at field_delim (one byte); with use_quote_delim a field that starts with '"'
//     is quoted: it ends at a '"' followed by the delimiter, a line break or the end of the file,
//     "" inside it is one '"', and delimiters and line breaks inside it are kept (a record may
//     span lines). A '"' followed by anything else inside a quoted field, a '"' inside an unquoted
//     field, or a file ending inside quotes → InvalidArgumentError for that record;
//     without use_quote_delim '"' is an ordinary byte;
//   - an empty field, or one equal to na_value (after unquoting) → the column's default; a column
//     without one → InvalidArgumentError "required but missing";
//   - numbers as absl::SimpleAtoi / SimpleAtof (TF's safe_strto32 / safe_strtof): ASCII whitespace
//     around them is ignored, one leading '+' or '-'; integers are decimal digits only, out of range
//     → error (2147483648 is not an int32); floats are decimal or hexadecimal ("0x1A", "0x1.8p3"),
//     "inf", "infinity", "nan", "nan(chars)" in any case, correctly rounded; past the type's range
//     → ±inf ("1e39" is inf as float32), below it → a subnormal or ±0;
//   - select_cols (strictly increasing, >= 0; as many as record_defaults): only those columns are
//     parsed and returned; a record with fewer columns → error, extra ones are ignored.
//     exclude_cols (strictly increasing, >= 0; not with select_cols): every other column is
//     returned. Otherwise every column, and a record must have exactly as many fields as
//     record_defaults;
//   - header: the first record of each file is skipped (parsed, so a quoted header may span lines);
//     an empty file, or a malformed header → InvalidArgumentError "can't read the header", once
//     per file (TF's behaviour), then the iterator continues.
//
// Errors from next(): a bad record → InvalidArgumentError naming the file, the record (its index in
// the file, from 0 after the header, and its byte offset), the field (its index among the
// returned fields and its column) and the text; the record has been read, so the next next()
// returns the record after it (as TF). A record longer than max_record_bytes →
// ResourceExhaustedError naming the file and offset, with at most max_record_bytes of it held in
// memory; the files' errors as text_line.h (missing, a directory or device, corrupt or truncated
// compressed data, max_inflated_bytes). After a ResourceExhaustedError or DataLossError the iterator
// goes on with the next file; an error opening a file is thrown again by the next next().
// Building the dataset (InvalidArgumentError, TF's checks): no record_defaults; a column dtype other
// than the five; select_cols or exclude_cols not strictly increasing or negative; both given;
// select_cols of another length than record_defaults; field_delim not one byte; buffer_size <= 0
// or > 64 MiB; a bad compression_type.
//
// Iterator state: the file index, whether it is open, the byte offset of the next record and the
// record count (for messages). Restoring seeks (or re-reads a compressed file, as TFRecord).
// Cardinality: unknown.
// Thread-safety: as dataset.h (the Dataset may be shared; each iterator is used by one thread at a
// time). String components are scalar tf.string tensors in host memory (core/tensor.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/data/dataset.h>
#include <chorus/data/io/text_line.h>

namespace chorus::data {

// A value of one of the five CSV column types.
using CsvValue = std::variant<std::int32_t, std::int64_t, float, double, std::string>;

// One entry of record_defaults.
struct CsvColumn {
  DType dtype = DType::kFloat32;
  std::optional<CsvValue> default_value;  // nullopt: the column is required
  // TF's `tf.int32` (a dtype alone): required. dtype: kInt32, kInt64, kFloat32, kFloat64, kString.
  static CsvColumn required(DType dtype) { return {dtype, std::nullopt}; }
  // TF's `tf.constant([v])`: optional, v when the field is empty or na_value.
  static CsvColumn optional(CsvValue value);
};

inline constexpr std::int64_t kCsvDefaultBufferBytes = 4 << 20;                       // TF's 4 MB
inline constexpr std::uint64_t kDefaultMaxCsvRecordBytes = std::uint64_t{256} << 20;  // 256 MiB

struct CsvOptions {
  std::string compression_type;                       // "", "NONE", "ZLIB", "GZIP"
  std::int64_t buffer_size = kCsvDefaultBufferBytes;  // bytes per read, 1..64 MiB
  bool header = false;
  std::string field_delim = ",";  // one byte
  bool use_quote_delim = true;
  std::string na_value;  // "" : only empty fields are missing
  std::vector<std::int64_t> select_cols;
  std::vector<std::int64_t> exclude_cols;
  std::uint64_t max_record_bytes = kDefaultMaxCsvRecordBytes;   // chorus's own bound
  std::uint64_t max_inflated_bytes = kDefaultMaxInflatedBytes;  // compressed files only
};

// tf.data.experimental.CsvDataset(filenames, record_defaults, ...). See the top of the file.
Dataset csv_dataset(std::vector<std::string> filenames, std::vector<CsvColumn> record_defaults,
                    CsvOptions options = {});

}  // namespace chorus::data
