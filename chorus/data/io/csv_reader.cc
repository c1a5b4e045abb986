// The CSV record reader (csv_internal.h): TF's CSVDatasetV2 field rules on a BufferedInput.
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>
#include <chorus/data/io/csv_internal.h>

namespace chorus::data::internal {

using chorus::internal::printable;
using chorus::internal::str_cat;

// ---- CsvRecordReader -----------------------------------------------------------------------------

void CsvRecordReader::fail(const std::string& what) {
  if (error_) return;  // TF reports the first error of a record
  error_ = str_cat("CsvDataset: record ", record_, " (byte offset ", record_start_, ") of ", in_.name(), ": ", what);
}

void CsvRecordReader::check_ceiling(std::uint64_t end_offset) const {
  if (end_offset - record_start_ <= spec_.max_record_bytes) return;
  throw ResourceExhaustedError(str_cat("CsvDataset: record ", record_, " at byte offset ", record_start_, " of ",
                                       in_.name(),
                                       " is longer than max_record_bytes = ", describe_bytes(spec_.max_record_bytes),
                                       "; if its records really are this long, raise the option"));
}

void CsvRecordReader::keep(bool include, std::string_view bytes) {
  if (include) field_.append(bytes);
}

void CsvRecordReader::emit(bool include) {
  if (!include || !convert_) return;
  const std::size_t i = values_.size();
  if (i >= spec_.kinds.size()) {
    fail(str_cat("it has more fields than the ", spec_.kinds.size(), " expected"));
    values_.emplace_back(std::int32_t{0});  // counted, never returned
    return;
  }
  const std::optional<CsvValue>& default_value = spec_.defaults[i];
  const auto where = [&] { return str_cat("field ", i, " (column ", column_, ")"); };
  if (field_.empty() || field_ == spec_.na_value) {
    if (!default_value) {
      fail(str_cat(where(), " is required but missing (", field_.empty() ? "empty" : "na_value",
                   ") and its column has no default"));
      values_.emplace_back(std::int32_t{0});
      return;
    }
    values_.push_back(*default_value);
    return;
  }
  const auto bad = [&](const char* type) {
    fail(str_cat(where(), " is not a valid ", type, ": '", printable(field_), "'"));
    values_.emplace_back(std::int32_t{0});
  };
  switch (spec_.kinds[i]) {
    case CsvKind::kInt32:
      if (auto v = parse_int32(field_))
        values_.emplace_back(*v);
      else
        bad("int32");
      break;
    case CsvKind::kInt64:
      if (auto v = parse_int64(field_))
        values_.emplace_back(*v);
      else
        bad("int64");
      break;
    case CsvKind::kFloat32:
      if (auto v = parse_float(field_))
        values_.emplace_back(*v);
      else
        bad("float32");
      break;
    case CsvKind::kFloat64:
      if (auto v = parse_double(field_))
        values_.emplace_back(*v);
      else
        bad("float64");
      break;
    default: values_.emplace_back(field_);
  }
}

void CsvRecordReader::unquoted(bool include, bool* end) {
  for (;;) {
    check_ceiling(in_.offset());
    const std::string_view w = in_.window();
    if (w.empty()) {
      *end = true;
      break;
    }
    std::size_t i = 0;
    for (; i < w.size(); ++i) {
      const char c = w[i];
      if (c == spec_.delim || c == '\n' || c == '\r' || (c == '"' && spec_.use_quote_delim)) break;
    }
    check_ceiling(in_.offset() + i);
    keep(include, w.substr(0, i));
    in_.consume(i);
    if (i == w.size()) continue;
    const char c = w[i];
    in_.consume(1);
    if (c == spec_.delim) break;
    if (c == '"') {  // TF notes the error and reads on to the end of the field
      fail(str_cat("field at column ", column_, ": an unquoted field cannot hold a '\"'"));
      keep(include, "\"");
      continue;
    }
    *end = true;  // '\n' or '\r'; "\r\n" is one line break
    if (c == '\r' && in_.peek() == '\n') in_.get();
    break;
  }
  emit(include);
}

void CsvRecordReader::quoted(bool include, bool* end) {
  in_.get();  // the opening quote
  for (;;) {
    check_ceiling(in_.offset());
    const std::string_view w = in_.window();
    if (w.empty()) {
      // TF: an error for the record, which then ends (with an empty last field) at the file's end.
      fail(str_cat("the file ends inside the quoted field at column ", column_, " (no closing quote)"));
      return;
    }
    const void* q = std::memchr(w.data(), '"', w.size());
    const std::size_t n = q ? static_cast<std::size_t>(static_cast<const char*>(q) - w.data()) : w.size();
    check_ceiling(in_.offset() + n);
    keep(include, w.substr(0, n));
    in_.consume(n);
    if (!q) continue;
    in_.consume(1);
    const int next = in_.get();
    if (next < 0) {
      *end = true;
      break;
    }
    if (next == static_cast<unsigned char>(spec_.delim)) break;
    if (next == '\n' || next == '\r') {
      *end = true;
      if (next == '\r' && in_.peek() == '\n') in_.get();
      break;
    }
    if (next == '"') {
      check_ceiling(in_.offset());
      keep(include, "\"");
      continue;
    }
    // TF notes the error and keeps reading the field as quoted, not returning it.
    fail(str_cat("field at column ", column_, ": a '\"' inside a quoted field must be escaped as \"\""));
    include = false;
  }
  emit(include);
}

void CsvRecordReader::field(bool include, bool* end) {
  field_.clear();
  const int c = in_.peek();
  if (c < 0) {  // the file ends right after a delimiter: an empty last field
    *end = true;
    emit(include);
    return;
  }
  if (spec_.use_quote_delim && c == '"')
    quoted(include, end);
  else
    unquoted(include, end);
}

bool CsvRecordReader::read_record(bool convert) {
  if (in_.peek() < 0) return false;
  convert_ = convert;
  record_start_ = in_.offset();
  error_.reset();
  values_.clear();
  const auto& sel = spec_.select_cols;
  const auto& exc = spec_.exclude_cols;
  const bool all = sel.empty() && exc.empty();
  std::size_t si = 0, ei = 0;
  bool end = false;
  for (column_ = 0; !end; ++column_) {
    bool include = all;
    if (convert && !all) {
      if (!sel.empty()) {
        include = si < sel.size() && sel[si] == column_;
        si += include;
      } else {
        const bool excluded = ei < exc.size() && exc[ei] == column_;
        ei += excluded;
        include = !excluded;
      }
    }
    field(convert && include, &end);
  }
  return true;
}

std::optional<std::vector<CsvValue>> CsvRecordReader::next() {
  if (!read_record(true)) return std::nullopt;
  if (values_.size() != spec_.kinds.size())
    fail(str_cat("it has ", values_.size(), " of the ", spec_.kinds.size(), " fields expected"));
  ++record_;
  if (error_) throw InvalidArgumentError(*error_);
  return std::move(values_);
}

void CsvRecordReader::skip_header() {
  if (!read_record(false))
    throw InvalidArgumentError(str_cat("CsvDataset: can't read the header of ", in_.name(), ": the file is empty"));
  if (error_) throw InvalidArgumentError(str_cat("CsvDataset: can't read the header: ", *error_));
}

std::vector<CsvResult> parse_csv(std::string_view bytes, const CsvSpec& spec, bool header, std::size_t buffer_size) {
  BufferedInput in(std::make_unique<StringSource>(std::string(bytes)), buffer_size);
  CsvRecordReader reader(in, spec);
  std::vector<CsvResult> out;
  if (header) {
    try {
      reader.skip_header();
    } catch (const InvalidArgumentError& e) {
      out.emplace_back(std::string(e.what()));
    }
  }
  for (;;) {
    try {
      auto r = reader.next();
      if (!r) break;
      out.emplace_back(std::move(*r));
    } catch (const InvalidArgumentError& e) {
      out.emplace_back(std::string(e.what()));
    }
  }
  return out;
}

}  // namespace chorus::data::internal
