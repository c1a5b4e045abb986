// TensorFlow's tensor bundle ("V2" checkpoint) files, read and written without TensorFlow:
// `<prefix>.index` (a LevelDB-style table: key → BundleEntryProto, plus the header entry "") and
// `<prefix>.data-00000-of-00001` (raw little-endian tensor bytes, one after another). Byte-level
// layout: checkpoint/bundle_format.h and docs/formats.md section B. `tf.train.load_checkpoint`
// lists and reads what BundleWriter writes; BundleReader reads what TensorFlow writes (any number
// of `.data-<i>-of-<n>` shards, partitioned tensors whose slices lie in several shards — what
// tf.train.CheckpointOptions(experimental_sharding_callback=MaxShardSizePolicy(...)) writes —,
// uncompressed tables, numeric and DT_STRING tensors). A sharded save (docs/checkpoints.md
// "Sharded checkpoints") has one BundleWriter per process, each writing its own
// `.data-<k>-of-<n>` with ZeRO shards as TF slices (add_flat_slice, finish_shard), and the chief
// writing the index from their metadata (write_sharded_index).
//
//   train::BundleWriter w("/ckpt/ckpt-1");
//   w.add("model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE", host_tensor);
//   w.add_strings("_CHECKPOINTABLE_OBJECT_GRAPH", {graph_bytes});
//   w.finish();                              // durable and visible only now
//
//   train::BundleReader r("/ckpt/ckpt-1");   // reads and checks the whole index
//   Tensor t = r.read("model/.../VARIABLE_VALUE");
//
// Crash safety (BundleWriter::finish): data and index are written to temporary files in the
// target directory (`<final name>.tempstate<random>`), each fsynced, the data renamed into place
// first, the index last, then the directory fsynced. A bundle whose `.index` exists is complete;
// a crash at any moment leaves either the previous state or the complete new bundle (plus stray
// `.tempstate` files, which remove_stray_temporaries cleans up). Never overwrites a complete
// bundle's files with partial ones. Rewriting an existing prefix (CheckpointManager never does)
// removes the old `.index` just before the renames, so a crash in that window leaves no bundle
// under the prefix rather than the old index over the new data.
//
// Untrusted input (BundleReader): every size, offset, varint, block handle and CRC is checked
// before it is used; nothing is allocated from an unchecked size. Corruption, truncation, a bad
// magic number or absurd sizes → DataLossError naming the file and, where known, the tensor key.
// A missing `.index` → NotFoundError. A tensor of a TF dtype chorus has no DType for (int8, int16,
// uint16, uint32, uint64, complex64, complex128, ...) → UnimplementedError naming the key and the
// dtype as TF and its Python API call it ("DT_INT8 (int8)"); such tensors are still listed.
//
// Thread-safety: a BundleWriter is used by one thread. A BundleReader is immutable after
// construction: read/read_strings may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>

namespace chorus::train {

// One tensor's index entry (TF's BundleEntryProto without its slices; a partitioned tensor's
// entry has its full shape and no data of its own).
struct BundleEntry {
  bool is_string = false;  // DT_STRING (then `dtype` is DType::kString; its data is TF's string payload)
  // Meaningful only when `supported()`: a TF dtype chorus lacks leaves the default here.
  DType dtype = DType::kFloat32;
  int tf_dtype = 0;  // TF's DataType enum value as stored (DT_FLOAT = 1, DT_STRING = 7, ...)
  Shape shape;
  int shard_id = 0;         // which `.data-<shard>-of-<num_shards>` file
  std::int64_t offset = 0;  // into the data file
  std::int64_t size = 0;    // bytes in the data file
  std::uint32_t masked_crc32c = 0;
  // Whether tf_dtype is one of chorus's DTypes (then `dtype` is it), DT_STRING included.
  bool supported() const;
};

class BundleWriter {
 public:
  // `prefix` is a path without suffix ("/dir/ckpt-3"); its directory must exist
  // (NotFoundError otherwise). Opens the temporary data file.
  explicit BundleWriter(std::string prefix);
  // One of several writers of a sharded save (docs/checkpoints.md "Sharded checkpoints"): this
  // one writes `<prefix>.data-<shard_id>-of-<num_shards>` and ends with finish_shard(); the
  // chief merges every writer's metadata with write_sharded_index. 0 ≤ shard_id < num_shards ≤
  // 99999 (InvalidArgumentError otherwise).
  BundleWriter(std::string prefix, int shard_id, int num_shards);
  // Not finished: the temporary files are removed.
  ~BundleWriter();
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  // Appends a numeric tensor's bytes (any device: copied to the host first) under `key`, or a
  // string tensor as a DT_STRING entry (as add_strings). Keys may come in any order; a key given
  // twice → InvalidArgumentError. The empty key is reserved.
  void add(const std::string& key, const Tensor& tensor);
  // A DT_STRING tensor of `shape` (rank 0 by default) with `values` (row-major; as many values as
  // the shape has elements, InvalidArgumentError otherwise).
  void add_strings(const std::string& key, const std::vector<std::string>& values, const Shape& shape = Shape{});
  // Elements [begin, begin + values.num_elements()) of the row-major flattening of the numeric
  // tensor `key` of `full_shape` — a ZeRO shard (core/sharded_variable.h) — written straight from
  // `values`' storage (1-D, any device; a GPU tensor is copied to the host) as TF slices: one
  // slice entry per box of flat_range_slices (bundle_format.h) and the box in the full-tensor
  // entry of `key`, as TF's BundleWriter::AddSlice writes them. A range that is the whole tensor
  // (or a scalar's) is a plain entry. Several calls for one key add disjoint ranges (the key's
  // dtype and shape must agree, InvalidArgumentError otherwise); the slices of all writers of the
  // save must cover the tensor once (checked when the index is merged). An empty range writes
  // nothing.
  void add_flat_slice(const std::string& key, const Shape& full_shape, std::int64_t begin, const Tensor& values);
  // Writes the index and commits as described above. Errors from the OS (ENOSPC →
  // ResourceExhaustedError, ...) throw; the temporary files are removed, and no new file is left
  // under `prefix` (the previous files, if any, are untouched unless the failure came after the
  // commit started, see above). Call once: add/finish afterwards → FailedPreconditionError.
  // add() may also throw the OS's errors (it writes as it goes); the writer is then spent.
  void finish();
  // For a writer of a sharded save: fsyncs the data file, renames it into place (removing the
  // `.index` of a bundle previously under `prefix` first, so that it stops being complete), fsyncs
  // the directory, and returns this file's index entries as the metadata the chief merges
  // (checkpoint/shard_metadata.h); `chief`: this writer's process writes the index (exactly one
  // of the save's writers). The bundle is complete only once the chief has written the index.
  // Errors as finish(); call once.
  std::string finish_shard(bool chief);

  const std::string& prefix() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class BundleReader {
 public:
  // Opens and validates `<prefix>.index` (every block's CRC, the header entry, every entry's
  // fields) and opens the data file(s) (`.data-<i>-of-<num_shards>`; each present one's size must
  // cover every entry in it, DataLossError otherwise). A data file that does not exist is not an
  // error here, as in TF (which opens data files on first use): keys() and entry() work from the
  // index alone, and read()/read_strings() of an entry in it throw NotFoundError naming the file.
  explicit BundleReader(std::string prefix);
  ~BundleReader();
  BundleReader(BundleReader&&) noexcept;
  BundleReader& operator=(BundleReader&&) noexcept;

  // Every tensor key, sorted bytewise (the header entry "" excluded). A partitioned tensor is one
  // key with its full shape; the entries holding its slices are not listed (as in TF's
  // tf.train.list_variables).
  std::vector<std::string> keys() const;
  bool contains(const std::string& key) const;
  // NotFoundError naming the key (and the nearest existing keys) when absent.
  const BundleEntry& entry(const std::string& key) const;
  // A host tensor (on "/CPU:0") with the entry's dtype and shape; the data's CRC32C is checked
  // (DataLossError "checksum does not match" naming file and key). A partitioned tensor is
  // assembled from its slices (each CRC-checked; slices that leave elements uncovered →
  // DataLossError). A DT_STRING entry gives a string tensor (as read_strings); a TF dtype chorus
  // lacks → UnimplementedError (see above).
  Tensor read(const std::string& key) const;
  // The values of a DT_STRING entry (CRC-checked); a numeric entry → InvalidArgumentError; a
  // partitioned DT_STRING tensor (TF cannot read one either) → UnimplementedError.
  std::vector<std::string> read_strings(const std::string& key) const;
  // Ranges of the row-major flattening of numeric tensor `key`: for each (begin, length), a 1-D
  // host tensor [length] with elements [begin, begin + length) — what a ZeRO shard of another
  // replica count needs. Reads only the entries whose elements overlap a range (each whole, to
  // check its CRC, in pieces of 512 KiB: memory beyond the results is one piece), never the full
  // tensor. Ranges outside the tensor → InvalidArgumentError; slices that leave an element of a
  // range uncovered → DataLossError; otherwise the errors of read().
  std::vector<Tensor> read_flat_ranges(const std::string& key,
                                       const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) const;

  const std::string& prefix() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `<prefix>.index` and `<prefix>.data-00000-of-00001`.
std::string index_filename(const std::string& prefix);
std::string data_filename(const std::string& prefix);
// Whether `<prefix>.index` exists (TF's checkpoint_exists for V2).
bool bundle_exists(const std::string& prefix);
// Removes `<prefix>.index` and every `<prefix>.data-*-of-*` (index first, so a half-deleted
// bundle is never mistaken for a complete one). Missing files are not an error.
void delete_bundle(const std::string& prefix);
// The commit of a sharded save (the chief, once every writer's finish_shard() has returned):
// merges `metadata` (every writer's finish_shard() result, concatenated in any order; see
// checkpoint/shard_metadata.h for what is checked) into `<prefix>.index` for `num_shards` data
// files, written to a temporary file, fsynced, renamed into place, the directory fsynced. A
// writer that failed (its metadata carries the error) → AbortedError, nothing written.
void write_sharded_index(const std::string& prefix, std::int64_t num_shards, std::string_view metadata);
// Reads every tensor of the bundle at `prefix` and checks its CRC32C: returns normally when the
// bundle is complete and intact, throws what BundleReader throws otherwise (DataLossError naming
// the file and the key, NotFoundError for a missing data file). Entries of a dtype chorus cannot
// hold (UnimplementedError) are size-checked only. Costs one read of the whole bundle.
void verify_bundle(const std::string& prefix);
// Removes `*.tempstate*` files left in `dir` by writers that crashed; returns how many.
int remove_stray_temporaries(const std::string& dir);
// fsync(2) of a directory (so renames inside it are durable).
void sync_directory(const std::string& dir);

}  // namespace chorus::train
