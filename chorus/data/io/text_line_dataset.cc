// text_line_dataset (text_line.h): LineReader (text_line.cc) over the files, one at a time.
#include <chorus/core/error.h>
#include <chorus/data/internal.h>
#include <chorus/data/io/text_line.h>
#include <chorus/data/io/text_line_internal.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace internal {

std::size_t text_buffer_bytes(std::int64_t buffer_size, std::int64_t zero_means, const char* op) {
  CHORUS_REQUIRE(buffer_size >= 0 && buffer_size <= kTextMaxBufferBytes, InvalidArgumentError, op, ": buffer_size ",
                 buffer_size, " is outside 0..", kTextMaxBufferBytes, " (0: the default, ", zero_means, " bytes)");
  return static_cast<std::size_t>(buffer_size == 0 ? zero_means : buffer_size);
}

// The position of a text iterator in its files, saved as "<prefix><key>.file" / ".offset"
// (offset -1: the file is not open yet).
void check_text_state(std::int64_t file, std::int64_t offset, std::size_t files, const char* op) {
  CHORUS_REQUIRE(file >= 0 && file <= static_cast<std::int64_t>(files) && offset >= -1, InvalidArgumentError,
                 "iterator state: ", op, " file ", file, " offset ", offset, " do not fit ", files, " files");
}

}  // namespace internal

namespace {

class TextLineDataset final : public DatasetBase {
 public:
  TextLineDataset(std::vector<std::string> files, TextLineOptions options)
      : files_(std::move(files)),
        options_(options),
        compression_(internal::parse_text_compression(options.compression_type, "TextLineDataset")),
        buffer_(internal::text_buffer_bytes(options.buffer_size, kTextLineDefaultBufferBytes, "TextLineDataset")) {}
  std::string name() const override { return "TextLineDataset"; }
  std::int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::unique_ptr<IteratorBase> make_iterator() const override;

  std::vector<std::string> files_;
  TextLineOptions options_;
  internal::TextCompression compression_;
  std::size_t buffer_;
};

class TextLineIterator final : public IteratorBase {
 public:
  explicit TextLineIterator(std::shared_ptr<const TextLineDataset> ds) : ds_(std::move(ds)) {}

  std::optional<Element> next() override {
    while (file_ < ds_->files_.size()) {
      if (!input_) open();
      std::string line;
      bool got;
      try {
        got = reader_->next(&line);
      } catch (const DataLossError&) {
        next_file();  // the rest of a broken stream cannot be trusted
        throw;
      } catch (const ResourceExhaustedError&) {
        next_file();  // a line or stream past its ceiling: the same, rather than throw forever
        throw;
      }
      if (got) return Element{Tensor::scalar(std::move(line))};
      next_file();
    }
    return std::nullopt;
  }
  void save(IteratorState& state, const std::string& prefix) override {
    state.set_int(prefix + "text_line.file", static_cast<std::int64_t>(file_));
    state.set_int(prefix + "text_line.offset", input_ ? static_cast<std::int64_t>(input_->offset()) : resume_);
  }
  void restore(const IteratorState& state, const std::string& prefix) override {
    const std::int64_t file = state.get_int(prefix + "text_line.file");
    const std::int64_t offset = state.get_int(prefix + "text_line.offset");
    internal::check_text_state(file, offset, ds_->files_.size(), "TextLineDataset");
    next_file();
    file_ = static_cast<std::size_t>(file);
    resume_ = offset;
  }

 private:
  void open() {
    auto source = std::make_unique<internal::TextFileSource>(ds_->files_[file_], ds_->compression_,
                                                             ds_->options_.max_inflated_bytes);
    const std::uint64_t start = resume_ > 0 ? static_cast<std::uint64_t>(resume_) : 0;
    if (start > 0) source->skip_to(start);
    input_ = std::make_unique<internal::BufferedInput>(std::move(source), ds_->buffer_, start);
    reader_ = std::make_unique<internal::LineReader>(*input_, ds_->options_.max_line_bytes);
    resume_ = -1;
  }
  void next_file() {
    reader_.reset();
    input_.reset();
    resume_ = -1;
    ++file_;
  }
  std::shared_ptr<const TextLineDataset> ds_;
  std::size_t file_ = 0;
  std::int64_t resume_ = -1;  // where a restored iterator opens its file
  std::unique_ptr<internal::BufferedInput> input_;
  std::unique_ptr<internal::LineReader> reader_;
};

std::unique_ptr<IteratorBase> TextLineDataset::make_iterator() const {
  return std::make_unique<TextLineIterator>(std::static_pointer_cast<const TextLineDataset>(shared_from_this()));
}

}  // namespace

Dataset text_line_dataset(std::vector<std::string> filenames, TextLineOptions options) {
  return Dataset(std::make_shared<TextLineDataset>(std::move(filenames), options));
}

}  // namespace chorus::data
