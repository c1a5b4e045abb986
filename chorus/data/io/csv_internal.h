// Internal to data/io/: the CSV record reader and number parsing of csv_dataset (csv.h), on bytes.
// Not installed; tests/data/io and tests/fuzz use it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <chorus/data/io/csv.h>
#include <chorus/data/io/text_file_internal.h>

namespace chorus::data::internal {

// TF 2.21's number parsing (absl::SimpleAtoi / SimpleAtof / SimpleAtod), see csv.h. nullopt when
// `text` is not a number of that type (never throws).
std::optional<std::int32_t> parse_int32(std::string_view text);
std::optional<std::int64_t> parse_int64(std::string_view text);
std::optional<float> parse_float(std::string_view text);
std::optional<double> parse_double(std::string_view text);

// A column's type: the index of its values in CsvValue.
enum class CsvKind : std::uint8_t { kInt32 = 0, kInt64, kFloat32, kFloat64, kString };

// CsvOptions and record_defaults, validated once (csv_dataset's checks: InvalidArgumentError).
struct CsvSpec {
  std::vector<CsvKind> kinds;                     // one per returned column
  std::vector<std::optional<CsvValue>> defaults;  // nullopt: required
  char delim = ',';
  bool use_quote_delim = true;
  std::string na_value;
  std::vector<std::int64_t> select_cols, exclude_cols;
  std::uint64_t max_record_bytes = kDefaultMaxCsvRecordBytes;
  static CsvSpec make(const std::vector<CsvColumn>& columns, const CsvOptions& options);  // csv.cc
};

class CsvRecordReader {
 public:
  CsvRecordReader(BufferedInput& input, const CsvSpec& spec, std::int64_t first_record_index = 0)
      : in_(input), spec_(spec), record_(first_record_index) {}
  // The next record's values, one per returned column; nullopt at the end of the input. A bad
  // record → InvalidArgumentError after the whole record was read (the next call reads the next
  // one); past max_record_bytes → ResourceExhaustedError at once; the input's errors pass through.
  std::optional<std::vector<CsvValue>> next();
  // Reads the first record without keeping it; InvalidArgumentError when there is none or it is
  // malformed (TF's "Can't read header of file").
  void skip_header();
  // The index of the next record in its file (after the header).
  std::int64_t record_index() const { return record_; }

 private:
  bool read_record(bool convert);
  void field(bool include, bool* end);
  void unquoted(bool include, bool* end);
  void quoted(bool include, bool* end);
  void keep(bool include, std::string_view bytes);
  void emit(bool include);
  void fail(const std::string& what);
  void check_ceiling(std::uint64_t end_offset) const;
  BufferedInput& in_;
  const CsvSpec& spec_;
  std::int64_t record_;
  // The record being read.
  bool convert_ = true;
  std::uint64_t record_start_ = 0;
  std::int64_t column_ = 0;
  std::string field_;
  std::vector<CsvValue> values_;
  std::optional<std::string> error_;  // the first, as TF reports
};

// One parsed record or its error message (for tests and the fuzz target).
using CsvResult = std::variant<std::vector<CsvValue>, std::string>;
// Every record of `bytes` (a StringSource read `buffer_size` bytes at a time); with `header` the
// first record is skipped (its error, if any, is the first result). ResourceExhaustedError passes.
std::vector<CsvResult> parse_csv(std::string_view bytes, const CsvSpec& spec, bool header = false,
                                 std::size_t buffer_size = 1 << 16);

}  // namespace chorus::data::internal
