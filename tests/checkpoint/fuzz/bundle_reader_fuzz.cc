// libFuzzer target for the bundle reader's decoding of untrusted bytes: the `.index` table
// (footer, block handles, block CRCs and entries, the header, every BundleEntryProto) and each
// entry's data (size and crc32c of numeric tensors, the DT_STRING layout). It drives the same
// functions BundleReader uses (checkpoint/bundle_format.h), from memory.
//
// Input: either a bare `.index` file (then the data file is empty), or "CHBF" + uint32 LE n +
// n index bytes + the data file's bytes (the seed corpus has both kinds), or "BLCK" + the raw
// contents of one data block: the target wraps it in a valid table (block trailer with the right
// CRC, empty metaindex, an index block whose separator is 64 bytes of 0xff, the footer), so
// mutations reach the block, entry and BundleEntryProto decoders instead of dying at the CRC
// check, which is where plain mutation stops (coverage plateaued there).
//
// "CHSM" + one byte k + bytes: the metadata workers of a sharded save send the chief
// (checkpoint/shard_metadata.h): decoded, checked for k % 8 + 1 workers and merged into an index,
// which must then parse (merge_shard_index parses it itself: an accepted merge is an index the
// reader accepts, and its sliced tensors' slices cover each exactly). "FLAT" + bytes: dims and a
// range for flat_range_slices, whose boxes must tile the range in flat order.
//
// Findings: any crash, sanitizer report, leak or huge allocation (run with -malloc_limit_mb), any
// exception that is not a chorus::Error (it escapes and aborts), and any accepted entry that
// breaks the invariants BundleReader relies on before it allocates or copies (checked below with
// __builtin_trap).
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/shard_metadata.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

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
    // BundleReader::read makes a string tensor of exactly the entry's shape for these.
    if (e.is_string) check(e.dtype == chorus::DType::kString);
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
    // The values account for every byte of the entry: lengths, their checksum, the strings.
    std::size_t total = 0;
    for (const std::string& v : values) total += v.size();
    check(total <= bytes.size());
    // What BundleWriter writes for them decodes to the same values (the re-encoding is TF's).
    std::uint32_t crc = 0;
    const std::string again = internal::encode_string_tensor(values, &crc);
    check(internal::decode_string_tensor(again, n, chorus::mask_crc32c(crc), "re.data", key) == values);
  } else if (internal::dtype_from_tf(e.tf_dtype)) {
    // The tensor BundleReader allocates holds n × dtype_size bytes; it copies e.size into it.
    check(static_cast<std::uint64_t>(e.size) == static_cast<std::uint64_t>(n) * chorus::dtype_size(e.dtype));
    internal::check_numeric_data(bytes, e, "fuzz.data", key);
  }
}

// A block's bytes followed by its trailer: type 0 (no compression) and the masked CRC32C of
// block || type, as the writer produces.
void append_block(std::string& out, std::string_view block) {
  out.append(block);
  const char type = static_cast<char>(internal::kNoCompression);
  std::uint32_t crc = chorus::crc32c(block.data(), block.size());
  crc = chorus::crc32c(&type, 1, crc);
  out.push_back(type);
  chorus::wire::append_fixed32(out, chorus::mask_crc32c(crc));
}

// A one-data-block table around `block` (see the file comment).
std::string wrap_block(std::string_view block) {
  std::string table;
  append_block(table, block);
  const std::uint64_t meta_offset = table.size();
  const std::string empty_block("\0\0\0\0\1\0\0\0", 8);  // no entries, restarts {0}, n = 1
  append_block(table, empty_block);
  // Index block: one entry (shared 0, non-shared 64, value = handle{0, block size}), restarts {0}.
  std::string handle;
  chorus::wire::append_varint(handle, 0);
  chorus::wire::append_varint(handle, block.size());
  std::string index;
  chorus::wire::append_varint(index, 0);
  chorus::wire::append_varint(index, 64);
  chorus::wire::append_varint(index, handle.size());
  index.append(64, '\xff');
  index.append(handle);
  chorus::wire::append_fixed32(index, 0);
  chorus::wire::append_fixed32(index, 1);
  const std::uint64_t index_offset = table.size();
  append_block(table, index);
  std::string footer;
  chorus::wire::append_varint(footer, meta_offset);
  chorus::wire::append_varint(footer, empty_block.size());
  chorus::wire::append_varint(footer, index_offset);
  chorus::wire::append_varint(footer, index.size());
  footer.resize(internal::kFooterSize - 8, '\0');
  chorus::wire::append_fixed64(footer, internal::kTableMagic);
  table.append(footer);
  return table;
}

// The chief's side of a sharded save on untrusted metadata.
void merge_metadata(std::string_view in) {
  const std::int64_t workers = static_cast<unsigned char>(in[0]) % 8 + 1;
  try {
    const auto reports = internal::decode_shard_metadata(in.substr(1), "fuzz");
    internal::check_shard_reports(reports, workers, "fuzz.index");
    const std::string index = internal::merge_shard_index(reports, workers, "fuzz.index");
    const internal::BundleIndex parsed = internal::parse_bundle_index(index, "fuzz.index");
    check(parsed.header.num_shards == workers);
    for (const auto& [key, sliced] : parsed.sliced) {
      std::int64_t covered = 0;
      const auto& dims = parsed.entries.at(key).shape.dims();
      for (const auto& spec : sliced.slices) {
        std::int64_t n = 1;
        for (std::size_t d = 0; d < spec.size(); ++d)
          n *= spec[d].length == internal::kFullExtent ? dims[d] : spec[d].length;
        covered += n;
      }
      check(covered == parsed.entries.at(key).shape.num_elements());
    }
  } catch (const chorus::Error&) {
  }
}

// flat_range_slices on dims and a range taken from the input (at most 4 dims of at most 15).
void flat_slices(std::string_view in) {
  std::vector<std::int64_t> dims;
  std::int64_t total = 1;
  for (std::size_t i = 1; i < in.size() && i <= 4; ++i) {
    dims.push_back(static_cast<unsigned char>(in[i]) % 16);
    total *= dims.back();
  }
  if (dims.empty() || total == 0) return;
  const std::int64_t b = static_cast<unsigned char>(in[0]) % (total + 1);
  const std::int64_t n = in.size() > 5 ? static_cast<unsigned char>(in[5]) % (total - b + 1) : total - b;
  std::int64_t next = b;
  for (const internal::FlatSlice& box : internal::flat_range_slices(dims, b, n)) {
    check(box.begin == next && box.length > 0 && box.spec.size() == dims.size());
    std::int64_t elements = 1;
    for (std::int64_t d : box.shape) elements *= d;
    check(elements == box.length);
    next += box.length;
  }
  check(next == b + n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* raw, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(raw), size);
  if (in.size() >= 5 && in.substr(0, 4) == "CHSM") {
    merge_metadata(in.substr(4));
    return 0;
  }
  if (in.size() >= 5 && in.substr(0, 4) == "FLAT") {
    flat_slices(in.substr(4));
    return 0;
  }
  std::string_view index = in, data;
  std::string wrapped;
  if (in.size() >= 4 && in.substr(0, 4) == "BLCK") {
    wrapped = wrap_block(in.substr(4));
    index = wrapped;
  } else if (in.size() >= 8 && in.substr(0, 4) == "CHBF") {
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
