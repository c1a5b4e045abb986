// Dataset: an input pipeline of elements, each a tuple of tensors (tf.data.Dataset).
//
//   auto ds = chorus::data::Dataset::from_tensor_slices({images, labels})
//                 .shuffle(10000, /*seed=*/42)
//                 .map(augment, /*num_parallel_calls=*/chorus::data::kAutotune)
//                 .batch(64)
//                 .prefetch(chorus::data::kAutotune);
//   auto it = ds.make_iterator();
//   while (auto element = it.next()) { const Tensor& x = (*element)[0]; ... }
//
// A Dataset is an immutable description (cheap to copy, shared by value); each make_iterator()
// starts a fresh pass ("epoch"). Elements are std::vector<Tensor> (the components, in order).
// The transformations are TensorFlow's, with TensorFlow's semantics (each method says where it
// differs). Readers (MNIST idx, TFRecord) and the built-in synthetic digits live in mnist.h,
// tfrecord.h and synthetic_digits.h.
//
// Devices: the data module creates its tensors, and runs map functions, on the *pipeline device*:
// the device named by the DeviceScope of the thread that calls make_iterator(), or CPU:0 when
// that scope names no device type (TF runs tf.data on the CPU). Worker threads (parallel map,
// prefetch) install a DeviceScope for it, so ops inside a map function land where they would
// have landed on the calling thread.
//
// String components (DType::kString, core/tensor.h) flow through every transformation as TF's
// tf.string components do: from_tensor_slices, batch, padded_batch (padding "" unless a string
// padding value is given), unbatch, shuffle, take/skip/repeat, cache() in memory and on disk,
// map, filter, and iterator save/restore (which keeps them as tensors; a checkpoint writes them as
// DT_STRING). tfrecord_dataset and list_files yield scalar string tensors. String tensors live on
// the host: where the pipeline device is a GPU, the data module makes them on CPU:0.
//
// Errors (thrown when the transformation is built, i.e. at the API boundary): bad arguments
// (batch_size <= 0, shuffle buffer <= 0, take/skip/repeat count < -1, components with different
// row counts, prefetch buffer < -1, num_parallel_calls 0 or < -1) → InvalidArgumentError naming the
// value. Errors raised while producing an element (a throwing map function, a corrupt record)
// are thrown by the next() that would have returned that element; see each transformation for
// what later calls do.
//
// Thread-safety: a Dataset may be shared by threads and iterated by several iterators at once.
// An Iterator is used by one thread at a time (it may move between threads between calls).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::data {

using Element = std::vector<Tensor>;
// A map function: one element in, one element out. May throw; see Dataset::map.
using MapFn = std::function<Element(const Element&)>;

// A filter predicate (tf.data.Dataset.filter): true keeps the element. May throw.
using PredicateFn = std::function<bool(const Element&)>;
class Dataset;
// An element to a dataset (flat_map, interleave). May throw.
using DatasetFn = std::function<Dataset(const Element&)>;

// tf.data.AUTOTUNE: a measured tuner (data/autotune.h), not a constant.
//  - prefetch(kAutotune): the buffer starts at 1 element and doubles, up to kAutotunePrefetchMax,
//    each time the consumer finds it empty while the producer is still running (the consumer is
//    faster than the producer, so a deeper buffer absorbs the producer's bursts), as TF's
//    prefetch autotuner does.
//  - map(fn, kAutotune), interleave(..., kAutotune): the number of calls in flight follows the
//    measured rates: ceil(mean time of one call / mean time between the consumer's requests),
//    between 1 and std::thread::hardware_concurrency() (interleave: cycle_length), re-estimated
//    from moving averages as elements are produced.
inline constexpr std::int64_t kAutotune = -1;
inline constexpr std::int64_t kAutotunePrefetchMax = 64;
// tf.data.INFINITE_CARDINALITY and tf.data.UNKNOWN_CARDINALITY.
inline constexpr std::int64_t kInfiniteCardinality = -1;
inline constexpr std::int64_t kUnknownCardinality = -2;

// An iterator's position, for checkpoints (TF's IteratorStateWriter/Reader): named integers and
// named tensors. Each transformation writes its own keys under a prefix and its input's keys
// under prefix + "input/", so keys read like paths ("input/input/shuffle.rng"). Tensors are
// shared, not copied (elements are immutable). What each transformation saves is listed in
// Dataset's comments; docs/data.md has the table.
class IteratorState {
 public:
  void set_int(const std::string& key, std::int64_t value) { ints_[key] = value; }
  void set_tensor(const std::string& key, Tensor value) { tensors_[key] = std::move(value); }
  // NotFoundError naming the key when it is missing (a state from another pipeline).
  std::int64_t get_int(const std::string& key) const;
  const Tensor& get_tensor(const std::string& key) const;
  bool has_int(const std::string& key) const { return ints_.count(key) != 0; }
  const std::map<std::string, std::int64_t>& ints() const { return ints_; }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  std::map<std::string, std::int64_t> ints_;
  std::map<std::string, Tensor> tensors_;
};

class IteratorBase {
 public:
  virtual ~IteratorBase() = default;
  // The next element, or nullopt at the end (and on every later call, unless a transformation
  // says otherwise). Blocks while a background thread produces it (prefetch, parallel map).
  virtual std::optional<Element> next() = 0;
  // Writes the position under `prefix`. The default throws UnimplementedError: iterators of
  // user-defined datasets are not checkpointable unless they override both.
  virtual void save(IteratorState& state, const std::string& prefix);
  // Puts a fresh iterator of the *same* dataset at a saved position. NotFoundError for a
  // missing key, InvalidArgumentError for a state that does not fit this pipeline.
  virtual void restore(const IteratorState& state, const std::string& prefix);
};

// Iterators keep their dataset alive (shared_from_this), so an Iterator may outlive its Dataset.
class DatasetBase : public std::enable_shared_from_this<DatasetBase> {
 public:
  virtual ~DatasetBase() = default;
  virtual std::unique_ptr<IteratorBase> make_iterator() const = 0;
  // "TensorSliceDataset", "BatchDataset", ... for messages.
  virtual std::string name() const = 0;
  // Number of elements, kInfiniteCardinality or kUnknownCardinality (tf.data.Dataset.cardinality).
  virtual std::int64_t cardinality() const = 0;
};

class Iterator {
 public:
  explicit Iterator(std::unique_ptr<IteratorBase> impl) : impl_(std::move(impl)) {}
  std::optional<Element> next();
  // The whole pipeline's position (tf.train.Checkpoint(iterator=...)). Blocks while background
  // threads settle (see prefetch and map).
  IteratorState save();
  // On an iterator just made from the same Dataset description: continue exactly where the saved
  // one stood — the same elements, in the same order, as the saved iterator would have produced.
  void restore(const IteratorState& state);

 private:
  std::unique_ptr<IteratorBase> impl_;
};

class Dataset {
 public:
  Dataset() = default;
  explicit Dataset(std::shared_ptr<const DatasetBase> impl) : impl_(std::move(impl)) {}

  // ---- sources ----
  // Element i is (c[i] for c in components): slices along axis 0, whose sizes must agree.
  // State: the next row.
  static Dataset from_tensor_slices(const std::vector<Tensor>& components);
  // One element: the components whole (tf.data.Dataset.from_tensors). State: done or not.
  static Dataset from_tensors(const std::vector<Tensor>& components);
  // Scalar int64 elements start, start+step, ... up to stop exclusive (step != 0, may be negative).
  // State: the next value.
  static Dataset range(std::int64_t stop);
  static Dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);

  // ---- transformations ----
  // fn applied to every element. num_parallel_calls == 1 (default): on the calling thread.
  // > 1: that many calls at once on worker threads owned by the iterator (kAutotune: as many as
  // the tuner measures to be needed, up to the hardware threads); the output order is the input order (TF's
  // deterministic=True). An exception from fn is thrown by the next() that would have returned that element; iteration
  // continues with the next element. State: the input's; a parallel map first waits for the calls in flight, then saves
  // their results (elements or errors) with the input's position (as TF does).
  Dataset map(MapFn fn, std::int64_t num_parallel_calls = 1) const;
  // TF's shuffle: fills a buffer of buffer_size elements, returns one chosen uniformly at random
  // and replaces it with the next input element. seed: the same seed gives the same orders on
  // every machine; nullopt draws one from ops::global_generator() (reproducible after
  // ops::set_seed, as TF's op seeds follow the global seed). reshuffle_each_iteration: every
  // make_iterator() of this dataset (so every epoch under repeat) takes the next order of a seed
  // sequence; false: every pass has the same order. State: pass number, RNG, buffer contents,
  // the input's position (and the dataset's pass counter is set from it on restore).
  Dataset shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  // Consecutive elements stacked on a new axis 0; the last batch may be smaller unless
  // drop_remainder. Elements of different shapes → InvalidArgumentError from next().
  // State: the input's (a batch is assembled within one next()).
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  // Produces up to buffer_size elements ahead on a background thread (kAutotune: tuned, see kAutotune;
  // 0: no thread, elements pass through). Errors of the input are rethrown by next() in order;
  // later calls continue. Destroying the iterator stops and joins the thread (it finishes the
  // input element it is producing; it never waits for a consumer). State: the thread is stopped
  // (after the element it is producing), then the buffered elements and the input's position are
  // saved; the next next() restarts it.
  Dataset prefetch(std::int64_t buffer_size) const;
  // The input count times over (-1: forever). An input pass that yields nothing ends the repeat
  // (TF does the same, so repeat() of an empty dataset ends instead of spinning).
  // State: passes completed, the current pass's input position.
  Dataset repeat(std::int64_t count = -1) const;
  // The first count elements (-1: all). State: elements taken, the input's position.
  Dataset take(std::int64_t count) const;
  // All but the first count elements (-1: skips everything). State: elements skipped, input's.
  Dataset skip(std::int64_t count) const;
  // In memory (tf.data.Dataset.cache() with no filename): the first pass that reads the input to
  // its end stores the elements; later make_iterator() calls (later epochs under repeat) read
  // the stored elements and never touch the input. A pass abandoned early stores nothing.
  // State: reading: the position and the stored elements (as TF, the checkpoint holds the cache);
  // filling: the elements so far and the input's position.
  Dataset cache() const;
  // On disk (tf.data.Dataset.cache(filename); "" is cache() in memory): the first pass that reads
  // the input to its end writes `filename`; every later pass (any iterator, any process) made
  // while the file exists reads it and never touches the input. The file is written under a
  // temporary name beside it ("<filename>.tmp-<pid>-<n>") and renamed only when complete, so an
  // interrupted first pass leaves no cache a later pass would trust; an input error during the
  // writing pass abandons the file (the error is rethrown, the pass goes on uncached). Format:
  // docs/data.md ("The cache file"): TFRecord framing with CRCs, a header, and a footer counting
  // the elements. Errors: `filename` naming a directory or another non-regular file →
  // InvalidArgumentError from make_iterator(); a file that is not a cache, is cut short, has a
  // CRC mismatch or an element that does not decode → DataLossError from next() (the header and
  // footer are checked before the first element is returned); reads are bounded by the file's
  // real size. Several passes may write at once (each its own temporary file; the last rename
  // wins, all hold the same elements). State: reading: the byte offset in the file; writing: the
  // temporary file's name and valid length (restore copies those records into a new temporary
  // file and continues; when the file is gone, the restored pass writes nothing). After a save,
  // a writing iterator destroyed early leaves its temporary file for the state to resume from;
  // the restored pass removes it when it has written the cache.
  Dataset cache(const std::string& filename) const;

  // The elements for which predicate(element) is true, in order. Errors from the predicate are
  // thrown by next(); iteration continues with the next element. Cardinality unknown (as TF's).
  // State: the input's.
  Dataset filter(PredicateFn predicate) const;
  // tf.data.Dataset.zip((a, b, ...)): element i is the components of a's element i, then b's, ...
  // (TF nests tuples; chorus elements are flat). Ends when the shortest input ends.
  // No datasets → InvalidArgumentError. State: each input's under "zip[k]/".
  static Dataset zip(const std::vector<Dataset>& datasets);
  // This dataset's elements, then other's. Structure: other's elements must have as many
  // components, of the same dtypes, as this one's (shapes may differ, as in TF); TF checks this
  // when the dataset is built, chorus (whose datasets carry no element spec) at the first element
  // of other that differs → InvalidArgumentError from next(). State: which input, its position.
  Dataset concatenate(const Dataset& other) const;
  // (i, components...) with i = start, start+1, ... an int64 scalar (tf.data.Dataset.enumerate).
  // State: the counter, the input's.
  Dataset enumerate(std::int64_t start = 0) const;
  // fn(element) for every input element, its datasets' elements concatenated in order.
  // Cardinality unknown. State: the input's, the current inner dataset's input element and position.
  Dataset flat_map(DatasetFn fn) const;
  // tf.data.Dataset.interleave: cycle_length inner datasets (fn of consecutive input elements) are
  // open at once; block_length elements are taken from each in turn; an inner dataset that ends is
  // replaced by fn of the next input element. The order is TF's for the same arguments.
  // cycle_length: >= 1, or kAutotune (hardware threads). block_length >= 1.
  // num_parallel_calls: 1 (TF's None): everything on the calling thread; > 1 or kAutotune: that
  // many (kAutotune: tuned, up to cycle_length) worker threads pull the open inner datasets ahead;
  // more than cycle_length → InvalidArgumentError (TF's error). deterministic (the default, TF's
  // deterministic=None/True): the output order is the sequential order; false: when the inner
  // dataset whose turn it is has no element ready, an element that another has ready is returned
  // instead. Errors of the input, fn or an inner dataset are thrown by next() in their place.
  // State: the cycle position, and for each open inner dataset its input element, its buffered
  // elements and its position (workers are paused while it is saved).
  Dataset interleave(DatasetFn fn, std::int64_t cycle_length = kAutotune, std::int64_t block_length = 1,
                     std::int64_t num_parallel_calls = 1, bool deterministic = true) const;
  // padded_batch: batches elements whose shapes differ by padding each component. padded_shapes
  // (one per component, each of the element's rank; -1 = TF's None: the largest in the batch):
  // nullopt pads every dimension to the batch's largest. padding_values: one scalar per component
  // of its dtype; nullopt = 0 (false for bool, "" for string). An element larger than a fixed padded dimension,
  // a padded shape of another rank, components of different ranks or dtypes within a batch →
  // InvalidArgumentError from next(); a padding value of another dtype or not a scalar, a count
  // of padded shapes or values other than the components' → InvalidArgumentError from next().
  // State: the input's.
  Dataset padded_batch(std::int64_t batch_size,
                       std::optional<std::vector<std::vector<std::int64_t>>> padded_shapes = std::nullopt,
                       std::optional<std::vector<Tensor>> padding_values = std::nullopt,
                       bool drop_remainder = false) const;
  // Splits every element along axis 0 into its rows (tf.data.Dataset.unbatch). Components must
  // have rank >= 1 and the same first dimension → else InvalidArgumentError from next().
  // Cardinality unknown unless known statically. State: the current element and row, the input's.
  Dataset unbatch() const;
  // Every num_shards-th element starting at index (tf.data.Dataset.shard). num_shards >= 1 and
  // 0 <= index < num_shards, else InvalidArgumentError. State: the input's, its position.
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  // tf.data.Dataset.list_files(patterns, shuffle, seed): the files matching any glob pattern
  // (glob(3): *, ?, [...]), each an element of one scalar string tensor holding the path (on the
  // pipeline device, or CPU:0 when that is a GPU: strings live on the host). Matched when this is called,
  // as TF does eagerly; duplicates removed, sorted. No match → InvalidArgumentError naming the
  // patterns ("No files matched pattern", as TF). shuffle (TF's default true): a full shuffle,
  // seed as shuffle(); a new order each pass. State: as shuffle, or the next file.
  static Dataset list_files(const std::vector<std::string>& patterns, bool shuffle = true,
                            std::optional<std::uint64_t> seed = std::nullopt);

  Iterator make_iterator() const;
  std::int64_t cardinality() const;
  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<const DatasetBase>& impl() const { return impl_; }

 private:
  const DatasetBase& get() const;
  std::shared_ptr<const DatasetBase> impl_;
};

}  // namespace chorus::data
