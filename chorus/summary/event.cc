#include <chorus/summary/event.h>

#include <cstring>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::summary {

using wire::ProtoReader;
using wire::ProtoWriter;

// ---- TensorProto ----

std::int64_t TensorProto::num_elements() const {
  std::int64_t n = 1;
  if (!shape) return n;
  for (std::int64_t d : *shape) {
    if (d < 0) throw DataLossError(internal::str_cat("tensor shape has a negative dimension ", d));
    if (d != 0 && n > INT64_MAX / d) throw DataLossError("tensor shape's element count overflows int64");
    n *= d;
  }
  return n;
}

namespace {

template <typename T>
void decode_content(const std::string& content, std::vector<double>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, content.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, float16>) {
      out[i] = static_cast<float>(v);
    } else {
      out[i] = static_cast<double>(v);
    }
  }
}

template <typename T>
void fill_from_field(const std::vector<T>& field, std::vector<double>& out, const char* name) {
  if (field.size() > out.size())
    throw DataLossError(
        internal::str_cat("tensor has ", field.size(), " values in ", name, " but its shape holds ", out.size()));
  // As TF's Tensor::FromProto: fewer values than elements repeat the last one; none gives zeros.
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = field.empty() ? 0.0 : static_cast<double>(field[std::min(i, field.size() - 1)]);
}

std::size_t numeric_size(int dtype) {
  switch (dtype) {
    case tf_dtype::kFloat:
    case tf_dtype::kInt32: return 4;
    case tf_dtype::kDouble:
    case tf_dtype::kInt64: return 8;
    case tf_dtype::kHalf:
    case tf_dtype::kInt16:
    case tf_dtype::kUInt16: return 2;
    case tf_dtype::kUInt8:
    case tf_dtype::kInt8:
    case tf_dtype::kBool: return 1;
    default: return 0;
  }
}

}  // namespace

std::vector<double> TensorProto::to_doubles() const {
  const std::size_t elem = numeric_size(dtype);
  CHORUS_REQUIRE(elem != 0, InvalidArgumentError, "TensorProto::to_doubles: DataType ", dtype,
                 " has no numeric reading (valid: FLOAT 1, DOUBLE 2, INT32 3, UINT8 4, INT16 5, INT8 6, INT64 9, BOOL "
                 "10, UINT16 17, HALF 19)");
  std::vector<double> out(static_cast<std::size_t>(num_elements()));
  if (!tensor_content.empty()) {
    if (tensor_content.size() != out.size() * elem)
      throw DataLossError(internal::str_cat("tensor_content has ", tensor_content.size(), " bytes; dtype ", dtype,
                                            " with ", out.size(), " elements needs ", out.size() * elem));
    switch (dtype) {
      case tf_dtype::kFloat: decode_content<float>(tensor_content, out); break;
      case tf_dtype::kDouble: decode_content<double>(tensor_content, out); break;
      case tf_dtype::kHalf: decode_content<float16>(tensor_content, out); break;
      case tf_dtype::kInt32: decode_content<std::int32_t>(tensor_content, out); break;
      case tf_dtype::kInt64: decode_content<std::int64_t>(tensor_content, out); break;
      case tf_dtype::kInt16: decode_content<std::int16_t>(tensor_content, out); break;
      case tf_dtype::kUInt16: decode_content<std::uint16_t>(tensor_content, out); break;
      case tf_dtype::kInt8: decode_content<std::int8_t>(tensor_content, out); break;
      case tf_dtype::kUInt8:
      case tf_dtype::kBool: decode_content<std::uint8_t>(tensor_content, out); break;
    }
    return out;
  }
  switch (dtype) {
    case tf_dtype::kFloat: fill_from_field(float_val, out, "float_val"); break;
    case tf_dtype::kDouble: fill_from_field(double_val, out, "double_val"); break;
    case tf_dtype::kInt64: fill_from_field(int64_val, out, "int64_val"); break;
    case tf_dtype::kBool: fill_from_field(bool_val, out, "bool_val"); break;
    case tf_dtype::kHalf:
      throw InvalidArgumentError(
          "TensorProto::to_doubles: HALF values in half_val are not decoded (only tensor_content)");
    default: fill_from_field(int_val, out, "int_val"); break;  // INT32, UINT8, INT16, INT8, UINT16
  }
  return out;
}

const std::string& SummaryValue::plugin_name() const {
  static const std::string kEmpty;
  return metadata ? metadata->plugin_data.plugin_name : kEmpty;
}

// ---- encoding ----

namespace {

std::string encode_metadata(const SummaryMetadata& m) {
  ProtoWriter plugin;
  if (!m.plugin_data.plugin_name.empty()) plugin.add_bytes(1, m.plugin_data.plugin_name);
  if (!m.plugin_data.content.empty()) plugin.add_bytes(2, m.plugin_data.content);
  ProtoWriter w;
  w.add_message(1, plugin);  // always present, as TF writes it
  if (!m.display_name.empty()) w.add_bytes(2, m.display_name);
  if (!m.summary_description.empty()) w.add_bytes(3, m.summary_description);
  if (m.data_class != DataClass::kUnknown) w.add_varint(4, static_cast<std::uint64_t>(m.data_class));
  return w.release();
}

std::string encode_histo(const HistogramProto& h) {
  ProtoWriter w;
  if (h.min != 0) w.add_double(1, h.min);
  if (h.max != 0) w.add_double(2, h.max);
  if (h.num != 0) w.add_double(3, h.num);
  if (h.sum != 0) w.add_double(4, h.sum);
  if (h.sum_squares != 0) w.add_double(5, h.sum_squares);
  w.add_packed_doubles(6, h.bucket_limit);
  w.add_packed_doubles(7, h.bucket);
  return w.release();
}

std::string encode_image(const SummaryImage& im) {
  ProtoWriter w;
  if (im.height != 0) w.add_int64(1, im.height);
  if (im.width != 0) w.add_int64(2, im.width);
  if (im.colorspace != 0) w.add_int64(3, im.colorspace);
  if (!im.encoded_image_string.empty()) w.add_bytes(4, im.encoded_image_string);
  return w.release();
}

}  // namespace

std::string encode_tensor(const TensorProto& t) {
  ProtoWriter w;
  if (t.dtype != 0) w.add_int64(1, t.dtype);
  if (t.shape) {
    ProtoWriter shape;
    for (std::int64_t d : *t.shape) {
      ProtoWriter dim;
      if (d != 0) dim.add_int64(1, d);
      shape.add_message(2, dim);
    }
    w.add_message(2, shape);
  }
  if (!t.tensor_content.empty()) w.add_bytes(4, t.tensor_content);
  w.add_packed_floats(5, t.float_val);
  w.add_packed_doubles(6, t.double_val);
  w.add_packed_varints(7, t.int_val);
  for (const std::string& s : t.string_val) w.add_bytes(8, s);
  w.add_packed_varints(10, t.int64_val);
  w.add_packed_varints(11, t.bool_val);
  return w.release();
}

std::string encode_summary_value(const SummaryValue& v) {
  const int set =
      int(v.simple_value.has_value()) + int(v.image.has_value()) + int(v.histo.has_value()) + int(v.tensor.has_value());
  CHORUS_REQUIRE(set <= 1, InvalidArgumentError, "Summary.Value '", v.tag, "' sets ", set,
                 " of simple_value/image/histo/tensor; the oneof allows at most one");
  ProtoWriter w;
  if (!v.tag.empty()) w.add_bytes(1, v.tag);
  if (v.simple_value) w.add_float(2, *v.simple_value);
  if (v.image) w.add_bytes(4, encode_image(*v.image));
  if (v.histo) w.add_bytes(5, encode_histo(*v.histo));
  if (v.tensor) w.add_bytes(8, encode_tensor(*v.tensor));
  if (v.metadata) w.add_bytes(9, encode_metadata(*v.metadata));
  return w.release();
}

std::string encode_event(const Event& e) {
  const int set = int(e.file_version.has_value()) + int(e.graph_def.has_value()) + int(e.summary.has_value()) +
                  int(e.session_log.has_value());
  CHORUS_REQUIRE(set <= 1, InvalidArgumentError, "Event sets ", set,
                 " of file_version/graph_def/summary/session_log; the oneof `what` allows at most one");
  ProtoWriter w;
  if (e.wall_time != 0) w.add_double(1, e.wall_time);
  if (e.step != 0) w.add_int64(2, e.step);
  if (e.file_version) w.add_bytes(3, *e.file_version);
  if (e.graph_def) w.add_bytes(4, *e.graph_def);
  if (e.summary) {
    ProtoWriter s;
    for (const SummaryValue& v : e.summary->value) s.add_bytes(1, encode_summary_value(v));
    w.add_message(5, s);
  }
  if (e.session_log) {
    ProtoWriter s;
    if (e.session_log->status != SessionStatus::kUnspecified)
      s.add_varint(1, static_cast<std::uint64_t>(e.session_log->status));
    if (!e.session_log->checkpoint_path.empty()) s.add_bytes(2, e.session_log->checkpoint_path);
    if (!e.session_log->msg.empty()) s.add_bytes(3, e.session_log->msg);
    w.add_message(7, s);
  }
  return w.release();
}

// ---- decoding ----

namespace {

std::vector<std::int64_t> decode_shape(std::string_view bytes) {
  std::vector<std::int64_t> dims;
  ProtoReader r(bytes, "TensorShapeProto");
  while (r.next()) {
    if (r.field() == 2) {
      std::int64_t size = 0;
      ProtoReader d(r.read_bytes(), "TensorShapeProto.Dim");
      while (d.next()) {
        if (d.field() == 1)
          size = d.read_int64();
        else
          d.skip();
      }
      dims.push_back(size);
    } else {
      r.skip();
    }
  }
  return dims;
}

SummaryMetadata decode_metadata(std::string_view bytes) {
  SummaryMetadata m;
  ProtoReader r(bytes, "SummaryMetadata");
  while (r.next()) {
    switch (r.field()) {
      case 1: {
        ProtoReader p(r.read_bytes(), "SummaryMetadata.PluginData");
        while (p.next()) {
          if (p.field() == 1)
            m.plugin_data.plugin_name = std::string(p.read_bytes());
          else if (p.field() == 2)
            m.plugin_data.content = std::string(p.read_bytes());
          else
            p.skip();
        }
        break;
      }
      case 2: m.display_name = std::string(r.read_bytes()); break;
      case 3: m.summary_description = std::string(r.read_bytes()); break;
      case 4: m.data_class = static_cast<DataClass>(r.read_varint()); break;
      default: r.skip();
    }
  }
  return m;
}

HistogramProto decode_histo(std::string_view bytes) {
  HistogramProto h;
  ProtoReader r(bytes, "HistogramProto");
  while (r.next()) {
    switch (r.field()) {
      case 1: h.min = r.read_double(); break;
      case 2: h.max = r.read_double(); break;
      case 3: h.num = r.read_double(); break;
      case 4: h.sum = r.read_double(); break;
      case 5: h.sum_squares = r.read_double(); break;
      case 6: wire::read_repeated_doubles(r, h.bucket_limit); break;
      case 7: wire::read_repeated_doubles(r, h.bucket); break;
      default: r.skip();
    }
  }
  return h;
}

SummaryImage decode_image(std::string_view bytes) {
  SummaryImage im;
  ProtoReader r(bytes, "Summary.Image");
  while (r.next()) {
    switch (r.field()) {
      case 1: im.height = static_cast<int>(r.read_int64()); break;
      case 2: im.width = static_cast<int>(r.read_int64()); break;
      case 3: im.colorspace = static_cast<int>(r.read_int64()); break;
      case 4: im.encoded_image_string = std::string(r.read_bytes()); break;
      default: r.skip();
    }
  }
  return im;
}

Summary decode_summary(std::string_view bytes) {
  Summary s;
  ProtoReader r(bytes, "Summary");
  while (r.next()) {
    if (r.field() == 1)
      s.value.push_back(decode_summary_value(r.read_bytes()));
    else
      r.skip();
  }
  return s;
}

SessionLog decode_session_log(std::string_view bytes) {
  SessionLog s;
  ProtoReader r(bytes, "SessionLog");
  while (r.next()) {
    switch (r.field()) {
      case 1: s.status = static_cast<SessionStatus>(r.read_varint()); break;
      case 2: s.checkpoint_path = std::string(r.read_bytes()); break;
      case 3: s.msg = std::string(r.read_bytes()); break;
      default: r.skip();
    }
  }
  return s;
}

}  // namespace

TensorProto decode_tensor(std::string_view bytes) {
  TensorProto t;
  ProtoReader r(bytes, "TensorProto");
  while (r.next()) {
    switch (r.field()) {
      case 1: t.dtype = static_cast<int>(r.read_int64()); break;
      case 2: t.shape = decode_shape(r.read_bytes()); break;
      case 4: t.tensor_content = std::string(r.read_bytes()); break;
      case 5: wire::read_repeated_floats(r, t.float_val); break;
      case 6: wire::read_repeated_doubles(r, t.double_val); break;
      case 7: wire::read_repeated_int64s(r, t.int_val); break;
      case 8: t.string_val.emplace_back(r.read_bytes()); break;
      case 10: wire::read_repeated_int64s(r, t.int64_val); break;
      case 11: wire::read_repeated_int64s(r, t.bool_val); break;
      default: r.skip();
    }
  }
  return t;
}

SummaryValue decode_summary_value(std::string_view bytes) {
  SummaryValue v;
  ProtoReader r(bytes, "Summary.Value");
  while (r.next()) {
    switch (r.field()) {
      case 1: v.tag = std::string(r.read_bytes()); break;
      case 2:
      case 3:
      case 4:
      case 5:
      case 6:
      case 8:
        // `value` is a oneof (simple_value, obsolete_old_style_histogram, image, histo, audio,
        // tensor): a later member replaces an earlier one, as in protobuf, so a decoded value
        // re-encodes (found by tests/fuzz/event_file_fuzz.cc, regressions/event_file_fuzz/).
        v.simple_value.reset();
        v.image.reset();
        v.histo.reset();
        v.tensor.reset();
        if (r.field() == 2)
          v.simple_value = r.read_float();
        else if (r.field() == 4)
          v.image = decode_image(r.read_bytes());
        else if (r.field() == 5)
          v.histo = decode_histo(r.read_bytes());
        else if (r.field() == 8)
          v.tensor = decode_tensor(r.read_bytes());
        else
          r.skip();
        break;
      case 9: v.metadata = decode_metadata(r.read_bytes()); break;
      default: r.skip();
    }
  }
  return v;
}

Event decode_event(std::string_view bytes) {
  Event e;
  ProtoReader r(bytes, "Event");
  while (r.next()) {
    const int f = r.field();
    switch (f) {
      case 1: e.wall_time = r.read_double(); break;
      case 2: e.step = r.read_int64(); break;
      case 3:
      case 4:
      case 5:
      case 6:
      case 7:
      case 8:
      case 9:
        // `what` is a oneof: a later member replaces an earlier one, as in protobuf, so a decoded
        // Event holds at most one and re-encodes (encode_event refuses two; found by
        // tests/fuzz/event_file_fuzz.cc, regressions/event_file_fuzz/).
        e.file_version.reset();
        e.graph_def.reset();
        e.summary.reset();
        e.session_log.reset();
        e.what = f;
        if (f == 3)
          e.file_version = std::string(r.read_bytes());
        else if (f == 4)
          e.graph_def = std::string(r.read_bytes());
        else if (f == 5)
          e.summary = decode_summary(r.read_bytes());
        else if (f == 7)
          e.session_log = decode_session_log(r.read_bytes());
        else
          r.skip();
        break;
      default: r.skip();
    }
  }
  return e;
}

}  // namespace chorus::summary
