// The cache file format of Dataset::cache(filename): see cache_file_internal.h.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/data/cache_file_internal.h>
#include <chorus/data/internal.h>

namespace chorus::data::internal {

using chorus::internal::str_cat;

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i) & 0xFF));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i) & 0xFF));
}

// A bounds-checked little-endian reader over one record's data.
class Cursor {
 public:
  Cursor(std::string_view data, const std::string& where) : data_(data), where_(where) {}
  std::uint64_t u(int bytes, const char* what) {
    need(static_cast<std::size_t>(bytes), what);
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<std::uint8_t>(data_[pos_ + i])} << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string_view take(std::size_t n, const char* what) {
    need(n, what);
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  std::size_t left() const { return data_.size() - pos_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw DataLossError(str_cat("corrupt cache file ", where_, ": ", why));
  }

 private:
  void need(std::size_t n, const char* what) {
    if (n > left()) fail(str_cat(what, " needs ", n, " bytes but the record has ", left(), " left"));
  }
  std::string_view data_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

// A string component's elements (u64 length, bytes, each): the caller checked that the record
// holds 8 bytes per element, and each length is checked against what is left before it is used.
Tensor decode_strings(Cursor& c, const Shape& shape, const std::string& device) {
  Tensor t = Tensor::empty(shape, DType::kString, host_device_for(device));
  for (std::string& v : t.mutable_strings()) {
    const std::uint64_t n = c.u(8, "a string's length");
    if (n > c.left()) c.fail(str_cat("a string of ", n, " bytes, more than the ", c.left(), " the record has left"));
    v = c.take(static_cast<std::size_t>(n), "a string's bytes");
  }
  return t;
}

}  // namespace

std::string encode_cache_element(const Element& element) {
  std::string out = "E";
  put_u32(out, static_cast<std::uint32_t>(element.size()));
  for (const Tensor& t : element) {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "cache: an element has an undefined component");
    CHORUS_REQUIRE(t.shape().rank() <= kCacheMaxRank, InvalidArgumentError, "cache: a component of rank ",
                   t.shape().rank(), " (at most ", kCacheMaxRank, ")");
    out.push_back(static_cast<char>(t.dtype()));
    out.push_back(static_cast<char>(t.shape().rank()));
    for (std::int64_t d : t.shape().dims()) put_u64(out, static_cast<std::uint64_t>(d));
    if (t.is_string()) {
      for (const std::string& v : t.strings()) {
        put_u64(out, v.size());
        out += v;
      }
      continue;
    }
    const std::size_t at = out.size();
    out.resize(at + t.nbytes());
    if (t.nbytes() != 0) t.copy_to_host(out.data() + at);
  }
  return out;
}

Element decode_cache_element(std::string_view data, const std::string& device, const std::string& where) {
  Cursor c(data, where);
  if (c.u(1, "the record type") != 'E') c.fail("an element record does not start with 'E'");
  const std::uint64_t n = c.u(4, "the number of components");
  // Each component takes at least 2 bytes: a count the record cannot hold is refused before use.
  if (n > c.left() / 2) c.fail(str_cat(n, " components cannot fit in ", c.left(), " bytes"));
  Element e;
  for (std::uint64_t k = 0; k < n; ++k) {
    const std::uint64_t code = c.u(1, "a dtype");
    if (code >= static_cast<std::uint64_t>(kNumDTypes)) c.fail(str_cat("component ", k, " has dtype code ", code));
    const auto dtype = static_cast<DType>(code);
    const std::uint64_t rank = c.u(1, "a rank");
    if (rank > kCacheMaxRank) c.fail(str_cat("component ", k, " has rank ", rank, " (at most ", kCacheMaxRank, ")"));
    std::vector<std::int64_t> dims;
    // The least bytes one element takes: its size, or a string's u64 length.
    std::uint64_t bytes = dtype == DType::kString ? 8 : dtype_size(dtype);
    for (std::uint64_t d = 0; d < rank; ++d) {
      const std::uint64_t dim = c.u(8, "a dimension");
      // The product can never exceed the bytes left (checked at each step, so it cannot overflow).
      if (dim != 0 && bytes > c.left() / dim)
        c.fail(str_cat("component ", k, " has dimension ", dim, ", more than the record's ", c.left(),
                       " remaining bytes hold"));
      bytes *= dim;
      dims.push_back(static_cast<std::int64_t>(dim));
    }
    if (dtype == DType::kString) {
      e.push_back(decode_strings(c, Shape(std::move(dims)), device));
      continue;
    }
    std::string_view raw = c.take(static_cast<std::size_t>(bytes), "a tensor's bytes");
    e.push_back(Tensor::from_host(raw.data(), Shape(std::move(dims)), dtype, device));
  }
  if (c.left() != 0) c.fail(str_cat(c.left(), " bytes after the last component"));
  return e;
}

std::string encode_cache_footer(std::uint64_t count, std::uint64_t footer_offset) {
  std::string out = "F";
  put_u64(out, count);
  put_u64(out, footer_offset);
  return out;
}

bool cache_file_exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    throw_file_error(errno, "cannot stat cache file", path);
  }
  CHORUS_REQUIRE(S_ISREG(st.st_mode), InvalidArgumentError, "cache: '", path, "' is ",
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file",
                 "; cache(filename) needs a regular file (or no file, to write one)");
  return true;
}

CacheFileReader::CacheFileReader(const std::string& path, std::string device)
    // No max_record_bytes: chorus wrote these records, one per element, and an element may be
    // large; TFRecordReader bounds each length by the file's real size, and a record grows only
    // as its bytes arrive.
    : path_(path),
      device_(std::move(device)),
      reader_((cache_file_exists(path), path), TFRecordOptions{.max_record_bytes = UINT64_MAX}) {
  const std::uint64_t size = reader_.file_size();
  auto header = reader_.read();
  if (!header || *header != kCacheHeader)
    throw DataLossError(str_cat("'", path, "' is not a chorus cache file (no \"chorus.data.cache/1\" header record)"));
  first_ = reader_.offset();
  if (size < first_ + kCacheFooterFrame)
    throw DataLossError(str_cat("cache file '", path, "' is cut short: ", size, " bytes, no room for its footer"));
  footer_at_ = size - kCacheFooterFrame;
  reader_.seek(footer_at_);
  std::optional<std::string> footer;
  try {
    footer = reader_.read();
  } catch (const DataLossError& e) {
    throw DataLossError(str_cat("cache file '", path,
                                "' does not end with a footer record (cut short or written "
                                "over?): ",
                                e.message()));
  }
  const std::string where = str_cat("'", path, "' at offset ", footer_at_);
  if (!footer || footer->size() != kCacheFooterBytes || (*footer)[0] != 'F')
    throw DataLossError(str_cat("cache file ", where, ": the last record is not a footer"));
  Cursor c(*footer, where);
  c.u(1, "the record type");
  count_ = c.u(8, "the element count");
  if (c.u(8, "the footer offset") != footer_at_)
    throw DataLossError(str_cat("cache file ", where, ": the footer names another offset"));
  // Each element record takes at least 16 + 5 bytes.
  if (count_ > (footer_at_ - first_) / 21)
    throw DataLossError(
        str_cat("cache file ", where, ": ", count_, " elements cannot fit in ", footer_at_ - first_, " bytes"));
  reader_.seek(first_);
}

std::optional<Element> CacheFileReader::next() {
  if (reader_.offset() >= footer_at_) {
    if (read_ != count_)
      throw DataLossError(str_cat("cache file '", path_, "' holds ", read_, " elements but its footer says ", count_));
    return std::nullopt;
  }
  const std::uint64_t at = reader_.offset();
  if (read_ == count_)
    throw DataLossError(str_cat("cache file '", path_, "' has more element records than its footer's ", count_,
                                " (at offset ", at, ")"));
  auto record = reader_.read();
  if (!record) throw DataLossError(str_cat("cache file '", path_, "' ends at offset ", at, " before its footer"));
  if (reader_.offset() > footer_at_)
    throw DataLossError(str_cat("cache file '", path_, "': the record at offset ", at, " overlaps the footer"));
  Element e = decode_cache_element(*record, device_, str_cat("'", path_, "' at offset ", at));
  ++read_;
  return e;
}

void CacheFileReader::seek(std::uint64_t offset, std::uint64_t elements_read) {
  CHORUS_REQUIRE(offset >= first_ && offset <= footer_at_ && elements_read <= count_, InvalidArgumentError,
                 "iterator state: cache file offset ", offset, " / ", elements_read, " elements do not fit '", path_,
                 "' (elements from ", first_, " to ", footer_at_, ", ", count_, " of them)");
  reader_.seek(offset);
  read_ = elements_read;
}

}  // namespace chorus::data::internal
