#include <chorus/data/io/example.h>

#include <algorithm>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::data::io {

using ::chorus::internal::str_cat;
using wire::ProtoReader;

// ---- the wire layer ----

std::string_view list_kind_name(ListKind kind) {
  switch (kind) {
    case ListKind::kBytes: return "bytes_list";
    case ListKind::kFloat: return "float_list";
    case ListKind::kInt64: return "int64_list";
    case ListKind::kNone: break;
  }
  return "no list";
}

std::size_t FeatureList::size() const {
  switch (kind) {
    case ListKind::kBytes: return bytes.size();
    case ListKind::kFloat: return floats.size();
    case ListKind::kInt64: return int64s.size();
    case ListKind::kNone: break;
  }
  return 0;
}

namespace {

// tf.train.Feature: oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List
// int64_list = 3; }, each list's values in its field 1. The first list decides, as TF's parser.
// Appends the values to out's vector of that kind (out.kind is left alone) and returns the kind.
ListKind decode_feature(std::string_view data, FeatureList& out) {
  ListKind kind = ListKind::kNone;
  ProtoReader r(data, "tf.train.Feature");
  while (r.next()) {
    const int field = r.field();
    if (field < 1 || field > 3 || kind != ListKind::kNone) {
      r.skip();
      continue;
    }
    kind = static_cast<ListKind>(field);
    ProtoReader list(r.read_bytes(), list_kind_name(kind));
    while (list.next()) {
      if (list.field() != 1)
        list.skip();
      else if (kind == ListKind::kBytes)
        out.bytes.emplace_back(list.read_bytes());
      else if (kind == ListKind::kFloat)
        wire::read_repeated_floats(list, out.floats);
      else
        wire::read_repeated_int64s(list, out.int64s);
    }
  }
  return kind;
}

FeatureList parse_feature(std::string_view data) {
  FeatureList out;
  out.kind = decode_feature(data, out);
  return out;
}

// Index of `key` in `keys`, or -1.
std::ptrdiff_t find_key(std::span<const std::string> keys, std::string_view key) {
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

// Calls visit(key, feature bytes) for each map entry (key 1, value 2, either order) of the
// Example, in wire order. Example { Features features = 1; }, Features { map<string, Feature>
// feature = 1; }: repeated occurrences of either merge, as protobuf (and TF's parser) do.
template <typename Visit>
void walk_entries(std::string_view serialized, Visit&& visit) {
  ProtoReader example(serialized, "tf.train.Example");
  while (example.next()) {
    if (example.field() != 1) {
      example.skip();
      continue;
    }
    ProtoReader features(example.read_bytes(), "tf.train.Features");
    while (features.next()) {
      if (features.field() != 1) {
        features.skip();
        continue;
      }
      ProtoReader entry(features.read_bytes(), "tf.train.Features map entry");
      std::string_view key, value;
      while (entry.next()) {
        if (entry.field() == 1)
          key = entry.read_bytes();
        else if (entry.field() == 2)
          value = entry.read_bytes();
        else
          entry.skip();
      }
      visit(key, value);
    }
  }
}

FeatureList parse_named_feature(std::string_view key, std::string_view value) {
  try {
    return parse_feature(value);
  } catch (const DataLossError& e) {
    throw DataLossError(str_cat("feature \"", key, "\": ", e.message()));
  }
}

}  // namespace

std::vector<FeatureList> read_feature_lists(std::string_view serialized, std::span<const std::string> keys) {
  std::vector<FeatureList> out(keys.size());
  walk_entries(serialized, [&](std::string_view key, std::string_view value) {
    const std::ptrdiff_t at = find_key(keys, key);
    if (at >= 0) out[static_cast<std::size_t>(at)] = parse_named_feature(key, value);  // the last entry wins
  });
  return out;
}

std::map<std::string, FeatureList> read_all_feature_lists(std::string_view serialized) {
  std::map<std::string, FeatureList> out;
  walk_entries(serialized, [&](std::string_view key, std::string_view value) {
    out[std::string(key)] = parse_named_feature(key, value);
  });
  return out;
}

std::string serialize_example(const std::map<std::string, FeatureList>& features) {
  wire::ProtoWriter all;
  for (const auto& [key, list] : features) {
    wire::ProtoWriter values, feature, entry;
    if (list.kind == ListKind::kBytes)
      for (const auto& b : list.bytes) values.add_bytes(1, b);
    if (list.kind == ListKind::kFloat) values.add_packed_floats(1, list.floats);
    if (list.kind == ListKind::kInt64) values.add_packed_varints(1, list.int64s);
    if (list.kind != ListKind::kNone) feature.add_message(static_cast<int>(list.kind), values);
    entry.add_bytes(1, key);
    entry.add_message(2, feature);
    all.add_message(1, entry);
  }
  wire::ProtoWriter example;
  example.add_message(1, all);
  return example.release();
}

// ---- specs → outputs ----

namespace {

ListKind kind_of(DType dtype) {
  if (dtype == DType::kFloat32) return ListKind::kFloat;
  if (dtype == DType::kInt64) return ListKind::kInt64;
  if (dtype == DType::kString) return ListKind::kBytes;
  return ListKind::kNone;
}

// A validated spec for one name.
struct Spec {
  std::string name;
  int form = 0;  // 0 FixedLen, 1 VarLen, 2 Ragged
  DType dtype = DType::kFloat32;
  Shape shape;                      // FixedLen
  std::int64_t count = 0;           // FixedLen: shape.num_elements()
  std::optional<FeatureList> dflt;  // FixedLen default, as a list of its kind
};

Spec validate(const std::string& name, const FeatureSpec& spec, const char* op) {
  Spec s;
  s.name = name;
  s.form = static_cast<int>(spec.index());
  std::visit([&](const auto& f) { s.dtype = f.dtype; }, spec);
  CHORUS_REQUIRE(kind_of(s.dtype) != ListKind::kNone, InvalidArgumentError, op, ": feature \"", name, "\": dtype ",
                 dtype_name(s.dtype), " is not one of float32, int64, string (the kinds of a tf.train.Feature)");
  const auto* fixed = std::get_if<FixedLenFeature>(&spec);
  if (!fixed) return s;
  s.shape = fixed->shape;  // Shape itself rejects negative dimensions
  s.count = s.shape.num_elements();
  if (!fixed->default_value) return s;
  const Tensor& d = *fixed->default_value;
  CHORUS_REQUIRE(d.defined() && d.dtype() == s.dtype && d.num_elements() == s.count, InvalidArgumentError, op,
                 ": feature \"", name, "\": default_value must hold ", s.count, " ", dtype_name(s.dtype),
                 " values (shape ", s.shape.to_string(), "); got ",
                 d.defined() ? str_cat(dtype_name(d.dtype()), " of shape ", d.shape().to_string()) : "undefined");
  FeatureList l;
  l.kind = kind_of(s.dtype);
  if (l.kind == ListKind::kFloat) l.floats = d.to_vector<float>();
  if (l.kind == ListKind::kInt64) l.int64s = d.to_vector<std::int64_t>();
  if (l.kind == ListKind::kBytes) l.bytes = d.to_vector<std::string>();
  s.dflt = std::move(l);
  return s;
}

// The values of one feature across the batch, in the spec's dtype: records decode straight into
// `values` (its vector of the spec's kind).
struct Column {
  FeatureList values;
  std::vector<std::int64_t> indices;    // VarLen: (record, position) pairs
  std::vector<std::int64_t> splits{0};  // values so far after each record
  std::int64_t longest = 0;

  std::size_t count(ListKind kind) const {
    return kind == ListKind::kFloat   ? values.floats.size()
           : kind == ListKind::kInt64 ? values.int64s.size()
                                      : values.bytes.size();
  }
  void append(const FeatureList& l) {
    values.floats.insert(values.floats.end(), l.floats.begin(), l.floats.end());
    values.int64s.insert(values.int64s.end(), l.int64s.begin(), l.int64s.end());
    values.bytes.insert(values.bytes.end(), l.bytes.begin(), l.bytes.end());
  }
  // The values as a tensor (the strings are moved into it: call once).
  Tensor tensor(DType dtype, const Shape& shape) {
    if (dtype == DType::kFloat32) return Tensor::from_vector(values.floats, shape);
    if (dtype == DType::kInt64) return Tensor::from_vector(values.int64s, shape);
    CHORUS_ENFORCE(shape.num_elements() == static_cast<std::int64_t>(values.bytes.size()), shape.to_string());
    Tensor t = Tensor::empty(shape, DType::kString);
    std::move(values.bytes.begin(), values.bytes.end(), t.mutable_strings().begin());
    return t;
  }
  std::int64_t size() const { return splits.back(); }
};

std::string with_article(ListKind kind) {
  return str_cat(kind == ListKind::kInt64 ? "an " : "a ", list_kind_name(kind));
}

std::string where(const char* op, const Spec& s, std::size_t record, bool single) {
  return single ? str_cat(op, ": feature \"", s.name, "\"")
                : str_cat(op, ": feature \"", s.name, "\" of record ", record);
}

// Decodes record `record`'s Feature for spec `s` into its column; returns the kind found
// (kNone: absent or no list). Malformed bytes → DataLossError naming the record and the feature.
ListKind decode(const Spec& s, std::string_view feature, Column& c, std::size_t record, const char* op, bool single) {
  try {
    return decode_feature(feature, c.values);
  } catch (const DataLossError& e) {
    throw DataLossError(single ? str_cat(op, ": feature \"", s.name, "\": ", e.message())
                               : str_cat(op, ": record ", record, ": feature \"", s.name, "\": ", e.message()));
  }
}

// Checks what decode() appended (n values of kind `got`) against spec `s` and completes the row.
void finish_row(const Spec& s, ListKind got, std::int64_t n, Column& c, std::size_t record, const char* op,
                bool single) {
  const ListKind want = kind_of(s.dtype);
  if (got != ListKind::kNone && got != want)
    throw InvalidArgumentError(str_cat(where(op, s, record, single), ": data types don't match: the Example holds ",
                                       with_article(got), ", the spec asks for ", dtype_name(s.dtype), " (",
                                       with_article(want), ")"));
  if (s.form == 0) {
    if (got == ListKind::kNone) {
      CHORUS_REQUIRE(s.dflt.has_value(), InvalidArgumentError, where(op, s, record, single),
                     " (data type: ", dtype_name(s.dtype),
                     ") is required but could not be found, and its FixedLenFeature has no ", "default_value");
      c.append(*s.dflt);
    } else {
      CHORUS_REQUIRE(n == s.count, InvalidArgumentError, where(op, s, record, single), ": ", n, " ",
                     dtype_name(s.dtype), " values but FixedLenFeature shape ", s.shape.to_string(), " needs ",
                     s.count);
    }
    c.splits.push_back(c.splits.back() + s.count);
    return;
  }
  if (s.form == 1)
    for (std::int64_t k = 0; k < n; ++k) {
      c.indices.push_back(static_cast<std::int64_t>(record));
      c.indices.push_back(k);
    }
  c.splits.push_back(c.splits.back() + n);
  c.longest = std::max(c.longest, n);
}

ParsedFeature finish(const Spec& s, Column& c, std::int64_t batch, bool single) {
  if (s.form == 0) {
    std::vector<std::int64_t> dims = s.shape.dims();
    if (!single) dims.insert(dims.begin(), batch);
    return c.tensor(s.dtype, Shape(std::move(dims)));
  }
  Tensor values = c.tensor(s.dtype, Shape{c.size()});
  if (s.form == 2) {
    if (single) return values;
    return RaggedTensor(std::move(values), Tensor::from_vector(c.splits));
  }
  if (single) {  // drop the record column of the (record, position) pairs
    std::vector<std::int64_t> positions;
    for (std::size_t i = 1; i < c.indices.size(); i += 2) positions.push_back(c.indices[i]);
    return SparseTensor(Tensor::from_vector(positions, Shape{c.size(), 1}), std::move(values), Shape{c.longest});
  }
  return SparseTensor(Tensor::from_vector(c.indices, Shape{c.size(), 2}), std::move(values), Shape{batch, c.longest});
}

// After the first record: room for `batch` records like it (a guess; the vectors still grow as needed).
void reserve_like_first(std::vector<Column>& columns, std::size_t batch) {
  for (Column& c : columns) {
    c.values.floats.reserve(c.values.floats.size() * batch);
    c.values.int64s.reserve(c.values.int64s.size() * batch);
    c.values.bytes.reserve(c.values.bytes.size() * batch);
    c.indices.reserve(c.indices.size() * batch);
    c.splits.reserve(batch + 1);
  }
}

ParsedFeatures parse(std::span<const std::string_view> records, const FeatureSpecs& features, const char* op,
                     bool single) {
  std::vector<Spec> specs;
  std::vector<std::string> keys;
  for (const auto& [name, spec] : features) {
    specs.push_back(validate(name, spec, op));
    keys.push_back(name);
  }
  std::vector<Column> columns(specs.size());
  std::vector<std::string_view> found(specs.size());
  std::vector<char> present(specs.size());
  std::vector<ListKind> kinds(specs.size());
  std::vector<std::int64_t> counts(specs.size());
  for (std::size_t r = 0; r < records.size(); ++r) {
    std::fill(present.begin(), present.end(), 0);
    try {
      walk_entries(records[r], [&](std::string_view key, std::string_view value) {
        const std::ptrdiff_t at = find_key(keys, key);
        if (at < 0) return;
        found[static_cast<std::size_t>(at)] = value;  // the last entry wins
        present[static_cast<std::size_t>(at)] = 1;
      });
    } catch (const DataLossError& e) {
      throw DataLossError(single ? str_cat(op, ": ", e.message()) : str_cat(op, ": record ", r, ": ", e.message()));
    }
    // Every feature is decoded before any is checked: a corrupt record is a DataLossError whatever
    // the spec's order.
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const ListKind want = kind_of(specs[k].dtype);
      const std::size_t before = columns[k].count(want);
      kinds[k] = present[k] ? decode(specs[k], found[k], columns[k], r, op, single) : ListKind::kNone;
      counts[k] = static_cast<std::int64_t>(columns[k].count(want) - before);
    }
    for (std::size_t k = 0; k < specs.size(); ++k) finish_row(specs[k], kinds[k], counts[k], columns[k], r, op, single);
    if (r == 0) reserve_like_first(columns, records.size());
  }
  ParsedFeatures out;
  for (std::size_t k = 0; k < specs.size(); ++k)
    out.features.emplace(specs[k].name,
                         finish(specs[k], columns[k], static_cast<std::int64_t>(records.size()), single));
  return out;
}

template <typename T>
const T& get_as(const ParsedFeatures& p, const std::string& name, const char* want) {
  const auto it = p.features.find(name);
  CHORUS_REQUIRE(it != p.features.end(), InvalidArgumentError, "ParsedFeatures: no feature \"", name,
                 "\" (it was not in the spec)");
  const T* v = std::get_if<T>(&it->second);
  static const char* const kNames[] = {"a dense Tensor", "a SparseTensor", "a RaggedTensor"};
  CHORUS_REQUIRE(v != nullptr, InvalidArgumentError, "ParsedFeatures: feature \"", name, "\" is ",
                 kNames[it->second.index()], ", not ", want);
  return *v;
}

}  // namespace

const Tensor& ParsedFeatures::dense(const std::string& name) const {
  return get_as<Tensor>(*this, name, "a dense Tensor");
}
const SparseTensor& ParsedFeatures::sparse(const std::string& name) const {
  return get_as<SparseTensor>(*this, name, "a SparseTensor");
}
const RaggedTensor& ParsedFeatures::ragged(const std::string& name) const {
  return get_as<RaggedTensor>(*this, name, "a RaggedTensor");
}

ParsedFeatures parse_single_example(std::string_view serialized, const FeatureSpecs& features) {
  const std::string_view one[] = {serialized};
  return parse(one, features, "parse_single_example", true);
}

ParsedFeatures parse_example(std::span<const std::string> serialized, const FeatureSpecs& features) {
  std::vector<std::string_view> views(serialized.begin(), serialized.end());
  return parse(views, features, "parse_example", false);
}

ParsedFeatures parse_single_example(const Tensor& serialized, const FeatureSpecs& features) {
  CHORUS_REQUIRE(serialized.defined() && serialized.dtype() == DType::kString && serialized.shape().rank() == 0,
                 InvalidArgumentError, "parse_single_example: serialized must be a scalar string tensor; got ",
                 serialized.defined() ? str_cat(dtype_name(serialized.dtype()), " ", serialized.shape().to_string())
                                      : std::string("an undefined tensor"));
  return parse_single_example(serialized.strings()[0], features);
}

ParsedFeatures parse_example(const Tensor& serialized, const FeatureSpecs& features) {
  CHORUS_REQUIRE(serialized.defined() && serialized.dtype() == DType::kString && serialized.shape().rank() == 1,
                 InvalidArgumentError, "parse_example: serialized must be a 1-D string tensor [batch]; got ",
                 serialized.defined() ? str_cat(dtype_name(serialized.dtype()), " ", serialized.shape().to_string())
                                      : std::string("an undefined tensor"));
  return parse_example(serialized.strings(), features);
}

// ---- in a pipeline ----

namespace {

// A record component: a scalar string tensor, or the uint8 [length] form older readers yield.
std::string record_bytes(const Tensor& t) {
  if (t.dtype() == DType::kString && t.shape().rank() == 0) return t.strings()[0];
  CHORUS_REQUIRE(t.dtype() == DType::kUInt8 && t.shape().rank() == 1, InvalidArgumentError,
                 "example_parser: a record must be a scalar string tensor (or uint8 [length]); got ",
                 dtype_name(t.dtype()), " ", t.shape().to_string());
  const std::vector<std::uint8_t> bytes = t.to_vector<std::uint8_t>();
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

MapFn example_parser(FeatureSpecs features, std::vector<std::string> keys) {
  FeatureSpecs wanted;  // only the features asked for are decoded
  for (const auto& k : keys) {
    const auto it = features.find(k);
    CHORUS_REQUIRE(it != features.end(), InvalidArgumentError, "example_parser: key \"", k,
                   "\" is not in the feature spec");
    (void)validate(k, it->second, "example_parser");
    wanted.emplace(k, it->second);
  }
  return [features = std::move(wanted), keys = std::move(keys)](const Element& e) -> Element {
    CHORUS_REQUIRE(e.size() == 1 || e.size() == 2, InvalidArgumentError,
                   "example_parser: an element must be (record) or (index, record); got ", e.size(), " components");
    const std::string record = record_bytes(e.back());
    ParsedFeatures p;
    try {
      p = parse_single_example(record, features);
    } catch (const Error& err) {
      if (e.size() == 1) throw;
      const std::string msg = str_cat("record ", e[0].item<std::int64_t>(), ": ", err.message());
      if (dynamic_cast<const DataLossError*>(&err)) throw DataLossError(msg);
      if (dynamic_cast<const InvalidArgumentError*>(&err)) throw InvalidArgumentError(msg);
      throw;
    }
    Element out;
    for (const auto& k : keys) {
      const ParsedFeature& f = p.features.at(k);
      if (const auto* sp = std::get_if<SparseTensor>(&f))
        out.push_back(sp->values());
      else
        out.push_back(std::get<Tensor>(f));
    }
    return out;
  };
}

}  // namespace chorus::data::io
