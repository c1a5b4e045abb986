// Sharded checkpoints (docs/checkpoints.md "Sharded checkpoints"): ZeRO shards written as TF
// slices straight from each replica's storage, and read back onto any layout.
//
//   FlatRangeSlices: every range of several shapes is cut into at most 2·rank − 1 boxes, in flat
//     order, each contiguous in the flattening, whose union is exactly the range.
//   BundleWriterSlices: a tensor written as the shards of 4 replicas (one writer) reads back
//     whole, and read_flat_ranges gives the shards of every other replica count, from the slices
//     and from a whole entry; a slice entry lies in the index under TF's slice key.
//   ShardMetadataMerge: the chief refuses reports that claim a key twice, leave elements
//     uncovered, name another worker's file, miss a worker, carry a worker's error, or have no or
//     two chiefs — and names what was wrong.
//   ShardedSave: ZeRO stage 3 on 4 logical CPU replicas saves its parameters as slices (no whole
//     tensor) into one data file, restores onto stage 0 with 1 replica, stage 2 with 2, stage 3
//     with 3 and 4, and the keys and values equal a gather-to-chief save's (SaveOptions::sharded
//     = false). An async save writes the values of the call.
//   ShardedSaveMemory: a model of 256 MiB (4 variables of 64 MiB, stage 3 over 4 replicas: shards
//     of 16 MiB) saves with a peak resident-memory growth under a limit of 48 MiB, below the
//     model; the gather-to-chief save of the same model exceeds that limit (it holds whole
//     tensors), so the bound can fail.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

#include "tests/core/test_util.h"
#include <chorus/checkpoint/atomic_file.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/shard_metadata.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/mirrored_strategy.h>

namespace chorus::train {
namespace {

using chorus::testing::cpus;
using chorus::testing::make_cpus;
using chorus::testing::message_of;
using chorus::testing::TempDir;
using internal::flat_range_slices;
using internal::kFullExtent;

// ---- FlatRangeSlices ----

std::int64_t flat_of(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& at) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + at[d];
  return f;
}

// The flat indices of a box, in the box's row-major order.
std::vector<std::int64_t> box_elements(const std::vector<std::int64_t>& dims, const internal::TensorSliceSpec& spec) {
  std::vector<std::int64_t> start(dims.size()), length(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    start[d] = spec[d].length == kFullExtent ? 0 : spec[d].start;
    length[d] = spec[d].length == kFullExtent ? dims[d] : spec[d].length;
  }
  std::vector<std::int64_t> out, at(dims.size(), 0);
  std::int64_t count = 1;
  for (std::int64_t l : length) count *= l;
  for (std::int64_t i = 0; i < count; ++i) {
    std::vector<std::int64_t> idx(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) idx[d] = start[d] + at[d];
    out.push_back(flat_of(dims, idx));
    for (std::size_t d = dims.size(); d-- > 0;) {
      if (++at[d] < length[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

TEST(FlatRangeSlices, EveryRangeIsCutIntoContiguousBoxesInFlatOrder) {
  for (const std::vector<std::int64_t>& dims :
       std::vector<std::vector<std::int64_t>>{{7}, {3, 5}, {2, 3, 4}, {4, 1, 3}, {2, 2, 2, 3}}) {
    std::int64_t total = 1;
    for (std::int64_t d : dims) total *= d;
    for (std::int64_t b = 0; b <= total; ++b) {
      for (std::int64_t n = 0; b + n <= total; ++n) {
        const auto boxes = flat_range_slices(dims, b, n);
        EXPECT_LE(static_cast<std::int64_t>(boxes.size()), 2 * static_cast<std::int64_t>(dims.size()) - 1);
        std::int64_t next = b;
        for (const internal::FlatSlice& box : boxes) {
          ASSERT_EQ(box.begin, next) << "dims rank " << dims.size() << " range " << b << "+" << n;
          const std::vector<std::int64_t> flat = box_elements(dims, box.spec);
          ASSERT_EQ(static_cast<std::int64_t>(flat.size()), box.length);
          for (std::size_t i = 0; i < flat.size(); ++i) ASSERT_EQ(flat[i], box.begin + static_cast<std::int64_t>(i));
          std::int64_t shape_elements = 1;
          for (std::int64_t d : box.shape) shape_elements *= d;
          EXPECT_EQ(shape_elements, box.length);
          next += box.length;
        }
        EXPECT_EQ(next, b + n);
      }
    }
  }
  EXPECT_THROW(flat_range_slices({3, 5}, 10, 6), InvalidArgumentError);
  EXPECT_THROW(flat_range_slices({}, 0, 1), InvalidArgumentError);
}

// ---- BundleWriterSlices ----

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.25f;
  return Tensor::from_vector(v, shape, "/CPU:0");
}

std::vector<float> range_of(const Tensor& whole, std::int64_t begin, std::int64_t length) {
  const std::vector<float> all = whole.to_vector<float>();
  return {all.begin() + begin, all.begin() + begin + length};
}

Tensor piece(const Tensor& whole, std::int64_t begin, std::int64_t length) {
  return Tensor::from_vector(range_of(whole, begin, length), Shape{length}, "/CPU:0");
}

TEST(BundleWriterSlices, ShardsWrittenAsSlicesReadBackWholeAndAsAnyOtherLayout) {
  TempDir dir;
  const Shape shape{5, 7};
  const Tensor value = iota(shape);
  const std::string prefix = dir.path() + "/sliced";
  {
    BundleWriter w(prefix);
    const ShardLayout layout = ShardLayout::of(35, 4);  // 9, 9, 9, 8
    for (int r = 0; r < 4; ++r)
      w.add_flat_slice("v", shape, layout.begin(r), piece(value, layout.begin(r), layout.length(r)));
    w.add("whole", value);
    w.finish();
  }
  const BundleReader reader(prefix);
  EXPECT_EQ(reader.keys(), (std::vector<std::string>{"v", "whole"}));  // slice entries are not listed
  EXPECT_EQ(reader.entry("v").shape, shape);
  EXPECT_EQ(reader.read("v").to_vector<float>(), value.to_vector<float>());
  for (const char* key : {"v", "whole"}) {
    for (int n : {1, 2, 3, 5, 6}) {
      const ShardLayout l = ShardLayout::of(35, n);
      std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
      for (int r = 0; r < n; ++r) ranges.emplace_back(l.begin(r), l.length(r));
      const std::vector<Tensor> got = reader.read_flat_ranges(key, ranges);
      ASSERT_EQ(got.size(), ranges.size());
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(got[r].to_vector<float>(), range_of(value, l.begin(r), l.length(r)))
            << key << " n=" << n << " r=" << r;
    }
  }
  EXPECT_THROW(reader.read_flat_ranges("v", {{30, 6}}), InvalidArgumentError);
  // Shard 1 covers elements [9, 18): row 1's last 5 ([1, 2:7]) and row 2's first 4 ([2, 0:4]).
  const internal::BundleIndex index = internal::parse_bundle_index(read_file(index_filename(prefix)), "index");
  ASSERT_TRUE(index.sliced.count("v"));
  const std::vector<internal::TensorSliceSpec>& slices = index.sliced.at("v").slices;
  EXPECT_EQ(slices.size(), 8u);  // 2 boxes per shard
  EXPECT_TRUE(std::any_of(slices.begin(), slices.end(), [](const internal::TensorSliceSpec& s) {
    return s.size() == 2 && s[0].start == 1 && s[0].length == 1 && s[1].start == 2 && s[1].length == 5;
  })) << "shard 1's first box, [1, 2:7]";
}

TEST(BundleWriterSlices, ARangeThatIsTheWholeTensorIsAPlainEntryAndMisuseIsRefused) {
  TempDir dir;
  const std::string prefix = dir.path() + "/b";
  BundleWriter w(prefix);
  w.add_flat_slice("one", Shape{1}, 0, iota(Shape{1}));      // E = 1 over 4 replicas: shard 0 is all
  w.add_flat_slice("one", Shape{1}, 1, Tensor::zeros({0}));  // an empty shard: nothing
  EXPECT_THROW(w.add_flat_slice("x", Shape{2, 2}, 3, iota(Shape{2})), InvalidArgumentError);     // past the end
  EXPECT_THROW(w.add_flat_slice("x", Shape{2, 2}, 0, iota(Shape{2, 2})), InvalidArgumentError);  // not 1-D
  w.add_flat_slice("x", Shape{2, 2}, 0, iota(Shape{2}));
  EXPECT_THROW(w.add_flat_slice("x", Shape{4}, 2, iota(Shape{2})), InvalidArgumentError);     // another shape
  EXPECT_THROW(w.add_flat_slice("x", Shape{2, 2}, 0, iota(Shape{2})), InvalidArgumentError);  // twice
  w.add_flat_slice("x", Shape{2, 2}, 2, piece(iota(Shape{4}), 2, 2));
  w.finish();
  const BundleReader r(prefix);
  EXPECT_EQ(r.read("one").to_vector<float>(), (std::vector<float>{0.25f}));
  EXPECT_EQ(r.read("x").to_vector<float>(), iota(Shape{4}).to_vector<float>());
  const internal::BundleIndex index = internal::parse_bundle_index(read_file(index_filename(prefix)), "index");
  EXPECT_FALSE(index.sliced.count("one"));
  EXPECT_TRUE(index.sliced.count("x"));
}

// ---- ShardMetadataMerge ----

// Worker w's metadata: slice [w·per, (w+1)·per) of "v" [n·per], written by a real writer.
std::string worker_metadata(const std::string& prefix, int w, int n, std::int64_t per, bool chief,
                            std::int64_t begin = -1) {
  BundleWriter writer(prefix, w, n);
  const std::int64_t b = begin >= 0 ? begin : w * per;
  writer.add_flat_slice("v", Shape{n * per}, b, piece(iota(Shape{n * per}), b, per));
  return writer.finish_shard(chief);
}

TEST(ShardMetadataMerge, TheChiefMergesEveryWorkersSlicesAndRefusesInconsistentReports) {
  TempDir dir;
  const std::string p = dir.path() + "/m";
  const std::string all =
      worker_metadata(p, 1, 3, 4, false) + worker_metadata(p, 0, 3, 4, true) + worker_metadata(p, 2, 3, 4, false);
  EXPECT_FALSE(bundle_exists(p)) << "no index before the chief commits";
  write_sharded_index(p, 3, all);
  EXPECT_EQ(BundleReader(p).read("v").to_vector<float>(), iota(Shape{12}).to_vector<float>());

  const auto reports = [&](const std::string& bytes) { return internal::decode_shard_metadata(bytes, "test"); };
  const std::string w0 = worker_metadata(dir.path() + "/a", 0, 2, 4, true);
  const std::string w1 = worker_metadata(dir.path() + "/a", 1, 2, 4, false);
  EXPECT_NO_THROW(internal::merge_shard_index(reports(w0 + w1), 2, "a.index"));
  EXPECT_NE(
      message_of<DataLossError>([&] { internal::merge_shard_index(reports(w0), 2, "a.index"); }).find("1 of 2 workers"),
      std::string::npos);
  EXPECT_THROW(internal::merge_shard_index(reports(w0 + w0), 2, "a.index"), DataLossError);
  // Worker 1 writes worker 0's elements again: the slice key repeats.
  const std::string dup = worker_metadata(dir.path() + "/b", 1, 2, 4, false, 0);
  const std::string twice =
      message_of<DataLossError>([&] { internal::merge_shard_index(reports(w0 + dup), 2, "b.index"); });
  EXPECT_NE(twice.find("written twice"), std::string::npos) << twice;
  // Worker 1 writes elements [2, 6): they overlap worker 0's and leave [6, 8) uncovered.
  const std::string gap = worker_metadata(dir.path() + "/c", 1, 2, 4, false, 2);
  EXPECT_NE(message_of<DataLossError>([&] {
              internal::merge_shard_index(reports(w0 + gap), 2, "c.index");
            }).find("two slices of 'v' overlap"),
            std::string::npos);
  // A worker's entry naming another worker's data file.
  internal::ShardMetadata forged = reports(w1)[0];
  forged.worker = 0;
  forged.chief = true;
  internal::ShardMetadata other = reports(w0)[0];
  other.worker = 1;
  other.chief = false;
  EXPECT_THROW(internal::merge_shard_index({forged, other}, 2, "d.index"), DataLossError);
  // A worker's error: AbortedError naming it; no chief or two chiefs: refused.
  internal::ShardMetadata failed{1, false, "disk full", {}};
  EXPECT_NE(message_of<AbortedError>([&] {
              internal::check_shard_reports({reports(w0)[0], failed}, 2, "e.index");
            }).find("worker 1 could not write its data file, nothing was committed: disk full"),
            std::string::npos);
  internal::ShardMetadata second_chief = reports(w1)[0];
  second_chief.chief = true;
  EXPECT_THROW(internal::check_shard_reports({reports(w0)[0], second_chief}, 2, "f.index"), FailedPreconditionError);
  // Garbage on the wire.
  EXPECT_THROW(internal::decode_shard_metadata(std::string("\x0a\x7f", 2), "test"), DataLossError);
}

// ---- ShardedSave ----

// Stage-3 parameters (and not-trainable mirrored ones) of several shapes, uneven over 4 replicas.
struct Params {
  std::vector<Variable> vars;
  std::vector<TrackableChild> children() const {
    std::vector<TrackableChild> out;
    for (const Variable& v : vars) out.push_back({v.name(), TrackableRef(v)});
    return out;
  }
};

const std::vector<Shape> kShapes{{5, 7}, {3, 4, 5}, {1}, {6}, {64, 130}};

Params make_params(distribute::MirroredStrategy& strategy, float offset) {
  Params p;
  auto scope = strategy.scope();
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    std::vector<float> v(static_cast<std::size_t>(kShapes[i].num_elements()));
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = offset + static_cast<float>(i * 1000 + j);
    p.vars.push_back(
        make_variable({.initial_value = Tensor::from_vector(v, kShapes[i]), .name = "p" + std::to_string(i)}));
  }
  p.vars.push_back(
      make_variable({.initial_value = Tensor::scalar<std::int64_t>(7), .name = "step", .trainable = false}));
  return p;
}

// A variable's whole value, as a checkpoint stores it.
Tensor whole_of(const Variable& v) {
  const DistributedVariable* d = as_distributed(v);
  return d ? d->checkpoint_value() : v.value();
}

std::string bytes_of(const Tensor& t) {
  std::string out(t.nbytes(), '\0');
  if (!out.empty()) t.copy_to_host(out.data());
  return out;
}

std::vector<std::vector<float>> values_of(const Params& p) {
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < kShapes.size(); ++i) out.push_back(whole_of(p.vars[i]).to_vector<float>());
  return out;
}

class ShardedSave : public ::testing::Test {
 protected:
  void SetUp() override { make_cpus(4); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
  TempDir dir_;
};

TEST_F(ShardedSave, StageThreeWritesSlicesThatRestoreOntoAnyStageAndReplicaCount) {
  distribute::MirroredStrategy strategy(cpus(4), {.sharding = {.stage = 3}});
  const Params saved = make_params(strategy, 0.5f);
  ASSERT_NE(as_sharded(saved.vars[0]), nullptr);
  const auto want = values_of(saved);
  const std::string sharded = dir_.path() + "/sharded", gathered = dir_.path() + "/gathered";
  {
    Checkpoint ckpt(saved.children());
    ckpt.write(sharded);
    ckpt.write(gathered, {.sharded = false});
  }
  EXPECT_TRUE(std::filesystem::exists(sharded + ".data-00000-of-00001")) << "one process, one data file";
  const internal::BundleIndex index = internal::parse_bundle_index(read_file(index_filename(sharded)), "index");
  const internal::BundleIndex whole = internal::parse_bundle_index(read_file(index_filename(gathered)), "index");
  EXPECT_TRUE(whole.sliced.empty());
  for (const std::string key : {"p0", "p1", "p3", "p4"})
    EXPECT_TRUE(index.sliced.count(key + std::string("/.ATTRIBUTES/VARIABLE_VALUE"))) << key;
  EXPECT_FALSE(index.sliced.count("p2/.ATTRIBUTES/VARIABLE_VALUE")) << "one element: shard 0 holds it whole";
  const BundleReader rs(sharded), rg(gathered);
  EXPECT_EQ(rs.keys(), rg.keys());
  for (const std::string& key : rg.keys()) {
    if (key == "_CHECKPOINTABLE_OBJECT_GRAPH") continue;
    EXPECT_EQ(rs.entry(key).shape, rg.entry(key).shape) << key;
    EXPECT_EQ(bytes_of(rs.read(key)), bytes_of(rg.read(key))) << key;
  }
  // Restore onto (replicas, stage): each gets the saved values.
  for (const auto& [k, stage] : std::vector<std::pair<int, int>>{{1, 0}, {2, 2}, {3, 3}, {4, 3}, {4, 1}}) {
    SCOPED_TRACE("restore onto " + std::to_string(k) + " replicas at stage " + std::to_string(stage));
    distribute::MirroredStrategy target(cpus(k), {.sharding = {.stage = stage}});
    const Params p = make_params(target, -100.0f);
    EXPECT_EQ(as_sharded(p.vars[0]) != nullptr, stage == 3);
    Checkpoint(p.children()).read(sharded).assert_consumed();
    EXPECT_EQ(values_of(p), want);
    EXPECT_EQ(p.vars.back().value().item<std::int64_t>(), 7);
  }
}

TEST_F(ShardedSave, AnAsyncShardedSaveWritesTheValuesOfTheCall) {
  distribute::MirroredStrategy strategy(cpus(4), {.sharding = {.stage = 3}});
  Params p = make_params(strategy, 1.0f);
  const auto want = values_of(p);
  Checkpoint ckpt(p.children());
  const std::string path = ckpt.write(dir_.path() + "/async", {.async = true});
  for (std::size_t i = 0; i < kShapes.size(); ++i) p.vars[i].assign(Tensor::zeros(kShapes[i]));  // waits for the copy
  ckpt.sync();
  const BundleReader r(path);
  for (std::size_t i = 0; i < kShapes.size(); ++i)
    EXPECT_EQ(r.read("p" + std::to_string(i) + "/.ATTRIBUTES/VARIABLE_VALUE").to_vector<float>(), want[i]) << i;
}

// ---- ShardedSaveMemory ----

std::int64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  return -1;
}

// The growth of the peak resident set over the resident set before `f` (VmHWM reset first).
template <typename F>
std::int64_t peak_growth_mib(F&& f) {
  std::FILE* reset = std::fopen("/proc/self/clear_refs", "w");
  if (reset == nullptr || std::fputs("5", reset) < 0 || std::fclose(reset) != 0) return -1;
  const std::int64_t before = status_kib("VmRSS:");
  f();
  return (status_kib("VmHWM:") - before) / 1024;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(ShardedSaveMemory, ASaveOfAModelLargerThanTheLimitPeaksUnderIt) {
  make_cpus(4, 512);
  constexpr std::int64_t kRows = 4096, kCols = 4096;  // 64 MiB of float32 per variable
  constexpr std::int64_t kLimitMib = 48;              // one shard is 16 MiB; the model 256 MiB
  TempDir dir;
  {
    distribute::MirroredStrategy strategy(cpus(4), {.sharding = {.stage = 3}});
    std::vector<Variable> vars;
    {
      auto scope = strategy.scope();
      for (int i = 0; i < 4; ++i)
        vars.push_back(
            make_variable({.initial_value = Tensor::full({kRows, kCols}, 1.0 + i), .name = "w" + std::to_string(i)}));
    }
    std::vector<TrackableChild> children;
    for (const Variable& v : vars) children.push_back({v.name(), TrackableRef(v)});
    Checkpoint ckpt(children);
    const std::int64_t sharded = peak_growth_mib([&] { ckpt.write(dir.path() + "/sharded"); });
    const std::int64_t gathered = peak_growth_mib([&] { ckpt.write(dir.path() + "/gathered", {.sharded = false}); });
    if (sharded < 0) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak resident set here";
    std::cout << "peak resident growth: sharded save " << sharded << " MiB, gather-to-chief save " << gathered
              << " MiB (model 256 MiB, limit " << kLimitMib << " MiB)\n";
    if (!kSanitized) EXPECT_LE(sharded, kLimitMib) << "a sharded save holds no whole tensor";
    EXPECT_GT(gathered, kLimitMib) << "the gather-to-chief save holds whole tensors: the bound can fail";
    EXPECT_EQ(BundleReader(dir.path() + "/sharded")
                  .read("w3/.ATTRIBUTES/VARIABLE_VALUE")
                  .to_vector<float>()[kRows * kCols - 1],
              4.0f);
  }
  chorus::internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus::train
