// The element order of filter, zip, concatenate, enumerate, shard, flat_map, interleave
// (deterministic, sequential and parallel), padded_batch and unbatch — with numeric and string
// components (from_tensor_slices, batch, padded_batch with "" and a string padding value,
// unbatch, zip, map) —, compared exactly with
// TensorFlow's for the same arguments: one Python run builds every case with tf.data and prints
// its elements (dtype, shape, values of each component), chorus builds the same cases here.
#include <gtest/gtest.h>

#include <map>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::describe_all;
using testing::slurp;
using testing::spit;
using testing::TempDir;

std::int64_t value_of(const Element& e, std::size_t c = 0) { return e[c].item<std::int64_t>(); }
using Strings = std::vector<std::string>;
// tf.fill([n], tf.strings.as_string(x)): n copies of x's decimal digits.
Tensor fill_text(std::int64_t n, std::int64_t x) {
  return Tensor::from_vector(Strings(static_cast<std::size_t>(n), std::to_string(x)));
}
const Strings kWords = {"a", "bb", "", std::string("\0\xff", 2), "e"};
Tensor fill(std::int64_t n, std::int64_t v) { return Tensor::full(Shape{n}, static_cast<double>(v), DType::kInt64); }
Dataset R(std::int64_t a, std::int64_t b) { return Dataset::range(a, b); }
Dataset R(std::int64_t b) { return Dataset::range(b); }

// Each case: its name, the TF expression (`R` is tf.data.Dataset.range), and chorus's pipeline.
struct Case {
  const char* name;
  const char* tf;
  Dataset (*chorus)();
};

const Case kCases[] = {
    {"filter", "R(20).filter(lambda x: x % 3 == 0)",
     [] { return R(20).filter([](const Element& e) { return value_of(e) % 3 == 0; }); }},
    {"zip", "tf.data.Dataset.zip((R(5), R(10, 20), R(100, 103)))",
     [] {
       return Dataset::zip({R(5), R(10, 20), R(100, 103)});
     }},
    {"concatenate", "R(3).concatenate(R(10, 13))", [] { return R(3).concatenate(R(10, 13)); }},
    {"enumerate", "R(100, 104).enumerate(3)", [] { return R(100, 104).enumerate(3); }},
    {"shard_3_1", "R(10).shard(3, 1)", [] { return R(10).shard(3, 1); }},
    {"shard_4_3", "R(23).shard(4, 3)", [] { return R(23).shard(4, 3); }},
    {"flat_map", "R(5).flat_map(lambda x: R(x))",
     [] { return R(5).flat_map([](const Element& e) { return R(value_of(e)); }); }},
    {"interleave_doc",
     "R(1, 6).interleave(lambda x: tf.data.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)",
     [] { return R(1, 6).interleave([](const Element& e) { return Dataset::from_tensors(e).repeat(6); }, 2, 4); }},
    {"interleave_doc_parallel",
     "R(1, 6).interleave(lambda x: tf.data.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4, "
     "num_parallel_calls=2, deterministic=True)",
     [] {
       return R(1, 6).interleave([](const Element& e) { return Dataset::from_tensors(e).repeat(6); }, 2, 4, 2, true);
     }},
    {"interleave_uneven", "R(1, 6).interleave(lambda x: R(10 * x, 11 * x), cycle_length=3, block_length=2)",
     [] { return R(1, 6).interleave([](const Element& e) { return R(10 * value_of(e), 11 * value_of(e)); }, 3, 2); }},
    {"interleave_uneven_parallel",
     "R(1, 6).interleave(lambda x: R(10 * x, 11 * x), cycle_length=3, block_length=2, num_parallel_calls=3)",
     [] {
       return R(1, 6).interleave([](const Element& e) { return R(10 * value_of(e), 11 * value_of(e)); }, 3, 2, 3);
     }},
    {"interleave_mixed",
     "R(1, 12).interleave(lambda x: R(100 * x, 100 * x + x * x % 7), cycle_length=4, block_length=3, "
     "num_parallel_calls=2)",
     [] {
       return R(1, 12).interleave(
           [](const Element& e) {
             const std::int64_t x = value_of(e);
             return R(100 * x, 100 * x + x * x % 7);
           },
           4, 3, 2);
     }},
    {"padded_batch", "R(1, 6).map(lambda x: tf.fill([x], x)).padded_batch(2)",
     [] {
       return R(1, 6).map([](const Element& e) { return Element{fill(value_of(e), value_of(e))}; }).padded_batch(2);
     }},
    {"padded_batch_fixed",
     "R(1, 6).map(lambda x: (tf.fill([x], x), x)).padded_batch(2, padded_shapes=([6], []), "
     "padding_values=(tf.constant(-1, tf.int64), tf.constant(0, tf.int64)), drop_remainder=True)",
     [] {
       return R(1, 6)
           .map([](const Element& e) {
             return Element{fill(value_of(e), value_of(e)), e[0]};
           })
           .padded_batch(2, std::vector<std::vector<std::int64_t>>{{6}, {}},
                         std::vector<Tensor>{Tensor::scalar<std::int64_t>(-1), Tensor::scalar<std::int64_t>(0)}, true);
     }},
    {"padded_batch_2d",
     "R(1, 5).map(lambda x: tf.fill([x % 3 + 1, x], tf.cast(x, tf.int32))).padded_batch(3, padded_shapes=[4, None])",
     [] {
       return R(1, 5)
           .map([](const Element& e) {
             const std::int64_t x = value_of(e);
             return Element{Tensor::full(Shape{x % 3 + 1, x}, static_cast<double>(x), DType::kInt32)};
           })
           .padded_batch(3, std::vector<std::vector<std::int64_t>>{{4, -1}});
     }},
    {"unbatch", "R(10).batch(3).unbatch()", [] { return R(10).batch(3).unbatch(); }},
    {"unbatch_zip", "tf.data.Dataset.zip((R(4).batch(2), R(10, 14).batch(2))).unbatch()",
     [] {
       return Dataset::zip({R(4).batch(2), R(10, 14).batch(2)}).unbatch();
     }},
    {"chain",
     "R(30).enumerate(5).filter(lambda i, x: x % 4 != 1).shard(3, 2).flat_map(lambda i, x: "
     "tf.data.Dataset.from_tensors((i, x)).repeat(x % 3))",
     [] {
       return R(30)
           .enumerate(5)
           .filter([](const Element& e) { return value_of(e, 1) % 4 != 1; })
           .shard(3, 2)
           .flat_map([](const Element& e) { return Dataset::from_tensors(e).repeat(value_of(e, 1) % 3); });
     }},
    {"padded_unbatch", "R(1, 9).flat_map(lambda x: R(x).map(lambda y: tf.fill([y], x))).padded_batch(4).unbatch()",
     [] {
       return R(1, 9)
           .flat_map([](const Element& e) {
             const std::int64_t x = value_of(e);
             return R(x).map([x](const Element& y) { return Element{fill(value_of(y), x)}; });
           })
           .padded_batch(4)
           .unbatch();
     }},
    {"string_slices_batch", "tf.data.Dataset.from_tensor_slices(WORDS).batch(2)",
     [] { return Dataset::from_tensor_slices({Tensor::from_vector(kWords)}).batch(2); }},
    {"string_zip_batch_unbatch",
     "tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(WORDS), R(5))).batch(3).unbatch()",
     [] {
       return Dataset::zip({Dataset::from_tensor_slices({Tensor::from_vector(kWords)}), R(5)}).batch(3).unbatch();
     }},
    {"string_rows", "tf.data.Dataset.from_tensor_slices(tf.reshape(tf.constant(WORDS[:4]), [2, 2])).unbatch()",
     [] {
       const Strings four(kWords.begin(), kWords.begin() + 4);
       return Dataset::from_tensor_slices({Tensor::from_vector(four, {2, 2})}).unbatch();
     }},
    {"string_padded_batch", "R(1, 6).map(lambda x: tf.fill([x], tf.strings.as_string(x))).padded_batch(2)",
     [] {
       return R(1, 6)
           .map([](const Element& e) { return Element{fill_text(value_of(e), value_of(e))}; })
           .padded_batch(2);
     }},
    {"string_padded_batch_value",
     "R(1, 5).map(lambda x: (tf.fill([x % 3 + 1, x], tf.strings.as_string(x)), x)).padded_batch(3, "
     "padded_shapes=([4, None], []), padding_values=(tf.constant(b'pad'), tf.constant(0, tf.int64)))",
     [] {
       return R(1, 5)
           .map([](const Element& e) {
             const std::int64_t x = value_of(e);
             Tensor t = fill_text((x % 3 + 1) * x, x).reshape(Shape{x % 3 + 1, x});
             return Element{t, e[0]};
           })
           .padded_batch(3, std::vector<std::vector<std::int64_t>>{{4, -1}, {}},
                         std::vector<Tensor>{Tensor::scalar("pad"), Tensor::scalar<std::int64_t>(0)});
     }},
};

TEST(TFDataInterop, ElementOrderMatchesTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  std::string script = R"(import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
import numpy as np
R = tf.data.Dataset.range
WORDS = [b"a", b"bb", b"", b"\x00\xff", b"e"]
def describe(e):
    parts = []
    for a in tf.nest.flatten(e):
        if isinstance(a, bytes) or a.dtype == object:  # tf.string: bytes, or an object array of them
            a = np.array(a, dtype=object)
            parts.append(f"string{list(a.shape)}{[v.hex() for v in a.flatten().tolist()]}")
        else:
            parts.append(f"{a.dtype.name}{list(a.shape)}{a.flatten().tolist()}")
    return " ; ".join(parts)
cases = [
)";
  for (const Case& c : kCases) script += std::string("    (\"") + c.name + "\", lambda: " + c.tf + "),\n";
  script += R"(]
with open(sys.argv[1], "w") as out:
    for name, make in cases:
        out.write("case " + name + "\n")
        for e in make().as_numpy_iterator():
            out.write(describe(e) + "\n")
)";
  spit(dir.file("cases.py"), script);
  const std::string cmd = "'" + python + "' " + dir.file("cases.py") + " " + dir.file("tf.txt");
  ASSERT_EQ(::chorus::testing::run_interop_command(cmd, "tf"), 0) << cmd;

  std::map<std::string, std::vector<std::string>> tf;
  std::string current;
  std::string text = slurp(dir.file("tf.txt"));
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("case ", 0) == 0) {
      current = line.substr(5);
      tf[current];
    } else {
      tf[current].push_back(line);
    }
  }
  ASSERT_EQ(tf.size(), std::size(kCases));
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto& expected = tf[c.name];
    EXPECT_FALSE(expected.empty());
    EXPECT_EQ(describe_all(c.chorus()), expected) << "TF: " << c.tf;
  }
}

}  // namespace
}  // namespace chorus::data
