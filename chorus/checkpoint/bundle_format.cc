#include <chorus/checkpoint/bundle_format.h>

#include <cstring>
#include <limits>

#include <chorus/checkpoint/table.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train::internal {

using chorus::internal::str_cat;
using wire::ProtoReader;
using wire::ProtoWriter;

int tf_dtype_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return kTfFloat;
    case DType::kFloat64: return kTfDouble;
    case DType::kFloat16: return kTfHalf;
    case DType::kBFloat16: return kTfBFloat16;
    case DType::kInt32: return kTfInt32;
    case DType::kInt64: return kTfInt64;
    case DType::kUInt8: return kTfUInt8;
    case DType::kUInt16: return kTfUInt16;
    case DType::kBool: return kTfBool;
    case DType::kString: return kTfString;
  }
  CHORUS_ENFORCE(false, "unknown DType ", static_cast<int>(dtype));
  return 0;
}

std::optional<DType> dtype_from_tf(int tf_dtype) {
  switch (tf_dtype) {
    case kTfFloat: return DType::kFloat32;
    case kTfDouble: return DType::kFloat64;
    case kTfHalf: return DType::kFloat16;
    case kTfBFloat16: return DType::kBFloat16;
    case kTfInt32: return DType::kInt32;
    case kTfInt64: return DType::kInt64;
    case kTfUInt8: return DType::kUInt8;
    case kTfUInt16: return DType::kUInt16;
    case kTfBool: return DType::kBool;
    default: return std::nullopt;
  }
}

std::string tf_dtype_name(int tf_dtype) {
  // tensorflow/core/framework/types.proto, with the names tf.as_dtype(n).name gives in Python.
  switch (tf_dtype) {
    case 1: return "DT_FLOAT (float32)";
    case 2: return "DT_DOUBLE (float64)";
    case 3: return "DT_INT32 (int32)";
    case 4: return "DT_UINT8 (uint8)";
    case 5: return "DT_INT16 (int16)";
    case 6: return "DT_INT8 (int8)";
    case 7: return "DT_STRING (string)";
    case 8: return "DT_COMPLEX64 (complex64)";
    case 9: return "DT_INT64 (int64)";
    case 10: return "DT_BOOL (bool)";
    case 11: return "DT_QINT8 (qint8)";
    case 12: return "DT_QUINT8 (quint8)";
    case 13: return "DT_QINT32 (qint32)";
    case 14: return "DT_BFLOAT16 (bfloat16)";
    case 15: return "DT_QINT16 (qint16)";
    case 16: return "DT_QUINT16 (quint16)";
    case 17: return "DT_UINT16 (uint16)";
    case 18: return "DT_COMPLEX128 (complex128)";
    case 19: return "DT_HALF (float16)";
    case 20: return "DT_RESOURCE (resource)";
    case 21: return "DT_VARIANT (variant)";
    case 22: return "DT_UINT32 (uint32)";
    case 23: return "DT_UINT64 (uint64)";
    case 24: return "DT_FLOAT8_E5M2 (float8_e5m2)";
    case 25: return "DT_FLOAT8_E4M3FN (float8_e4m3fn)";
    case 26: return "DT_FLOAT8_E4M3FNUZ (float8_e4m3fnuz)";
    case 27: return "DT_FLOAT8_E4M3B11FNUZ (float8_e4m3b11fnuz)";
    case 28: return "DT_FLOAT8_E5M2FNUZ (float8_e5m2fnuz)";
    case 29: return "DT_INT4 (int4)";
    case 30: return "DT_UINT4 (uint4)";
    case 31: return "DT_INT2 (int2)";
    case 32: return "DT_UINT2 (uint2)";
    default: return str_cat("DT_", tf_dtype);
  }
}

std::string supported_dtype_names() {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i) out += str_cat(i ? ", " : "", dtype_name(static_cast<DType>(i)));
  return out;
}

// ---- slices ----

namespace {

// OrderedCode (tensorflow/core/lib/strings/ordered_code.cc), the three writers the slice keys use.
void ordered_num_increasing(std::string& out, std::uint64_t v) {
  // One length byte, then the value big-endian without leading zero bytes (0 → just "\0").
  char digits[8];
  int n = 0;
  for (; v > 0; v >>= 8) digits[7 - n++] = static_cast<char>(v & 0xff);
  out.push_back(static_cast<char>(n));
  out.append(digits + 8 - n, static_cast<std::size_t>(n));
}

void ordered_string(std::string& out, std::string_view s) {
  // '\0' → "\0\xff", '\xff' → "\xff\0", then the separator "\0\1".
  for (char c : s) {
    if (c == '\0') {
      out.append("\0\xff", 2);
    } else if (c == '\xff') {
      out.append("\xff\0", 2);
    } else {
      out.push_back(c);
    }
  }
  out.append("\0\1", 2);
}

void ordered_signed_num_increasing(std::string& out, std::int64_t v) {
  // Sign bit (1: v ≥ 0), then as many further copies of it as there are bytes after the first,
  // a delimiter bit, then the value in two's complement, big-endian: n bytes hold
  // [-2^(7n-1), 2^(7n-1)), 1 ≤ n ≤ 10.
  const std::uint64_t magnitude = v < 0 ? ~static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  int bits = 0;  // significant bits of the magnitude
  while (bits < 64 && (magnitude >> bits) != 0) ++bits;
  const int len = bits / 7 + 1;  // payload bits available in n bytes: 7n - 1 ≥ bits
  unsigned char buf[10];
  const unsigned char sign = v < 0 ? 0xff : 0x00;
  for (int i = 0; i < 10; ++i) {
    const int shift = 8 * (9 - i);  // buf is v sign-extended to 80 bits, big-endian
    buf[i] = shift >= 64 ? sign : static_cast<unsigned char>(static_cast<std::uint64_t>(v) >> shift);
  }
  unsigned char* first = buf + 10 - len;
  // Header: `len` one-bits (the sign bit and len − 1 size bits) then a zero, over the first two
  // bytes; XOR-ing flips the sign-extension bits of a negative number into the same pattern.
  std::uint16_t header = static_cast<std::uint16_t>(0xffff0000u >> len);
  first[0] ^= static_cast<unsigned char>(header >> 8);
  if (len >= 2) first[1] ^= static_cast<unsigned char>(header & 0xff);
  out.append(reinterpret_cast<const char*>(first), static_cast<std::size_t>(len));
}

}  // namespace

std::string encode_tensor_name_slice(std::string_view name, const TensorSliceSpec& slice) {
  std::string out;
  ordered_num_increasing(out, 0);
  ordered_string(out, name);
  ordered_num_increasing(out, slice.size());
  for (const SliceExtent& e : slice) {
    ordered_signed_num_increasing(out, e.start);
    ordered_signed_num_increasing(out, e.length);
  }
  return out;
}

namespace {

// Appends the boxes of [lo, hi) of the sub-tensor at dimension d (offsets relative to it, whose
// element 0 is flat element `base`); `prefix` fixes the dimensions before d.
void decompose(const std::vector<std::int64_t>& dims, std::size_t d, std::vector<std::int64_t>& prefix,
               std::int64_t base, std::int64_t lo, std::int64_t hi, std::vector<FlatSlice>& out) {
  if (lo >= hi) return;
  std::int64_t row = 1;  // elements per index of dimension d
  for (std::size_t i = d + 1; i < dims.size(); ++i) row *= dims[i];
  const auto box = [&](std::int64_t start, std::int64_t count) {
    FlatSlice s;
    for (std::int64_t i : prefix) {
      s.spec.push_back({i, 1});
      s.shape.push_back(1);
    }
    s.spec.push_back({start, count});
    s.shape.push_back(count);
    for (std::size_t i = d + 1; i < dims.size(); ++i) {
      s.spec.push_back({0, kFullExtent});
      s.shape.push_back(dims[i]);
    }
    s.begin = base + start * row;
    s.length = count * row;
    out.push_back(std::move(s));
  };
  if (row == 1) return box(lo, hi - lo);
  const std::int64_t first_full = (lo + row - 1) / row, last_full = hi / row;
  const auto inside = [&](std::int64_t i, std::int64_t from, std::int64_t to) {
    prefix.push_back(i);
    decompose(dims, d + 1, prefix, base + i * row, from, to, out);
    prefix.pop_back();
  };
  if (first_full > last_full) return inside(lo / row, lo % row, hi - lo / row * row);  // within one index
  if (lo < first_full * row) inside(lo / row, lo % row, row);
  if (first_full < last_full) box(first_full, last_full - first_full);
  if (last_full * row < hi) inside(last_full, 0, hi - last_full * row);
}

}  // namespace

std::vector<FlatSlice> flat_range_slices(const std::vector<std::int64_t>& dims, std::int64_t begin,
                                         std::int64_t length) {
  std::int64_t elements = 1;
  for (std::int64_t d : dims) elements *= d;
  CHORUS_REQUIRE(!dims.empty() && begin >= 0 && length >= 0 && begin <= elements - length, InvalidArgumentError,
                 "flat_range_slices: range [", begin, ", ", begin + length, ") of a tensor of rank ", dims.size(),
                 " with ", elements, " elements");
  std::vector<FlatSlice> out;
  std::vector<std::int64_t> prefix;
  decompose(dims, 0, prefix, 0, begin, begin + length, out);
  return out;
}

// ---- encoding ----

std::string encode_bundle_header(std::int64_t num_shards) {
  ProtoWriter version;
  version.add_varint(kVersionProducer, kTensorBundleVersion);
  ProtoWriter header;
  header.add_varint(kHeaderNumShards, static_cast<std::uint64_t>(num_shards));
  // endianness LITTLE = 0: omitted (proto3 default), as TF writes it.
  header.add_message(kHeaderVersion, version);
  return header.release();
}

std::string encode_bundle_entry(const BundleEntry& entry, const std::vector<TensorSliceSpec>& slices) {
  ProtoWriter shape;
  for (std::int64_t d : entry.shape.dims()) {
    ProtoWriter dim;
    if (d != 0) dim.add_int64(kDimSize, d);
    shape.add_message(kShapeDim, dim);
  }
  ProtoWriter e;
  e.add_varint(kEntryDtype, static_cast<std::uint64_t>(entry.tf_dtype));
  e.add_message(kEntryShape, shape);  // always present, also for a scalar ("12 00")
  if (entry.shard_id != 0) e.add_int64(kEntryShardId, entry.shard_id);
  if (entry.offset != 0) e.add_int64(kEntryOffset, entry.offset);
  if (entry.size != 0) e.add_int64(kEntrySize, entry.size);
  std::string out = e.release();
  if (entry.masked_crc32c != 0) {
    wire::append_varint(out, (kEntryCrc32c << 3) | 5);
    wire::append_fixed32(out, entry.masked_crc32c);
  }
  if (slices.empty()) return out;
  ProtoWriter tail;  // field 7 follows the crc (field 6), in field order as TF serializes
  for (const TensorSliceSpec& spec : slices) {
    ProtoWriter slice;
    for (const SliceExtent& x : spec) {
      ProtoWriter extent;
      if (x.length != kFullExtent) {
        if (x.start != 0) extent.add_int64(kExtentStart, x.start);
        extent.add_int64(kExtentLength, x.length);  // in a oneof: written even when 0
      }
      slice.add_message(kSliceExtent, extent);
    }
    tail.add_message(kEntrySlices, slice);
  }
  return out + tail.release();
}

// ---- decoding ----

namespace {

[[noreturn]] void fail(const std::string& filename, const std::string& key, const std::string& why) {
  throw DataLossError(str_cat("corrupt checkpoint index '", filename, "': entry '", key, "': ", why));
}

// Wraps ProtoReader's DataLossError so that the message names the file and the key.
template <typename F>
auto with_context(const std::string& filename, const std::string& key, F&& f) {
  try {
    return f();
  } catch (const DataLossError& e) {
    fail(filename, key, e.message());
  }
}

std::int64_t to_int64(std::uint64_t v) { return static_cast<std::int64_t>(v); }

}  // namespace

BundleHeader decode_bundle_header(std::string_view bytes, const std::string& filename) {
  BundleHeader h;
  std::int64_t endianness = 0;
  std::int64_t producer = 0, min_consumer = 0;
  std::vector<std::int64_t> bad_consumers;
  with_context(filename, "", [&] {
    ProtoReader r(bytes, "BundleHeaderProto");
    while (r.next()) {
      switch (r.field()) {
        case kHeaderNumShards: h.num_shards = static_cast<std::int32_t>(r.read_varint()); break;
        case kHeaderEndianness: endianness = to_int64(r.read_varint()); break;
        case kHeaderVersion: {
          ProtoReader v(r.read_bytes(), "VersionDef");
          while (v.next()) {
            switch (v.field()) {
              case kVersionProducer: producer = static_cast<std::int32_t>(v.read_varint()); break;
              case kVersionMinConsumer: min_consumer = static_cast<std::int32_t>(v.read_varint()); break;
              case kVersionBadConsumers: wire::read_repeated_int64s(v, bad_consumers); break;
              default: v.skip();
            }
          }
          break;
        }
        default: r.skip();
      }
    }
    return 0;
  });
  if (h.num_shards < 1 || h.num_shards > kMaxShards)
    fail(filename, "", str_cat("header: num_shards ", h.num_shards, " (valid: 1 to ", kMaxShards, ")"));
  if (endianness == 1)
    throw UnimplementedError(str_cat("checkpoint '", filename,
                                     "' was written on a big-endian machine; chorus reads "
                                     "little-endian bundles only"));
  if (endianness != 0) fail(filename, "", str_cat("header: endianness ", endianness, " (valid: 0 little, 1 big)"));
  // TF's CheckVersions(version, kTensorBundleVersion, kTensorBundleMinProducer, "Checkpoint", ...).
  if (producer < kTensorBundleMinProducer)
    throw FailedPreconditionError(str_cat("checkpoint '", filename, "': producer version ", producer,
                                          " is older than the oldest supported (", kTensorBundleMinProducer, ")"));
  if (min_consumer > kTensorBundleVersion)
    throw FailedPreconditionError(str_cat("checkpoint '", filename, "' needs a reader of version ", min_consumer,
                                          " or newer; chorus reads version ", kTensorBundleVersion));
  for (std::int64_t b : bad_consumers)
    if (b == kTensorBundleVersion)
      throw FailedPreconditionError(str_cat("checkpoint '", filename, "' disallows readers of version ",
                                            kTensorBundleVersion, " (bad_consumers)"));
  return h;
}

namespace {
// A BundleEntryProto's TensorShapeProto: its dimensions (at most 254) appended to `dims`, and
// unknown_rank.
void decode_shape(std::string_view bytes, const std::string& filename, const std::string& key,
                  std::vector<std::int64_t>& dims, bool& unknown_rank) {
  ProtoReader s(bytes, "TensorShapeProto");
  while (s.next()) {
    if (s.field() == kShapeDim) {
      ProtoReader d(s.read_bytes(), "TensorShapeProto.Dim");
      std::int64_t size = 0;
      while (d.next()) {
        if (d.field() == kDimSize)
          size = d.read_int64();
        else
          d.skip();
      }
      if (dims.size() >= 254) fail(filename, key, "shape has more than 254 dimensions");
      dims.push_back(size);
    } else if (s.field() == kShapeUnknownRank) {
      unknown_rank = s.read_bool();
    } else {
      s.skip();
    }
  }
}

// A TensorSliceProto's extents (at most 254), unchecked.
TensorSliceSpec decode_slice(std::string_view bytes, const std::string& filename, const std::string& key) {
  TensorSliceSpec spec;
  ProtoReader t(bytes, "TensorSliceProto");
  while (t.next()) {
    if (t.field() != kSliceExtent) {
      t.skip();
      continue;
    }
    if (spec.size() >= 254) fail(filename, key, "a slice has more than 254 extents");
    SliceExtent extent;
    ProtoReader x(t.read_bytes(), "TensorSliceProto.Extent");
    while (x.next()) {
      if (x.field() == kExtentStart)
        extent.start = x.read_int64();
      else if (x.field() == kExtentLength)
        extent.length = x.read_int64();
      else
        x.skip();
    }
    spec.push_back(extent);
  }
  return spec;
}

// Every slice has one extent per dimension of `dims`, each within its dimension.
void check_slices(const std::vector<TensorSliceSpec>& specs, const std::vector<std::int64_t>& dims,
                  const std::string& filename, const std::string& key) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSliceSpec& spec = specs[i];
    if (spec.size() != dims.size())
      fail(filename, key, str_cat("slice ", i, " has ", spec.size(), " extents for a tensor of rank ", dims.size()));
    for (std::size_t d = 0; d < spec.size(); ++d) {
      const SliceExtent& x = spec[d];
      const bool full = x.length == kFullExtent;
      if (x.start < 0 || (!full && (x.length < 0 || x.length > dims[d] || x.start > dims[d] - x.length)) ||
          (full && x.start != 0))
        fail(filename, key,
             str_cat("slice ", i, ", dimension ", d, ": start ", x.start, " length ", x.length, " is not within [0, ",
                     dims[d], ")"));
    }
  }
}
}  // namespace

BundleEntry decode_bundle_entry(std::string_view bytes, const std::string& filename, const std::string& key,
                                std::int64_t num_shards, int* num_slices, std::vector<TensorSliceSpec>* slice_specs) {
  BundleEntry e;
  std::int64_t shard = 0;
  std::vector<std::int64_t> dims;
  bool unknown_rank = false;
  int slices = 0;
  std::vector<TensorSliceSpec> specs;
  with_context(filename, key, [&] {
    ProtoReader r(bytes, "BundleEntryProto");
    while (r.next()) {
      switch (r.field()) {
        case kEntryDtype: e.tf_dtype = static_cast<int>(static_cast<std::int32_t>(r.read_varint())); break;
        case kEntryShape: decode_shape(r.read_bytes(), filename, key, dims, unknown_rank); break;
        case kEntryShardId: shard = static_cast<std::int32_t>(r.read_varint()); break;
        case kEntryOffset: e.offset = r.read_int64(); break;
        case kEntrySize: e.size = r.read_int64(); break;
        case kEntryCrc32c: {
          const float f = r.read_float();  // wire type fixed32; reinterpret the bits
          std::memcpy(&e.masked_crc32c, &f, 4);
          break;
        }
        case kEntrySlices: {
          ++slices;
          if (!slice_specs) {
            r.skip();
            break;
          }
          specs.push_back(decode_slice(r.read_bytes(), filename, key));
          break;
        }
        default: r.skip();
      }
    }
    return 0;
  });
  if (num_slices) *num_slices = slices;
  if (e.tf_dtype <= 0) fail(filename, key, str_cat("invalid dtype ", e.tf_dtype));
  if (unknown_rank) fail(filename, key, "shape has unknown rank");
  std::int64_t elements = 1;
  for (std::int64_t d : dims) {
    if (d < 0) fail(filename, key, str_cat("shape has a negative dimension ", d));
    if (d != 0 && elements > std::numeric_limits<std::int64_t>::max() / d)
      fail(filename, key, "shape's element count overflows int64");
    elements *= d;
  }
  check_slices(specs, dims, filename, key);
  if (slice_specs) *slice_specs = std::move(specs);
  e.shape = Shape(std::move(dims));
  if (shard < 0 || shard >= num_shards)
    fail(filename, key, str_cat("shard_id ", shard, " (the header says ", num_shards, " shards)"));
  e.shard_id = static_cast<int>(shard);
  if (e.offset < 0 || e.size < 0 || e.size > std::numeric_limits<std::int64_t>::max() - e.offset)
    fail(filename, key, str_cat("offset ", e.offset, " and size ", e.size, " are not a valid byte range"));
  e.is_string = e.tf_dtype == kTfString;
  if (e.is_string) e.dtype = DType::kString;
  if (const auto dt = dtype_from_tf(e.tf_dtype)) {
    e.dtype = *dt;
    const auto esize = static_cast<std::int64_t>(dtype_size(*dt));
    if (slices == 0 && (elements > std::numeric_limits<std::int64_t>::max() / esize || elements * esize != e.size))
      fail(filename, key,
           str_cat("size ", e.size, " bytes does not match ", e.shape.to_string(), " × ", tf_dtype_name(e.tf_dtype),
                   " (", esize, " bytes each)"));
  } else if (e.is_string && slices == 0) {
    // Every element needs at least one length byte, plus the 4-byte checksum of the lengths.
    if (e.size < 4 || elements > e.size - 4)
      fail(filename, key, str_cat("DT_STRING data of ", e.size, " bytes cannot hold ", elements, " elements"));
  }
  return e;
}

BundleIndex parse_bundle_index(std::string_view contents, const std::string& filename) {
  BundleIndex index;
  bool have_header = false;
  read_table(contents, filename, [&](std::string_view key, std::string_view value) {
    if (!have_header) {
      if (!key.empty())
        throw DataLossError(str_cat("corrupt checkpoint index '", filename, "': the first entry is '", key,
                                    "', not the header entry \"\""));
      index.header = decode_bundle_header(value, filename);
      have_header = true;
      return;
    }
    std::string k(key);
    int num_slices = 0;
    std::vector<TensorSliceSpec> slices;
    BundleEntry e = decode_bundle_entry(value, filename, k, index.header.num_shards, &num_slices, &slices);
    if (num_slices > 0) index.sliced[k].slices = std::move(slices);
    index.entries.emplace_hint(index.entries.end(), std::move(k), std::move(e));
  });
  if (!have_header)
    throw DataLossError(str_cat("corrupt checkpoint index '", filename, "': no header entry (the table is empty)"));
  // Each slice of a partitioned tensor: its data entry (TF's BundleReader::GetSliceValue), which
  // is not a tensor of its own (TF's CheckpointReader leaves it out of the variable list too).
  std::vector<std::string> pieces;
  for (auto& [key, sliced] : index.sliced) {
    const BundleEntry& full = index.entries.at(key);
    for (const TensorSliceSpec& spec : sliced.slices) {
      std::vector<std::int64_t> dims(spec.size());
      bool whole = true;
      std::string where = "[";
      for (std::size_t d = 0; d < spec.size(); ++d) {
        const bool full_dim = spec[d].length == kFullExtent;
        dims[d] = full_dim ? full.shape.dims()[d] : spec[d].length;
        whole = whole && full_dim;
        where += str_cat(d ? ", " : "", spec[d].start, ":", spec[d].start + dims[d]);
      }
      where += "]";
      if (whole) {
        // A stored slice covering everything keeps its data in the full entry itself.
        BundleEntry piece = full;
        if (const auto dt = dtype_from_tf(full.tf_dtype)) {
          if (piece.size != full.shape.num_elements() * static_cast<std::int64_t>(dtype_size(*dt)))
            fail(filename, key,
                 str_cat("whole-tensor slice: size ", piece.size, " bytes does not match ", full.shape.to_string()));
        }
        sliced.pieces.push_back(piece);
        continue;
      }
      const std::string piece_key = encode_tensor_name_slice(key, spec);
      const auto it = index.entries.find(piece_key);
      if (it == index.entries.end() || index.sliced.count(piece_key))
        fail(filename, key, str_cat("the data of slice ", where, " is missing"));
      const BundleEntry& piece = it->second;
      if (piece.tf_dtype != full.tf_dtype || !(piece.shape == Shape(dims)))
        fail(filename, key,
             str_cat("slice ", where, " is stored as ", tf_dtype_name(piece.tf_dtype), " ", piece.shape.to_string(),
                     ", expected ", tf_dtype_name(full.tf_dtype), " ", Shape(dims).to_string()));
      sliced.pieces.push_back(piece);
      pieces.push_back(piece_key);
    }
  }
  for (const std::string& k : pieces) index.entries.erase(k);
  return index;
}

// ---- DT_STRING ----

std::string encode_string_tensor(const std::vector<std::string>& values, std::uint32_t* crc_out) {
  std::string out;
  std::uint32_t crc = 0;
  std::size_t total = 0;
  for (const std::string& v : values) {
    wire::append_varint(out, v.size());
    if (v.size() <= std::numeric_limits<std::uint32_t>::max()) {
      const auto n = static_cast<std::uint32_t>(v.size());
      crc = crc32c(&n, 4, crc);
    } else {
      const auto n = static_cast<std::uint64_t>(v.size());
      crc = crc32c(&n, 8, crc);
    }
    total += v.size();
  }
  const std::uint32_t lengths_crc = mask_crc32c(crc);
  wire::append_fixed32(out, lengths_crc);
  crc = crc32c(&lengths_crc, 4, crc);
  out.reserve(out.size() + total);
  for (const std::string& v : values) {
    out.append(v);
    crc = crc32c(v.data(), v.size(), crc);
  }
  *crc_out = crc;
  return out;
}

std::vector<std::string> decode_string_tensor(std::string_view bytes, std::int64_t num_elements,
                                              std::uint32_t masked_crc32c, const std::string& filename,
                                              const std::string& key) {
  auto bad = [&](const std::string& why) -> DataLossError {
    return DataLossError(str_cat("corrupt checkpoint data '", filename, "': DT_STRING tensor '", key, "': ", why));
  };
  // Each element takes ≥ 1 length byte: more elements than bytes is corruption (and this bounds
  // the allocation below by the data actually read).
  if (num_elements < 0 || static_cast<std::uint64_t>(num_elements) > bytes.size())
    throw bad(str_cat(num_elements, " elements cannot fit in ", bytes.size(), " bytes"));
  const auto n = static_cast<std::size_t>(num_elements);
  std::vector<std::uint64_t> lengths(n);
  std::size_t pos = 0;
  std::uint32_t crc = 0;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= bytes.size() || shift >= 64) throw bad(str_cat("truncated or overlong length of element ", i));
      const auto byte = static_cast<std::uint8_t>(bytes[pos++]);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    if (v > bytes.size()) throw bad(str_cat("element ", i, " claims ", v, " bytes; the tensor has ", bytes.size()));
    lengths[i] = v;
    total += v;
    if (total > bytes.size())
      throw bad(str_cat("the lengths of elements 0..", i, " add up to more than the ", bytes.size(), " bytes"));
    if (v <= std::numeric_limits<std::uint32_t>::max()) {
      const auto w = static_cast<std::uint32_t>(v);
      crc = crc32c(&w, 4, crc);
    } else {
      crc = crc32c(&v, 8, crc);
    }
  }
  if (bytes.size() - pos < 4) throw bad("truncated before the checksum of the lengths");
  std::uint32_t stored;
  std::memcpy(&stored, bytes.data() + pos, 4);
  if (unmask_crc32c(stored) != crc)
    throw bad(
        str_cat("the checksum of the lengths does not match (stored ", stored, ", calculated ", mask_crc32c(crc), ")"));
  crc = crc32c(bytes.data() + pos, 4, crc);
  pos += 4;
  if (total != bytes.size() - pos)
    throw bad(str_cat("the lengths add up to ", total, " bytes but ", bytes.size() - pos, " follow them"));
  crc = crc32c(bytes.data() + pos, bytes.size() - pos, crc);
  if (crc != unmask_crc32c(masked_crc32c))
    throw bad(str_cat("checksum does not match: stored ", unmask_crc32c(masked_crc32c),
                      " vs. calculated on the restored bytes ", crc));
  std::vector<std::string> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].assign(bytes.data() + pos, lengths[i]);
    pos += lengths[i];
  }
  return out;
}

void check_entry_fits(const BundleEntry& entry, std::uint64_t data_size, const std::string& filename,
                      const std::string& key) {
  // offset, size ≥ 0 and offset + size without overflow: decode_bundle_entry checked them.
  if (static_cast<std::uint64_t>(entry.offset) + static_cast<std::uint64_t>(entry.size) > data_size)
    throw DataLossError(str_cat("corrupt checkpoint: tensor '", key, "' needs bytes [", entry.offset, ", ",
                                entry.offset + entry.size, ") of '", filename, "', which has ", data_size));
}

void check_numeric_data(std::string_view bytes, const BundleEntry& entry, const std::string& filename,
                        const std::string& key) {
  if (static_cast<std::int64_t>(bytes.size()) != entry.size)
    throw DataLossError(str_cat("corrupt checkpoint data '", filename, "': tensor '", key, "': read ", bytes.size(),
                                " bytes, the index says ", entry.size));
  check_numeric_crc(crc32c(bytes.data(), bytes.size()), entry, filename, key);
}

void check_numeric_crc(std::uint32_t crc, const BundleEntry& entry, const std::string& filename,
                       const std::string& key) {
  if (crc != unmask_crc32c(entry.masked_crc32c))
    throw DataLossError(str_cat("corrupt checkpoint data '", filename, "': tensor '", key,
                                "': checksum does not match: stored ", unmask_crc32c(entry.masked_crc32c),
                                " vs. calculated on the restored bytes ", crc));
}

}  // namespace chorus::train::internal
