// TensorFlow itself reads chorus's checkpoints, and chorus reads TensorFlow's, as a TF user would
// try it: tests/checkpoint/tf_interop.py runs in the interop Python (tests/core/interop_python.h;
// skipped without it outside CI, FAILED under CI=true), one Python process per test.
//
//   ChorusWritesTensorFlowReads: chorus saves nested objects (names TF must escape), a variable of
//     each of chorus's 8 numeric dtypes with edge values (NaN, ±inf, −0, subnormals, integer limits) and a
//     100 MiB variable; tf.train.list_variables lists exactly chorus's keys, shapes and dtypes,
//     tf.train.load_checkpoint reads every value bit for bit, and tf.train.Checkpoint(...) restores
//     each into matching TF objects with assert_consumed().
//   TensorFlowReadsChorusShardedStageThreeCheckpoint: ZeRO stage 3 on 4 replicas writes each
//     parameter as its replicas' TF slices; TF reads and restores the full tensors bit for bit.
//   ChorusReadsTensorFlowCheckpoints: TF writes a nested tf.Module, a variable of each of the 16
//     dtypes it saves, a 100 MiB variable, a checkpoint with each tensor in its own
//     `.data-K-of-N` file, one whose tensors MaxShardSizePolicy sliced over several data files, and
//     2-D slices written by SaveV2; chorus restores every value it has a dtype for bit for bit, and
//     for each dtype it lacks raises UnimplementedError naming that key and that dtype.
//   KerasRestoresChorusSeedCnnWithAdam: chorus trains examples/mnist_mirrored.cc's seed CNN with
//     Adam for a few steps and saves {model, optimizer}; tf_keras's Sequential of the same layers
//     with tf_keras.optimizers.legacy.Adam restores it with assert_consumed(): weights, m and v
//     slots, iterations and save_counter equal chorus's bit for bit, the restored Keras model's
//     logits equal chorus's on the same input, and one more training step in tf_keras lands where
//     chorus's does. A Dense-Dropout-Dense Sequential restores too.
//   ChorusRestoresKerasSeedCnnWithAdam: tf_keras trains the seed CNN with Adam and saves
//     tf.train.Checkpoint(model=, optimizer=): with the legacy Adam chorus restores weights, slots
//     and iterations bit for bit (only Adam's hyperparameter variables stay unused), gives the same
//     logits, and one more training step in chorus lands where tf_keras's does. With tf_keras's
//     default Adam (slots under optimizer/_variables/N) chorus restores the model and leaves exactly
//     the optimizer's values unused; Keras 3 names everything its own way
//     (optimizer/_trainable_variables/N), so nothing matches by object — BundleReader still reads
//     every value, and assigning them by position gives Keras 3's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/checkpoint/tf_interop_util.h"
#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/data/dataset.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/model.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/random.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>

namespace chorus::train {
namespace {

using chorus::testing::message_of;
using chorus::testing::TempDir;
using namespace chorus::train::testing;  // NOLINT: the interop helpers

constexpr const char* kVar = "/.ATTRIBUTES/VARIABLE_VALUE";
std::string key_of(const std::string& path) { return path + kVar; }

// Each test first finds the interop Python with what it imports (one short Python process each).
class TensorFlowInterop : public chorus::testing::CoreTest {
 protected:
  // A fixed seed (CHORUS_INTEROP_SEED overrides it): the models' initial weights are the same on
  // every run, so a failure reproduces. Unseeded, the ZeRO-3 case failed now and then: TF's next
  // step landed up to 2.3e-3 (of the largest value) away from chorus's on the first convolution's
  // kernel m slot, tolerance 1e-4 (2026-11-26: 1 of 6 runs under load). Seeds 1-70 all pass, and
  // with a fixed seed chorus's own ZeRO-0 and ZeRO-3 steps are bitwise the same over 16 runs, so
  // the suspect is a rare initialization whose first-layer gradient cancels far enough for
  // summation-order differences to show; not proven.
  void SetUp() override {
    chorus::testing::CoreTest::SetUp();
    const char* seed = std::getenv("CHORUS_INTEROP_SEED");
    ops::set_seed(seed != nullptr ? std::strtoull(seed, nullptr, 10) : 20261126);
  }
  std::string python_;
};

Variable var(const std::string& name, const Tensor& value) {
  return make_variable({.initial_value = value, .name = name, .trainable = false});
}

// A variable of `d`'s dtype and shape holding zeros (to restore into).
Variable zeros_like(const std::string& name, const Dumped& d) {
  return var(name, Tensor::zeros(d.shape, parse_dtype(d.dtype), "/CPU:0"));
}

Tensor f16(const std::vector<float>& v, const Shape& shape) {
  std::vector<std::uint16_t> bits;
  for (float x : v) bits.push_back(float_to_float16(x));
  return Tensor::from_host(bits.data(), shape, DType::kFloat16, "/CPU:0");
}

Tensor bf16(const std::vector<float>& v, const Shape& shape) {
  std::vector<std::uint16_t> bits;
  for (float x : v) bits.push_back(float_to_bfloat16(x));
  return Tensor::from_host(bits.data(), shape, DType::kBFloat16, "/CPU:0");
}

Tensor big_tensor() {
  std::vector<float> v(static_cast<std::size_t>(kBigRows * kBigCols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = big_value(static_cast<std::int64_t>(i));
  return Tensor::from_vector(v, Shape{kBigRows, kBigCols}, "/CPU:0");
}

void expect_bits(const Tensor& got, const Dumped& want, const std::string& what) {
  EXPECT_EQ(dtype_name(got.dtype()), want.dtype) << what;
  EXPECT_EQ(got.shape(), want.shape) << what;
  const std::string bytes = tensor_bytes(got);
  EXPECT_TRUE(bytes == want.bytes) << what << ": " << first_difference(bytes, want.bytes, dtype_size(got.dtype()));
}

void expect_big(const Tensor& t, const std::string& what) {
  ASSERT_EQ(t.shape(), (Shape{kBigRows, kBigCols})) << what;
  ASSERT_EQ(t.dtype(), DType::kFloat32) << what;
  const float* p = static_cast<const float*>(t.data());
  std::int64_t wrong = 0, first = -1;
  for (std::int64_t i = 0; i < kBigRows * kBigCols; ++i) {
    if (p[i] != big_value(i) && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0) << what << ": first wrong element " << first;
}

// ---------------------------------------------------------------------------------------------
// chorus writes, TensorFlow reads

TEST_F(TensorFlowInterop, ChorusWritesTensorFlowReads) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow");
  TempDir dir;
  // nested: Checkpoint.save (so save_counter too); children TF must escape ("a/b", "x.y").
  {
    Variable v = var("v", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, "/CPU:0"));
    Variable step = var("step", Tensor::scalar<std::int64_t>(42, "/CPU:0"));
    Variable w = var("w", Tensor::from_vector<float>({5, 6}, {2}, "/CPU:0"));
    Variable deep = var("deep", Tensor::from_vector<float>({0.5f, -1, 2, 1e-30f, 3, 4}, {3, 2}, "/CPU:0"));
    Variable ab = var("ab", Tensor::from_vector<std::int64_t>({7, 8, 9}, {3}, "/CPU:0"));
    Variable xy = var("xy", Tensor::scalar<double>(-0.5, "/CPU:0"));
    Variable item0 = var("item0", Tensor::from_vector<bool>({true, false}, {2, 1}, "/CPU:0"));
    Variable bias = var("bias", f16({0.25f, 0.5f}, {2}));
    auto outer = node({{"inner", node({{"deep", node({{"w", deep}})}})},
                       {"table", node({{"a/b", ab}, {"x.y", xy}})},
                       {"items", node({{"0", item0}, {"1", node({{"bias", bias}})}})}});
    Checkpoint ckpt({{"v", v}, {"step", step}, {"net", node({{"w", w}})}, {"outer", outer}});
    std::filesystem::create_directories(dir / "nested");
    const std::string prefix = ckpt.save(dir / "nested" + "/ckpt");
    EXPECT_EQ(prefix, dir / "nested" + "/ckpt-1");
    write_text(dir / "nested/prefix", prefix);
    write_dump(dir / "nested/expected", {{key_of("v"), v.read_value()},
                                         {key_of("step"), step.read_value()},
                                         {key_of("net/w"), w.read_value()},
                                         {key_of("outer/inner/deep/w"), deep.read_value()},
                                         {key_of("outer/table/a.Sb"), ab.read_value()},
                                         {key_of("outer/table/x..y"), xy.read_value()},
                                         {key_of("outer/items/0"), item0.read_value()},
                                         {key_of("outer/items/1/bias"), bias.read_value()},
                                         {key_of("save_counter"), ckpt.save_counter().read_value()}});
  }
  // dtypes: one variable per chorus dtype, with each type's edge values; Checkpoint.write.
  {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const double dinf = std::numeric_limits<double>::infinity();
    const std::vector<float> floats = {0.0f, -0.0f, 1.5f, -2.25f, inf, -inf, nan, 1e-3f};
    std::vector<float> f32 = floats;
    f32.push_back(std::numeric_limits<float>::max());
    f32.push_back(std::numeric_limits<float>::denorm_min());
    std::vector<float> half = floats;
    half.push_back(65504.0f);
    half.push_back(6e-8f);  // float16's smallest subnormal
    std::vector<float> brain = floats;
    brain.push_back(3.0e38f);
    brain.push_back(1e-40f);  // a bfloat16 subnormal
    std::vector<std::pair<std::string, Tensor>> values = {
        {"float32", Tensor::from_vector(f32, {2, 5}, "/CPU:0")},
        {"float64",
         Tensor::from_vector<double>({0.0, -0.0, 1.5, -2.25, dinf, -dinf, std::nan(""), 1e-3,
                                      std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()},
                                     {2, 5}, "/CPU:0")},
        {"float16", f16(half, {2, 5})},
        {"bfloat16", bf16(brain, {2, 5})},
        {"int32", Tensor::from_vector<std::int32_t>(
                      {std::numeric_limits<std::int32_t>::min(), -1, 0, 1, std::numeric_limits<std::int32_t>::max()},
                      {5}, "/CPU:0")},
        {"int64", Tensor::from_vector<std::int64_t>(
                      {std::numeric_limits<std::int64_t>::min(), -1, 0, 1, std::numeric_limits<std::int64_t>::max()},
                      {5}, "/CPU:0")},
        {"uint8", Tensor::from_vector<std::uint8_t>({0, 1, 127, 128, 255}, {5}, "/CPU:0")},
        {"uint16", Tensor::from_vector<std::uint16_t>({0, 1, 255, 256, 32768, 65535}, {6}, "/CPU:0")},
        {"bool", Tensor::from_vector<bool>({true, false, true, true, false, false}, {3, 2}, "/CPU:0")},
    };
    std::vector<TrackableChild> children;
    std::vector<std::pair<std::string, Tensor>> expected;
    for (const auto& [name, t] : values) {
      children.push_back({name, var(name, t)});
      expected.push_back({key_of(name), t});
    }
    std::set<DType> covered;
    for (const auto& [name, t] : values) covered.insert(t.dtype());
    // Every numeric chorus dtype (strings, which this dump of raw bytes cannot carry, have their
    // own interop test: string_checkpoint_test.cc).
    EXPECT_EQ(covered.size(), static_cast<std::size_t>(kNumDTypes - 1)) << "every numeric chorus dtype";
    std::filesystem::create_directories(dir / "dtypes");
    const std::string prefix = Checkpoint(std::move(children)).write(dir / "dtypes" + "/ckpt");
    write_text(dir / "dtypes/prefix", prefix);
    write_dump(dir / "dtypes/expected", expected);
  }
  // big: 100 MiB in one variable (the values are a formula both sides compute; no dump).
  {
    Variable big = var("big", big_tensor());
    std::filesystem::create_directories(dir / "big");
    const std::string prefix = Checkpoint({{"big", big}}).write(dir / "big" + "/ckpt");
    EXPECT_GE(std::filesystem::file_size(data_filename(prefix)), 100u << 20);
    write_text(dir / "big/prefix", prefix);
    write_dump(dir / "big/expected", {});
  }
  EXPECT_EQ(run_tf_interop(python_, "chorus-wrote " + quoted(dir.path())), 0);
}

// ---------------------------------------------------------------------------------------------
// TensorFlow writes, chorus reads

struct UnsupportedDType {
  const char* name;     // the variable's name in the checkpoint (numpy's dtype name)
  int tf_enum;          // types.proto
  const char* message;  // how the error must name it
};

// Every dtype tf.train.Checkpoint saves that chorus has no DType for. Spelled out here (not taken
// from checkpoint/bundle_format.cc) so that a wrong table there fails.
const UnsupportedDType kUnsupported[] = {
    {"int8", 6, "DT_INT8 (int8)"},
    {"int16", 5, "DT_INT16 (int16)"},
    {"uint32", 22, "DT_UINT32 (uint32)"},
    {"uint64", 23, "DT_UINT64 (uint64)"},
    {"complex64", 8, "DT_COMPLEX64 (complex64)"},
    {"complex128", 18, "DT_COMPLEX128 (complex128)"},
};
const char* const kSupported[] = {"float16", "bfloat16", "float32", "float64", "bool",
                                  "int32",   "int64",    "uint8",   "uint16"};
// tf_interop.py STRINGS.
const std::vector<std::string> kStrings = {"alpha", "", std::string("with\0nul", 8),
                                           "\xc3\xbc"
                                           "ber"};

void check_nested(const std::string& case_dir) {
  SCOPED_TRACE("nested tf.Module");
  const std::string prefix = read_prefix(case_dir);
  auto want = read_dump(case_dir + "/values");
  ASSERT_EQ(want.size(), 9u);
  std::map<std::string, Variable> vars;
  for (const auto& [key, d] : want) vars.emplace(key, zeros_like(key, d));
  auto v = [&](const std::string& path) { return vars.at(key_of(path)); };
  auto outer = node({{"inner", node({{"deep", node({{"w", v("outer/inner/deep/w")}})}})},
                     {"table", node({{"a/b", v("outer/table/a.Sb")}, {"x.y", v("outer/table/x..y")}})},
                     {"items", node({{"0", v("outer/items/0")}, {"1", node({{"bias", v("outer/items/1/bias")}})}})}});
  Checkpoint ckpt(
      {{"v", v("v")}, {"step", v("step")}, {"ids", v("ids")}, {"net", node({{"w", v("net/w")}})}, {"outer", outer}});
  ckpt.read(prefix).assert_consumed();
  for (const auto& [key, d] : want) expect_bits(vars.at(key).read_value(), d, key);
  EXPECT_EQ(v("step").read_value().item<std::int64_t>(), 7);
  EXPECT_EQ(v("ids").read_value().to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 1, 2}));
}

void check_dtypes(const std::string& case_dir) {
  SCOPED_TRACE("every dtype TF saves");
  const std::string prefix = read_prefix(case_dir);
  auto want = read_dump(case_dir + "/values");
  ASSERT_EQ(want.size(), 15u);  // the 16 dtypes but string
  BundleReader reader(prefix);
  EXPECT_EQ(reader.keys().size(), 17u);  // + string + the object graph

  // Supported: restored bit for bit (and the DT_STRING variable value for value); the
  // unsupported values are left unused, nothing else.
  std::vector<TrackableChild> children;
  std::map<std::string, Variable> vars;
  for (const char* name : kSupported) {
    ASSERT_TRUE(want.count(key_of(name))) << name;
    vars.emplace(name, zeros_like(name, want.at(key_of(name))));
    children.push_back({name, vars.at(name)});
  }
  vars.emplace("string", var("string", Tensor::empty({4}, DType::kString, "/CPU:0")));
  children.push_back({"string", vars.at("string")});
  Checkpoint ckpt(std::move(children));
  const LoadStatus status = ckpt.read(prefix);
  status.assert_existing_objects_matched();
  std::vector<std::string> unused_want;
  for (const UnsupportedDType& u : kUnsupported) unused_want.push_back(key_of(u.name));
  std::sort(unused_want.begin(), unused_want.end());
  EXPECT_EQ(status.unused_keys(), unused_want);
  status.expect_partial();
  for (const char* name : kSupported) {
    expect_bits(vars.at(name).read_value(), want.at(key_of(name)), name);
    expect_bits(reader.read(key_of(name)), want.at(key_of(name)), std::string("BundleReader ") + name);
  }
  // Spot values TF wrote (tf_interop.py dtype_values): the edges survive in chorus's own types.
  const auto f32 = vars.at("float32").read_value().to_vector<float>();
  EXPECT_TRUE(std::signbit(f32[1]) && f32[1] == 0.0f);
  EXPECT_TRUE(std::isinf(f32[4]) && f32[4] > 0 && std::isnan(f32[6]));
  EXPECT_EQ(f32[9], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(vars.at("int64").read_value().to_vector<std::int64_t>()[0], std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(vars.at("uint8").read_value().to_vector<std::uint8_t>()[3], 255);
  EXPECT_EQ(vars.at("bool").read_value().to_vector<bool>(), (std::vector<bool>{true, false, true, true, false, false}));
  EXPECT_EQ(float16_to_float(static_cast<const std::uint16_t*>(vars.at("float16").read_value().data())[8]), 65504.0f);
  // DT_STRING: a string tensor, through the variable, read() and read_strings().
  const BundleEntry& str = reader.entry(key_of("string"));
  EXPECT_TRUE(str.is_string && str.supported());
  EXPECT_EQ(str.dtype, DType::kString);
  EXPECT_EQ(vars.at("string").read_value().to_vector<std::string>(), kStrings);
  EXPECT_EQ(reader.read(key_of("string")).to_vector<std::string>(), kStrings);
  EXPECT_EQ(reader.read_strings(key_of("string")), kStrings);

  // Unsupported: listed with TF's dtype and shape; reading or restoring one names key and dtype.
  for (const UnsupportedDType& u : kUnsupported) {
    SCOPED_TRACE(u.name);
    const std::string key = key_of(u.name);
    ASSERT_TRUE(reader.contains(key));
    const BundleEntry& e = reader.entry(key);
    EXPECT_EQ(e.tf_dtype, u.tf_enum);
    EXPECT_FALSE(e.supported());
    const Shape shape = want.at(key).shape;
    EXPECT_EQ(e.shape, shape);
    {
      const std::string m = message_of<UnimplementedError>([&] { reader.read(key); });
      EXPECT_NE(m.find("tensor '" + key + "' of checkpoint '" + prefix + "' has TF dtype " + u.message +
                       ", which chorus has no DType for"),
                std::string::npos)
          << m;
    }
    // A chorus program with a variable where TF has this one: nothing restored, the error names
    // the key and the dtype (not the variable's own dtype as if it were the checkpoint's).
    Variable into = var(u.name, Tensor::zeros(shape, DType::kFloat32, "/CPU:0"));
    Variable other = var("float32", Tensor::zeros(want.at(key_of("float32")).shape, DType::kFloat32, "/CPU:0"));
    Checkpoint one({{u.name, into}, {"float32", other}});
    const std::string m = message_of<UnimplementedError>([&] { one.read(prefix); });
    EXPECT_NE(m.find("1 value(s) have a TF dtype chorus has no DType for"), std::string::npos) << m;
    EXPECT_NE(m.find("unsupported dtype: '" + key + "' has TF dtype " + u.message + " " + shape.to_string()),
              std::string::npos)
        << m;
    EXPECT_EQ(other.read_value().to_vector<float>()[2], 0.0f) << "nothing may be assigned";
  }
}

void check_big(const std::string& case_dir) {
  SCOPED_TRACE("100 MiB variable");
  const std::string prefix = read_prefix(case_dir);
  EXPECT_GE(std::filesystem::file_size(data_filename(prefix)), 100u << 20);
  Variable big = var("big", Tensor::zeros({kBigRows, kBigCols}, DType::kFloat32, "/CPU:0"));
  Checkpoint({{"big", big}}).read(prefix).assert_consumed();
  expect_big(big.read_value(), "restored");
}

// A checkpoint over several data files: restored with assert_consumed, bit for bit.
void check_sharded(const std::string& case_dir, bool expect_slices) {
  SCOPED_TRACE(case_dir);
  const std::string prefix = read_prefix(case_dir);
  auto want = read_dump(case_dir + "/values");
  ASSERT_EQ(want.size(), 6u);
  int data_files = 0;
  for (const auto& f : std::filesystem::directory_iterator(case_dir))
    data_files += f.path().filename().string().find(".data-") != std::string::npos ? 1 : 0;
  EXPECT_GE(data_files, 3);
  // What the index holds: partitioned tensors whose slices lie in different files, or whole
  // tensors in several files.
  const internal::BundleIndex index = internal::parse_bundle_index(read_text(index_filename(prefix)), prefix);
  EXPECT_EQ(index.header.num_shards, data_files);
  std::set<int> shards_used;
  for (const auto& [key, e] : index.entries) shards_used.insert(e.shard_id);
  for (const auto& [key, s] : index.sliced)
    for (const BundleEntry& e : s.pieces) shards_used.insert(e.shard_id);
  EXPECT_EQ(static_cast<int>(shards_used.size()), data_files);
  if (expect_slices) {
    EXPECT_GE(index.sliced.size(), 3u);
    bool spans_files = false;
    for (const auto& [key, s] : index.sliced) {
      std::set<int> files;
      for (const BundleEntry& e : s.pieces) files.insert(e.shard_id);
      spans_files = spans_files || files.size() > 1;
    }
    EXPECT_TRUE(spans_files) << "a tensor's slices in more than one data file";
  } else {
    EXPECT_TRUE(index.sliced.empty());
  }

  BundleReader reader(prefix);
  std::vector<std::string> keys;
  for (const auto& [key, d] : want) keys.push_back(key);
  keys.push_back("_CHECKPOINTABLE_OBJECT_GRAPH");
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(reader.keys(), keys) << "the slices' own entries are not listed";
  std::map<std::string, Variable> vars;
  std::vector<TrackableChild> children;
  for (const auto& [key, d] : want) {
    const std::string name = key.substr(0, key.size() - std::strlen(kVar));
    vars.emplace(key, zeros_like(name, d));
    children.push_back({name, vars.at(key)});
    EXPECT_EQ(reader.entry(key).shape, d.shape) << key;
  }
  Checkpoint(std::move(children)).read(prefix).assert_consumed();
  for (const auto& [key, d] : want) expect_bits(vars.at(key).read_value(), d, key);
}

// SaveV2 with 2-D slices (one covering whole rows, two covering parts of columns), no object
// graph: BundleReader assembles them; Checkpoint restores by name.
void check_slices(const std::string& case_dir) {
  SCOPED_TRACE("SaveV2 2-D slices");
  const std::string prefix = read_prefix(case_dir);
  auto want = read_dump(case_dir + "/values");
  const std::string key = key_of("w");
  ASSERT_TRUE(want.count(key));
  BundleReader reader(prefix);
  EXPECT_EQ(reader.keys(), std::vector<std::string>{key});
  expect_bits(reader.read(key), want.at(key), "BundleReader");
  Variable w = zeros_like("w", want.at(key));
  Checkpoint({{"w", w}}).read(prefix).assert_consumed();
  expect_bits(w.read_value(), want.at(key), "restored by name");
}

TEST_F(TensorFlowInterop, ChorusReadsTensorFlowCheckpoints) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow");
  TempDir dir;
  ASSERT_EQ(run_tf_interop(python_, "tf-writes " + quoted(dir.path())), 0);
  check_nested(dir / "nested");
  check_dtypes(dir / "dtypes");
  check_big(dir / "big");
  check_sharded(dir / "per_tensor_shards", /*expect_slices=*/false);
  check_sharded(dir / "max_shard", /*expect_slices=*/true);
  check_slices(dir / "slices");
}

// ---------------------------------------------------------------------------------------------
// Keras: the seed CNN with Adam, both directions

struct SeedCnn {
  std::unique_ptr<model::Sequential> model;
  std::shared_ptr<optimizers::Adam> adam;
};

// examples/mnist_mirrored.cc's model, compiled with Adam(1e-3).
SeedCnn seed_cnn() {
  namespace L = layers;
  SeedCnn s;
  s.model = std::make_unique<model::Sequential>(std::vector<L::LayerPtr>{
      L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
      L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
  s.adam = std::make_shared<optimizers::Adam>(1e-3);
  s.model->compile(s.adam, std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
  return s;
}

// The Keras 2 layout chorus writes: checkpoint key → variable, for the weights of each layer with
// weights and, with an optimizer, their m and v slots and its iterations.
std::vector<std::pair<std::string, Variable>> legacy_keys(const model::Sequential& m,
                                                          const optimizers::Optimizer* opt) {
  std::vector<std::pair<std::string, Variable>> out;
  int i = 0;
  for (const auto& layer : m.layers()) {
    if (!layer->has_weights()) continue;
    for (const TrackableChild& w : layer->trackable_children()) {
      const std::string base = "model/layer_with_weights-" + std::to_string(i) + "/" + w.name;
      out.push_back({key_of(base), w.ref.variable()});
      if (!opt) continue;
      for (const char* slot : {"m", "v"})
        out.push_back({key_of(base + "/.OPTIMIZER_SLOT/optimizer/" + slot), opt->get_slot(w.ref.variable(), slot)});
    }
    ++i;
  }
  if (opt) out.push_back({key_of("optimizer/iter"), opt->iterations()});
  return out;
}

std::vector<std::pair<std::string, Tensor>> values_of(const std::vector<std::pair<std::string, Variable>>& vars) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, v] : vars) out.push_back({key, v.read_value()});
  return out;
}

// max |got − want| <= rtol · max |want| (+ a floor for all-zero tensors).
void expect_close(const Tensor& got, const Dumped& want, double rtol, const std::string& what) {
  ASSERT_EQ(want.dtype, "float32") << what;
  ASSERT_EQ(got.shape(), want.shape) << what;
  const std::vector<float> g = got.to_vector<float>();
  std::vector<float> w(g.size());
  std::memcpy(w.data(), want.bytes.data(), std::min(want.bytes.size(), w.size() * sizeof(float)));
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(g[i]) - w[i]));
    scale = std::max(scale, std::abs(static_cast<double>(w[i])));
  }
  EXPECT_LE(diff, rtol * scale + 1e-12) << what << ": max |diff| " << diff << ", max |value| " << scale;
}

// The "seq" and "cnn" cases that tf_interop.py keras-restores checks, from `cnn` (already trained
// 4 steps): a small Sequential without an optimizer; the CNN's checkpoint with Adam, exactly the
// Keras 2 keys and the values chorus reads (variables may be mirrored or sharded: read whole), its
// logits on a fixed batch, and its state after one more step on that batch.
void write_keras_restores_cases(const TempDir& dir, SeedCnn& cnn) {
  {
    model::Sequential m({layers::Dense(3), layers::Dropout(0.1), layers::Dense(2)});
    m.build(Shape({1, 4}));
    std::filesystem::create_directories(dir / "seq");
    write_text(dir / "seq/prefix", Checkpoint({{"model", m}}).write(dir / "seq/ckpt"));
    write_dump(dir / "seq/expected", values_of(legacy_keys(m, nullptr)));
  }
  ASSERT_EQ(cnn.adam->iterations().read_value().item<std::int64_t>(), 4);
  Checkpoint ckpt({{"model", *cnn.model}, {"optimizer", cnn.adam}});
  std::filesystem::create_directories(dir / "cnn");
  const std::string prefix = ckpt.save(dir / "cnn/ckpt");
  write_text(dir / "cnn/prefix", prefix);
  auto expected = values_of(legacy_keys(*cnn.model, cnn.adam.get()));
  ASSERT_EQ(expected.size(), 10u * 3 + 1);
  expected.push_back({key_of("save_counter"), ckpt.save_counter().read_value()});
  write_dump(dir / "cnn/expected", expected);
  // chorus's own file holds exactly these keys (and the object graph).
  std::vector<std::string> keys{"_CHECKPOINTABLE_OBJECT_GRAPH"};
  for (const auto& [key, t] : expected) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(BundleReader(prefix).keys(), keys);
  const data::DigitArrays batch = data::synthetic_digits_arrays(16, 7);
  write_dump(dir / "cnn/io", {{"x", batch.images}, {"y", batch.labels}, {"logits", (*cnn.model)(batch.images, false)}});
  // One more step from the saved state: where tf_keras must land after restoring and taking it.
  cnn.model->fit(data::Dataset::from_tensors({batch.images, batch.labels}), {.epochs = 1, .verbose = 0});
  write_dump(dir / "cnn/after", values_of(legacy_keys(*cnn.model, cnn.adam.get())));
}

TEST_F(TensorFlowInterop, KerasRestoresChorusSeedCnnWithAdam) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow, tf_keras");
  TempDir dir;
  SeedCnn cnn = seed_cnn();
  cnn.model->fit(data::synthetic_digits(64, 1).batch(16), {.epochs = 1, .verbose = 0});  // 4 steps
  write_keras_restores_cases(dir, cnn);
  EXPECT_EQ(run_tf_interop(python_, "keras-restores " + quoted(dir.path())), 0);
}

// A LossScaleOptimizer around Adam (one finite step, one skipped, one finite): tf_keras's
// LossScaleOptimizer around its legacy Adam restores it with assert_consumed() — the same keys,
// loss scale and good-step counter, slots and iterations bit for bit — and its next step on the
// same gradient lands where chorus's does.
TEST_F(TensorFlowInterop, KerasRestoresChorusLossScaleOptimizer) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow, tf_keras");
  TempDir dir;
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({1, -2, 3}, {3}, "/CPU:0"), .name = "w"});
  auto lso = std::make_shared<optimizers::LossScaleOptimizer>(
      std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.01}),
      optimizers::LossScaleOptions{.initial_scale = 1024.0, .dynamic_growth_steps = 5});
  const auto grad = [](float a, float b, float c) { return Tensor::from_vector<float>({a, b, c}, {3}, "/CPU:0"); };
  lso->apply_gradients({{grad(0.5f, -1, 2), w}});
  lso->apply_gradients({{grad(0.5f, std::numeric_limits<float>::infinity(), 2), w}});  // skipped: scale 512
  lso->apply_gradients({{grad(-0.25f, 1, 0.5f), w}});
  ASSERT_EQ(lso->loss_scale(), 512.0);
  ASSERT_EQ(lso->dynamic_counter(), 1);
  std::filesystem::create_directories(dir / "lso");
  const auto state = [&] {
    return values_of(
        {{key_of("w"), w},
         {key_of("w/.OPTIMIZER_SLOT/optimizer/m"), lso->get_slot(w, "m")},
         {key_of("w/.OPTIMIZER_SLOT/optimizer/v"), lso->get_slot(w, "v")},
         {key_of("optimizer/iter"), lso->iterations()},
         {key_of("optimizer/loss_scale/current_loss_scale"), lso->variables()[lso->variables().size() - 2]},
         {key_of("optimizer/loss_scale/good_steps"), lso->variables().back()}});
  };
  write_text(dir / "lso/prefix", Checkpoint({{"optimizer", lso}, {"w", w}}).write(dir / "lso/ckpt"));
  write_dump(dir / "lso/expected", state());
  const Tensor next = grad(1, 0.5f, -1);
  write_dump(dir / "lso/next_gradient", {{"g", next}});
  lso->apply_gradients({{next, w}});
  write_dump(dir / "lso/after", state());
  EXPECT_EQ(run_tf_interop(python_, "keras-restores-lso " + quoted(dir.path())), 0);
}

// The seed CNN under the mixed_bfloat16 policy (its output layer float32, as Keras recommends),
// trained 4 steps with LossScaleOptimizer(Adam): tf_keras under the same policy restores model and
// optimizer with assert_consumed() — the float32 variables, slots, loss scale and good-step counter
// bit for bit (a policy changes no checkpoint key) — its logits agree within bfloat16 rounding and
// its next step lands near chorus's.
TEST_F(TensorFlowInterop, KerasRestoresChorusMixedPrecisionModel) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow, tf_keras");
  TempDir dir;
  namespace L = layers;
  mixed_precision::set_global_policy("mixed_bfloat16");
  model::Sequential m({L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
                       L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"),
                       L::with_dtype_policy(L::Dense(10), "float32")});
  mixed_precision::set_global_policy("float32");
  auto adam = std::make_shared<optimizers::Adam>(1e-3);
  auto lso = std::make_shared<optimizers::LossScaleOptimizer>(adam);
  m.compile(lso, std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
  m.fit(data::synthetic_digits(64, 1).batch(16), {.epochs = 1, .verbose = 0});  // 4 steps
  ASSERT_EQ(lso->dynamic_counter(), 4);
  const auto state = [&] {
    auto keys = legacy_keys(m, adam.get());
    keys.push_back({key_of("optimizer/loss_scale/current_loss_scale"), lso->variables()[lso->variables().size() - 2]});
    keys.push_back({key_of("optimizer/loss_scale/good_steps"), lso->variables().back()});
    return values_of(keys);
  };
  std::filesystem::create_directories(dir / "mixed");
  write_text(dir / "mixed/prefix", Checkpoint({{"model", m}, {"optimizer", lso}}).write(dir / "mixed/ckpt"));
  write_dump(dir / "mixed/expected", state());
  const data::DigitArrays batch = data::synthetic_digits_arrays(16, 7);
  const Tensor logits = m(batch.images, false);
  ASSERT_EQ(logits.dtype(), DType::kFloat32);
  write_dump(dir / "mixed/io", {{"x", batch.images}, {"y", batch.labels}, {"logits", logits}});
  m.fit(data::Dataset::from_tensors({batch.images, batch.labels}), {.epochs = 1, .verbose = 0});
  write_dump(dir / "mixed/after", state());
  EXPECT_EQ(run_tf_interop(python_, "keras-restores-mixed " + quoted(dir.path())), 0);
}

// The seed CNN trained 4 steps under MirroredStrategy with ZeRO stage 3 on 2 logical CPUs (its
// parameters and Adam slots exist only as shards): the checkpoint holds the whole tensors under the
// keys a one-device save writes, and tf_keras restores it with assert_consumed(), bit for bit, as
// in KerasRestoresChorusSeedCnnWithAdam; its next step lands near chorus's (sharded) next step.
TEST_F(TensorFlowInterop, KerasRestoresChorusZeroStageThreeModel) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow, tf_keras");
  chorus::testing::make_cpus(2, 256);
  TempDir dir;
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2), {.sharding = {.stage = 3}});
  SeedCnn cnn;
  {
    auto scope = strategy.scope();
    cnn = seed_cnn();
  }
  cnn.model->fit(data::synthetic_digits(64, 1).batch(16), {.epochs = 1, .verbose = 0});  // 4 steps
  const Variable kernel = cnn.model->trainable_variables()[0];
  ASSERT_NE(as_sharded(kernel), nullptr);
  ASSERT_TRUE(as_sharded(kernel)->gathers_parameters());
  ASSERT_NE(as_sharded(cnn.adam->get_slot(kernel, "m")), nullptr);
  write_keras_restores_cases(dir, cnn);
  EXPECT_EQ(run_tf_interop(python_, "keras-restores " + quoted(dir.path())), 0);
}

// ZeRO stage 3 on 4 replicas saves each parameter as every replica's slices (sharded checkpoints,
// docs/checkpoints.md): TF lists and reads the full tensors bit for bit and restores them into
// tf.Variables with assert_consumed().
TEST_F(TensorFlowInterop, TensorFlowReadsChorusShardedStageThreeCheckpoint) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow");
  chorus::testing::make_cpus(4, 256);
  TempDir dir;
  distribute::MirroredStrategy strategy(chorus::testing::cpus(4), {.sharding = {.stage = 3}});
  std::vector<Variable> vars;
  {
    auto scope = strategy.scope();
    const std::vector<std::pair<Shape, DType>> params{{{5, 7}, DType::kFloat32},
                                                      {{3, 4, 5}, DType::kFloat64},
                                                      {{64, 130}, DType::kFloat32},
                                                      {{6}, DType::kFloat32},
                                                      {{1}, DType::kFloat32}};
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& [shape, dtype] = params[i];
      std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
      for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<double>(i) * 1000 + static_cast<double>(j) / 8;
      vars.push_back(make_variable({.initial_value = ops::cast(Tensor::from_vector(v, shape, "/CPU:0"), dtype),
                                    .name = "w" + std::to_string(i)}));
      ASSERT_NE(as_sharded(vars.back()), nullptr);
    }
  }
  std::vector<TrackableChild> children;
  std::vector<std::pair<std::string, Tensor>> expected;
  for (const Variable& v : vars) {
    children.push_back({v.name(), TrackableRef(v)});
    expected.emplace_back(key_of(v.name()), as_distributed(v)->checkpoint_value());
  }
  const std::string prefix = Checkpoint(children).write(dir.path() + "/sharded");
  const std::string case_dir = dir.path() + "/case";
  write_dump(case_dir + "/expected", expected);
  write_text(case_dir + "/prefix", prefix);
  write_text(case_dir + "/data_files", "1");
  EXPECT_EQ(run_tf_interop(python_, "chorus-wrote-sharded " + quoted(case_dir)), 0);
}

// Every value of a Keras case's dump: listed by chorus's reader with its shape and read bit for bit.
void check_reader_reads_dump(const std::string& case_dir) {
  const std::string prefix = read_prefix(case_dir);
  BundleReader reader(prefix);
  for (const auto& [key, d] : read_dump(case_dir + "/values")) {
    ASSERT_TRUE(reader.contains(key)) << key;
    expect_bits(reader.read(key), d, "BundleReader " + key);
  }
}

TEST_F(TensorFlowInterop, ChorusRestoresKerasSeedCnnWithAdam) {
  CHORUS_REQUIRE_INTEROP_PYTHON(python_, "tensorflow, tf_keras, keras");
  TempDir dir;
  ASSERT_EQ(run_tf_interop(python_, "keras-writes " + quoted(dir.path())), 0);
  const Shape input{1, 28, 28, 1};
  for (const char* c : {"k2legacy", "k2", "k3"}) {
    SCOPED_TRACE(c);
    check_reader_reads_dump(dir / c);
  }

  {  // tf_keras + legacy Adam: chorus's layout. Restore before build; values arrive on creation.
    SCOPED_TRACE("tf_keras, legacy Adam");
    const std::string d = dir / "k2legacy";
    auto want = read_dump(d + "/values");
    SeedCnn cnn = seed_cnn();
    Checkpoint ckpt({{"model", *cnn.model}, {"optimizer", cnn.adam}});
    const LoadStatus status = ckpt.read(read_prefix(d));
    cnn.model->build(input);
    cnn.adam->build(cnn.model->trainable_variables());
    status.assert_existing_objects_matched();
    std::vector<std::string> hyper;
    for (const char* h : {"beta_1", "beta_2", "decay", "learning_rate"})
      hyper.push_back(key_of(std::string("optimizer/") + h));
    EXPECT_EQ(status.unused_keys(), hyper) << "Keras 2's hyperparameters are not variables in chorus";
    status.expect_partial();
    const auto restored = legacy_keys(*cnn.model, cnn.adam.get());
    EXPECT_EQ(restored.size(), want.size());
    for (const auto& [key, v] : restored) {
      ASSERT_TRUE(want.count(key)) << key;
      expect_bits(v.read_value(), want.at(key), "restored " + key);
    }
    EXPECT_EQ(cnn.adam->iterations().read_value().item<std::int64_t>(), 4);
    const auto io = read_dump(d + "/io");
    const Tensor x = dumped_tensor(io.at("x"));
    expect_close((*cnn.model)(x, false), io.at("logits"), 1e-4, "logits");
    // Training goes on from TF's state: one step on the batch tf_keras took its next step on.
    cnn.model->fit(data::Dataset::from_tensors({x, dumped_tensor(io.at("y"))}), {.epochs = 1, .verbose = 0});
    EXPECT_EQ(cnn.adam->iterations().read_value().item<std::int64_t>(), 5);
    const auto after = read_dump(d + "/after");
    for (const auto& [key, v] : legacy_keys(*cnn.model, cnn.adam.get())) {
      if (key == key_of("optimizer/iter")) continue;
      ASSERT_TRUE(after.count(key)) << key;
      expect_close(v.read_value(), after.at(key), 1e-4, "after one step: " + key);
    }
  }

  {  // tf_keras + its default Adam: the model restores; the optimizer's values stay unused.
    SCOPED_TRACE("tf_keras, default Adam");
    const std::string d = dir / "k2";
    auto want = read_dump(d + "/values");
    SeedCnn cnn = seed_cnn();
    Checkpoint ckpt({{"model", *cnn.model}, {"optimizer", cnn.adam}});
    const LoadStatus status = ckpt.read(read_prefix(d));
    cnn.model->build(input);
    std::vector<std::string> optimizer_keys;
    for (const auto& [key, v] : want)
      if (key.rfind("optimizer/", 0) == 0) optimizer_keys.push_back(key);
    EXPECT_EQ(optimizer_keys.size(), 22u);  // _iterations, _learning_rate, _variables/1..20
    EXPECT_EQ(status.unused_keys(), optimizer_keys);
    EXPECT_EQ(status.unmatched_objects(), std::vector<std::string>{"optimizer/iter"});
    status.expect_partial();
    for (const auto& [key, v] : legacy_keys(*cnn.model, nullptr)) expect_bits(v.read_value(), want.at(key), key);
    const auto io = read_dump(d + "/io");
    expect_close((*cnn.model)(dumped_tensor(io.at("x")), false), io.at("logits"), 1e-4, "logits");
  }

  {  // Keras 3: no object matches; the values, assigned by position, are the same model.
    SCOPED_TRACE("Keras 3");
    const std::string d = dir / "k3";
    auto want = read_dump(d + "/values");
    SeedCnn cnn = seed_cnn();
    Checkpoint ckpt({{"model", *cnn.model}, {"optimizer", cnn.adam}});
    const LoadStatus status = ckpt.read(read_prefix(d));
    cnn.model->build(input);
    EXPECT_THROW(status.assert_nontrivial_match(), FailedPreconditionError);
    std::vector<std::string> all;
    for (const auto& [key, v] : want) all.push_back(key);
    EXPECT_EQ(status.unused_keys(), all);
    status.expect_partial();
    BundleReader reader(read_prefix(d));
    auto vars = cnn.model->trainable_variables();
    ASSERT_EQ(vars.size(), 10u);
    for (std::size_t i = 0; i < vars.size(); ++i)
      vars[i].assign(reader.read(key_of("optimizer/_trainable_variables/" + std::to_string(i))));
    const auto io = read_dump(d + "/io");
    expect_close((*cnn.model)(dumped_tensor(io.at("x")), false), io.at("logits"), 1e-4, "logits");
  }
}

}  // namespace
}  // namespace chorus::train
