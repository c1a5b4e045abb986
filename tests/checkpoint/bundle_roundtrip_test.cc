// BundleWriter → BundleReader round trips: every chorus dtype (incl. 0-element and rank-0),
// DT_STRING, many keys over several table blocks, the docs/formats.md B6 byte-exact test vector, the
// real TF-written index, and the API's error cases.
#include <chorus/checkpoint/bundle.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/table.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>

namespace chorus::train {
namespace {

using testing::TempDir;

template <typename T>
void expect_round_trip(const std::vector<T>& values, const Shape& shape) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  const Tensor t = Tensor::from_vector<T>(values, shape, "/CPU:0");
  {
    BundleWriter w(prefix);
    w.add("t", t);
    w.finish();
  }
  BundleReader r(prefix);
  ASSERT_EQ(r.keys(), std::vector<std::string>{"t"});
  const BundleEntry& e = r.entry("t");
  EXPECT_FALSE(e.is_string);
  EXPECT_EQ(e.dtype, dtype_of<T>());
  EXPECT_EQ(e.shape, shape);
  EXPECT_EQ(e.offset, 0);
  EXPECT_EQ(e.size, static_cast<std::int64_t>(values.size() * dtype_size(dtype_of<T>())));
  const Tensor back = r.read("t");
  EXPECT_EQ(back.dtype(), dtype_of<T>());
  EXPECT_EQ(back.shape(), shape);
  // Compare raw bytes: exact, NaN-safe, and the data file holds the raw little-endian buffer.
  std::vector<char> want(t.nbytes()), got(back.nbytes());
  t.copy_to_host(want.data());
  back.copy_to_host(got.data());
  EXPECT_EQ(want, got);
  EXPECT_EQ(testing::slurp(data_filename(prefix)), std::string(want.begin(), want.end()));
}

TEST(BundleRoundTrip, EveryDTypeWithRank0AndEmptyTensors) {
  expect_round_trip<float>({1.5f, -2.f, std::numeric_limits<float>::quiet_NaN(), 1e30f, -0.f, 7.f}, {2, 3});
  expect_round_trip<double>({3.141592653589793, -1e300}, {2});
  expect_round_trip<float16>({float16(1.f), float16(-65504.f), float16(0.5f)}, {3, 1});
  expect_round_trip<bfloat16>({bfloat16(1.f), bfloat16(-3e38f)}, {1, 2});
  expect_round_trip<std::int32_t>({std::numeric_limits<std::int32_t>::min(), 0, 42}, {3});
  expect_round_trip<std::int64_t>({std::numeric_limits<std::int64_t>::max(), -1}, {2, 1, 1});
  expect_round_trip<std::uint8_t>({0, 255, 17, 3}, {2, 2});
  expect_round_trip<bool>({true, false, true}, {3});
  // rank 0
  expect_round_trip<float>({2.5f}, Shape{});
  expect_round_trip<std::int64_t>({7}, Shape{});
  expect_round_trip<bool>({true}, Shape{});
  // 0 elements
  expect_round_trip<float>({}, {0});
  expect_round_trip<std::int32_t>({}, {3, 0, 2});
  expect_round_trip<double>({}, {0, 0});
}

TEST(BundleRoundTrip, SeveralTensorsKeepTheirOffsetsAndOrder) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-2";
  BundleWriter w(prefix);
  // Added out of order: the index is sorted, the data file keeps the order of add().
  w.add("z", Tensor::from_vector<float>({1, 2, 3}, "/CPU:0"));
  w.add("a", Tensor::from_vector<std::int64_t>({4, 5}, "/CPU:0"));
  w.add("m", Tensor::scalar<double>(6.0, "/CPU:0"));
  w.finish();
  EXPECT_EQ(w.prefix(), prefix);
  EXPECT_TRUE(bundle_exists(prefix));
  BundleReader r(prefix);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"a", "m", "z"}));
  EXPECT_EQ(r.entry("z").offset, 0);
  EXPECT_EQ(r.entry("a").offset, 12);
  EXPECT_EQ(r.entry("m").offset, 28);
  EXPECT_EQ(r.read("z").to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(r.read("a").to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(r.read("m").item<double>(), 6.0);
  EXPECT_TRUE(r.contains("m"));
  EXPECT_FALSE(r.contains("b"));
  EXPECT_EQ(std::filesystem::file_size(data_filename(prefix)), 36u);
}

TEST(BundleRoundTrip, Strings) {
  TempDir dir;
  const std::string prefix = dir / "s";
  const std::string big(100000, 'x');
  std::string binary("a\0b\xff", 4);
  {
    BundleWriter w(prefix);
    w.add_strings("graph", {"serialized graph bytes"});
    w.add_strings("empty_scalar", {""});
    w.add_strings("matrix", {"", "one", binary, big, "", "six"}, Shape{2, 3});
    w.add_strings("none", {}, Shape{0});
    w.add("after", Tensor::from_vector<float>({9}, "/CPU:0"));
    w.finish();
  }
  BundleReader r(prefix);
  EXPECT_TRUE(r.entry("graph").is_string);
  EXPECT_EQ(r.entry("graph").tf_dtype, internal::kTfString);
  EXPECT_EQ(r.entry("graph").shape, Shape{});
  EXPECT_EQ(r.read_strings("graph"), std::vector<std::string>{"serialized graph bytes"});
  EXPECT_EQ(r.read_strings("empty_scalar"), std::vector<std::string>{""});
  EXPECT_EQ(r.read_strings("matrix"), (std::vector<std::string>{"", "one", binary, big, "", "six"}));
  EXPECT_EQ(r.entry("matrix").shape, (Shape{2, 3}));
  EXPECT_TRUE(r.read_strings("none").empty());
  EXPECT_EQ(r.read("after").to_vector<float>(), std::vector<float>{9});
  // The layout of docs/formats.md B4: [varint lengths][masked crc of the lengths as uint32][bytes].
  const BundleEntry& g = r.entry("graph");
  const std::string data = testing::slurp(data_filename(prefix));
  const std::string payload = data.substr(static_cast<std::size_t>(g.offset), static_cast<std::size_t>(g.size));
  ASSERT_EQ(payload.size(), 1 + 4 + 22u);
  EXPECT_EQ(payload[0], 22);
  const std::uint32_t len = 22;
  std::uint32_t stored;
  std::memcpy(&stored, payload.data() + 1, 4);
  EXPECT_EQ(stored, mask_crc32c(crc32c(&len, 4)));
  EXPECT_EQ(payload.substr(5), "serialized graph bytes");
  // The entry's crc runs over the lengths as uint32 (not as varints), the stored checksum, the bytes.
  std::string crc_input(reinterpret_cast<const char*>(&len), 4);
  crc_input += payload.substr(1);
  EXPECT_EQ(g.masked_crc32c, mask_crc32c(crc32c(crc_input.data(), crc_input.size())));
  // read() of a DT_STRING entry gives a string tensor (core/tensor.h) with the same values.
  const Tensor graph = r.read("graph");
  EXPECT_EQ(graph.dtype(), DType::kString);
  EXPECT_EQ(graph.shape(), Shape{});
  EXPECT_EQ(graph.item<std::string>(), "serialized graph bytes");
  EXPECT_THROW(r.read_strings("after"), InvalidArgumentError);
}

TEST(BundleRoundTrip, ManyLongKeysSpanSeveralTableBlocks) {
  TempDir dir;
  const std::string prefix = dir / "many";
  constexpr int kKeys = 5000;
  // A scrambled number right after "m/" keeps consecutive keys from sharing long prefixes, so
  // each index entry carries ~100 key bytes: > 500 KB of entries, three or more data blocks.
  auto key = [](int i) {
    const std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u;
    return "m/" + std::to_string(h) + "/layer_with_weights-" + std::to_string(i % 97) +
           "/very/long/path/to/make/the/index/large/" + std::to_string(i) + "/.ATTRIBUTES/VARIABLE_VALUE";
  };
  {
    BundleWriter w(prefix);
    for (int i = 0; i < kKeys; ++i) w.add(key(i), Tensor::from_vector<std::int32_t>({i, -i}, "/CPU:0"));
    w.finish();
  }
  const std::string index = testing::slurp(index_filename(prefix));
  ASSERT_GT(index.size(), 2 * internal::kBlockSize);
  // The index block (restart interval 1) has one restart per data block.
  std::uint64_t off = 0, size = 0;
  {
    std::size_t pos = index.size() - 48;
    auto varint = [&] {
      std::uint64_t v = 0;
      for (int s = 0;; s += 7) {
        const auto b = static_cast<std::uint8_t>(index[pos++]);
        v |= std::uint64_t{b & 0x7fu} << s;
        if (!(b & 0x80)) return v;
      }
    };
    varint();
    varint();
    off = varint();
    size = varint();
  }
  std::uint32_t blocks;
  std::memcpy(&blocks, index.data() + off + size - 4, 4);
  EXPECT_GE(blocks, 3u);
  BundleReader r(prefix);
  const std::vector<std::string> keys = r.keys();
  ASSERT_EQ(keys.size(), static_cast<std::size_t>(kKeys));
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  for (int i = 0; i < kKeys; i += 7) {
    const std::vector<std::int32_t> v = r.read(key(i)).to_vector<std::int32_t>();
    ASSERT_EQ(v, (std::vector<std::int32_t>{i, -i})) << key(i);
  }
}

TEST(BundleRoundTrip, ConcurrentReads) {
  TempDir dir;
  const std::string prefix = dir / "c";
  {
    BundleWriter w(prefix);
    for (int i = 0; i < 16; ++i) w.add("k" + std::to_string(i), Tensor::full({1000}, i, DType::kFloat32, "/CPU:0"));
    w.finish();
  }
  const BundleReader r(prefix);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 16; ++i) {
        const int k = (i + t) % 16;
        const std::vector<float> v = r.read("k" + std::to_string(k)).to_vector<float>();
        if (v.size() != 1000 || v[999] != static_cast<float>(k)) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// docs/formats.md B6: one float32 [2] tensor {1, 2} gives this 148-byte index and 8-byte data file.
TEST(BundleFormat, TestVectorOfFormatsB6ByteForByte) {
  const std::string expected_index = testing::unhex(
      "00000608011a020801001c0f762f2e415454524942555445532f5641524941424c455f56414c55450801120412020802280835593ce535"
      "0000000001000000"
      "00 3c6b67c8"
      "0000000001000000"
      "00 c0f2a1b0"
      "00 01 02 77 003f 00000000 01000000"
      "00 273eb947"
      "44 08 51 0e 000000000000000000000000000000000000000000000000000000000000000000000000 57fb808b 247547db");
  ASSERT_EQ(expected_index.size(), 148u);
  TempDir dir;
  const std::string prefix = dir / "v";
  {
    BundleWriter w(prefix);
    w.add("v/.ATTRIBUTES/VARIABLE_VALUE", Tensor::from_vector<float>({1.f, 2.f}, "/CPU:0"));
    w.finish();
  }
  EXPECT_EQ(testing::hex(testing::slurp(index_filename(prefix))), testing::hex(expected_index));
  EXPECT_EQ(testing::hex(testing::slurp(data_filename(prefix))), "0000803f00000040");
  // The stated data CRC, independently: mask(crc32c(bytes)).
  const float data[2] = {1.f, 2.f};
  EXPECT_EQ(mask_crc32c(crc32c(data, 8)), 0x35e53c59u);
  BundleReader r(prefix);
  EXPECT_EQ(r.entry("v/.ATTRIBUTES/VARIABLE_VALUE").masked_crc32c, 0x35e53c59u);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"v.data-00000-of-00001", "v.index"}));
}

// The real index TensorFlow 2 wrote (tests/checkpoint/testdata/README.md); its data file is absent.
TEST(BundleFormat, ReadsTheIndexTensorFlowWrote) {
  const std::string prefix = std::string(CHORUS_CHECKPOINT_TESTDATA) + "/keras_model_ckpt-1";
  ASSERT_TRUE(bundle_exists(prefix)) << prefix;
  // The table itself: 972 entries, the header first with the observed value.
  const std::string index = testing::slurp(index_filename(prefix));
  ASSERT_EQ(index.size(), 77533u);
  std::vector<std::pair<std::string, std::string>> entries;
  internal::read_table(index, "tf", [&](std::string_view k, std::string_view v) { entries.emplace_back(k, v); });
  ASSERT_EQ(entries.size(), 972u);
  EXPECT_EQ(entries[0].first, "");
  EXPECT_EQ(testing::hex(entries[0].second), "08011a020801");

  BundleReader r(prefix);
  const std::vector<std::string> keys = r.keys();
  EXPECT_EQ(keys.size(), 971u);
  ASSERT_TRUE(r.contains("_CHECKPOINTABLE_OBJECT_GRAPH"));
  const BundleEntry& g = r.entry("_CHECKPOINTABLE_OBJECT_GRAPH");
  EXPECT_TRUE(g.is_string);
  EXPECT_EQ(g.shape.rank(), 0);
  EXPECT_GT(g.size, 0);
  int floats = 0;
  bool saw_1280 = false;
  for (const std::string& k : keys) {
    const BundleEntry& e = r.entry(k);
    if (e.tf_dtype == internal::kTfFloat) {
      ++floats;
      EXPECT_EQ(e.size, e.shape.num_elements() * 4) << k;
      if (e.shape == Shape{1280} && e.size == 5120) saw_1280 = true;
    }
  }
  EXPECT_GT(floats, 100);
  EXPECT_TRUE(saw_1280);  // docs/formats.md B3's observed entry: DT_FLOAT [1280], 5120 bytes
  // Reading needs the data file, which is not there.
  try {
    r.read_strings("_CHECKPOINTABLE_OBJECT_GRAPH");
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("keras_model_ckpt-1.data-00000-of-00001"), std::string::npos) << e.what();
  }
}

TEST(BundleApi, Errors) {
  TempDir dir;
  EXPECT_THROW(BundleWriter(dir / "missing_dir/ckpt"), NotFoundError);
  EXPECT_THROW(BundleReader(dir / "nothing"), NotFoundError);
  EXPECT_FALSE(bundle_exists(dir / "nothing"));
  const std::string prefix = dir / "p";
  BundleWriter w(prefix);
  w.add("a", Tensor::scalar<float>(1, "/CPU:0"));
  EXPECT_THROW(w.add("a", Tensor::scalar<float>(2, "/CPU:0")), InvalidArgumentError);
  EXPECT_THROW(w.add("", Tensor::scalar<float>(2, "/CPU:0")), InvalidArgumentError);
  EXPECT_THROW(w.add_strings("s", {"x", "y"}, Shape{3}), InvalidArgumentError);
  EXPECT_THROW(w.add("u", Tensor()), InvalidArgumentError);
  w.finish();
  EXPECT_THROW(w.finish(), FailedPreconditionError);
  EXPECT_THROW(w.add("b", Tensor::scalar<float>(2, "/CPU:0")), FailedPreconditionError);
  BundleReader r(prefix);
  try {
    r.entry("b");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();  // the nearest key
  }
  BundleReader moved(std::move(r));
  EXPECT_EQ(moved.read("a").item<float>(), 1.f);
}

TEST(BundleApi, Filenames) {
  EXPECT_EQ(index_filename("/d/ckpt-3"), "/d/ckpt-3.index");
  EXPECT_EQ(data_filename("/d/ckpt-3"), "/d/ckpt-3.data-00000-of-00001");
}

}  // namespace
}  // namespace chorus::train
