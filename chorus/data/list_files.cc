// list_files (tf.data.Dataset.list_files): a source of file names matched with glob(3).
#include <glob.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace {

// Names as scalar string tensors, in the given order (from_tensor_slices of strings in TF).
class FilenamesDataset final : public DatasetBase {
 public:
  explicit FilenamesDataset(std::vector<std::string> names) : names_(std::move(names)) {}
  std::string name() const override { return "TensorSliceDataset"; }
  std::int64_t cardinality() const override { return static_cast<std::int64_t>(names_.size()); }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const FilenamesDataset> ds)
          : ds_(std::move(ds)), device_(internal::host_device_for(internal::pipeline_device())) {}
      std::optional<Element> next() override {
        if (i_ >= ds_->names_.size()) return std::nullopt;
        const std::string& n = ds_->names_[i_++];
        return Element{Tensor::scalar(n, device_)};
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "list_files.next", static_cast<std::int64_t>(i_));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t i = state.get_int(prefix + "list_files.next");
        CHORUS_REQUIRE(i >= 0 && i <= static_cast<std::int64_t>(ds_->names_.size()), InvalidArgumentError,
                       "iterator state: list_files position ", i, " is outside [0, ", ds_->names_.size(), "]");
        i_ = static_cast<std::size_t>(i);
      }

     private:
      std::shared_ptr<const FilenamesDataset> ds_;
      std::string device_;
      std::size_t i_ = 0;
    };
    return std::make_unique<It>(std::static_pointer_cast<const FilenamesDataset>(shared_from_this()));
  }

 private:
  std::vector<std::string> names_;
};

std::vector<std::string> match_files(const std::vector<std::string>& patterns) {
  std::vector<std::string> names;
  for (const std::string& pattern : patterns) {
    CHORUS_REQUIRE(!pattern.empty(), InvalidArgumentError, "list_files: an empty file pattern");
    CHORUS_REQUIRE(pattern.find('\0') == std::string::npos, InvalidArgumentError,
                   "list_files: a file pattern contains a NUL byte");
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) names.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    CHORUS_REQUIRE(rc == 0 || rc == GLOB_NOMATCH, UnknownError, "list_files: glob(\"", pattern, "\") failed (",
                   rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read", ")");
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace

Dataset Dataset::list_files(const std::vector<std::string>& patterns, bool shuffle, std::optional<std::uint64_t> seed) {
  CHORUS_REQUIRE(!patterns.empty(), InvalidArgumentError, "list_files: no file patterns given");
  std::vector<std::string> names = match_files(patterns);
  if (names.empty()) {
    std::string joined;
    for (std::size_t i = 0; i < patterns.size(); ++i) joined += str_cat(i ? ", " : "", patterns[i]);
    throw InvalidArgumentError(str_cat("list_files: No files matched pattern: ", joined));
  }
  const auto n = static_cast<std::int64_t>(names.size());
  Dataset ds(std::make_shared<FilenamesDataset>(std::move(names)));
  // As TF: a shuffle whose buffer holds every name (a uniform permutation), reshuffled each pass.
  return shuffle ? ds.shuffle(n, seed) : ds;
}

}  // namespace chorus::data
