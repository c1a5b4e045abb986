// cache(filename): TF's on-disk cache. The format is in cache_file_internal.h.
//
// A pass either reads the file (it existed when the iterator was made) or writes it: to a
// temporary file beside it, renamed over `filename` when the input ends, so a pass cut short never
// leaves a file a later pass would read. A writing iterator's state names its temporary file and
// how many bytes of it are valid; restoring copies those records into a new temporary file (so the
// saved iterator, if it goes on, and the restored one never write the same file) and continues.
//
// The temporary's name ends in 64 random bits and it is created O_EXCL | O_NOFOLLOW: a link
// planted beside the cache is never written through, and nobody can deny the cache by planting
// files at the names it will use. A write that fails (full disk, a directory that is missing or
// read-only) is thrown once; the pass then goes on uncached — the element that was not written is
// the next one returned — and leaves no file behind.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/logging.h>
#include <chorus/data/cache_file_internal.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;
using internal::input_prefix;

namespace {

// "<filename>.tmp-<pid>-<16 random hex digits>" (io::temporary_name).
std::string temporary_name(const std::string& filename) {
  return io::temporary_name(str_cat(filename, ".tmp-", ::getpid()), "-");
}

Tensor string_tensor(const std::string& s) {
  return Tensor::from_vector(std::vector<std::uint8_t>(s.begin(), s.end()), "/CPU:0");
}

class FileCacheDataset final : public DatasetBase {
 public:
  FileCacheDataset(std::shared_ptr<const DatasetBase> input, std::string filename)
      : input_(std::move(input)), filename_(std::move(filename)) {
    CHORUS_REQUIRE(filename_.find('\0') == std::string::npos, InvalidArgumentError,
                   "cache: the filename contains a NUL byte");
  }
  std::string name() const override { return "CacheDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorBase> make_iterator() const override;

 private:
  class It;
  std::shared_ptr<const DatasetBase> input_;
  std::string filename_;
};

class FileCacheDataset::It final : public IteratorBase {
 public:
  explicit It(std::shared_ptr<const FileCacheDataset> ds) : ds_(std::move(ds)), device_(internal::pipeline_device()) {
    reading_ = internal::cache_file_exists(ds_->filename_);  // a directory etc.: InvalidArgumentError now
  }
  ~It() override {
    // An unfinished file is removed, unless a saved state may still resume from it.
    if (writer_ && !saved_) {
      writer_.reset();
      std::remove(tmp_.c_str());
    }
  }

  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (reading_) {
      if (!reader_) reader_ = std::make_unique<internal::CacheFileReader>(ds_->filename_, device_);
      auto e = reader_->next();
      if (!e) done_ = true;
      return e;
    }
    if (pending_) {  // the element whose write failed: the error went out, the element goes now
      std::optional<Element> e = std::move(pending_);
      pending_.reset();
      return e;
    }
    if (!in_) in_ = ds_->input_->make_iterator();
    if (!writer_ && !passthrough_) {
      try {
        start_writing();
      } catch (const Error& err) {
        write_failed(err, "cannot start");
      }
    }
    std::optional<Element> e;
    try {
      e = in_->next();
    } catch (...) {
      abandon_writing();  // a cache without this element would be wrong: this pass writes none
      throw;
    }
    if (!e) {
      done_ = true;  // set first: a failure to finish is thrown once, then the pass has ended
      if (writer_) {
        try {
          finish_writing();
        } catch (const Error& err) {
          write_failed(err, "cannot finish");
        }
      }
      return std::nullopt;
    }
    if (writer_) {
      try {
        write(internal::encode_cache_element(*e));
      } catch (const Error& err) {
        pending_ = std::move(e);
        write_failed(err, "cannot write");
      }
    }
    return e;
  }

  void save(IteratorState& state, const std::string& prefix) override {
    state.set_int(prefix + "file_cache.reading", reading_);
    state.set_int(prefix + "file_cache.done", done_);
    if (done_) return;
    state.set_int(prefix + "file_cache.pending", pending_.has_value());
    if (pending_) internal::save_element(state, prefix + "file_cache.pending_element", *pending_);
    if (reading_) {
      if (!reader_) reader_ = std::make_unique<internal::CacheFileReader>(ds_->filename_, device_);
      state.set_int(prefix + "file_cache.offset", static_cast<std::int64_t>(reader_->offset()));
      state.set_int(prefix + "file_cache.read", static_cast<std::int64_t>(reader_->elements_read()));
      return;
    }
    if (!in_) in_ = ds_->input_->make_iterator();
    if (!writer_ && !passthrough_) {
      try {
        start_writing();
      } catch (const Error& err) {
        write_failed(err, "cannot start");
      }
    }
    in_->save(state, input_prefix(prefix));
    state.set_int(prefix + "file_cache.writing", writer_ != nullptr);
    if (writer_) {
      writer_->flush();
      saved_ = true;
      state.set_tensor(prefix + "file_cache.tmp", string_tensor(tmp_));
      state.set_int(prefix + "file_cache.bytes", static_cast<std::int64_t>(bytes_));
      state.set_int(prefix + "file_cache.count", static_cast<std::int64_t>(count_));
    }
  }

  void restore(const IteratorState& state, const std::string& prefix) override {
    const bool reading = state.get_int(prefix + "file_cache.reading") != 0;
    done_ = state.get_int(prefix + "file_cache.done") != 0;
    reading_ = reading;
    if (done_) return;
    if (reading) {
      const std::int64_t offset = state.get_int(prefix + "file_cache.offset");
      const std::int64_t read = state.get_int(prefix + "file_cache.read");
      CHORUS_REQUIRE(offset >= 0 && read >= 0, InvalidArgumentError, "iterator state: cache file offset ", offset,
                     " / elements read ", read, " are negative");
      reader_ = std::make_unique<internal::CacheFileReader>(ds_->filename_, device_);
      reader_->seek(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(read));
      return;
    }
    pending_.reset();
    // States saved before the key existed have no pending element.
    if (state.has_int(prefix + "file_cache.pending") && state.get_int(prefix + "file_cache.pending") != 0)
      pending_ = internal::load_element(state, prefix + "file_cache.pending_element");
    in_ = ds_->input_->make_iterator();
    in_->restore(state, input_prefix(prefix));
    if (state.get_int(prefix + "file_cache.writing") == 0) {
      passthrough_ = true;
      return;
    }
    const auto bytes = state.get_tensor(prefix + "file_cache.tmp").to_vector<std::uint8_t>();
    try {
      resume_writing(std::string(bytes.begin(), bytes.end()),
                     static_cast<std::uint64_t>(state.get_int(prefix + "file_cache.bytes")),
                     static_cast<std::uint64_t>(state.get_int(prefix + "file_cache.count")));
    } catch (...) {
      abandon_writing();  // thrown once from restore; the restored pass then goes on uncached
      throw;
    }
  }

 private:
  void start_writing() {
    // A name taken (by chance, or by someone planting files) is not ours to touch: another name.
    for (int attempt = 0;; ++attempt) {
      tmp_ = temporary_name(ds_->filename_);
      try {
        writer_ = std::make_unique<TFRecordWriter>(TFRecordWriter::create_new(tmp_));
        break;
      } catch (const AlreadyExistsError&) {
        if (attempt == 15) throw;
      }
    }
    saved_ = false;
    bytes_ = count_ = 0;
    write(std::string(internal::kCacheHeader));
    count_ = 0;
  }
  void write(const std::string& record) {
    writer_->write(record);
    bytes_ += 16 + record.size();
    ++count_;
  }
  void abandon_writing() {
    if (writer_) {
      writer_.reset();
      if (!saved_) std::remove(tmp_.c_str());
    }
    passthrough_ = true;
  }
  // A write to the cache failed (`err`: the OS's error, typed — ResourceExhaustedError for a full
  // disk, NotFoundError / PermissionDeniedError for the directory). Thrown once, with the same
  // class; the pass goes on uncached and nothing of it is left on disk.
  [[noreturn]] void write_failed(const Error& err, const char* what) {
    abandon_writing();
    const std::string msg =
        str_cat("cache(\"", ds_->filename_, "\"): ", what, " the cache file: ", err.message(),
                done_ ? "; the input has ended and no cache file was made (a later pass tries again)"
                      : "; this pass goes on uncached: no element is lost (the next call returns the one not "
                        "written) and no cache file is made (a later pass tries again)");
    CHORUS_LOG(WARNING) << msg;
    throw_error(err.code(), msg);
  }
  void finish_writing() {
    if (!writer_) return;
    writer_->write(internal::encode_cache_footer(count_, bytes_));
    writer_->close();  // the buffered bytes go out here: a full disk may show only now
    writer_.reset();
    try {
      io::require_replaceable(ds_->filename_);  // a device or FIFO at the cache's name is never replaced
    } catch (...) {
      std::remove(tmp_.c_str());
      throw;
    }
    if (std::rename(tmp_.c_str(), ds_->filename_.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp_.c_str());
      // A restored copy of this iterator finished first and removed our file (see below): the
      // cache it wrote holds the same elements.
      if (err == ENOENT && internal::cache_file_exists(ds_->filename_)) return;
      internal::throw_file_error(err, "cannot rename the finished cache file to", ds_->filename_);
    }
    // The file a saved iterator left for us is no longer needed by anyone who could finish it.
    if (!resumed_from_.empty()) std::remove(resumed_from_.c_str());
  }
  // Copies the first `bytes` bytes' records of a saved temporary file (header + `count` elements)
  // into a new one. When the old file is gone or shorter (another machine, a cleaned /tmp), this
  // pass writes nothing: the cache is written by a later complete pass instead.
  void resume_writing(const std::string& old_tmp, std::uint64_t bytes, std::uint64_t count) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(old_tmp, ec) || std::filesystem::file_size(old_tmp, ec) < bytes || ec) {
      passthrough_ = true;
      return;
    }
    TFRecordReader old(old_tmp, TFRecordOptions{.max_record_bytes = UINT64_MAX});  // as CacheFileReader
    start_writing();
    auto header = old.read();
    if (!header || *header != internal::kCacheHeader)
      throw DataLossError(
          str_cat("cache: the temporary file '", old_tmp, "' a saved iterator was writing has no header"));
    while (old.offset() < bytes) {
      auto record = old.read();
      if (!record) break;
      write(*record);
    }
    if (old.offset() != bytes || count_ != count)
      throw DataLossError(str_cat("cache: the temporary file '", old_tmp, "' holds ", count_, " elements in ",
                                  old.offset(), " bytes where the saved iterator wrote ", count, " in ", bytes));
    saved_ = false;
    resumed_from_ = old_tmp;
  }

  std::shared_ptr<const FileCacheDataset> ds_;
  std::string device_;
  bool reading_ = false;
  bool done_ = false;
  // reading
  std::unique_ptr<internal::CacheFileReader> reader_;
  // writing
  std::unique_ptr<IteratorBase> in_;
  std::unique_ptr<TFRecordWriter> writer_;
  std::string tmp_;
  std::uint64_t bytes_ = 0, count_ = 0;
  std::string resumed_from_;        // the saved temporary file this pass resumed from
  bool saved_ = false;              // a state names tmp_: keep it if this iterator ends early
  bool passthrough_ = false;        // restored without a usable temporary file, or a write failed: write nothing
  std::optional<Element> pending_;  // read from the input, its write failed: returned by the next call
};

std::unique_ptr<IteratorBase> FileCacheDataset::make_iterator() const {
  return std::make_unique<It>(std::static_pointer_cast<const FileCacheDataset>(shared_from_this()));
}

}  // namespace

Dataset Dataset::cache(const std::string& filename) const {
  if (filename.empty()) return cache();  // TF: cache(filename="") caches in memory
  return Dataset(std::make_shared<FileCacheDataset>(get().shared_from_this(), filename));
}

}  // namespace chorus::data
