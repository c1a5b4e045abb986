// The file format of Dataset::cache(filename) (docs/data.md, "The cache file"), shared by the
// writer and the reader. Internal to the data module (not installed); fuzzed by
// tests/fuzz/cache_file_fuzz.cc.
//
// A cache file is a TFRecord file (formats.md A2: length, masked CRC-32C of the length, data,
// masked CRC-32C of the data; little-endian), uncompressed, whose records are:
//   1. the header: the 20 bytes "chorus.data.cache/1\n";
//   2. one record per element: 'E', u32 number of components, then per component: u8 dtype
//      (core/dtype.h's code), u8 rank (<= kMaxRank), rank x u64 dimensions, and the tensor's bytes
//      (row-major; exactly dims' product x dtype size of them). A string component (dtype code 8,
//      DType::kString) holds instead, per element in row-major order, a u64 length and that many
//      bytes. Files written before strings existed never hold code 8, so they read unchanged (the
//      header stays "/1"); a reader from before refuses a string component as an unknown dtype;
//   3. the footer: 'F', u64 number of elements, u64 byte offset of the footer record itself.
// Nothing follows the footer. A reader checks the header and the footer before it returns any
// element (a file cut short or grown has no valid footer at its end), and every record's CRCs as
// it reads; TFRecordReader bounds every length by the file's real size, so a corrupt length never
// allocates more than the file holds.
//
// Errors: DataLossError naming the path and the offset for anything that does not follow the
// format; InvalidArgumentError for a path that is not a regular file (a directory, a device, a
// FIFO: stat() follows symlinks, so a link to a regular cache file reads as that file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <chorus/data/dataset.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data::internal {

inline constexpr std::string_view kCacheHeader = "chorus.data.cache/1\n";
inline constexpr int kCacheMaxRank = 32;
// A footer record's data (17 bytes) and its whole frame (8 + 4 + 17 + 4).
inline constexpr std::size_t kCacheFooterBytes = 17;
inline constexpr std::size_t kCacheFooterFrame = 33;

// An element record's data. Tensors are copied to the host.
std::string encode_cache_element(const Element& element);
// The inverse, tensors made on `device`. DataLossError (with `where` in the message) for data
// that is not an element record: every length is checked against the bytes left first.
Element decode_cache_element(std::string_view data, const std::string& device, const std::string& where);
std::string encode_cache_footer(std::uint64_t count, std::uint64_t footer_offset);

// Reads a cache file: the constructor opens it and checks the header and the footer.
class CacheFileReader {
 public:
  CacheFileReader(const std::string& path, std::string device);
  // The next element, or nullopt after the last one (the footer's count is then checked).
  std::optional<Element> next();
  // Byte offset of the next record, for iterator state; seek() continues there (it must be an
  // offset offset() returned, between the header and the footer: else InvalidArgumentError).
  std::uint64_t offset() const { return reader_.offset(); }
  std::uint64_t elements_read() const { return read_; }
  void seek(std::uint64_t offset, std::uint64_t elements_read);
  std::uint64_t count() const { return count_; }

 private:
  std::string path_;
  std::string device_;
  TFRecordReader reader_;
  std::uint64_t count_ = 0;      // the footer's
  std::uint64_t footer_at_ = 0;  // the footer record's offset
  std::uint64_t first_ = 0;      // the first element record's offset
  std::uint64_t read_ = 0;
};

// Throws InvalidArgumentError unless `path` (after symlinks) is a regular file; false when it
// does not exist (ENOENT, or a dangling link), true when it is a regular file.
bool cache_file_exists(const std::string& path);

}  // namespace chorus::data::internal
