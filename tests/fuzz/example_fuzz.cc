// libFuzzer target: the generic tf.train.Example parser (data/io/example.h).
// Input: one selector byte, then one serialized Example.
// Contract: malformed wire data → DataLossError; a spec the record does not satisfy →
// InvalidArgumentError; nothing else.
// Oracles on accepted input:
//   - round trip: serialize_example(read_all_feature_lists(x)) reads back to the same lists
//     (float bits compared, so NaN payloads count), and serializes to the same bytes again;
//   - read_feature_lists(x, keys) agrees with read_all_feature_lists(x) for those keys;
//   - parse_single_example(x, spec) and parse_example({x, x}, spec) agree: the same error class, or
//     per feature the same values (dense: both batch rows equal the single tensor; VarLen: nnz twice
//     the single's, dense_shape [2, n]; Ragged: splits [0, n, 2n]), and the values equal the lists.
// The spec is built from the features the record holds: the selector's bits choose, per feature,
// FixedLen (shape [n], or [n + 1] to exercise the count error) / VarLen / Ragged, the dtype of its
// kind (or another kind: a type mismatch), and whether a missing "zz" FixedLen has a default.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/data/io/example.h>

using chorus::fuzz::check;
namespace io = chorus::data::io;
using chorus::DType;
using chorus::Shape;
using chorus::Tensor;

namespace {

bool same_list(const io::FeatureList& a, const io::FeatureList& b) {
  if (a.kind != b.kind || a.bytes != b.bytes || a.int64s != b.int64s || a.floats.size() != b.floats.size())
    return false;
  return a.floats.empty() || std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float)) == 0;
}

// The values of a tensor as the list they came from (numeric kinds).
io::FeatureList as_list(const Tensor& t) {
  io::FeatureList l;
  if (t.dtype() == DType::kFloat32) {
    l.kind = io::ListKind::kFloat;
    l.floats = t.to_vector<float>();
  } else if (t.dtype() == DType::kString) {
    l.kind = io::ListKind::kBytes;
    l.bytes = t.to_vector<std::string>();
  } else {
    l.kind = io::ListKind::kInt64;
    l.int64s = t.to_vector<std::int64_t>();
  }
  return l;
}

io::FeatureSpecs spec_for(const std::map<std::string, io::FeatureList>& lists, std::uint8_t selector) {
  io::FeatureSpecs spec;
  unsigned bit = 0;
  const auto take = [&](unsigned n) {
    const unsigned v = (selector >> (bit % 8)) & ((1u << n) - 1);
    bit += n;
    return v;
  };
  for (const auto& [name, list] : lists) {
    if (list.kind == io::ListKind::kNone) continue;
    static const DType kDTypes[] = {DType::kString, DType::kFloat32, DType::kInt64};  // by ListKind - 1
    int kind = static_cast<int>(list.kind) - 1;
    if (take(3) == 0) kind = (kind + 1) % 3;  // a mismatch, 1 in 8
    const DType dtype = kDTypes[kind];
    const unsigned form = take(2);
    if (form == 1)
      spec.emplace(name, io::VarLenFeature{dtype});
    else if (form == 2)
      spec.emplace(name, io::RaggedFeature{dtype});
    else
      spec.emplace(name,
                   io::FixedLenFeature{Shape{static_cast<std::int64_t>(list.size()) + (form == 3 ? 1 : 0)}, dtype});
  }
  if (!lists.count("zz")) {
    io::FixedLenFeature missing{Shape{2}, DType::kInt64};
    if (selector & 0x80) missing.default_value = Tensor::from_vector<std::int64_t>({-1, 1});
    spec.emplace("zz", missing);
  }
  return spec;
}

void compare(const io::ParsedFeature& single, const io::ParsedFeature& batch, const io::FeatureList& list) {
  if (const auto* t = std::get_if<Tensor>(&single)) {
    if (const auto* d = std::get_if<Tensor>(&batch)) {  // FixedLen
      check(d->shape().dim(0) == 2 && d->num_elements() == 2 * t->num_elements(), "dense batch shape");
      const io::FeatureList one = as_list(*t), two = as_list(*d);
      io::FeatureList twice = one;
      twice.floats.insert(twice.floats.end(), one.floats.begin(), one.floats.end());
      twice.int64s.insert(twice.int64s.end(), one.int64s.begin(), one.int64s.end());
      twice.bytes.insert(twice.bytes.end(), one.bytes.begin(), one.bytes.end());
      check(same_list(two, twice), "dense batch rows = the single tensor");
      if (list.kind != io::ListKind::kNone) check(same_list(one, list), "dense values = the list");
      return;
    }
    const auto& r = std::get<chorus::RaggedTensor>(batch);  // Ragged: single gives the values
    const auto n = t->num_elements();
    check(r.splits() == std::vector<std::int64_t>{0, n, 2 * n}, "ragged splits [0, n, 2n]");
    check(same_list(as_list(*t), list.kind == io::ListKind::kNone ? as_list(*t) : list), "ragged values = the list");
    return;
  }
  const auto& s = std::get<chorus::SparseTensor>(single);
  const auto& b = std::get<chorus::SparseTensor>(batch);
  check(b.nnz() == 2 * s.nnz() && b.dense_shape() == (Shape{2, s.nnz()}) && s.dense_shape() == Shape{s.nnz()},
        "sparse batch = twice the single");
  if (list.kind != io::ListKind::kNone) check(same_list(as_list(s.values()), list), "sparse values = the list");
  b.to_dense();  // sorted, unique, in bounds
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::string record(chorus::fuzz::as_view(data + 1, size - 1));
  std::map<std::string, io::FeatureList> lists;
  try {
    lists = io::read_all_feature_lists(record);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    // The typed parser walks the entries but decodes only the features its spec names: with an
    // empty spec it may accept, or reject with the same class.
    try {
      io::parse_single_example(record, {});
    } catch (const chorus::Error& e2) {
      chorus::fuzz::expect_error<chorus::DataLossError>(e2);
    }
    return 0;
  }
  // Round trip.
  const std::string again = io::serialize_example(lists);
  const auto relisted = io::read_all_feature_lists(again);
  check(relisted.size() == lists.size(), "round trip keeps the feature count");
  for (const auto& [name, list] : lists) check(same_list(relisted.at(name), list), "round trip keeps each list");
  check(io::serialize_example(relisted) == again, "serialize is stable");
  // Keyed reads agree.
  std::vector<std::string> keys;
  for (const auto& entry : lists) keys.push_back(entry.first);
  keys.push_back("zz");
  const auto keyed = io::read_feature_lists(record, keys);
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) check(same_list(keyed[i], lists.at(keys[i])), "keyed read agrees");

  // Single vs batch of two.
  const io::FeatureSpecs spec = spec_for(lists, selector);
  io::ParsedFeatures one, two;
  int single_error = 0, batch_error = 0;  // 0 none, 1 InvalidArgument
  try {
    one = io::parse_single_example(record, spec);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    single_error = 1;
  }
  try {
    two = io::parse_example(std::vector<std::string>{record, record}, spec);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    batch_error = 1;
  }
  check(single_error == batch_error, "single and batch agree on rejecting");
  if (single_error) return 0;
  check(one.features.size() == spec.size() && two.features.size() == spec.size(), "one output per spec");
  for (const auto& [name, f] : one.features) {
    const auto it = lists.find(name);
    compare(f, two.features.at(name), it == lists.end() ? io::FeatureList{} : it->second);
  }
  return 0;
}
