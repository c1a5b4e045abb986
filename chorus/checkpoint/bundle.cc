#include <chorus/checkpoint/bundle.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <chorus/checkpoint/atomic_file.h>
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/checksum_worker.h>
#include <chorus/checkpoint/shard_metadata.h>
#include <chorus/checkpoint/table.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/runtime.h>

namespace chorus::train {

using chorus::internal::str_cat;
using io::File;
using io::throw_errno;

namespace {

// Tensors smaller than this are gathered in one buffer and written together; larger ones are
// written straight from their storage (no copy for CPU tensors), their CRC computed meanwhile by
// a ChecksumWorker on another core.
constexpr std::size_t kWriteBufferSize = std::size_t{1} << 20;
// The data file is written in pieces of this size, and after each such piece the kernel is asked
// to start writing the dirty pages to the disk (sync_file_range), so the disk works while later
// tensors are still being copied into the page cache, and the closing fsync waits only for the
// tail (RocksDB's bytes_per_sync). Without it the disk idles until fsync: the kernel's own
// writeback starts only past dirty_background_ratio of memory.
constexpr std::size_t kWritebackChunk = std::size_t{8} << 20;
// read() fetches and checksums numeric tensors in pieces of this size (fits in L2). (Checksumming
// on another core while the next piece is read, as the writer does, measured no faster: the
// kernel's copy and the disk dominate, bench_checkpoint 2026-11-26.)
constexpr std::int64_t kReadChunk = std::int64_t{1} << 19;

std::string shard_filename(const std::string& prefix, std::int64_t shard, std::int64_t num_shards) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".data-%05lld-of-%05lld", static_cast<long long>(shard),
                static_cast<long long>(num_shards));
  return prefix + suffix;
}

}  // namespace

bool BundleEntry::supported() const { return is_string || internal::dtype_from_tf(tf_dtype).has_value(); }

std::string index_filename(const std::string& prefix) { return prefix + ".index"; }
std::string data_filename(const std::string& prefix) { return shard_filename(prefix, 0, 1); }

bool bundle_exists(const std::string& prefix) {
  struct stat st {};
  return ::stat(index_filename(prefix).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void sync_directory(const std::string& dir) {
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(errno, "cannot open directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // EINVAL: the filesystem cannot sync directories (some FUSE/network mounts): nothing to do.
  if (rc != 0 && err != EINVAL) throw_errno(err, "cannot sync directory", dir);
}

namespace {

// Files in `dir` whose name satisfies `match`.
template <typename Match>
std::vector<std::string> list_matching(const std::string& dir, Match&& match) {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) throw_errno(ec.value(), "cannot list directory", dir);
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (match(name)) out.push_back(it->path().string());
  }
  if (ec) throw_errno(ec.value(), "cannot list directory", dir);
  return out;
}

}  // namespace

void delete_bundle(const std::string& prefix) {
  remove_file_if_exists(index_filename(prefix));  // first: the bundle stops being "complete"
  const std::string dir = directory_of(prefix);
  const auto slash = prefix.find_last_of('/');
  const std::string base = (slash == std::string::npos ? prefix : prefix.substr(slash + 1)) + ".data-";
  if (!std::filesystem::is_directory(dir)) return;
  for (const std::string& path : list_matching(dir, [&](const std::string& name) {
         return name.compare(0, base.size(), base) == 0 && name.find("-of-", base.size()) != std::string::npos &&
                name.find(".tempstate") == std::string::npos;
       }))
    remove_file_if_exists(path);
}

int remove_stray_temporaries(const std::string& dir) {
  int n = 0;
  for (const std::string& path :
       list_matching(dir, [](const std::string& name) { return name.find(".tempstate") != std::string::npos; }))
    n += remove_file_if_exists(path) ? 1 : 0;
  return n;
}

// =============================================================================================
// BundleWriter

struct BundleWriter::Impl {
  std::string prefix;
  int shard_id = 0;
  int num_shards = 1;
  std::string data_tmp;
  std::string index_tmp;  // set during finish
  File data;
  std::int64_t offset = 0;
  std::map<std::string, BundleEntry> entries;  // whole tensors and the data entries of slices
  // Partitioned tensors: key → the full-tensor entry (dtype, shape) and the slices written here.
  std::map<std::string, std::pair<BundleEntry, std::vector<internal::TensorSliceSpec>>> sliced;
  std::uint64_t written = 0;    // bytes handed to write(2) so far
  std::uint64_t writeback = 0;  // bytes whose writeback was started
  std::string buffer;
  std::vector<char> scratch;                           // device tensors are copied here
  std::unique_ptr<internal::ChecksumWorker> checksum;  // made at the first large tensor
  bool spent = false;                                  // finished, or failed while writing

  void require_usable(const char* what) const {
    CHORUS_REQUIRE(!spent, FailedPreconditionError, "BundleWriter('", prefix, "')::", what,
                   " after finish() or after a failed write");
  }

  void check_key(const std::string& key) const {
    CHORUS_REQUIRE(!key.empty(), InvalidArgumentError, "BundleWriter('", prefix,
                   "'): the empty key is reserved for the bundle header");
    CHORUS_REQUIRE(!entries.count(key) && !sliced.count(key), InvalidArgumentError, "BundleWriter('", prefix,
                   "'): key '", key, "' was already added");
  }

  std::string data_final() const { return shard_filename(prefix, shard_id, num_shards); }

  // This writer's index entries (serialized BundleEntryProtos), for the merge.
  internal::ShardMetadata metadata(bool chief) const {
    internal::ShardMetadata md;
    md.worker = shard_id;
    md.chief = chief;
    for (const auto& [key, e] : entries) md.entries.emplace_back(key, internal::encode_bundle_entry(e));
    for (const auto& [key, full] : sliced)
      md.entries.emplace_back(key, internal::encode_bundle_entry(full.first, full.second));
    return md;
  }

  // A host pointer to `tensor`'s bytes: its storage (after the work queued on it), or a copy in
  // `scratch` for a GPU tensor.
  const char* host_bytes(const Tensor& tensor) {
    DeviceContext& ctx = tensor.device_context();
    if (ctx.is_gpu()) {
      scratch.resize(tensor.nbytes());
      tensor.copy_to_host(scratch.data());
      return scratch.data();
    }
    ctx.stream().synchronize();  // pending CPU work on the storage has run (rethrows its errors)
    return static_cast<const char*>(tensor.data());
  }

  void write_through(std::string_view bytes) {
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), kWritebackChunk);
      data.write_all(bytes.substr(0, n));
      bytes.remove_prefix(n);
      written += n;
      if (written - writeback >= kWritebackChunk) {
        // Only a hint: an error here (EIO, or a file system without it) is reported by fsync.
        (void)::sync_file_range(data.fd(), static_cast<off_t>(writeback), static_cast<off_t>(written - writeback),
                                SYNC_FILE_RANGE_WRITE);
        writeback = written;
      }
    }
  }

  void flush() {
    if (buffer.empty()) return;
    write_through(buffer);
    buffer.clear();
  }

  // Appends `bytes` to the data file (buffered when small); returns their crc32c (unmasked). A
  // large piece is checksummed on the ChecksumWorker while it is written.
  std::uint32_t append(std::string_view bytes) {
    offset += static_cast<std::int64_t>(bytes.size());
    if (bytes.size() < kWriteBufferSize) {
      if (buffer.size() + bytes.size() > kWriteBufferSize) flush();
      buffer.append(bytes);
      return crc32c(bytes.data(), bytes.size());
    }
    flush();
    if (!checksum) checksum = std::make_unique<internal::ChecksumWorker>();
    checksum->add(bytes.data(), bytes.size());
    try {
      write_through(bytes);
    } catch (...) {
      checksum->take();  // the worker reads `bytes` until then
      throw;
    }
    return checksum->take();
  }

  // Runs f; on an error marks the writer spent (the data file's state is unknown) and rethrows.
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      spent = true;
      throw;
    }
  }

  void remove_temporaries() noexcept {
    data = File();
    if (!data_tmp.empty()) ::unlink(data_tmp.c_str());
    if (!index_tmp.empty()) ::unlink(index_tmp.c_str());
    data_tmp.clear();
    index_tmp.clear();
  }
};

BundleWriter::BundleWriter(std::string prefix) : BundleWriter(std::move(prefix), 0, 1) {}

BundleWriter::BundleWriter(std::string prefix, int shard_id, int num_shards) : impl_(std::make_unique<Impl>()) {
  CHORUS_REQUIRE(num_shards >= 1 && num_shards <= internal::kMaxShards && shard_id >= 0 && shard_id < num_shards,
                 InvalidArgumentError, "BundleWriter('", prefix, "'): data file ", shard_id, " of ", num_shards);
  impl_->prefix = std::move(prefix);
  impl_->shard_id = shard_id;
  impl_->num_shards = num_shards;
  const std::string& p = impl_->prefix;
  CHORUS_REQUIRE(!p.empty() && p.back() != '/', InvalidArgumentError, "BundleWriter: prefix '", p,
                 "' must name a file path without suffix, like '/dir/ckpt-1'");
  const std::string dir = directory_of(p);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw_errno(errno, "BundleWriter: cannot use checkpoint directory", dir);
  if (!S_ISDIR(st.st_mode)) throw_errno(ENOTDIR, "BundleWriter: cannot use checkpoint directory", dir);
  impl_->data_tmp = temporary_filename(impl_->data_final());
  impl_->data = File::create_new(impl_->data_tmp);
}

BundleWriter::~BundleWriter() {
  if (impl_) impl_->remove_temporaries();  // after a successful finish() there are none left
}

const std::string& BundleWriter::prefix() const { return impl_->prefix; }

void BundleWriter::add(const std::string& key, const Tensor& tensor) {
  Impl& m = *impl_;
  m.require_usable("add");
  m.check_key(key);
  CHORUS_REQUIRE(tensor.defined(), InvalidArgumentError, "BundleWriter::add('", key, "'): undefined tensor");
  if (tensor.is_string()) return add_strings(key, tensor.to_vector<std::string>(), tensor.shape());
  BundleEntry e;
  e.dtype = tensor.dtype();
  e.tf_dtype = internal::tf_dtype_of(tensor.dtype());
  e.shape = tensor.shape();
  e.shard_id = m.shard_id;
  e.offset = m.offset;
  e.size = static_cast<std::int64_t>(tensor.nbytes());
  m.guarded([&] { e.masked_crc32c = mask_crc32c(m.append(std::string_view(m.host_bytes(tensor), tensor.nbytes()))); });
  m.entries.emplace(key, std::move(e));
}

void BundleWriter::add_flat_slice(const std::string& key, const Shape& full_shape, std::int64_t begin,
                                  const Tensor& values) {
  Impl& m = *impl_;
  m.require_usable("add_flat_slice");
  CHORUS_REQUIRE(values.defined() && !values.is_string() && values.shape().rank() == 1, InvalidArgumentError,
                 "BundleWriter::add_flat_slice('", key, "'): values must be a 1-D numeric tensor");
  const std::int64_t total = full_shape.num_elements(), n = values.num_elements();
  CHORUS_REQUIRE(begin >= 0 && begin <= total - n, InvalidArgumentError, "BundleWriter::add_flat_slice('", key,
                 "'): elements [", begin, ", ", begin + n, ") of a tensor ", full_shape.to_string(), " of ", total);
  if (n == 0) return;
  CHORUS_REQUIRE(!key.empty() && !m.entries.count(key), InvalidArgumentError, "BundleWriter('", m.prefix,
                 "')::add_flat_slice: key '", key, "' is empty or was added whole");
  if (n == total) return add(key, values.reshape(full_shape));  // the whole tensor: a plain entry
  BundleEntry full;
  full.dtype = values.dtype();
  full.tf_dtype = internal::tf_dtype_of(values.dtype());
  full.shape = full_shape;
  auto [it, fresh] = m.sliced.try_emplace(key, full, std::vector<internal::TensorSliceSpec>{});
  CHORUS_REQUIRE(fresh || (it->second.first.dtype == full.dtype && it->second.first.shape == full_shape),
                 InvalidArgumentError, "BundleWriter::add_flat_slice('", key, "'): ", dtype_name(full.dtype),
                 full_shape.to_string(), " after ", dtype_name(it->second.first.dtype),
                 it->second.first.shape.to_string());
  const auto esize = static_cast<std::int64_t>(dtype_size(values.dtype()));
  std::vector<internal::FlatSlice> boxes = internal::flat_range_slices(full_shape.dims(), begin, n);
  for (const internal::FlatSlice& box : boxes)
    CHORUS_REQUIRE(!m.entries.count(internal::encode_tensor_name_slice(key, box.spec)), InvalidArgumentError,
                   "BundleWriter::add_flat_slice('", key, "'): elements [", box.begin, ", ", box.begin + box.length,
                   ") were already added");
  m.guarded([&] {
    const char* src = m.host_bytes(values);
    for (internal::FlatSlice& box : boxes) {
      std::string slice_key = internal::encode_tensor_name_slice(key, box.spec);
      BundleEntry e = full;
      e.shape = Shape(std::move(box.shape));
      e.shard_id = m.shard_id;
      e.offset = m.offset;
      e.size = box.length * esize;
      const char* p = src + (box.begin - begin) * esize;
      e.masked_crc32c = mask_crc32c(m.append(std::string_view(p, static_cast<std::size_t>(e.size))));
      m.entries.emplace(std::move(slice_key), std::move(e));
      it->second.second.push_back(std::move(box.spec));
    }
  });
}

void BundleWriter::add_strings(const std::string& key, const std::vector<std::string>& values, const Shape& shape) {
  Impl& m = *impl_;
  m.require_usable("add_strings");
  m.check_key(key);
  CHORUS_REQUIRE(static_cast<std::int64_t>(values.size()) == shape.num_elements(), InvalidArgumentError,
                 "BundleWriter::add_strings('", key, "'): ", values.size(), " values for shape ", shape.to_string(),
                 " (", shape.num_elements(), " elements)");
  BundleEntry e;
  e.is_string = true;
  e.tf_dtype = internal::kTfString;
  e.shape = shape;
  e.shard_id = m.shard_id;
  e.offset = m.offset;
  std::uint32_t crc = 0;
  const std::string bytes = internal::encode_string_tensor(values, &crc);
  e.size = static_cast<std::int64_t>(bytes.size());
  e.masked_crc32c = mask_crc32c(crc);
  m.guarded([&] { m.append(bytes); });
  m.entries.emplace(key, std::move(e));
}

void BundleWriter::finish() {
  Impl& m = *impl_;
  m.require_usable("finish");
  CHORUS_REQUIRE(m.num_shards == 1, FailedPreconditionError, "BundleWriter('", m.prefix, "')::finish: this writer ",
                 "writes data file ", m.shard_id, " of ", m.num_shards, "; call finish_shard()");
  m.spent = true;
  const std::string index_final = index_filename(m.prefix);
  const std::string data_final = data_filename(m.prefix);
  bool data_renamed = false;
  try {
    m.flush();
    m.data.sync();
    m.data.close();

    const std::string index = internal::merge_shard_index({m.metadata(true)}, 1, index_final);
    m.index_tmp = temporary_filename(index_final);
    File f = File::create_new(m.index_tmp);
    f.write_all(index);
    f.sync();
    f.close();

    // Commit: everything fallible that does not touch final names is done. A device, FIFO or
    // directory planted at a final name is refused, never replaced.
    io::require_replaceable(index_final);
    io::require_replaceable(data_final);
    remove_file_if_exists(index_final);  // an old bundle under this prefix stops being complete
    rename_file(m.data_tmp, data_final);
    data_renamed = true;
    m.data_tmp.clear();
    rename_file(m.index_tmp, index_final);
    m.index_tmp.clear();
    sync_directory(directory_of(m.prefix));
  } catch (...) {
    m.remove_temporaries();
    if (data_renamed && !bundle_exists(m.prefix)) ::unlink(data_final.c_str());  // no index refers to it
    throw;
  }
}

std::string BundleWriter::finish_shard(bool chief) {
  Impl& m = *impl_;
  m.require_usable("finish_shard");
  m.spent = true;
  const std::string index_final = index_filename(m.prefix);
  const std::string data_final = m.data_final();
  try {
    m.flush();
    m.data.sync();
    m.data.close();
    io::require_replaceable(index_final);
    io::require_replaceable(data_final);
    remove_file_if_exists(index_final);  // an old bundle under this prefix stops being complete
    rename_file(m.data_tmp, data_final);
    m.data_tmp.clear();
    sync_directory(directory_of(m.prefix));  // durable before the chief's index can name it
  } catch (...) {
    m.remove_temporaries();
    throw;
  }
  return internal::encode_shard_metadata(m.metadata(chief));
}

void write_sharded_index(const std::string& prefix, std::int64_t num_shards, std::string_view metadata) {
  const std::string index_final = index_filename(prefix);
  const std::string index = internal::merge_shard_index(
      internal::decode_shard_metadata(metadata, "the writers of '" + prefix + "'"), num_shards, index_final);
  const std::string tmp = temporary_filename(index_final);
  try {
    File f = File::create_new(tmp);
    f.write_all(index);
    f.sync();
    f.close();
    io::require_replaceable(index_final);
    rename_file(tmp, index_final);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory(directory_of(prefix));
}

// =============================================================================================
// BundleReader

namespace {

struct DataShard {
  std::string filename;
  std::optional<File> file;  // nullopt: the file does not exist
  std::uint64_t size = 0;
};

}  // namespace

struct BundleReader::Impl {
  std::string prefix;
  std::string index_file;
  internal::BundleIndex index;
  std::vector<DataShard> shards;

  const DataShard& open_shard(const std::string& key, const BundleEntry& e) const {
    const DataShard& s = shards[static_cast<std::size_t>(e.shard_id)];
    if (!s.file)
      throw NotFoundError(str_cat("cannot read tensor '", key, "' of checkpoint '", prefix, "': its data file '",
                                  s.filename, "' does not exist"));
    return s;
  }

  // Reads a numeric entry's bytes into dst (exactly e.size bytes) and checks their crc32c, chunk
  // by chunk, so the CRC runs over bytes still in the cache.
  void read_checked(const std::string& key, const BundleEntry& e, char* dst) const {
    const DataShard& s = open_shard(key, e);
    std::uint32_t crc = 0;
    for (std::int64_t done = 0; done < e.size;) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(e.size - done, kReadChunk));
      const std::size_t got = s.file->read_at(static_cast<std::uint64_t>(e.offset + done), dst + done, n);
      if (got != n)
        throw DataLossError(str_cat("corrupt checkpoint data '", s.filename, "': tensor '", key, "' needs bytes [",
                                    e.offset, ", ", e.offset + e.size, ") but the file ends at ",
                                    e.offset + done + got));
      crc = crc32c(dst + done, n, crc);
      done += static_cast<std::int64_t>(n);
    }
    internal::check_numeric_crc(crc, e, s.filename, key);
  }

  // A partitioned tensor (TF's BundleReader::GetSliceValue): each slice's data entry is read,
  // checked, and copied into its box of the full tensor `dst` (row-major, full.shape). Slices may
  // overlap, as in TF; together they must cover every element (DataLossError otherwise).
  void read_slices(const std::string& key, const BundleEntry& full, const internal::BundleIndex::Sliced& sliced,
                   char* dst) const {
    const std::vector<std::int64_t>& dims = full.shape.dims();
    const std::size_t rank = dims.size();
    const std::int64_t esize = static_cast<std::int64_t>(dtype_size(full.dtype));
    const std::int64_t total = full.shape.num_elements();
    std::vector<std::int64_t> stride(rank, 1);  // in elements
    for (std::size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * dims[d];
    std::vector<bool> covered(static_cast<std::size_t>(total), false);
    std::int64_t covered_count = 0;
    std::vector<char> buffer;
    for (std::size_t i = 0; i < sliced.slices.size(); ++i) {
      const internal::TensorSliceSpec& spec = sliced.slices[i];
      const BundleEntry& piece = sliced.pieces[i];
      std::vector<std::int64_t> start(rank), length(rank);
      for (std::size_t d = 0; d < rank; ++d) {
        const bool whole_dim = spec[d].length == internal::kFullExtent;
        start[d] = whole_dim ? 0 : spec[d].start;
        length[d] = whole_dim ? dims[d] : spec[d].length;
      }
      const std::int64_t count = piece.shape.num_elements();
      if (count == 0) continue;
      buffer.resize(static_cast<std::size_t>(piece.size));
      read_checked(key, piece, buffer.data());
      // Copy runs along the last dimension; an odometer walks the others.
      const std::int64_t run = rank == 0 ? 1 : length[rank - 1];
      std::vector<std::int64_t> at(rank, 0);
      for (std::int64_t src = 0; src < count; src += run) {
        std::int64_t off = 0;
        for (std::size_t d = 0; d < rank; ++d) off += (start[d] + at[d]) * stride[d];
        std::memcpy(dst + off * esize, buffer.data() + src * esize, static_cast<std::size_t>(run * esize));
        for (std::int64_t j = 0; j < run; ++j) {
          if (!covered[static_cast<std::size_t>(off + j)]) {
            covered[static_cast<std::size_t>(off + j)] = true;
            ++covered_count;
          }
        }
        for (std::size_t d = rank < 2 ? 0 : rank - 1; d-- > 0;) {  // next index over dimensions 0 .. rank-2
          if (++at[d] < length[d]) break;
          at[d] = 0;
        }
      }
    }
    if (covered_count != total)
      throw DataLossError(str_cat("corrupt checkpoint '", prefix, "': the ", sliced.slices.size(),
                                  " slices of partitioned tensor '", key, "' ", full.shape.to_string(), " cover ",
                                  covered_count, " of its ", total, " elements"));
  }

  // One range of read_flat_ranges: its destination and the flat intervals copied into it so far.
  struct RangeTarget {
    std::int64_t begin = 0;
    std::int64_t length = 0;
    char* dst = nullptr;
    std::vector<std::pair<std::int64_t, std::int64_t>> copied;  // (flat start, count)
  };

  // Copies the elements of one stored piece — the box [start, start + length) of a tensor of
  // `dims`, stored row-major in `piece` — that fall in a target range. The piece is read in
  // chunks and CRC-checked; a piece that overlaps no target is not read.
  void read_box_into(const std::string& key, const BundleEntry& piece, const std::vector<std::int64_t>& start,
                     const std::vector<std::int64_t>& length, const std::vector<std::int64_t>& dims, std::int64_t esize,
                     std::vector<RangeTarget>& targets) const {
    const std::size_t rank = dims.size();
    std::vector<std::int64_t> stride(rank, 1);
    for (std::size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * dims[d];
    // Dimensions [outer, rank) form contiguous runs: the trailing whole ones and the next.
    std::size_t outer = rank;
    std::int64_t run = 1;
    while (outer > 0 && start[outer - 1] == 0 && length[outer - 1] == dims[outer - 1]) run *= dims[--outer];
    if (outer > 0) run *= length[--outer];
    std::int64_t first = 0, last = 0, inner_base = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      first += start[d] * stride[d];
      last += (start[d] + length[d] - 1) * stride[d];
      if (d >= outer) inner_base += start[d] * stride[d];
    }
    const std::int64_t count = piece.shape.num_elements();
    const bool needed = std::any_of(targets.begin(), targets.end(), [&](const RangeTarget& t) {
      return t.begin <= last && first < t.begin + t.length;
    });
    if (count == 0 || !needed) return;
    const auto run_flat = [&](std::int64_t r) {  // flat index of run r's first element
      std::int64_t flat = inner_base;
      for (std::size_t d = outer; d-- > 0;) {
        flat += (start[d] + r % length[d]) * stride[d];
        r /= length[d];
      }
      return flat;
    };
    const DataShard& s = open_shard(key, piece);
    const std::int64_t chunk = kReadChunk / esize * esize;
    std::vector<char> buffer(static_cast<std::size_t>(std::min(chunk, piece.size)));
    std::uint32_t crc = 0;
    for (std::int64_t done = 0; done < piece.size;) {
      const auto n = static_cast<std::size_t>(std::min(piece.size - done, chunk));
      const std::size_t got = s.file->read_at(static_cast<std::uint64_t>(piece.offset + done), buffer.data(), n);
      if (got != n)
        throw DataLossError(str_cat("corrupt checkpoint data '", s.filename, "': tensor '", key, "' needs bytes [",
                                    piece.offset, ", ", piece.offset + piece.size, ") but the file ends at ",
                                    piece.offset + done + got));
      crc = crc32c(buffer.data(), n, crc);
      const std::int64_t p0 = done / esize, p1 = (done + static_cast<std::int64_t>(n)) / esize;
      for (std::int64_t p = p0; p < p1;) {
        const std::int64_t within = p % run, seg = std::min(run - within, p1 - p);
        const std::int64_t flat = run_flat(p / run) + within;
        for (RangeTarget& t : targets) {
          const std::int64_t lo = std::max(flat, t.begin), hi = std::min(flat + seg, t.begin + t.length);
          if (lo >= hi) continue;
          std::memcpy(t.dst + (lo - t.begin) * esize, buffer.data() + (p - p0 + lo - flat) * esize,
                      static_cast<std::size_t>((hi - lo) * esize));
          t.copied.emplace_back(lo, hi - lo);
        }
        p += seg;
      }
      done += static_cast<std::int64_t>(n);
    }
    internal::check_numeric_crc(crc, piece, s.filename, key);
  }

  // Reads entry's bytes into dst (exactly e.size bytes).
  void read_bytes(const std::string& key, const BundleEntry& e, void* dst) const {
    const DataShard& s = open_shard(key, e);
    const std::size_t got =
        s.file->read_at(static_cast<std::uint64_t>(e.offset), dst, static_cast<std::size_t>(e.size));
    if (got != static_cast<std::size_t>(e.size))
      throw DataLossError(str_cat("corrupt checkpoint data '", s.filename, "': tensor '", key, "' needs bytes [",
                                  e.offset, ", ", e.offset + e.size, ") but the file ends at ", e.offset + got));
  }
};

BundleReader::BundleReader(std::string prefix) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.prefix = std::move(prefix);
  m.index_file = index_filename(m.prefix);
  const std::string contents = read_file(m.index_file);
  m.index = internal::parse_bundle_index(contents, m.index_file);
  const std::int64_t n = m.index.header.num_shards;
  m.shards.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    DataShard& s = m.shards[static_cast<std::size_t>(i)];
    s.filename = shard_filename(m.prefix, i, n);
    struct stat st {};
    if (::stat(s.filename.c_str(), &st) != 0 && errno == ENOENT) continue;  // index-only use stays possible
    s.file = File::open_for_read(s.filename);
    s.size = s.file->size();
  }
  for (const auto& [key, e] : m.index.entries) {
    const DataShard& s = m.shards[static_cast<std::size_t>(e.shard_id)];
    if (s.file) internal::check_entry_fits(e, s.size, s.filename, key);
  }
  for (const auto& [key, sliced] : m.index.sliced) {
    for (const BundleEntry& e : sliced.pieces) {
      const DataShard& s = m.shards[static_cast<std::size_t>(e.shard_id)];
      if (s.file) internal::check_entry_fits(e, s.size, s.filename, key);
    }
  }
}

BundleReader::~BundleReader() = default;
BundleReader::BundleReader(BundleReader&&) noexcept = default;
BundleReader& BundleReader::operator=(BundleReader&&) noexcept = default;

const std::string& BundleReader::prefix() const {
  CHORUS_REQUIRE(impl_, FailedPreconditionError, "use of a moved-from BundleReader");
  return impl_->prefix;
}

std::vector<std::string> BundleReader::keys() const {
  CHORUS_REQUIRE(impl_, FailedPreconditionError, "use of a moved-from BundleReader");
  std::vector<std::string> out;
  out.reserve(impl_->index.entries.size());
  for (const auto& kv : impl_->index.entries) out.push_back(kv.first);
  return out;
}

bool BundleReader::contains(const std::string& key) const {
  CHORUS_REQUIRE(impl_, FailedPreconditionError, "use of a moved-from BundleReader");
  return impl_->index.entries.count(key) > 0;
}

const BundleEntry& BundleReader::entry(const std::string& key) const {
  CHORUS_REQUIRE(impl_, FailedPreconditionError, "use of a moved-from BundleReader");
  const auto& entries = impl_->index.entries;
  const auto it = entries.lower_bound(key);
  if (it != entries.end() && it->first == key) return it->second;
  std::string near;
  if (it != entries.begin()) near += str_cat(" '", std::prev(it)->first, "'");
  if (it != entries.end()) near += str_cat(near.empty() ? " '" : " and '", it->first, "'");
  throw NotFoundError(str_cat("key '", key, "' not found in checkpoint '", impl_->prefix, "' (", entries.size(),
                              " keys", near.empty() ? "" : "; nearest:", near, ")"));
}

Tensor BundleReader::read(const std::string& key) const {
  const BundleEntry& e = entry(key);
  const Impl& m = *impl_;
  if (e.is_string) return Tensor::from_vector(read_strings(key), e.shape, "/CPU:0");
  if (!internal::dtype_from_tf(e.tf_dtype))
    throw UnimplementedError(
        str_cat("tensor '", key, "' of checkpoint '", m.prefix, "' has TF dtype ", internal::tf_dtype_name(e.tf_dtype),
                ", which chorus has no DType for (chorus reads ", internal::supported_dtype_names(), ")"));
  Tensor t = Tensor::empty(e.shape, e.dtype, "/CPU:0");  // e.size == its nbytes (checked at open)
  char* dst = static_cast<char*>(t.data());
  const auto sliced = m.index.sliced.find(key);
  if (sliced == m.index.sliced.end()) {
    m.read_checked(key, e, dst);
    return t;
  }
  m.read_slices(key, e, sliced->second, dst);
  return t;
}

std::vector<std::string> BundleReader::read_strings(const std::string& key) const {
  const BundleEntry& e = entry(key);
  const Impl& m = *impl_;
  CHORUS_REQUIRE(e.is_string, InvalidArgumentError, "BundleReader::read_strings('", key, "'): a ",
                 internal::tf_dtype_name(e.tf_dtype), " entry; use read");
  if (m.index.sliced.count(key))
    throw UnimplementedError(str_cat("DT_STRING tensor '", key, "' of checkpoint '", m.prefix,
                                     "' is partitioned into slices, which chorus (like TensorFlow) does not read"));
  const DataShard& s = m.open_shard(key, e);
  std::string bytes(static_cast<std::size_t>(e.size), '\0');  // e.size ≤ the file's size (checked)
  m.read_bytes(key, e, bytes.data());
  return internal::decode_string_tensor(bytes, e.shape.num_elements(), e.masked_crc32c, s.filename, key);
}

std::vector<Tensor> BundleReader::read_flat_ranges(
    const std::string& key, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) const {
  const BundleEntry& e = entry(key);
  const Impl& m = *impl_;
  CHORUS_REQUIRE(!e.is_string && e.supported(), UnimplementedError, "BundleReader::read_flat_ranges('", key, "'): a ",
                 internal::tf_dtype_name(e.tf_dtype), " tensor; ranges are read of numeric ones");
  const std::int64_t total = e.shape.num_elements();
  std::vector<Tensor> out;
  std::vector<Impl::RangeTarget> targets;
  for (const auto& [begin, length] : ranges) {
    CHORUS_REQUIRE(begin >= 0 && length >= 0 && begin <= total - length, InvalidArgumentError,
                   "BundleReader::read_flat_ranges('", key, "'): elements [", begin, ", ", begin + length, ") of ",
                   total);
    out.push_back(Tensor::empty({length}, e.dtype, "/CPU:0"));
    targets.push_back({begin, length, static_cast<char*>(out.back().data()), {}});
  }
  const auto esize = static_cast<std::int64_t>(dtype_size(e.dtype));
  const std::vector<std::int64_t>& dims = e.shape.dims();
  const auto sliced = m.index.sliced.find(key);
  if (sliced == m.index.sliced.end()) {
    m.read_box_into(key, e, std::vector<std::int64_t>(dims.size(), 0), dims, dims, esize, targets);
  } else {
    for (std::size_t i = 0; i < sliced->second.slices.size(); ++i) {
      const internal::TensorSliceSpec& spec = sliced->second.slices[i];
      std::vector<std::int64_t> start(dims.size()), length(dims.size());
      for (std::size_t d = 0; d < dims.size(); ++d) {
        const bool whole = spec[d].length == internal::kFullExtent;
        start[d] = whole ? 0 : spec[d].start;
        length[d] = whole ? dims[d] : spec[d].length;
      }
      m.read_box_into(key, sliced->second.pieces[i], start, length, dims, esize, targets);
    }
  }
  for (Impl::RangeTarget& t : targets) {  // every element of every range was copied
    std::sort(t.copied.begin(), t.copied.end());
    std::int64_t reached = t.begin;
    for (const auto& [lo, n] : t.copied)
      if (lo <= reached) reached = std::max(reached, lo + n);
    if (reached < t.begin + t.length)
      throw DataLossError(str_cat("corrupt checkpoint '", m.prefix, "': the slices of partitioned tensor '", key,
                                  "' do not cover element ", reached, " (reading elements [", t.begin, ", ",
                                  t.begin + t.length, "))"));
  }
  return out;
}

void verify_bundle(const std::string& prefix) {
  const BundleReader reader(prefix);  // the index's CRCs, and every data file's size
  for (const std::string& key : reader.keys()) {
    const BundleEntry& e = reader.entry(key);
    try {
      if (e.is_string) {
        (void)reader.read_strings(key);
      } else if (e.supported()) {
        (void)reader.read(key);
      }
    } catch (const UnimplementedError&) {
      // A partitioned DT_STRING tensor: neither chorus nor TF reads one; its size was checked.
    }
  }
}

}  // namespace chorus::train
