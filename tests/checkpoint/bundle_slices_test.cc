// Checkpoints over several data files and partitioned (sliced) tensors, without TensorFlow:
//   - the keys of slice entries (TF's EncodeTensorNameSlice / OrderedCode), byte for byte against
//     keys read from TF-written index files and the examples in TF's ordered_code.cc;
//   - testdata/tf_sharded/: three checkpoints TF 2.21 wrote (tests/checkpoint/tf_interop.py
//     tf-writes; README.md there) — whole tensors in 7 data files, MaxShardSizePolicy slices over
//     17 files (float32 2-D, int64 3-D, bool, float16, bfloat16, float64 scalar), SaveV2 2-D slices
//     — read bit for bit against the values TF dumped beside them, and restored by Checkpoint;
//   - hand-made sliced bundles with a slice missing, out of range, of the wrong shape, or slices
//     leaving elements uncovered: DataLossError naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/checkpoint/tf_interop_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/table.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train {
namespace {

using chorus::testing::message_of;
using internal::kFullExtent;
using internal::SliceExtent;
using internal::TensorSliceSpec;
using testing::TempDir;
using testing::unhex;
using wire::ProtoWriter;

const std::string kW = "w/.ATTRIBUTES/VARIABLE_VALUE";

std::string testdata(const std::string& name) {
  return (std::filesystem::path(CHORUS_SOURCE_ROOT) / "tests" / "checkpoint" / "testdata" / "tf_sharded" / name)
      .string();
}

TEST(BundleSlices, SliceKeysAreTensorFlows) {
  // From testdata/tf_sharded/slices/ckpt.index (SaveV2 "4 6 0,2:0,4" and "4 6 2,2:-").
  EXPECT_EQ(internal::encode_tensor_name_slice(kW, {{0, 2}, {0, 4}}),
            std::string(1, '\0') + kW + unhex("00 01 01 02 80 82 80 84"));
  EXPECT_EQ(internal::encode_tensor_name_slice(kW, {{2, 2}, {0, kFullExtent}}),
            std::string(1, '\0') + kW + unhex("00 01 01 02 82 82 80 7f"));
  // From a MaxShardSizePolicy index: v1 [1125, 1125 + 292) → start c4 65, length c1 24.
  const std::string v1 = "v1/.ATTRIBUTES/VARIABLE_VALUE";
  EXPECT_EQ(internal::encode_tensor_name_slice(v1, {{1125, 292}}),
            std::string(1, '\0') + v1 + unhex("00 01 01 01 c4 65 c1 24"));
  // TF's ordered_code.cc examples: 0x424242 → f0 42 42 42; −0x800 → 38 00; and the length bounds.
  auto signed_part = [](std::int64_t start) {
    const std::string k = internal::encode_tensor_name_slice("", {{start, 0}});
    return testing::hex(k.substr(5, k.size() - 6));  // after 00 | 00 01 | 01 01, before the length 80
  };
  EXPECT_EQ(signed_part(0x424242), "f0424242");
  EXPECT_EQ(signed_part(-0x800), "3800");
  EXPECT_EQ(signed_part(63), "bf");
  EXPECT_EQ(signed_part(64), "c040");
  EXPECT_EQ(signed_part(-64), "40");
  EXPECT_EQ(signed_part(-65), "3fbf");
  EXPECT_EQ(signed_part(std::numeric_limits<std::int64_t>::max()), "ffc07fffffffffffffff");
  EXPECT_EQ(signed_part(std::numeric_limits<std::int64_t>::min()), "003f8000000000000000");
  // Names are escaped: \0 → 00 ff, \xff → ff 00, then the separator 00 01.
  EXPECT_EQ(testing::hex(internal::encode_tensor_name_slice(std::string("a\0b\xff", 4), {})),
            "00"
            "6100ff62ff00"
            "0001"
            "00");
}

// Every value of a TF-written case, read bit for bit and restored by Checkpoint.
void check_case(const std::string& name, std::size_t want_files, bool want_slices) {
  SCOPED_TRACE(name);
  const std::string prefix = testdata(name) + "/ckpt";
  const auto want = testing::read_dump(testdata(name) + "/values");
  ASSERT_FALSE(want.empty());
  std::size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(testdata(name)))
    files += f.path().filename().string().find(".data-") != std::string::npos ? 1 : 0;
  EXPECT_EQ(files, want_files);
  const internal::BundleIndex index = internal::parse_bundle_index(testing::slurp(prefix + ".index"), prefix);
  EXPECT_EQ(index.sliced.empty(), !want_slices);

  BundleReader reader(prefix);
  std::vector<std::string> keys;
  for (const auto& [key, d] : want) keys.push_back(key);
  if (reader.contains("_CHECKPOINTABLE_OBJECT_GRAPH")) keys.push_back("_CHECKPOINTABLE_OBJECT_GRAPH");
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(reader.keys(), keys);
  std::vector<TrackableChild> children;
  std::map<std::string, Variable> vars;
  for (const auto& [key, d] : want) {
    const Tensor t = reader.read(key);
    EXPECT_TRUE(testing::tensor_bytes(t) == d.bytes)
        << key << ": " << testing::first_difference(testing::tensor_bytes(t), d.bytes, dtype_size(t.dtype()));
    EXPECT_EQ(t.shape(), d.shape) << key;
    EXPECT_EQ(dtype_name(t.dtype()), d.dtype) << key;
    const std::string child = key.substr(0, key.find('/'));
    vars.emplace(key, make_variable({.initial_value = Tensor::zeros(d.shape, parse_dtype(d.dtype), "/CPU:0"),
                                     .name = child,
                                     .trainable = false}));
    children.push_back({child, vars.at(key)});
  }
  Checkpoint(std::move(children)).read(prefix).assert_consumed();
  for (const auto& [key, d] : want) EXPECT_TRUE(testing::tensor_bytes(vars.at(key).read_value()) == d.bytes) << key;
}

TEST(BundleSlices, ReadsTensorFlowsShardedCheckpoints) {
  check_case("per_tensor_shards", 7, /*want_slices=*/false);
  check_case("max_shard", 17, /*want_slices=*/true);
  check_case("slices", 1, /*want_slices=*/true);
}

// ---- hand-made sliced bundles ----

std::string slice_proto(const TensorSliceSpec& spec) {
  ProtoWriter s;
  for (const SliceExtent& x : spec) {
    ProtoWriter e;
    if (x.start) e.add_int64(1, x.start);
    if (x.length != kFullExtent) e.add_int64(2, x.length);
    s.add_message(1, e);
  }
  return s.release();
}

// A float32 entry; with `slices`, a partitioned tensor's full entry (no data of its own).
std::string entry(const std::vector<std::int64_t>& dims, std::int64_t offset, const std::string& data,
                  const std::vector<TensorSliceSpec>& slices = {}) {
  ProtoWriter shape;
  for (std::int64_t d : dims) {
    ProtoWriter dim;
    dim.add_int64(1, d);
    shape.add_message(2, dim);
  }
  ProtoWriter e;
  e.add_varint(1, 1);  // DT_FLOAT
  e.add_message(2, shape);
  if (offset) e.add_int64(4, offset);
  if (!data.empty()) e.add_int64(5, static_cast<std::int64_t>(data.size()));
  for (const TensorSliceSpec& s : slices) e.add_bytes(7, slice_proto(s));
  std::string out = e.release();
  if (!data.empty()) {
    wire::append_varint(out, (6 << 3) | 5);
    wire::append_fixed32(out, mask_crc32c(crc32c(data.data(), data.size())));
  }
  return out;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(v.begin()), v.size() * sizeof(float));
}

// A bundle holding kW [2, 3] in `slices`, each stored as `pieces[i]` (the data for the slice's
// shape; an empty string leaves its entry out), in one data file.
std::string write_sliced(const TempDir& dir, const std::vector<TensorSliceSpec>& slices,
                         const std::vector<std::pair<std::vector<std::int64_t>, std::string>>& pieces) {
  std::map<std::string, std::string> table;
  std::string data;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (pieces[i].second.empty()) continue;
    table[internal::encode_tensor_name_slice(kW, slices[i])] =
        entry(pieces[i].first, static_cast<std::int64_t>(data.size()), pieces[i].second);
    data += pieces[i].second;
  }
  table[kW] = entry({2, 3}, 0, "", slices);
  internal::TableBuilder t;
  t.add("", internal::encode_bundle_header());
  for (const auto& [k, v] : table) t.add(k, v);
  testing::spit(dir / "s.index", t.finish());
  testing::spit(dir / "s.data-00000-of-00001", data);
  return dir / "s";
}

TEST(BundleSlices, HandMadeSlicesAssembleAcrossRowsAndColumns) {
  TempDir dir;
  // [[0 1 2] [3 4 5]] as: column 2 (both rows), row 0 columns 0..1, row 1 columns 0..1.
  const std::string prefix =
      write_sliced(dir, {{{0, kFullExtent}, {2, 1}}, {{0, 1}, {0, 2}}, {{1, 1}, {0, 2}}},
                   {{{2, 1}, floats({2, 5})}, {{1, 2}, floats({0, 1})}, {{1, 2}, floats({3, 4})}});
  BundleReader r(prefix);
  EXPECT_EQ(r.keys(), std::vector<std::string>{kW});
  EXPECT_EQ(r.entry(kW).shape, (Shape{2, 3}));
  EXPECT_EQ(r.read(kW).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(BundleSlices, BrokenSlicesAreDataLoss) {
  const TensorSliceSpec top{{0, 1}, {0, kFullExtent}}, bottom{{1, 1}, {0, kFullExtent}};
  {
    SCOPED_TRACE("uncovered elements");
    TempDir dir;
    const std::string prefix = write_sliced(dir, {top}, {{{1, 3}, floats({0, 1, 2})}});
    BundleReader r(prefix);
    const std::string m = message_of<DataLossError>([&] { r.read(kW); });
    EXPECT_NE(m.find("the 1 slices of partitioned tensor '" + kW + "' (2, 3) cover 3 of its 6 elements"),
              std::string::npos)
        << m;
  }
  {
    SCOPED_TRACE("missing slice data");
    TempDir dir;
    const std::string prefix = write_sliced(dir, {top, bottom}, {{{1, 3}, floats({0, 1, 2})}, {{1, 3}, ""}});
    const std::string m = message_of<DataLossError>([&] { BundleReader r(prefix); });
    EXPECT_NE(m.find("entry '" + kW + "': the data of slice [1:2, 0:3] is missing"), std::string::npos) << m;
  }
  {
    SCOPED_TRACE("slice of the wrong shape");
    TempDir dir;
    const std::string prefix =
        write_sliced(dir, {top, bottom}, {{{1, 3}, floats({0, 1, 2})}, {{3, 1}, floats({3, 4, 5})}});
    const std::string m = message_of<DataLossError>([&] { BundleReader r(prefix); });
    EXPECT_NE(m.find("slice [1:2, 0:3] is stored as DT_FLOAT (float32) (3, 1), expected DT_FLOAT (float32) (1, 3)"),
              std::string::npos)
        << m;
  }
  {
    SCOPED_TRACE("slice out of range");
    TempDir dir;
    const std::string prefix = write_sliced(dir, {top, {{1, 2}, {0, kFullExtent}}},
                                            {{{1, 3}, floats({0, 1, 2})}, {{2, 3}, floats({1, 2, 3, 4, 5, 6})}});
    const std::string m = message_of<DataLossError>([&] { BundleReader r(prefix); });
    EXPECT_NE(m.find("slice 1, dimension 0: start 1 length 2 is not within [0, 2)"), std::string::npos) << m;
  }
  {
    SCOPED_TRACE("slice of another rank");
    TempDir dir;
    const std::string prefix = write_sliced(dir, {{{0, 2}}}, {{{2}, floats({0, 1})}});
    const std::string m = message_of<DataLossError>([&] { BundleReader r(prefix); });
    EXPECT_NE(m.find("slice 0 has 1 extents for a tensor of rank 2"), std::string::npos) << m;
  }
  {
    SCOPED_TRACE("a corrupt slice's checksum");
    TempDir dir;
    const std::string prefix =
        write_sliced(dir, {top, bottom}, {{{1, 3}, floats({0, 1, 2})}, {{1, 3}, floats({3, 4, 5})}});
    std::string data = testing::slurp(prefix + ".data-00000-of-00001");
    data[13] ^= 1;
    testing::spit(prefix + ".data-00000-of-00001", data);
    BundleReader r(prefix);
    const std::string m = message_of<DataLossError>([&] { r.read(kW); });
    EXPECT_NE(m.find("tensor '" + kW + "': checksum does not match"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace chorus::train
