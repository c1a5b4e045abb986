// tf.train.Example parsing: tf.io.parse_example / tf.io.parse_single_example with FixedLenFeature,
// VarLenFeature and RaggedFeature specs, in namespace chorus::data::io (TF's tf.io).
//
// An Example (tensorflow/core/example/example.proto) is a map from feature name to one list of
// values of one of three kinds: bytes_list (→ DType::kString), float_list (→ kFloat32) or
// int64_list (→ kInt64). A spec says, per name, which kind to expect and how to shape the values:
//
//   namespace io = chorus::data::io;
//   io::FeatureSpecs spec{
//       {"label", io::FixedLenFeature{Shape{}, DType::kInt64}},                        // required scalar
//       {"weight", io::FixedLenFeature{Shape{}, DType::kFloat32, Tensor::scalar(1.0f)}},  // default 1
//       {"tokens", io::VarLenFeature{DType::kInt64}},                                  // → SparseTensor
//       {"scores", io::RaggedFeature{DType::kFloat32}}};                               // → RaggedTensor
//   io::ParsedFeatures p = io::parse_example(records, spec);  // records: std::vector<std::string>
//   Tensor labels = p.dense("label");                         // int64 [batch]
//   SparseTensor tokens = p.sparse("tokens");                 // indices [N, 2], dense_shape [batch, longest]
//
// Outputs (exactly TF's layout; B = number of records):
//   FixedLenFeature{shape}  dense Tensor [B, shape...] (parse_single_example: [shape...]). The list
//                           must hold shape.num_elements() values (row-major), else
//                           InvalidArgumentError. A missing feature takes default_value (any shape
//                           with that many elements, of the spec's dtype); without one →
//                           InvalidArgumentError "... is required but could not be found".
//   VarLenFeature           SparseTensor: indices int64 [N, 2] of (record, position), values [N],
//                           dense_shape [B, longest list] (single: indices [N, 1], dense_shape [n]).
//                           A missing feature contributes no values.
//   RaggedFeature           RaggedTensor: values [N] and int64 row_splits [B + 1], one row per record
//                           (single: a dense 1-D Tensor [n], as TF). Missing → an empty row.
// "Missing" is TF's: the name is absent, or its Feature has no list set. A present but EMPTY list is
// not missing: for a FixedLenFeature it is a count mismatch (TF raises too, default or not).
//
// Errors. Every message names the op, the feature and the record (its index in the batch):
//   InvalidArgumentError  spec problems (dtype other than float32/int64/string, a default of the
//                         wrong dtype or size), records not a string tensor of the rank asked; the Example's
//                         list is of another kind than the spec's dtype ("data types don't match",
//                         saying both); a FixedLenFeature count mismatch (values seen vs shape); a
//                         required feature missing. These are TF's error classes for the same cases.
//   DataLossError         malformed wire data: truncated varints, lengths past the end, wrong wire
//                         types, packed lists whose size is not a multiple of the element size
//                         (byte offsets as core/proto_wire.h reports them). TF raises
//                         InvalidArgumentError "Could not parse example input" here; chorus uses its
//                         reader-wide class for corrupt data. A record's spec'd features are all
//                         decoded before any is checked, so a corrupt record is DataLossError
//                         whatever the order of the spec.
// Nothing is read past the input, every length is checked against the bytes left before anything
// is allocated, and the nesting is fixed (Example → Features → entry → Feature → list: no
// recursion), so no input crashes, hangs or allocates more than ~16× its own size (a bytes_list of
// empty strings: 2 wire bytes per std::string); records are already bounded by the TFRecord
// reader's max_record_bytes, so no separate ceiling is applied here.
//
// Wire details, as TF's parser (example_proto_fast_parsing.cc): a name that occurs twice — the last
// entry wins; a Feature holding more than one list — the first list decides (protobuf's "last
// oneof wins" is not what TF does); repeated float/int64 values packed or not; unknown fields
// skipped. Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <chorus/core/ragged_tensor.h>
#include <chorus/core/shape.h>
#include <chorus/core/sparse_tensor.h>
#include <chorus/core/tensor.h>
#include <chorus/data/dataset.h>

namespace chorus::data::io {

// ---- specs (tf.io.FixedLenFeature, VarLenFeature, RaggedFeature) ----

struct FixedLenFeature {
  Shape shape;                          // {} = a scalar per record
  DType dtype = DType::kFloat32;        // kFloat32, kInt64 or kString
  std::optional<Tensor> default_value;  // nullopt: the feature is required
};
struct VarLenFeature {
  DType dtype = DType::kFloat32;
};
// The simple form of tf.io.RaggedFeature: the value list becomes one ragged row (no partitions).
struct RaggedFeature {
  DType dtype = DType::kFloat32;
};
using FeatureSpec = std::variant<FixedLenFeature, VarLenFeature, RaggedFeature>;
// Name → spec (sorted by name, as TF orders its outputs).
using FeatureSpecs = std::map<std::string, FeatureSpec>;

// ---- results ----

using ParsedFeature = std::variant<Tensor, SparseTensor, RaggedTensor>;

// Name → parsed feature, one per spec. The accessors throw InvalidArgumentError for a name that was
// not in the spec or that holds another kind (naming both).
struct ParsedFeatures {
  std::map<std::string, ParsedFeature> features;

  bool contains(const std::string& name) const { return features.count(name) != 0; }
  const Tensor& dense(const std::string& name) const;
  const SparseTensor& sparse(const std::string& name) const;
  const RaggedTensor& ragged(const std::string& name) const;
};

// tf.io.parse_single_example(serialized, features).
ParsedFeatures parse_single_example(std::string_view serialized, const FeatureSpecs& features);
// tf.io.parse_example(serialized, features): one batch row per record, in order.
ParsedFeatures parse_example(std::span<const std::string> serialized, const FeatureSpecs& features);
// The same on string tensors, as TF takes them: a scalar for parse_single_example, a vector [batch]
// for parse_example (another dtype or rank → InvalidArgumentError).
ParsedFeatures parse_single_example(const Tensor& serialized, const FeatureSpecs& features);
ParsedFeatures parse_example(const Tensor& serialized, const FeatureSpecs& features);

// ---- the wire layer (what the functions above and launch/tfrecord_digits.h are built on) ----

enum class ListKind : std::uint8_t { kNone = 0, kBytes = 1, kFloat = 2, kInt64 = 3 };
// "bytes_list", "float_list", "int64_list", or "no list".
std::string_view list_kind_name(ListKind kind);

// One Feature's values: the vector of its kind is filled, the others are empty.
struct FeatureList {
  ListKind kind = ListKind::kNone;  // kNone: the feature is missing
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<std::int64_t> int64s;
  std::size_t size() const;
};

// Reads the features named in `keys` from one serialized Example: result[i] is keys[i]'s list
// (kind kNone when missing). Other features are skipped without decoding their values. Malformed
// wire data → DataLossError naming the feature when it is inside one.
std::vector<FeatureList> read_feature_lists(std::string_view serialized, std::span<const std::string> keys);

// Every feature of one serialized Example, by name (the last entry of a repeated name wins).
std::map<std::string, FeatureList> read_all_feature_lists(std::string_view serialized);

// tf.train.Example(...).SerializeToString(): the features in name order, float and int64 values
// packed (example.proto declares them [packed = true]), one bytes field per bytes value; a list of
// kind kNone is written as an empty Feature (which readers treat as missing). Only the vector of
// each list's kind is written.
std::string serialize_example(const std::map<std::string, FeatureList>& features);

// ---- in a pipeline ----

// A Dataset::map function parsing one record per element into one tensor per name in `keys` (each
// must be in `features`, else InvalidArgumentError now), in the order of `keys`:
//   FixedLenFeature                  the dense tensor [shape...]
//   VarLenFeature, RaggedFeature     the values as a dense 1-D tensor [n] (n differs per record:
//                                    batch these with padded_batch, which pads with 0 / "")
// The input element is either (record) or (index, record) as enumerate() makes it, the index
// (an int64 scalar) then naming the record in error messages. A record is a scalar string tensor
// (what data::tfrecord_dataset yields) or a uint8 tensor [length] (the bytes; what it yielded before
// the string dtype). Errors as parse_single_example, thrown by the iterator's next() for that element.
//
//   auto ds = data::tfrecord_dataset(files).enumerate()
//                 .map(io::example_parser(spec, {"image", "label"}))
//                 .padded_batch(32);
MapFn example_parser(FeatureSpecs features, std::vector<std::string> keys);

}  // namespace chorus::data::io
