// libFuzzer target for the bundle reader's decoding of untrusted bytes: the `.index` table
// (footer, block handles, block CRCs and entries, the header, every BundleEntryProto) and each
// entry's data (size and crc32c of numeric tensors, the DT_STRING layout). It drives the same
// functions BundleReader uses (checkpoint/bundle_format.h), from memory.
//
// Input: either a bare `.index` file (then the data file is empty), or "CHBF" + uint32 LE n +
// n index bytes + the data file's bytes (the seed corpus has both kinds).
//
// Findings: any crash, sanitizer report, leak or huge allocation (run with -malloc_limit_mb), any
// exception that is not a chorus::Error (it escapes and aborts), and any accepted entry that
// breaks the invariants BundleReader relies on before it allocates or copies (checked below with
// __builtin_trap).
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "checkpoint/bundle_format.h"
#include "core/error.h"

using chorus::train::BundleEntry;
namespace internal = chorus::train::internal;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void read_entry(const std::string& key, const BundleEntry& e, std::string_view data, std::int64_t num_shards) {
  // Invariants of decode_bundle_entry's output.
  check(e.offset >= 0 && e.size >= 0 && e.size <= INT64_MAX - e.offset);
  check(e.shard_id >= 0 && e.shard_id < num_shards);
  check(e.shape.rank() <= 254);
  for (std::int64_t d : e.shape.dims()) check(d >= 0);
  const std::int64_t n = e.shape.num_elements();  // throws InvalidArgumentError on overflow: must not
  if (const auto dt = internal::dtype_from_tf(e.tf_dtype)) {
    check(!e.is_string && e.dtype == *dt);
  } else {
    check(e.is_string == (e.tf_dtype == internal::kTfString));
  }
  // decode(encode(entry)) == entry.
  int slices = 0;
  const BundleEntry again =
      internal::decode_bundle_entry(internal::encode_bundle_entry(e), "re.index", key, num_shards, &slices);
  check(again.tf_dtype == e.tf_dtype && again.shape == e.shape && again.offset == e.offset && again.size == e.size &&
        again.masked_crc32c == e.masked_crc32c && again.shard_id == e.shard_id && slices == 0);

  // What BundleReader::read / read_strings do after opening the data file.
  internal::check_entry_fits(e, data.size(), "fuzz.data", key);
  const std::string_view bytes = data.substr(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.size));
  if (e.is_string) {
    const auto values = internal::decode_string_tensor(bytes, n, e.masked_crc32c, "fuzz.data", key);
    check(static_cast<std::int64_t>(values.size()) == n);
  } else if (internal::dtype_from_tf(e.tf_dtype)) {
    // The tensor BundleReader allocates holds n × dtype_size bytes; it copies e.size into it.
    check(static_cast<std::uint64_t>(e.size) == static_cast<std::uint64_t>(n) * chorus::dtype_size(e.dtype));
    internal::check_numeric_data(bytes, e, "fuzz.data", key);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* raw, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(raw), size);
  std::string_view index = in, data;
  if (in.size() >= 8 && in.substr(0, 4) == "CHBF") {
    std::uint32_t n;
    std::memcpy(&n, in.data() + 4, 4);
    const std::size_t len = std::min<std::size_t>(n, in.size() - 8);
    index = in.substr(8, len);
    data = in.substr(8 + len);
  }
  internal::BundleIndex parsed;
  try {
    parsed = internal::parse_bundle_index(index, "fuzz.index");
  } catch (const chorus::Error&) {
    return 0;  // rejected: fine, as long as it is a chorus error
  }
  check(parsed.header.num_shards >= 1);
  for (const auto& [key, e] : parsed.entries) {
    check(!key.empty());
    try {
      read_entry(key, e, data, parsed.header.num_shards);
    } catch (const chorus::Error&) {
    }
  }
  return 0;
}
