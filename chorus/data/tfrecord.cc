#include <chorus/data/tfrecord.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/logging.h>
#include <chorus/data/internal.h>
#include <chorus/data/zlib_stream.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace internal {

void throw_file_error(int err, const std::string& what, const std::string& path) {
  const std::string msg = str_cat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) throw NotFoundError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) throw PermissionDeniedError(msg);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) throw ResourceExhaustedError(msg);
  throw UnknownError(msg);
}

namespace {
// A stdio stream on a duplicate of `checked`'s descriptor (`checked` closes its own).
File stdio_from(const io::File& checked, const char* mode, const std::string& what, const std::string& path) {
  const int fd = ::dup(checked.fd());
  if (fd < 0) throw_file_error(errno, what, path);
  std::FILE* f = ::fdopen(fd, mode);
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    throw_file_error(err, what, path);
  }
  return File(f);
}
}  // namespace

File open_file(const std::string& path, const char* mode, const std::string& what) {
  if (mode[0] == 'r') {
    // Through io::File: a FIFO, directory or device given as a data file is refused with
    // InvalidArgumentError naming it, instead of blocking or reading forever.
    return stdio_from(io::File::open_for_read(path), mode, what, path);
  }
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (f == nullptr) throw_file_error(errno, what, path);
  return File(f);
}

File create_new_file(const std::string& path, const std::string& what) {
  return stdio_from(io::File::create_new(path), "wb", what, path);
}

std::vector<std::uint8_t> read_file(const std::string& path, const std::string& what) {
  File f = open_file(path, "rb", what);
  std::vector<std::uint8_t> out;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    out.insert(out.end(), buf, buf + n);
    if (n < sizeof buf) {
      if (std::ferror(f.get())) throw_file_error(errno, "cannot read", path);
      return out;
    }
  }
}

}  // namespace internal

namespace {

using internal::throw_file_error;

void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

internal::ZlibFormat zlib_format(TFRecordCompression c) {
  return c == TFRecordCompression::kGzip ? internal::ZlibFormat::kGzip : internal::ZlibFormat::kZlib;
}

// The framing of one record: header, then footer (the data goes between them).
void frame(std::string_view record, char (&header)[kTFRecordHeaderBytes], char (&footer)[kTFRecordFooterBytes]) {
  put_u64(header, record.size());
  put_u32(header + 8, masked_crc32c(header, 8));
  put_u32(footer, masked_crc32c(record.data(), record.size()));
}

// DataLossError naming the record unless the CRC stored after the length (or after the data) holds.
void check_length_crc(const unsigned char* header, std::uint64_t offset, const std::string& path,
                      const std::string& hint) {
  const std::uint32_t length_crc = masked_crc32c(header, 8), stored = get_u32(header + 8);
  CHORUS_REQUIRE(length_crc == stored, DataLossError, "corrupted record at offset ", offset, " in ", path,
                 ": length CRC mismatch (stored ", hex(stored), ", computed ", hex(length_crc), ")", hint);
}
// `crc`: the unmasked CRC-32C of `data`, computed as its chunks arrived.
void check_data_crc(const std::string& data, std::uint32_t crc, const unsigned char* footer, std::uint64_t offset,
                    const std::string& path) {
  const std::uint32_t data_crc = mask_crc32c(crc), stored = get_u32(footer);
  CHORUS_REQUIRE(data_crc == stored, DataLossError, "corrupted record at offset ", offset, " in ", path,
                 ": data CRC mismatch over ", data.size(), " bytes (stored ", hex(stored), ", computed ", hex(data_crc),
                 ")");
}

// Reads a record's `length` data bytes through `read(dst, n)` (returns how many arrived; fewer at
// the end), growing `data` only as bytes arrive — geometrically, never past `length` — and
// CRC-ing each chunk as it comes. Returns the CRC, or nullopt if the bytes ran out first.
template <typename Read>
std::optional<std::uint32_t> read_record_data(std::uint64_t length, std::string& data, Read&& read) {
  constexpr std::uint64_t kChunk = 1 << 20;
  std::uint32_t crc = 0;
  data.clear();
  while (data.size() < length) {
    const std::size_t old = data.size();
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(length - old, kChunk));
    if (data.capacity() < old + want)
      data.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(length, std::max<std::uint64_t>(2 * old, kChunk))));
    data.resize(old + want);
    const std::size_t got = read(data.data() + old, want);
    crc = crc32c(data.data() + old, got, crc);
    if (got < want) {
      data.resize(old + got);
      return std::nullopt;
    }
  }
  return crc;
}

// What an uncompressed read that fails at offset 0 may really be looking at.
std::string compression_hint(const unsigned char* first, std::uint64_t offset) {
  if (offset != 0) return "";
  if (first[0] == 0x1f && first[1] == 0x8b)
    return "; the file starts with the GZIP magic bytes 1f 8b: read it with TFRecordOptions{.compression = "
           "TFRecordCompression::kGzip} (TensorFlow: compression_type=\"GZIP\")";
  if ((first[0] & 0x0f) == 8 && ((first[0] << 8) | first[1]) % 31 == 0)
    return "; the file starts like a zlib stream: if TensorFlow wrote it with compression_type=\"ZLIB\", read it "
           "with TFRecordOptions{.compression = TFRecordCompression::kZlib}";
  return "";
}

}  // namespace

TFRecordOptions TFRecordOptions::from_compression_type(std::string_view type) {
  if (type.empty() || type == "NONE") return {};
  if (type == "ZLIB") return {.compression = TFRecordCompression::kZlib};
  if (type == "GZIP") return {.compression = TFRecordCompression::kGzip};
  throw InvalidArgumentError(str_cat("TFRecord compression_type '", type, "': use \"\" (none), \"ZLIB\" or \"GZIP\""));
}

// ---------------------------------------------------------------------------------------------
// TFRecordWriter

namespace {
void check_compression_level(const TFRecordOptions& options, const std::string& path) {
  CHORUS_REQUIRE(options.compression_level >= -1 && options.compression_level <= 9, InvalidArgumentError,
                 "TFRecordWriter: compression_level ", options.compression_level, " for ", path,
                 ": use -1 (zlib's default) or 0..9");
}
}  // namespace

TFRecordWriter::TFRecordWriter(std::string path, TFRecordOptions options)
    : TFRecordWriter(
          path,
          (check_compression_level(options, path), internal::open_file(path, "wb", "cannot create TFRecord file")),
          options) {}

TFRecordWriter TFRecordWriter::create_new(std::string path, TFRecordOptions options) {
  check_compression_level(options, path);
  StdioFile file = internal::create_new_file(path, "cannot create TFRecord file");
  return TFRecordWriter(std::move(path), std::move(file), options);
}

TFRecordWriter::TFRecordWriter(std::string path, StdioFile file, TFRecordOptions options)
    : path_(std::move(path)), file_(std::move(file)) {
  if (options.compression != TFRecordCompression::kNone)
    zlib_ = std::make_unique<internal::ZlibWriter>(file_.get(), path_, zlib_format(options.compression),
                                                   options.compression_level);
}

TFRecordWriter::TFRecordWriter(TFRecordWriter&&) noexcept = default;
TFRecordWriter& TFRecordWriter::operator=(TFRecordWriter&&) noexcept = default;

TFRecordWriter::~TFRecordWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    CHORUS_LOG(ERROR) << "closing TFRecord file: " << e.what();
  }
}

void TFRecordWriter::write(std::string_view record) {
  CHORUS_REQUIRE(file_ != nullptr, FailedPreconditionError, "write to closed TFRecordWriter ", path_);
  char header[kTFRecordHeaderBytes], footer[kTFRecordFooterBytes];
  frame(record, header, footer);
  if (zlib_) {
    zlib_->write(std::string_view(header, sizeof header));
    zlib_->write(record);
    zlib_->write(std::string_view(footer, sizeof footer));
    return;
  }
  if (std::fwrite(header, 1, sizeof header, file_.get()) != sizeof header ||
      std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size() ||
      std::fwrite(footer, 1, sizeof footer, file_.get()) != sizeof footer)
    throw_file_error(errno, "cannot write to TFRecord file", path_);
}

void TFRecordWriter::flush() {
  CHORUS_REQUIRE(file_ != nullptr, FailedPreconditionError, "flush of closed TFRecordWriter ", path_);
  if (zlib_) zlib_->flush();
  if (std::fflush(file_.get()) != 0) throw_file_error(errno, "cannot flush TFRecord file", path_);
}

void TFRecordWriter::close() {
  if (file_ == nullptr) return;
  if (zlib_) {
    try {
      zlib_->finish();
    } catch (...) {
      std::fclose(file_.release());
      throw;
    }
    zlib_.reset();
  }
  std::FILE* f = file_.release();
  if (std::fclose(f) != 0) throw_file_error(errno, "cannot close TFRecord file", path_);
}

// ---------------------------------------------------------------------------------------------
// TFRecordReader

TFRecordReader::TFRecordReader(std::string path, TFRecordOptions options)
    : path_(std::move(path)), max_record_bytes_(options.max_record_bytes) {
  file_ = internal::open_file(path_, "rb", "cannot open TFRecord file");
  std::FILE* f = file_.get();
  if (std::fseek(f, 0, SEEK_END) != 0) throw_file_error(errno, "cannot seek in TFRecord file", path_);
  const long size = std::ftell(f);
  if (size < 0) throw_file_error(errno, "cannot size TFRecord file", path_);
  size_ = static_cast<std::uint64_t>(size);
  if (std::fseek(f, 0, SEEK_SET) != 0) throw_file_error(errno, "cannot seek in TFRecord file", path_);
  if (options.compression != TFRecordCompression::kNone) {
    zlib_ = std::make_unique<internal::ZlibReader>(f, size_, path_, zlib_format(options.compression));
    return;
  }
  seek(0);
}

TFRecordReader::~TFRecordReader() = default;
TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader& TFRecordReader::operator=(TFRecordReader&&) noexcept = default;

void TFRecordReader::seek(std::uint64_t offset) {
  if (zlib_) {
    zlib_->rewind();
    resync_ = false;
    if (!zlib_->skip(offset)) {
      const std::uint64_t end = zlib_->position();
      zlib_->rewind();
      offset_ = 0;
      throw InvalidArgumentError(
          str_cat("seek to offset ", offset, " past the end of ", path_, " (", end, " uncompressed bytes)"));
    }
    offset_ = offset;
    return;
  }
  CHORUS_REQUIRE(offset <= size_, InvalidArgumentError, "seek to offset ", offset, " past the end of ", path_, " (",
                 size_, " bytes)");
  if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0)
    throw_file_error(errno, "cannot seek in TFRecord file", path_);
  offset_ = offset;
}

void TFRecordReader::throw_compressed_truncated(const char* what) {
  throw DataLossError(str_cat(
      "truncated record at offset ", offset_, " in ", path_, ": its ", what, " is cut short (",
      zlib_->at_clean_end() ? "the compressed stream ends there" : "the file ends inside the compressed stream", ")"));
}

void TFRecordReader::check_ceiling(std::uint64_t length) const {
  if (length <= max_record_bytes_) return;
  throw ResourceExhaustedError(
      str_cat("record at offset ", offset_, " in ", path_, " is ", length,
              " bytes long (its length CRC holds), more than "
              "TFRecordOptions::max_record_bytes = ",
              max_record_bytes_,
              max_record_bytes_ % (1 << 20) == 0 ? str_cat(" (", max_record_bytes_ >> 20, " MiB)") : std::string(),
              "; nothing was allocated for it. If the data set's records really are this large, raise the ceiling: "
              "TFRecordOptions{.max_record_bytes = ",
              length, "} or more"));
}

std::optional<std::string> TFRecordReader::read_compressed() {
  if (resync_) {  // a previous read failed part-way: back to the record's start
    zlib_->rewind();
    if (!zlib_->skip(offset_)) throw_compressed_truncated("position");
    resync_ = false;
  }
  unsigned char header[kTFRecordHeaderBytes];
  const std::size_t got = zlib_->read(header, sizeof header);
  if (got == 0 && zlib_->at_clean_end()) return std::nullopt;
  if (got == 0)
    throw DataLossError(str_cat("truncated or trailing data at offset ", offset_, " in ", path_,
                                ": the compressed stream does not end cleanly at the end of the file (a file cut "
                                "short, a writer not closed, or bytes after the stream)"));
  if (got < sizeof header) throw_compressed_truncated("header");
  check_length_crc(header, offset_, path_, "");
  const std::uint64_t length = get_u64(header);
  const std::uint64_t most = zlib_->max_remaining();
  CHORUS_REQUIRE(length < most, DataLossError, "corrupted record at offset ", offset_, " in ", path_, ": its length ",
                 length, " is more than the compressed bytes left could hold (", most, ")");
  check_ceiling(length);
  // The record grows as its bytes arrive: a length that the stream does not back costs nothing.
  std::string data;
  const auto crc = read_record_data(length, data, [&](char* dst, std::size_t n) { return zlib_->read(dst, n); });
  if (!crc) throw_compressed_truncated("data");
  unsigned char footer[kTFRecordFooterBytes];
  if (zlib_->read(footer, sizeof footer) < sizeof footer) throw_compressed_truncated("footer");
  check_data_crc(data, *crc, footer, offset_, path_);
  offset_ += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  return data;
}

std::optional<std::string> TFRecordReader::read() {
  if (zlib_) {
    try {
      return read_compressed();
    } catch (...) {
      resync_ = true;  // calling again reads up to offset_ again and throws again
      throw;
    }
  }
  const std::uint64_t left = size_ - offset_;
  if (left == 0) return std::nullopt;
  // Every read below goes back to offset_ first, so a throw leaves the position at the record.
  seek(offset_);
  CHORUS_REQUIRE(left >= kTFRecordHeaderBytes, DataLossError, "truncated record at offset ", offset_, " in ", path_,
                 ": the header needs ", kTFRecordHeaderBytes, " bytes, ", left, " remain");
  unsigned char header[kTFRecordHeaderBytes];
  if (std::fread(header, 1, sizeof header, file_.get()) != sizeof header)
    throw_file_error(errno, "cannot read TFRecord file", path_);
  check_length_crc(header, offset_, path_, compression_hint(header, offset_));
  const std::uint64_t length = get_u64(header);
  const std::uint64_t body = left - kTFRecordHeaderBytes;
  CHORUS_REQUIRE(body >= kTFRecordFooterBytes && length <= body - kTFRecordFooterBytes, DataLossError,
                 "truncated record at offset ", offset_, " in ", path_, ": the record needs ", length, " data bytes + ",
                 kTFRecordFooterBytes, " CRC bytes, ", body, " remain");
  check_ceiling(length);
  // Read as it arrives, not allocated up front: the file may shrink under us, or be sparse.
  std::string data;
  const auto crc =
      read_record_data(length, data, [&](char* dst, std::size_t n) { return std::fread(dst, 1, n, file_.get()); });
  unsigned char footer[kTFRecordFooterBytes];
  if (!crc || std::fread(footer, 1, sizeof footer, file_.get()) != sizeof footer) {
    if (std::ferror(file_.get())) throw_file_error(errno, "cannot read TFRecord file", path_);
    throw DataLossError(str_cat("truncated record at offset ", offset_, " in ", path_,
                                ": the file ended while the record was read (it is shorter than when it was opened)"));
  }
  check_data_crc(data, *crc, footer, offset_, path_);
  offset_ += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  return data;
}

std::vector<std::string> read_tfrecord_file(const std::string& path, TFRecordOptions options) {
  TFRecordReader reader(path, options);
  std::vector<std::string> out;
  while (auto r = reader.read()) out.push_back(std::move(*r));
  return out;
}

void write_tfrecord_file(const std::string& path, const std::vector<std::string>& records, TFRecordOptions options) {
  TFRecordWriter writer(path, options);
  for (const auto& r : records) writer.write(r);
  writer.close();
}

// ---------------------------------------------------------------------------------------------
// TFRecordDataset

namespace {

class TFRecordDataset final : public DatasetBase {
 public:
  TFRecordDataset(std::vector<std::string> files, TFRecordOptions options)
      : files_(std::move(files)), options_(options) {}
  std::string name() const override { return "TFRecordDataset"; }
  std::int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const TFRecordDataset> ds)
          : ds_(std::move(ds)), device_(internal::host_device_for(internal::pipeline_device())) {}
      std::optional<Element> next() override {
        while (file_ < ds_->files_.size()) {
          if (!reader_) {
            reader_ = std::make_unique<TFRecordReader>(ds_->files_[file_], ds_->options_);
            if (resume_offset_ != 0) reader_->seek(resume_offset_);
            resume_offset_ = 0;
          }
          std::optional<std::string> record;
          try {
            record = reader_->read();
          } catch (const DataLossError&) {
            next_file();  // the rest of this file cannot be framed
            throw;
          } catch (const ResourceExhaustedError&) {
            next_file();  // a record over max_record_bytes: the same, rather than throw forever
            throw;
          }
          if (record) return Element{Tensor::scalar(std::move(*record), device_)};
          next_file();
        }
        return std::nullopt;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "tfrecord.file", static_cast<std::int64_t>(file_));
        state.set_int(prefix + "tfrecord.offset",
                      static_cast<std::int64_t>(reader_ ? reader_->offset() : resume_offset_));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t file = state.get_int(prefix + "tfrecord.file");
        const std::int64_t offset = state.get_int(prefix + "tfrecord.offset");
        CHORUS_REQUIRE(file >= 0 && file <= static_cast<std::int64_t>(ds_->files_.size()) && offset >= 0,
                       InvalidArgumentError, "iterator state: TFRecord file ", file, " offset ", offset, " do not fit ",
                       ds_->files_.size(), " files");
        file_ = static_cast<std::size_t>(file);
        resume_offset_ = static_cast<std::uint64_t>(offset);
        reader_.reset();  // reopened (and seeked) by the next next()
      }

     private:
      void next_file() {
        reader_.reset();
        resume_offset_ = 0;
        ++file_;
      }
      std::shared_ptr<const TFRecordDataset> ds_;
      std::string device_;
      std::size_t file_ = 0;
      std::uint64_t resume_offset_ = 0;
      std::unique_ptr<TFRecordReader> reader_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const TFRecordDataset>(shared_from_this()));
  }

 private:
  std::vector<std::string> files_;
  TFRecordOptions options_;
};

}  // namespace

Dataset tfrecord_dataset(std::vector<std::string> filenames, TFRecordOptions options) {
  return Dataset(std::make_shared<TFRecordDataset>(std::move(filenames), options));
}

}  // namespace chorus::data
