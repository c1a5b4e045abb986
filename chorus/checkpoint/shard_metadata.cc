#include <chorus/checkpoint/shard_metadata.h>

#include <cstdio>
#include <map>
#include <set>

#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/table.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train::internal {

using ::chorus::internal::str_cat;

namespace {

constexpr int kBlobShard = 1;
constexpr int kShardWorker = 1, kShardError = 2, kShardEntry = 3, kShardChief = 4;
constexpr int kEntryKey = 1, kEntryProto = 2;

// The elements of one slice of a tensor with `dims`.
std::int64_t slice_elements(const TensorSliceSpec& spec, const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < spec.size(); ++d) n *= spec[d].length == kFullExtent ? dims[d] : spec[d].length;
  return n;
}

// A key for messages: slice keys start with OrderedCode bytes ('\0', ...), shown as \xNN.
std::string printable(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  return out;
}

// Whether two slices of a tensor with `dims` share an element.
bool overlap(const TensorSliceSpec& a, const TensorSliceSpec& b, const std::vector<std::int64_t>& dims) {
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const std::int64_t a0 = a[d].length == kFullExtent ? 0 : a[d].start;
    const std::int64_t a1 = a[d].length == kFullExtent ? dims[d] : a[d].start + a[d].length;
    const std::int64_t b0 = b[d].length == kFullExtent ? 0 : b[d].start;
    const std::int64_t b1 = b[d].length == kFullExtent ? dims[d] : b[d].start + b[d].length;
    if (a1 <= b0 || b1 <= a0) return false;
  }
  return true;
}

// A sliced tensor's full entry, merged over the workers.
struct FullEntry {
  BundleEntry entry;
  std::vector<TensorSliceSpec> slices;
};

}  // namespace

std::string encode_shard_metadata(const ShardMetadata& m) {
  wire::ProtoWriter shard;
  shard.add_int64(kShardWorker, m.worker);
  if (!m.error.empty()) shard.add_bytes(kShardError, m.error);
  if (m.chief) shard.add_bool(kShardChief, true);
  for (const auto& [key, proto] : m.entries) {
    wire::ProtoWriter e;
    e.add_bytes(kEntryKey, key);
    e.add_bytes(kEntryProto, proto);
    shard.add_message(kShardEntry, e);
  }
  wire::ProtoWriter blob;
  blob.add_message(kBlobShard, shard);
  return blob.release();
}

std::vector<ShardMetadata> decode_shard_metadata(std::string_view bytes, const std::string& what) {
  std::vector<ShardMetadata> out;
  try {
    wire::ProtoReader blob(bytes, "shard metadata");
    while (blob.next()) {
      if (blob.field() != kBlobShard) {
        blob.skip();
        continue;
      }
      ShardMetadata m;
      wire::ProtoReader shard(blob.read_bytes(), "ShardMetadata");
      while (shard.next()) {
        if (shard.field() == kShardWorker) {
          m.worker = shard.read_int64();
        } else if (shard.field() == kShardChief) {
          m.chief = shard.read_bool();
        } else if (shard.field() == kShardError) {
          m.error = std::string(shard.read_bytes());
        } else if (shard.field() == kShardEntry) {
          wire::ProtoReader e(shard.read_bytes(), "ShardMetadata.Entry");
          std::string key, proto;
          while (e.next()) {
            if (e.field() == kEntryKey)
              key = std::string(e.read_bytes());
            else if (e.field() == kEntryProto)
              proto = std::string(e.read_bytes());
            else
              e.skip();
          }
          m.entries.emplace_back(std::move(key), std::move(proto));
        } else {
          shard.skip();
        }
      }
      out.push_back(std::move(m));
    }
  } catch (const DataLossError& e) {
    throw DataLossError(str_cat("corrupt shard metadata from ", what, ": ", e.what()));
  }
  return out;
}

void check_shard_reports(const std::vector<ShardMetadata>& shards, std::int64_t num_shards,
                         const std::string& index_name) {
  for (const ShardMetadata& m : shards) {
    if (!m.error.empty())
      throw AbortedError(str_cat("sharded save of '", index_name, "': worker ", m.worker,
                                 " could not write its data file, nothing was committed: ", m.error));
  }
  std::set<std::int64_t> seen;
  for (const ShardMetadata& m : shards) {
    if (m.worker < 0 || m.worker >= num_shards || !seen.insert(m.worker).second)
      throw DataLossError(str_cat("sharded save of '", index_name, "': metadata from worker ", m.worker, " (",
                                  shards.size(), " reports for ", num_shards, " data files)"));
  }
  if (static_cast<std::int64_t>(seen.size()) != num_shards)
    throw DataLossError(str_cat("sharded save of '", index_name, "': ", seen.size(), " of ", num_shards,
                                " workers reported their data file"));
  std::string chiefs;
  int num_chiefs = 0;
  for (const ShardMetadata& m : shards) {
    if (!m.chief) continue;
    chiefs += str_cat(num_chiefs++ ? ", " : "", m.worker);
  }
  if (num_chiefs != 1)
    throw FailedPreconditionError(str_cat("sharded save of '", index_name, "': ", num_chiefs,
                                          " workers would write the index (", chiefs.empty() ? "none" : chiefs,
                                          "); exactly one must (SaveOptions::chief)"));
}

std::string merge_shard_index(const std::vector<ShardMetadata>& shards, std::int64_t num_shards,
                              const std::string& index_name) {
  check_shard_reports(shards, num_shards, index_name);
  std::map<std::string, std::string> plain;  // key → entry proto (whole tensors, slice data)
  std::map<std::string, FullEntry> full;
  for (const ShardMetadata& m : shards) {
    for (const auto& [key, proto] : m.entries) {
      if (key.empty()) throw DataLossError(str_cat("'", index_name, "': worker ", m.worker, " sent the empty key"));
      int num_slices = 0;
      std::vector<TensorSliceSpec> slices;
      BundleEntry e = decode_bundle_entry(proto, index_name, key, num_shards, &num_slices, &slices);
      if (num_slices == 0 && e.shard_id != m.worker)
        throw DataLossError(str_cat("'", index_name, "': worker ", m.worker, "'s entry '", printable(key),
                                    "' names data file ", e.shard_id));
      if (num_slices == 0) {
        if (full.count(key) || !plain.emplace(key, proto).second)
          throw DataLossError(
              str_cat("'", index_name, "': key '", printable(key), "' was written twice (worker ", m.worker, ")"));
        continue;
      }
      auto [it, fresh] = full.try_emplace(key, FullEntry{e, {}});
      if (plain.count(key) ||
          (!fresh && (it->second.entry.tf_dtype != e.tf_dtype || !(it->second.entry.shape == e.shape))))
        throw DataLossError(str_cat("'", index_name, "': workers disagree on tensor '", key, "' (worker ", m.worker,
                                    ": ", tf_dtype_name(e.tf_dtype), " ", e.shape.to_string(), ")"));
      for (TensorSliceSpec& s : slices) it->second.slices.push_back(std::move(s));
    }
  }
  for (const auto& [key, f] : full) {
    // Disjoint slices (pairwise: a tensor has a few per worker) holding as many elements as the
    // tensor cover it exactly.
    const std::vector<std::int64_t>& dims = f.entry.shape.dims();
    std::int64_t covered = 0;
    for (std::size_t i = 0; i < f.slices.size(); ++i) {
      covered += slice_elements(f.slices[i], dims);
      for (std::size_t j = 0; j < i; ++j)
        if (overlap(f.slices[i], f.slices[j], dims))
          throw DataLossError(str_cat("sharded save of '", index_name, "': two slices of '", key, "' overlap"));
    }
    if (covered != f.entry.shape.num_elements())
      throw DataLossError(str_cat("sharded save of '", index_name, "': the ", f.slices.size(), " slices of '", key,
                                  "' ", f.entry.shape.to_string(), " hold ", covered, " elements, the tensor ",
                                  f.entry.shape.num_elements()));
    plain.emplace(key, encode_bundle_entry(f.entry, f.slices));
  }
  TableBuilder table;
  table.add("", encode_bundle_header(num_shards));
  for (const auto& [key, proto] : plain) table.add(key, proto);
  std::string index = table.finish();
  (void)parse_bundle_index(index, index_name);  // every slice's data entry exists, with its shape
  return index;
}

}  // namespace chorus::train::internal
