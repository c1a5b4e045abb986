// The messages of a TensorBoard event file, as plain structs, with an encoder and a decoder:
// tensorflow.Event, Summary, Summary.Value, SummaryMetadata, TensorProto, HistogramProto,
// Summary.Image, SessionLog (field numbers in docs/formats.md A3–A6; the .proto files are
// tensorboard/compat/proto/{event,summary,tensor,tensor_shape,types}.proto).
//
// Only the fields chorus writes or a reader of TF-written files needs are modelled; the decoder
// skips every other field (run metadata, audio, ...), as a protobuf parser does, and
// notes which `oneof what` field an Event carried (Event::what).
//
// encode_event writes proto3 canonical bytes in field-number order and omits zero / empty
// scalars (step 0, no metadata content), so our events are byte-for-byte what TF2 writes for the
// same content (checked against docs/formats.md A8's record in tests/summary/event_test.cc).
// decode_event accepts any valid encoding (packed or unpacked repeated fields, any field order)
// and throws DataLossError on malformed bytes. Both are pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::summary {

// tensorflow.DataType numbers (types.proto); the ones chorus writes or converts.
namespace tf_dtype {
inline constexpr int kInvalid = 0, kFloat = 1, kDouble = 2, kInt32 = 3, kUInt8 = 4, kInt16 = 5, kInt8 = 6, kString = 7,
                     kInt64 = 9, kBool = 10, kBFloat16 = 14, kUInt16 = 17, kHalf = 19;
}

// SummaryMetadata.data_class.
enum class DataClass : int { kUnknown = 0, kScalar = 1, kTensor = 2, kBlobSequence = 3 };

struct TensorProto {
  int dtype = tf_dtype::kInvalid;
  // TensorShapeProto dims. nullopt: the message had no tensor_shape (TensorBoard reads rank 0).
  // Encoded as an empty-but-present tensor_shape when the vector is empty (what TF writes for a
  // scalar: `12 00`).
  std::optional<std::vector<std::int64_t>> shape;
  std::string tensor_content;           // raw little-endian elements, row-major (numeric tensors)
  std::vector<float> float_val;         // 5
  std::vector<double> double_val;       // 6
  std::vector<std::int64_t> int_val;    // 7 (int32, uint8, int16, int8, uint16 values)
  std::vector<std::string> string_val;  // 8
  std::vector<std::int64_t> int64_val;  // 10
  std::vector<std::int64_t> bool_val;   // 11

  // Product of the shape's dims (1 for rank 0 or no shape).
  std::int64_t num_elements() const;
  // Every element as a double, row-major, for FLOAT, DOUBLE, HALF, INT32, UINT8, INT16, INT8,
  // UINT16, INT64, BOOL — from tensor_content when it is set, else from the typed field (a typed field
  // holding one value for a larger shape is broadcast, as TF does). Throws DataLossError when
  // the byte count or value count does not fit the shape, InvalidArgumentError for a dtype with
  // no numeric reading (STRING, ...).
  std::vector<double> to_doubles() const;
};

struct PluginData {
  std::string plugin_name;  // 1: "scalars", "histograms", "images", "text", ...
  std::string content;      // 2: the plugin's own serialized proto (empty for version 0)
};

struct SummaryMetadata {
  PluginData plugin_data;                      // 1
  std::string display_name;                    // 2
  std::string summary_description;             // 3
  DataClass data_class = DataClass::kUnknown;  // 4 (omitted when unknown, as TF2's writers do)
};

// Legacy `histo` (Summary.Value field 5). Bucket i spans (bucket_limit[i-1], bucket_limit[i]].
struct HistogramProto {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

// Legacy `image` (Summary.Value field 4).
struct SummaryImage {
  int height = 0, width = 0;
  int colorspace = 0;  // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  std::string encoded_image_string;
};

struct SummaryValue {
  std::string tag;                          // 1
  std::optional<SummaryMetadata> metadata;  // 9
  // oneof value: at most one is set.
  std::optional<float> simple_value;    // 2
  std::optional<SummaryImage> image;    // 4
  std::optional<HistogramProto> histo;  // 5
  std::optional<TensorProto> tensor;    // 8

  // The metadata's plugin name, "" without metadata.
  const std::string& plugin_name() const;
};

struct Summary {
  std::vector<SummaryValue> value;
};

// SessionLog.status.
enum class SessionStatus : int { kUnspecified = 0, kStart = 1, kStop = 2, kCheckpoint = 3 };

struct SessionLog {
  SessionStatus status = SessionStatus::kUnspecified;  // 1
  std::string checkpoint_path;                         // 2
  std::string msg;                                     // 3
};

// Event.what field numbers.
namespace event_what {
inline constexpr int kNone = 0, kFileVersion = 3, kGraphDef = 4, kSummary = 5, kLogMessage = 6, kSessionLog = 7,
                     kTaggedRunMetadata = 8, kMetaGraphDef = 9;
}

inline constexpr std::string_view kFileVersion = "brain.Event:2";

struct Event {
  double wall_time = 0;   // 1, seconds since the epoch
  std::int64_t step = 0;  // 2
  // oneof what: set at most one of these when encoding.
  std::optional<std::string> file_version;  // 3
  std::optional<std::string> graph_def;     // 4: a serialized tensorflow.GraphDef (summary/graph_def.h)
  std::optional<Summary> summary;           // 5
  std::optional<SessionLog> session_log;    // 7
  // Decoding: the number of the `oneof what` field present (event_what::*; the last one wins, as
  // in protobuf), kNone when absent. Ignored by encode_event.
  int what = event_what::kNone;
};

// Serialized tensorflow.Event. Throws InvalidArgumentError when more than one `what` is set.
std::string encode_event(const Event& event);
// Parses a serialized tensorflow.Event; DataLossError on malformed bytes.
Event decode_event(std::string_view bytes);

// The pieces, for tests and for writers of other messages.
std::string encode_summary_value(const SummaryValue& value);
std::string encode_tensor(const TensorProto& tensor);
SummaryValue decode_summary_value(std::string_view bytes);
TensorProto decode_tensor(std::string_view bytes);

}  // namespace chorus::summary
