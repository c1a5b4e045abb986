#include <chorus/data/io/csv.h>

#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>
#include <chorus/data/internal.h>
#include <chorus/data/io/csv_internal.h>
#include <chorus/data/io/text_line_internal.h>

namespace chorus::data {

using chorus::internal::printable;
using chorus::internal::str_cat;

CsvColumn CsvColumn::optional(CsvValue value) {
  static constexpr DType kByIndex[] = {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64, DType::kString};
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
    CHORUS_REQUIRE(csv_dtype_name(columns[i].dtype) != nullptr, InvalidArgumentError, "CsvDataset: record_defaults[", i,
                   "] has dtype ", dtype_name(columns[i].dtype),
                   "; CSV columns are int32, int64, float32, float64 or string");
    CHORUS_REQUIRE(
        !columns[i].default_value || CsvColumn::optional(*columns[i].default_value).dtype == columns[i].dtype,
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

namespace internal {
// text_line_dataset.cc: buffer_size's check, and the saved position's.
std::size_t text_buffer_bytes(std::int64_t buffer_size, std::int64_t zero_means, const char* op);
void check_text_state(std::int64_t file, std::int64_t offset, std::size_t files, const char* op);
}  // namespace internal

namespace {

class CsvDataset final : public DatasetBase {
 public:
  CsvDataset(std::vector<std::string> files, const std::vector<CsvColumn>& columns, const CsvOptions& options)
      : files_(std::move(files)),
        options_(options),
        spec_(internal::CsvSpec::make(columns, options)),
        compression_(internal::parse_text_compression(options.compression_type, "CsvDataset")) {
    CHORUS_REQUIRE(options.buffer_size > 0, InvalidArgumentError, "CsvDataset: buffer_size must be positive, got ",
                   options.buffer_size);
    buffer_ = internal::text_buffer_bytes(options.buffer_size, kCsvDefaultBufferBytes, "CsvDataset");
  }
  std::string name() const override { return "CsvDataset"; }
  std::int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::unique_ptr<IteratorBase> make_iterator() const override;

  std::vector<std::string> files_;
  CsvOptions options_;
  internal::CsvSpec spec_;
  internal::TextCompression compression_;
  std::size_t buffer_ = 0;
};

Tensor to_tensor(CsvValue&& v, const std::string& device) {
  switch (v.index()) {
    case 0: return Tensor::scalar(std::get<0>(v), device);
    case 1: return Tensor::scalar(std::get<1>(v), device);
    case 2: return Tensor::scalar(std::get<2>(v), device);
    case 3: return Tensor::scalar(std::get<3>(v), device);
    default: return Tensor::scalar(std::move(std::get<4>(v)));  // string tensors live on the host
  }
}

class CsvIterator final : public IteratorBase {
 public:
  explicit CsvIterator(std::shared_ptr<const CsvDataset> ds)
      : ds_(std::move(ds)), device_(internal::pipeline_device()) {}

  std::optional<Element> next() override {
    while (file_ < ds_->files_.size()) {
      if (!input_) open();  // may throw "can't read the header" with the file left open, as TF
      std::optional<std::vector<CsvValue>> values;
      try {
        values = reader_->next();
      } catch (const DataLossError&) {
        next_file();
        throw;
      } catch (const ResourceExhaustedError&) {
        next_file();
        throw;
      }
      if (values) {
        Element e;
        e.reserve(values->size());
        for (CsvValue& v : *values) e.push_back(to_tensor(std::move(v), device_));
        return e;
      }
      next_file();
    }
    return std::nullopt;
  }
  void save(IteratorState& state, const std::string& prefix) override {
    state.set_int(prefix + "csv.file", static_cast<std::int64_t>(file_));
    state.set_int(prefix + "csv.offset", input_ ? static_cast<std::int64_t>(input_->offset()) : resume_);
    state.set_int(prefix + "csv.record", reader_ ? reader_->record_index() : record_);
  }
  void restore(const IteratorState& state, const std::string& prefix) override {
    const std::int64_t file = state.get_int(prefix + "csv.file");
    const std::int64_t offset = state.get_int(prefix + "csv.offset");
    const std::int64_t record = state.get_int(prefix + "csv.record");
    internal::check_text_state(file, offset, ds_->files_.size(), "CsvDataset");
    next_file();
    file_ = static_cast<std::size_t>(file);
    resume_ = offset;
    record_ = record;
  }

 private:
  void open() {
    auto source = std::make_unique<internal::TextFileSource>(ds_->files_[file_], ds_->compression_,
                                                             ds_->options_.max_inflated_bytes);
    const bool fresh = resume_ < 0;  // not a restored position inside the file: the header comes first
    const std::uint64_t start = fresh ? 0 : static_cast<std::uint64_t>(resume_);
    if (start > 0) source->skip_to(start);
    input_ = std::make_unique<internal::BufferedInput>(std::move(source), ds_->buffer_, start);
    reader_ = std::make_unique<internal::CsvRecordReader>(*input_, ds_->spec_, fresh ? 0 : record_);
    resume_ = -1;
    if (fresh && ds_->options_.header) reader_->skip_header();
  }
  void next_file() {
    reader_.reset();
    input_.reset();
    resume_ = -1;
    record_ = 0;
    ++file_;
  }
  std::shared_ptr<const CsvDataset> ds_;
  std::string device_;
  std::size_t file_ = 0;
  std::int64_t resume_ = -1;  // a restored iterator's offset in its file; -1: open it from the start
  std::int64_t record_ = 0;
  std::unique_ptr<internal::BufferedInput> input_;
  std::unique_ptr<internal::CsvRecordReader> reader_;
};

std::unique_ptr<IteratorBase> CsvDataset::make_iterator() const {
  return std::make_unique<CsvIterator>(std::static_pointer_cast<const CsvDataset>(shared_from_this()));
}

}  // namespace

Dataset csv_dataset(std::vector<std::string> filenames, std::vector<CsvColumn> record_defaults, CsvOptions options) {
  return Dataset(std::make_shared<CsvDataset>(std::move(filenames), record_defaults, options));
}

}  // namespace chorus::data
