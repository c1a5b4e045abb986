// tf.io.parse_example against TensorFlow 2.21, element by element: TF writes a TFRecord of
// tf.train.Examples (float, int64 and bytes lists; NaN, ±Inf, -0 and subnormal floats; int64 extremes; empty and
// binary bytes; empty lists; missing features; one record with hand-written unpacked lists) and
// parses it with FixedLen (scalar and shaped, with and without defaults), VarLen and Ragged specs;
// chorus reads the same file and must produce the same values (floats compared by their bits),
// sparse indices, dense_shapes and ragged row_splits. Then the error cases: TF's error class for
// each must be chorus's (malformed wire data: TF says InvalidArgumentError, chorus DataLossError,
// as data/io/example.h documents).
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <map>
#include <sstream>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/example.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data::io {
namespace {

const char* const kScript = R"PY(
import struct, sys
import numpy as np
import tensorflow as tf
out_dir = sys.argv[1]
F = tf.train.Feature
fl = lambda v: F(float_list=tf.train.FloatList(value=v))
il = lambda v: F(int64_list=tf.train.Int64List(value=v))
bl = lambda v: F(bytes_list=tf.train.BytesList(value=v))
ex = lambda **kw: tf.train.Example(features=tf.train.Features(feature=kw)).SerializeToString()
nan, inf = float("nan"), float("inf")
I64MIN, I64MAX = -2**63, 2**63 - 1
records = [
  ex(fixed_f=fl([1.25]), fixed_i2=il([I64MIN, I64MAX]), fixed_m=fl([nan, inf, -inf, -0.0]),
     var_f=fl([1e-45, 3.4028235e38, -1.0]), var_i=il([-1, 0, 1]), rag_f=fl([nan]), rag_i=il([5]),
     var_s=bl([b"", b"\x00\xff\x80", b"text"]), fixed_s=bl([b"\xff\xfe"]), rag_s=bl([b"a", b""])),
  ex(fixed_i2=il([7, -7]), var_f=fl([]), var_i=il([]), rag_f=fl([]), rag_i=il([]), var_s=bl([])),
  ex(fixed_f=fl([-0.0]), fixed_i2=il([0, 1]), var_i=il([2**40, -2**40]), rag_i=il([1, 2, 3]),
     fixed_m=fl([1, 2, 3, 4]), var_s=bl([b"\x00" * 3]), fixed_s=bl([b""]), rag_s=bl([b"\n" * 5])),
  ex(fixed_i2=il([3, 4]), other=fl([9])),
]
# Hand-written: unpacked floats and int64s (one field per value), as proto2-era writers emit.
def ld(field, payload): return bytes([field << 3 | 2]) + bytes([len(payload)]) + payload
unpacked_f = b"".join(b"\x0d" + struct.pack("<f", v) for v in [2.5, -3.0])
unpacked_i = b"".join(b"\x08" + bytes([v]) for v in [4, 5])
entry = lambda k, feat: ld(1, ld(1, k) + ld(2, feat))
records.append(ld(1, entry(b"var_f", ld(2, unpacked_f)) + entry(b"fixed_i2", ld(3, unpacked_i))
                     + entry(b"rag_i", ld(3, unpacked_i))))
with tf.io.TFRecordWriter(out_dir + "/examples.tfrecord") as w:
  for r in records: w.write(r)

spec = {
  "fixed_f": tf.io.FixedLenFeature([], tf.float32, default_value=0.5),
  "fixed_i2": tf.io.FixedLenFeature([2], tf.int64),
  "fixed_m": tf.io.FixedLenFeature([2, 2], tf.float32, default_value=[9, 8, 7, 6]),
  "var_f": tf.io.VarLenFeature(tf.float32), "var_i": tf.io.VarLenFeature(tf.int64),
  "var_s": tf.io.VarLenFeature(tf.string), "rag_s": tf.io.RaggedFeature(tf.string),
  "fixed_s": tf.io.FixedLenFeature([], tf.string, default_value=b"dflt\x00"),
  "rag_f": tf.io.RaggedFeature(tf.float32), "rag_i": tf.io.RaggedFeature(tf.int64),
}
lines = []
def put(name, t):
  a = np.asarray(t)
  if a.dtype == np.float32: vals = [format(int(x), "08x") for x in a.reshape(-1).view(np.uint32)]
  elif a.dtype == object: vals = [x.hex() or "-" for x in a.reshape(-1)]
  else: vals = [str(int(x)) for x in a.reshape(-1)]
  lines.append(name + " " + ",".join(map(str, a.shape)) + "".join(" " + v for v in vals))
def dump(prefix, parsed):
  for k in sorted(parsed):
    v = parsed[k]
    if isinstance(v, tf.SparseTensor):
      put(prefix + k + ".indices", v.indices); put(prefix + k + ".values", v.values); put(prefix + k + ".dense_shape", v.dense_shape)
    elif isinstance(v, tf.RaggedTensor):
      put(prefix + k + ".values", v.values); put(prefix + k + ".row_splits", v.row_splits)
    else:
      put(prefix + k, v)
rs = [r.numpy() for r in tf.data.TFRecordDataset(out_dir + "/examples.tfrecord")]
dump("batch/", tf.io.parse_example(rs, spec))
single = {k: v for k, v in spec.items() if k != "fixed_i2"}
for i in (0, 3):
  dump("single%d/" % i, tf.io.parse_single_example(rs[i], single))
open(out_dir + "/tf.txt", "w").write("\n".join(lines) + "\n")

# Error cases: the class TF raises.
errs = {
  "missing_required": (rs, {"fixed_f": tf.io.FixedLenFeature([], tf.float32)}),
  "wrong_kind_fixed": (rs, {"fixed_i2": tf.io.FixedLenFeature([2], tf.float32)}),
  "wrong_kind_varlen": (rs, {"var_f": tf.io.VarLenFeature(tf.int64)}),
  "wrong_kind_ragged": (rs, {"rag_i": tf.io.RaggedFeature(tf.float32)}),
  "bytes_as_int64": (rs, {"var_s": tf.io.VarLenFeature(tf.int64)}),
  "int64_as_bytes": (rs, {"fixed_i2": tf.io.FixedLenFeature([2], tf.string)}),
  "too_many": (rs, {"fixed_i2": tf.io.FixedLenFeature([1], tf.int64)}),
  "too_few": (rs, {"fixed_i2": tf.io.FixedLenFeature([3], tf.int64)}),
  "empty_list_with_default": ([rs[1]], {"var_f": tf.io.FixedLenFeature([], tf.float32, default_value=1.0)}),
  "truncated": ([rs[3][:-3]], {"var_f": tf.io.VarLenFeature(tf.float32)}),  # ASCII-safe: TF quotes it
  "bad_length": ([b"\x0a\x7f\x0a"], {"var_f": tf.io.VarLenFeature(tf.float32)}),
}
with open(out_dir + "/tf_errors.txt", "w") as f:
  for name, (batch, s) in sorted(errs.items()):
    try:
      tf.io.parse_example(batch, s); cls = "none"
    except Exception as e:
      cls = type(e).__name__
    f.write("%s %s\n" % (name, cls))
)PY";

std::string shape_text(const Shape& s) {
  std::string out;
  for (int d = 0; d < s.rank(); ++d) out += (d ? "," : "") + std::to_string(s.dim(d));
  return out;
}

std::string hex(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out.empty() ? "-" : out;
}

// As the script prints a tensor: name, shape, values (float bits in hex, bytes in hex, "-" for "").
std::string line(const std::string& name, const Tensor& t) {
  std::ostringstream o;
  o << name << " " << shape_text(t.shape());
  if (t.dtype() == DType::kFloat32) {
    for (float v : t.to_vector<float>()) {
      char buf[16];
      std::snprintf(buf, sizeof buf, " %08x", std::bit_cast<std::uint32_t>(v));
      o << buf;
    }
  } else if (t.dtype() == DType::kString) {
    for (const std::string& v : t.strings()) o << " " << hex(v);
  } else {
    for (std::int64_t v : t.to_vector<std::int64_t>()) o << " " << v;
  }
  return o.str();
}

void dump(const std::string& prefix, const ParsedFeatures& p, std::vector<std::string>& out) {
  for (const auto& [k, v] : p.features) {
    if (const auto* s = std::get_if<SparseTensor>(&v)) {
      out.push_back(line(prefix + k + ".indices", s->indices()));
      out.push_back(line(prefix + k + ".values", s->values()));
      out.push_back(line(prefix + k + ".dense_shape", s->dense_shape_tensor()));
    } else if (const auto* r = std::get_if<RaggedTensor>(&v)) {
      out.push_back(line(prefix + k + ".values", r->values()));
      out.push_back(line(prefix + k + ".row_splits", r->row_splits()));
    } else {
      out.push_back(line(prefix + k, std::get<Tensor>(v)));
    }
  }
}

FeatureSpecs the_spec(bool with_fixed_i2) {
  FeatureSpecs s{
      {"fixed_f", FixedLenFeature{Shape{}, DType::kFloat32, Tensor::scalar(0.5f)}},
      {"fixed_m", FixedLenFeature{Shape{2, 2}, DType::kFloat32, Tensor::from_vector<float>({9, 8, 7, 6})}},
      {"var_f", VarLenFeature{DType::kFloat32}},
      {"var_i", VarLenFeature{DType::kInt64}},
      {"rag_f", RaggedFeature{DType::kFloat32}},
      {"rag_i", RaggedFeature{DType::kInt64}},
      {"var_s", VarLenFeature{DType::kString}},
      {"rag_s", RaggedFeature{DType::kString}},
      {"fixed_s", FixedLenFeature{Shape{}, DType::kString, Tensor::scalar(std::string("dflt\0", 5))}},
  };
  if (with_fixed_i2) s.emplace("fixed_i2", FixedLenFeature{Shape{2}, DType::kInt64});
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  std::sort(out.begin(), out.end());
  return out;
}

// The error class chorus raises for an error case, as TF's class name ("none" when it parses).
template <typename Fn>
std::string class_of(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgumentError&) {
    return "InvalidArgumentError";
  } catch (const DataLossError&) {
    return "DataLossError";
  } catch (const Error& e) {
    return std::string("other: ") + e.what();
  }
  return "none";
}

TEST(ExampleInterop, ParseExampleEqualsTensorFlowElementByElement) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  testing::TempDir dir;
  testing::spit(dir.file("make.py"), kScript);
  ASSERT_EQ(chorus::testing::run_interop_command("'" + python + "' " + dir.file("make.py") + " " + dir.path(), "tf"),
            0);
  const std::vector<std::string> records = read_tfrecord_file(dir.file("examples.tfrecord"));
  ASSERT_EQ(records.size(), 5u);

  std::vector<std::string> mine;
  dump("batch/", parse_example(records, the_spec(true)), mine);
  for (int i : {0, 3}) {
    const std::string prefix = "single" + std::to_string(i) + "/";
    dump(prefix, parse_single_example(records[static_cast<std::size_t>(i)], the_spec(false)), mine);
  }
  std::sort(mine.begin(), mine.end());
  const std::vector<std::string> theirs = lines_of(testing::slurp(dir.file("tf.txt")));
  // One line written out by hand, so that a script printing nothing cannot pass: record 0's bytes,
  // the default (with its NUL) for the records without the feature, record 2's empty string.
  EXPECT_NE(std::find(theirs.begin(), theirs.end(), "batch/fixed_s 5 fffe 64666c7400 - 64666c7400 64666c7400"),
            theirs.end());
  EXPECT_EQ(mine.size(), theirs.size());
  for (std::size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) EXPECT_EQ(mine[i], theirs[i]);

  // Error classes.
  std::map<std::string, std::string> tf_class;
  std::istringstream in(testing::slurp(dir.file("tf_errors.txt")));
  for (std::string name, cls; in >> name >> cls;) tf_class[name] = cls;
  const std::string truncated = records[3].substr(0, records[3].size() - 3);
  const std::vector<std::string> one_empty = {records[1]};
  const std::map<std::string, std::string> mine_class = {
      {"missing_required", class_of([&] {
         parse_example(records, {{"fixed_f", FixedLenFeature{Shape{}, DType::kFloat32}}});
       })},
      {"wrong_kind_fixed", class_of([&] {
         parse_example(records, {{"fixed_i2", FixedLenFeature{Shape{2}, DType::kFloat32}}});
       })},
      {"wrong_kind_varlen", class_of([&] {
         parse_example(records, {{"var_f", VarLenFeature{DType::kInt64}}});
       })},
      {"wrong_kind_ragged", class_of([&] {
         parse_example(records, {{"rag_i", RaggedFeature{DType::kFloat32}}});
       })},
      {"bytes_as_int64", class_of([&] {
         parse_example(records, {{"var_s", VarLenFeature{DType::kInt64}}});
       })},
      {"int64_as_bytes", class_of([&] {
         parse_example(records, {{"fixed_i2", FixedLenFeature{Shape{2}, DType::kString}}});
       })},
      {"too_many", class_of([&] {
         parse_example(records, {{"fixed_i2", FixedLenFeature{Shape{1}, DType::kInt64}}});
       })},
      {"too_few", class_of([&] {
         parse_example(records, {{"fixed_i2", FixedLenFeature{Shape{3}, DType::kInt64}}});
       })},
      {"empty_list_with_default", class_of([&] {
         parse_example(one_empty, {{"var_f", FixedLenFeature{Shape{}, DType::kFloat32, Tensor::scalar(1.0f)}}});
       })},
      {"truncated", class_of([&] {
         parse_example(std::vector<std::string>{truncated}, {{"var_f", VarLenFeature{DType::kFloat32}}});
       })},
      {"bad_length", class_of([&] {
         parse_example(std::vector<std::string>{std::string("\x0a\x7f\x0a", 3)},
                       {{"var_f", VarLenFeature{DType::kFloat32}}});
       })},
  };
  ASSERT_EQ(tf_class.size(), mine_class.size());
  for (const auto& [name, cls] : mine_class) {
    // Malformed wire data: TF's InvalidArgumentError ("Could not parse example input") is chorus's
    // DataLossError, the class of every corrupt-data error in chorus's readers.
    const bool wire = name == "truncated" || name == "bad_length";
    EXPECT_EQ(cls, wire && tf_class[name] == "InvalidArgumentError" ? "DataLossError" : tf_class[name]) << name;
    if (wire) {
      EXPECT_EQ(tf_class[name], "InvalidArgumentError") << name;
    }
  }
}

}  // namespace
}  // namespace chorus::data::io
