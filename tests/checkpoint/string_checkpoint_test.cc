// String tensors in checkpoints: BundleWriter::add / BundleReader::read of DT_STRING entries,
// a string Variable saved and restored by Checkpoint (synchronously and asynchronously), an
// iterator whose state holds string tensors, and TensorFlow interop both ways:
// tf.train.load_checkpoint reads chorus's string values (and tf.train.Checkpoint restores them
// into a tf.Variable), chorus restores a string tf.Variable TensorFlow saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/variable.h>
#include <chorus/data/dataset.h>

namespace chorus::train {
namespace {

using chorus::testing::TempDir;
using Strings = std::vector<std::string>;

const std::string kVarKey = "v/.ATTRIBUTES/VARIABLE_VALUE";
// Empty, NUL and non-UTF-8 bytes, a quote, a long value (past the small-string buffer).
const Strings kValues = {"", "a", std::string("\0\xff\x80", 3), "it's \"q\"", std::string(5000, 'z'), "end"};

Variable string_var(const Strings& values, const Shape& shape) {
  return make_variable(
      {.initial_value = Tensor::from_vector(values, shape, "/CPU:0"), .name = "v", .trainable = false});
}

class StringCheckpoint : public chorus::testing::CoreTest {};

TEST_F(StringCheckpoint, BundleAddAndReadStringTensors) {
  TempDir dir;
  {
    BundleWriter w(dir / "b");
    w.add("matrix", Tensor::from_vector(kValues, {2, 3}));
    w.add("scalar", Tensor::scalar("one"));
    w.add("empty", Tensor::empty({0, 4}, DType::kString));
    w.add("numbers", Tensor::from_vector<float>({1, 2}));
    w.finish();
  }
  BundleReader r(dir / "b");
  const BundleEntry& e = r.entry("matrix");
  EXPECT_TRUE(e.is_string);
  EXPECT_TRUE(e.supported());
  EXPECT_EQ(e.dtype, DType::kString);
  EXPECT_EQ(e.tf_dtype, 7);  // DT_STRING
  Tensor m = r.read("matrix");
  EXPECT_EQ(m.dtype(), DType::kString);
  EXPECT_EQ(m.shape(), Shape({2, 3}));
  EXPECT_EQ(m.to_vector<std::string>(), kValues);
  EXPECT_EQ(r.read_strings("matrix"), kValues);  // the same entry, either way
  EXPECT_EQ(r.read("scalar").item<std::string>(), "one");
  EXPECT_EQ(r.read("empty").shape(), Shape({0, 4}));
  EXPECT_EQ(r.read("numbers").to_vector<float>(), (std::vector<float>{1, 2}));
  verify_bundle(dir / "b");
}

TEST_F(StringCheckpoint, StringVariableSavesAndRestores) {
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    TempDir dir;
    Variable v = string_var(kValues, {3, 2});
    Checkpoint ckpt({{"v", v}});
    const std::string prefix = ckpt.save(dir / "ckpt", {.async = async});
    v.assign(Tensor::from_vector(Strings(6, "overwritten"), {3, 2}));  // waits for an async copy's hold
    ckpt.sync();
    EXPECT_EQ(BundleReader(prefix).read(kVarKey).to_vector<std::string>(), kValues);

    Variable fresh = string_var(Strings(6), {3, 2});
    Checkpoint({{"v", fresh}}).restore(prefix).assert_consumed();
    EXPECT_EQ(fresh.read_value().to_vector<std::string>(), kValues);
    // A numeric variable does not take a string value: a mismatch naming both.
    Variable numeric = make_variable({.initial_value = Tensor::zeros({3, 2}), .name = "v", .trainable = false});
    EXPECT_THROW(Checkpoint({{"v", numeric}}).restore(prefix).assert_consumed(), Error);
  }
}

TEST_F(StringCheckpoint, IteratorStateWithStringsRestoresTheSamePosition) {
  TempDir dir;
  const Strings words = {"w0", "w1", std::string("w\0002", 3), "w3", "w4", "w5", "w6"};
  auto build = [&] { return data::Dataset::from_tensor_slices({Tensor::from_vector(words)}).shuffle(4, 9).batch(2); };
  auto it = build().make_iterator();
  it.next();  // the shuffle buffer now holds string tensors
  Checkpoint({{"data", it}}).write(dir / "it");
  std::vector<Strings> rest, resumed;
  while (auto e = it.next()) rest.push_back((*e)[0].to_vector<std::string>());
  auto again = build().make_iterator();
  Checkpoint({{"data", again}}).read(dir / "it").assert_consumed();
  while (auto e = again.next()) resumed.push_back((*e)[0].to_vector<std::string>());
  EXPECT_FALSE(rest.empty());
  EXPECT_EQ(resumed, rest);
}

std::string hex(const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {kHex[c >> 4], kHex[c & 15]};
  return out;
}

void write_lines(const std::string& path, const Strings& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << '\n';
}

Strings hex_all(const Strings& v) {
  Strings out;
  for (const auto& s : v) out.push_back(hex(s));
  return out;
}

// One Python run: TF reads chorus's checkpoint and compares each value with the expected bytes
// (hex, one per line), restores it into a tf.Variable, then writes its own string variable.
TEST_F(StringCheckpoint, TensorFlowReadsChorusStringsAndChorusReadsTensorFlows) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  Variable v = string_var(kValues, {2, 3});
  const std::string prefix = Checkpoint({{"v", v}}).write(dir / "chorus");
  write_lines(dir / "expected.hex", hex_all(kValues));
  std::ofstream(dir / "script.py") << R"(import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
prefix, expected_file, out_dir = sys.argv[1:4]
expected = [bytes.fromhex(l) for l in open(expected_file).read().split("\n")[:-1]]
key = "v/.ATTRIBUTES/VARIABLE_VALUE"
reader = tf.train.load_checkpoint(prefix)
assert reader.get_variable_to_dtype_map()[key] == tf.string, reader.get_variable_to_dtype_map()
assert reader.get_variable_to_shape_map()[key] == [2, 3], reader.get_variable_to_shape_map()
got = reader.get_tensor(key)
assert got.shape == (2, 3), got.shape
assert got.flatten().tolist() == expected, (got.flatten().tolist()[:4], expected[:4])
v = tf.Variable(tf.fill([2, 3], ""))
tf.train.Checkpoint(v=v).read(prefix).assert_consumed()
assert v.numpy().flatten().tolist() == expected
# TF writes: a string variable with bytes of every value 0..255 and an empty string.
values = [bytes(range(256)), b"", "é".encode(), b"x" * 3000]
tf.train.Checkpoint(v=tf.Variable(tf.constant(values))).write(os.path.join(out_dir, "tf"))
with open(os.path.join(out_dir, "tf.hex"), "w") as f:
    for s in values: f.write(s.hex() + "\n")
print("ok")
)";
  const std::string cmd =
      "'" + python + "' " + (dir / "script.py") + " " + prefix + " " + (dir / "expected.hex") + " " + dir.path();
  ASSERT_EQ(chorus::testing::run_interop_command(cmd, "tf"), 0) << cmd;

  Strings want;
  {
    std::ifstream in(dir / "tf.hex");
    for (std::string l; std::getline(in, l);) want.push_back(l);
  }
  ASSERT_EQ(want.size(), 4u);
  Variable got =
      make_variable({.initial_value = Tensor::empty({4}, DType::kString, "/CPU:0"), .name = "v", .trainable = false});
  Checkpoint({{"v", got}}).read(dir / "tf").assert_consumed();
  EXPECT_EQ(hex_all(got.read_value().to_vector<std::string>()), want);
  EXPECT_EQ(got.read_value().strings()[0].size(), 256u);
}

}  // namespace
}  // namespace chorus::train
