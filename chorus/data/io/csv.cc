#include <chorus/data/io/csv.h>

#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>
#include <chorus/data/internal.h>
#include <chorus/data/io/csv_internal.h>

namespace chorus::data {

using chorus::internal::printable;
using chorus::internal::str_cat;

CsvColumn CsvColumn::optional(CsvValue value) {
  static constexpr DType kByIndex[] = {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64,
                                       DType::kString};
  const DType dtype = kByIndex[value.index()];
  return {dtype, std::move(value)};
}

namespace internal {

namespace {

const char* csv_dtype_name(DType d) {
  switch (d) {
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kString: return "string";
    default: return nullptr;
  }
}

CsvKind kind_of(DType d) {
  switch (d) {
    case DType::kInt32: return CsvKind::kInt32;
    case DType::kInt64: return CsvKind::kInt64;
    case DType::kFloat32: return CsvKind::kFloat32;
    case DType::kFloat64: return CsvKind::kFloat64;
    default: return CsvKind::kString;
  }
}

void check_cols(const std::vector<std::int64_t>& cols, const char* name) {
  for (std::size_t i = 0; i < cols.size(); ++i) {
    CHORUS_REQUIRE(cols[i] >= 0, InvalidArgumentError, "CsvDataset: ", name, "[", i, "] = ", cols[i],
                   ": column indices must be >= 0");
    CHORUS_REQUIRE(i == 0 || cols[i - 1] < cols[i], InvalidArgumentError, "CsvDataset: ", name,
                   " must be strictly increasing, got ", cols[i - 1], " then ", cols[i], " at ", i);
  }
}

}  // namespace

CsvSpec CsvSpec::make(const std::vector<CsvColumn>& columns, const CsvOptions& o) {
  CHORUS_REQUIRE(!columns.empty(), InvalidArgumentError, "CsvDataset: record_defaults is empty: give one per column");
  for (std::size_t i = 0; i < columns.size(); ++i) {
    CHORUS_REQUIRE(csv_dtype_name(columns[i].dtype) != nullptr, InvalidArgumentError, "CsvDataset: record_defaults[",
                   i, "] has dtype ", dtype_name(columns[i].dtype),
                   "; CSV columns are int32, int64, float32, float64 or string");
    CHORUS_REQUIRE(!columns[i].default_value ||
                       CsvColumn::optional(*columns[i].default_value).dtype == columns[i].dtype,
                   InvalidArgumentError, "CsvDataset: record_defaults[", i, "]: the default value is not a ",
                   csv_dtype_name(columns[i].dtype));
  }
  CHORUS_REQUIRE(o.field_delim.size() == 1, InvalidArgumentError, "CsvDataset: field_delim must be one byte, got '",
                 printable(o.field_delim), "' (", o.field_delim.size(), " bytes)");
  check_cols(o.select_cols, "select_cols");
  check_cols(o.exclude_cols, "exclude_cols");
  CHORUS_REQUIRE(o.select_cols.empty() || o.exclude_cols.empty(), InvalidArgumentError,
                 "CsvDataset: give select_cols or exclude_cols, not both");
  CHORUS_REQUIRE(o.select_cols.empty() || o.select_cols.size() == columns.size(), InvalidArgumentError,
                 "CsvDataset: select_cols has ", o.select_cols.size(), " columns, record_defaults ", columns.size(),
                 ": they must match");
  CsvSpec s;
  for (const CsvColumn& c : columns) {
    s.kinds.push_back(kind_of(c.dtype));
    s.defaults.push_back(c.default_value);
  }
  s.delim = o.field_delim[0];
  s.use_quote_delim = o.use_quote_delim;
  s.na_value = o.na_value;
  s.select_cols = o.select_cols;
  s.exclude_cols = o.exclude_cols;
  s.max_record_bytes = o.max_record_bytes;
  return s;
}

}  // namespace internal

}  // namespace chorus::data
