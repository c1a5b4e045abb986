// Internal to checkpoint/: the byte layout of TF's tensor bundles, in one place for the writer and
// the reader (docs/formats.md section B; TF's tensorflow/core/lib/io/format.h,
// tensorflow/core/protobuf/tensor_bundle.proto, tensorflow/core/util/tensor_bundle/).
//
// The pure functions here take bytes and return bytes — no files, no Tensors — so the libFuzzer
// target (tests/checkpoint/fuzz/) can drive the whole index and data decoding from memory.
// Every decoder treats its input as untrusted: malformed input → DataLossError whose message
// names `filename` (and the key, when known); nothing is allocated from an unchecked size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/checkpoint/bundle.h>

namespace chorus::train::internal {

// ---- SSTable (LevelDB table format without filter blocks) ----
inline constexpr std::uint64_t kTableMagic = 0xdb4775248b80fb57ull;
inline constexpr std::size_t kFooterSize = 48;          // two BlockHandles padded to 40, magic
inline constexpr std::size_t kMaxBlockHandleSize = 20;  // two varint64s
inline constexpr std::size_t kBlockTrailerSize = 5;     // type byte + masked crc32c
inline constexpr std::uint8_t kNoCompression = 0;
inline constexpr std::uint8_t kSnappyCompression = 1;
inline constexpr int kBlockRestartInterval = 16;   // data blocks (the index block uses 1)
inline constexpr std::size_t kBlockSize = 262144;  // a data block is flushed at this size

// ---- BundleHeaderProto / BundleEntryProto / TensorShapeProto / VersionDef field numbers ----
inline constexpr int kHeaderNumShards = 1, kHeaderEndianness = 2, kHeaderVersion = 3;
inline constexpr int kVersionProducer = 1, kVersionMinConsumer = 2, kVersionBadConsumers = 3;
inline constexpr int kEntryDtype = 1, kEntryShape = 2, kEntryShardId = 3, kEntryOffset = 4, kEntrySize = 5,
                     kEntryCrc32c = 6, kEntrySlices = 7;
inline constexpr int kShapeDim = 2, kShapeUnknownRank = 3;
inline constexpr int kDimSize = 1;
// TensorSliceProto{repeated Extent extent = 1}, Extent{int64 start = 1; oneof {int64 length = 2}}.
inline constexpr int kSliceExtent = 1;
inline constexpr int kExtentStart = 1, kExtentLength = 2;
// tensor_bundle.h: kTensorBundleVersion = 1 (what we write as producer), kTensorBundleMinProducer
// = 0, kTensorBundleMinConsumer = 0.
inline constexpr int kTensorBundleVersion = 1;
inline constexpr int kTensorBundleMinProducer = 0;
// TF writes at most 99999 shards ("%05d"); more is corruption.
inline constexpr std::int64_t kMaxShards = 99999;

// ---- TF's DataType enum (tensorflow/core/framework/types.proto) ----
inline constexpr int kTfFloat = 1, kTfDouble = 2, kTfInt32 = 3, kTfUInt8 = 4, kTfString = 7, kTfInt64 = 9, kTfBool = 10,
                     kTfBFloat16 = 14, kTfUInt16 = 17, kTfHalf = 19;

// DT_STRING (7) for DType::kString.
int tf_dtype_of(DType dtype);
// The chorus DType of a TF DataType number with fixed-size elements; nullopt for DT_STRING (its
// entries are decoded apart: BundleEntry::is_string) and types chorus lacks.
std::optional<DType> dtype_from_tf(int tf_dtype);
// TF's enum name and, where TF has one, its Python name: "DT_FLOAT (float32)", "DT_INT8 (int8)",
// "DT_HALF (float16)", "DT_STRING (string)", "DT_RESOURCE"; "DT_<number>" for a number TF does
// not define (for messages).
std::string tf_dtype_name(int tf_dtype);
// The DTypes chorus reads and writes, for messages: "float32, float64, ..., bool, string".
std::string supported_dtype_names();

// ---- Partitioned (sliced) tensors: TensorSliceProto and the keys of their pieces ----
// One dimension of a slice: [start, start + length); length kFullExtent: the whole dimension.
inline constexpr std::int64_t kFullExtent = -1;
struct SliceExtent {
  std::int64_t start = 0;
  std::int64_t length = kFullExtent;
};
using TensorSliceSpec = std::vector<SliceExtent>;  // one extent per dimension
// TF's checkpoint::EncodeTensorNameSlice (tensorflow/core/util/saved_tensor_slice_util.cc): the
// key of one slice's data entry — OrderedCode NumIncreasing(0), String(name),
// NumIncreasing(rank), then SignedNumIncreasing(start) and SignedNumIncreasing(length) per
// dimension (length −1 for a full one). Such keys start with '\0', below every variable key.
std::string encode_tensor_name_slice(std::string_view name, const TensorSliceSpec& slice);
// One box of a flat range: elements [begin, begin + length) of the row-major flattening, which
// are exactly the box `spec` (of shape `shape`) in its own row-major order.
struct FlatSlice {
  TensorSliceSpec spec;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;
  std::int64_t length = 0;
};
// The boxes, in flat order, whose union is the flat range [begin, begin + length) of a tensor of
// `dims` (how a ZeRO shard, a piece of the flattened variable, is stored as TF slices): at most
// 2·rank − 1 of them, each of the form (fixed indices, one range, whole dimensions), so each is
// contiguous in the flattening. Dimensions a box spans whole are kFullExtent. An empty range →
// none. Requires rank ≥ 1 and 0 ≤ begin ≤ begin + length ≤ elements (InvalidArgumentError).
std::vector<FlatSlice> flat_range_slices(const std::vector<std::int64_t>& dims, std::int64_t begin,
                                         std::int64_t length);

// ---- Encoding (writer side) ----
// The serialized BundleHeaderProto we write: num_shards, LITTLE endian, version{producer=1}
// (num_shards 1: 08 01 1a 02 08 01).
std::string encode_bundle_header(std::int64_t num_shards = 1);
// BundleEntryProto for one tensor; proto3 defaults (0) are omitted as TF's writer does. With
// `slices`, the full-tensor entry of a partitioned tensor (TF's BundleWriter::AddSlice: dtype,
// shape and one TensorSliceProto per slice, no data of its own); an extent of length kFullExtent
// is written as an empty Extent, as TF's TensorSlice::AsProto does.
std::string encode_bundle_entry(const BundleEntry& entry, const std::vector<TensorSliceSpec>& slices = {});

// ---- Decoding (reader side) ----
struct BundleHeader {
  std::int64_t num_shards = 0;
};
BundleHeader decode_bundle_header(std::string_view bytes, const std::string& filename);
// Decodes and validates one entry (dtype known or not, shape dims ≥ 0 without overflow, offset
// and size ≥ 0 without overflow, shard in range, size == elements × dtype size for chorus's
// numeric types). `num_slices` receives the count of TensorSliceProto fields (a partitioned
// tensor: its data lies in one entry per slice, under encode_tensor_name_slice keys); `slices`,
// when given, the slices themselves, each checked against the shape (one extent per dimension,
// start ≥ 0, length ≥ 0 or full, within the dimension).
BundleEntry decode_bundle_entry(std::string_view bytes, const std::string& filename, const std::string& key,
                                std::int64_t num_shards, int* num_slices,
                                std::vector<TensorSliceSpec>* slices = nullptr);

// The parsed `.index` file: header plus every entry, keys sorted.
struct BundleIndex {
  BundleHeader header;
  // Every tensor a reader lists (TF's CheckpointReader does the same): plain entries and the
  // full-tensor entries of partitioned tensors, not the entries of their slices.
  std::map<std::string, BundleEntry, std::less<>> entries;
  // Partitioned tensors: key → its slices, and, for each slice, the entry holding its data
  // (the same order; a slice covering the whole tensor keeps its data in the key's own entry).
  struct Sliced {
    std::vector<TensorSliceSpec> slices;
    std::vector<BundleEntry> pieces;
  };
  std::map<std::string, Sliced, std::less<>> sliced;
};
// Parses a whole `.index` file held in `contents` (table, CRCs, header first, every entry). A
// partitioned tensor's slice entries must exist, with its dtype and the slice's shape
// (DataLossError naming the key and the slice otherwise); they leave `entries`.
BundleIndex parse_bundle_index(std::string_view contents, const std::string& filename);

// DT_STRING payload: [varint64 len_i]* [masked crc32c of the lengths (as uint32 or uint64)]
// [bytes]*; the returned crc is the unmasked running crc over all of it (docs/formats.md B4).
std::string encode_string_tensor(const std::vector<std::string>& values, std::uint32_t* crc);
// Decodes `num_elements` strings from exactly `bytes` (the entry's data) and checks the lengths'
// checksum and the entry's crc32c.
std::vector<std::string> decode_string_tensor(std::string_view bytes, std::int64_t num_elements,
                                              std::uint32_t masked_crc32c, const std::string& filename,
                                              const std::string& key);

// DataLossError naming the file and key unless the entry's bytes lie within a data file of
// `data_size` bytes (checked before anything is allocated for the entry).
void check_entry_fits(const BundleEntry& entry, std::uint64_t data_size, const std::string& filename,
                      const std::string& key);

// The bytes of a numeric entry, already read: checks size and crc32c (DataLossError otherwise);
// check_numeric_crc checks a crc computed by the caller (chunk by chunk, as the bytes arrive).
void check_numeric_crc(std::uint32_t crc32c_of_bytes, const BundleEntry& entry, const std::string& filename,
                       const std::string& key);
void check_numeric_data(std::string_view bytes, const BundleEntry& entry, const std::string& filename,
                        const std::string& key);

}  // namespace chorus::train::internal
