// Internal to checkpoint/: what each worker of a sharded save tells the chief about the data file
// it wrote — the index entries of that file, never the data — and how the chief merges them into
// one `.index` (docs/checkpoints.md "Sharded checkpoints", docs/formats.md section B).
//
// A sharded save of N workers writes N data files `<prefix>.data-<k>-of-<N>`, file k by worker k.
// Worker k's entries all name shard_id k: whole tensors (the chief: every value that is not a
// sharded variable's, and the object graph), the slice entries of the variable shards it owns
// (keys: encode_tensor_name_slice) and, per sliced tensor, a full-tensor entry listing the slices
// it wrote. The chief merges: plain and slice entries must be unique across workers; full
// entries of one key must agree on dtype and shape, and their slices are joined and must cover
// the tensor exactly (as many elements as it has; chorus's slices never overlap). The merged
// index is parsed back with parse_bundle_index before it is written, so it is what a reader
// accepts.
//
// Wire form (what strategy gather carries between the workers; a worker's blob is the
// concatenation of such messages, and so is the gather of several blobs):
//   message Blob        { repeated ShardMetadata shard = 1; }
//   message ShardMetadata { int64 worker = 1; bytes error = 2; repeated Entry entry = 3;
//                           bool chief = 4; }
//   message Entry       { bytes key = 1; bytes bundle_entry_proto = 2; }
// A worker whose write failed sends its error instead of entries: then every worker throws
// (nothing is committed). The decoder treats the bytes as untrusted (a libFuzzer target:
// tests/checkpoint/fuzz/bundle_reader_fuzz.cc): malformed input → DataLossError naming `what`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::train::internal {

struct ShardMetadata {
  std::int64_t worker = 0;
  bool chief = false;  // the worker that writes the index (and the values that are not shards)
  std::string error;   // non-empty: this worker's write failed (then no entries)
  std::vector<std::pair<std::string, std::string>> entries;  // key → serialized BundleEntryProto
};

// One worker's blob.
std::string encode_shard_metadata(const ShardMetadata& m);
// Every ShardMetadata in `bytes` (one or more blobs back to back), in order. Checks the wire form
// only; merge_shard_index checks the entries.
std::vector<ShardMetadata> decode_shard_metadata(std::string_view bytes, const std::string& what);

// Every worker's check of the gathered reports, before the chief commits: exactly workers
// 0..num_shards-1, one chief (DataLossError / FailedPreconditionError naming `index_name`
// otherwise), and none that failed (AbortedError naming the worker and its message).
void check_shard_reports(const std::vector<ShardMetadata>& shards, std::int64_t num_shards,
                         const std::string& index_name);

// The `.index` file's bytes for `num_shards` data files from every worker's metadata (exactly
// one per worker 0..num_shards-1, entries with shard_id = worker; check_shard_reports first):
// merged as above.
// DataLossError naming `index_name` and the key when two workers claim a key, a worker's entry
// names another shard, full entries disagree, slices do not cover their tensor exactly, or a
// worker is missing or repeated. A worker that reported an error → AbortedError naming it and
// its message.
std::string merge_shard_index(const std::vector<ShardMetadata>& shards, std::int64_t num_shards,
                              const std::string& index_name);

}  // namespace chorus::train::internal
