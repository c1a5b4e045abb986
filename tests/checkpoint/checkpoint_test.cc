// Checkpoint: save/write/restore/read of variables, nested objects, iterators and generators;
// TF's key layout; mismatch diffs; restore-on-create; async saves.
#include <chorus/checkpoint/checkpoint.h>

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/async_writer.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/object_graph.h>
#include <chorus/core/profile.h>
#include <chorus/core/runtime.h>
#include <chorus/data/dataset.h>
#include <chorus/ops/random.h>

namespace chorus::train {
namespace {

using chorus::testing::LogCapture;
using testing::TempDir;

class CheckpointTest : public chorus::testing::CoreTest {};

Variable var(const std::string& name, std::vector<float> values, Shape shape) {
  return make_variable({.initial_value = Tensor::from_vector<float>(values, shape), .name = name});
}

std::vector<float> values(const Variable& v) {
  return v.read_value().reshape(Shape{v.shape().num_elements()}).to_vector<float>();
}

// A custom object: a child variable created late (as a layer's weights) and a plain attribute.
class Counter final : public Trackable {
 public:
  std::vector<TrackableChild> trackable_children() const override {
    if (!weight_.defined()) return {};
    return {{"weight", weight_}};
  }
  std::map<std::string, Tensor> serialize_to_tensors() const override {
    return {{"count", Tensor::scalar<std::int64_t>(count)}};
  }
  void restore_from_tensors(const std::map<std::string, Tensor>& t) override {
    count = t.at("count").item<std::int64_t>();
  }
  void create_weight(const std::vector<float>& init) {
    weight_ = var("w", init, Shape{static_cast<std::int64_t>(init.size())});
    child_created("weight", weight_);
  }
  const Variable& weight() const { return weight_; }
  std::int64_t count = 0;

 private:
  Variable weight_;
};

TEST_F(CheckpointTest, SaveNumbersAndRestoresTheValues) {
  TempDir dir;
  Variable a = var("a", {1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Variable b = make_variable({.initial_value = Tensor::scalar<std::int64_t>(7), .name = "b"});
  Checkpoint ckpt({{"a", a}, {"b", b}});
  const std::string p1 = ckpt.save(dir / "ckpt");
  EXPECT_EQ(p1, dir / "ckpt-1");
  EXPECT_TRUE(std::filesystem::exists(p1 + ".index"));
  EXPECT_TRUE(std::filesystem::exists(p1 + ".data-00000-of-00001"));
  a.assign(Tensor::zeros({2, 3}));
  b.assign(Tensor::scalar<std::int64_t>(-1));
  EXPECT_EQ(ckpt.save(dir / "ckpt"), dir / "ckpt-2");
  EXPECT_EQ(ckpt.save_counter().value().item<std::int64_t>(), 2);

  ckpt.restore(p1).assert_consumed().assert_nontrivial_match();
  EXPECT_EQ(values(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(b.value().item<std::int64_t>(), 7);
  EXPECT_EQ(ckpt.save_counter().value().item<std::int64_t>(), 1);  // restored with the rest
}

TEST_F(CheckpointTest, RestoreHandsWhatItReadToTheVariablesAndAliasesSeeIt) {
  TempDir dir;
  Variable a = var("a", {1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Checkpoint ckpt({{"a", a}});
  const std::string path = ckpt.write(dir / "ckpt");
  const Tensor alias = a.value();  // e.g. a layer's handle on its kernel
  a.assign(Tensor::zeros({2, 3}));
  void* const before = a.value().data();
  ckpt.read(path).assert_consumed();
  EXPECT_NE(a.value().data(), before);  // the storage the reader filled, not a copy of it
  EXPECT_EQ(values(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  a.assign_add(Tensor::ones({2, 3}));  // the variable goes on working on its new storage
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{2, 3, 4, 5, 6, 7}));
  ckpt.read(path).assert_consumed();
  EXPECT_EQ(values(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(CheckpointTest, KeysFollowTensorFlowsObjectPaths) {
  TempDir dir;
  Variable v = var("v", {1, 2}, Shape{2});
  auto counter = std::make_shared<Counter>();
  counter->create_weight({3});
  Checkpoint ckpt({{"v", v}, {"odd.name/x", counter}});
  const std::string path = ckpt.write(dir / "w");
  BundleReader r(path);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"_CHECKPOINTABLE_OBJECT_GRAPH", "odd..name.Sx/.ATTRIBUTES/count",
                                                "odd..name.Sx/weight/.ATTRIBUTES/VARIABLE_VALUE",
                                                "v/.ATTRIBUTES/VARIABLE_VALUE"}));
  EXPECT_EQ(r.read("v/.ATTRIBUTES/VARIABLE_VALUE").to_vector<float>(), (std::vector<float>{1, 2}));
  // The object graph: root → v, odd.name/x → weight.
  const auto graph = internal::parse_object_graph(r.read_strings("_CHECKPOINTABLE_OBJECT_GRAPH")[0], path);
  ASSERT_EQ(graph.nodes.size(), 4u);
  ASSERT_EQ(graph.nodes[0].children.size(), 2u);
  EXPECT_EQ(graph.nodes[0].children[0].local_name, "v");
  EXPECT_EQ(graph.nodes[0].children[1].local_name, "odd.name/x");
  const auto& vnode = graph.nodes[static_cast<std::size_t>(graph.nodes[0].children[0].node_id)];
  ASSERT_NE(vnode.attribute("VARIABLE_VALUE"), nullptr);
  EXPECT_EQ(vnode.attribute("VARIABLE_VALUE")->checkpoint_key, "v/.ATTRIBUTES/VARIABLE_VALUE");
  EXPECT_EQ(vnode.attribute("VARIABLE_VALUE")->full_name, "v");
}

TEST_F(CheckpointTest, MismatchesAreAllListedAndNothingIsAssigned) {
  TempDir dir;
  Variable a = var("a", {1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Variable b = var("b", {1, 2, 3, 4}, Shape{4});
  Variable c = var("c", {9}, Shape{1});
  const std::string path = Checkpoint({{"a", a}, {"b", b}, {"c", c}}).write(dir / "x");

  Variable a2 = var("a2", std::vector<float>(9, 0), Shape{3, 3});                                   // shape differs
  Variable b2 = make_variable({.initial_value = Tensor::zeros({4}, DType::kInt32), .name = "b2"});  // dtype differs
  Variable c2 = var("c2", {0}, Shape{1});                                                           // fits
  Checkpoint other({{"a", a2}, {"b", b2}, {"c", c2}});
  EXPECT_THROW_WITH(other.read(path), InvalidArgumentError, "2 value(s) do not fit", "nothing was restored",
                    "a/.ATTRIBUTES/VARIABLE_VALUE: checkpoint float32(2, 3), variable 'a2' float32(3, 3)",
                    "b/.ATTRIBUTES/VARIABLE_VALUE: checkpoint float32(4,), variable 'b2' int32(4,)");
  EXPECT_EQ(values(c2), std::vector<float>{0});  // not assigned either
}

TEST_F(CheckpointTest, StatusAssertionsNameWhatIsMissing) {
  TempDir dir;
  Variable a = var("a", {1}, Shape{1});
  Variable b = var("b", {2}, Shape{1});
  const std::string path = Checkpoint({{"a", a}, {"b", b}}).write(dir / "x");

  Variable a2 = var("a", {0}, Shape{1});
  Variable extra = var("extra", {0}, Shape{1});
  Checkpoint partial({{"a", a2}, {"extra", extra}});
  LoadStatus s = partial.read(path);
  EXPECT_EQ(values(a2), std::vector<float>{1});
  EXPECT_EQ(s.unused_keys(), std::vector<std::string>{"b/.ATTRIBUTES/VARIABLE_VALUE"});
  EXPECT_EQ(s.unmatched_objects(), std::vector<std::string>{"extra"});
  EXPECT_THROW_WITH(s.assert_consumed(), FailedPreconditionError, "b/.ATTRIBUTES/VARIABLE_VALUE", "extra");
  EXPECT_THROW_WITH(s.assert_existing_objects_matched(), FailedPreconditionError, "extra");
  s.assert_nontrivial_match();
  s.expect_partial();

  // Only the checkpoint has more: existing objects all matched.
  Variable a3 = var("a", {0}, Shape{1});
  Checkpoint fewer({{"a", a3}});
  LoadStatus s2 = fewer.read(path);
  s2.assert_existing_objects_matched();
  EXPECT_THROW(s2.assert_consumed(), FailedPreconditionError);
  s2.expect_partial();

  Variable z = var("z", {0}, Shape{1});
  EXPECT_THROW_WITH(Checkpoint({{"z", z}}).read(path).expect_partial().assert_nontrivial_match(),
                    FailedPreconditionError, "nothing besides the root");
}

TEST_F(CheckpointTest, UnusedValuesAreLoggedUnlessExpectPartial) {
  TempDir dir;
  Variable a = var("a", {1}, Shape{1});
  Variable b = var("b", {2}, Shape{1});
  const std::string path = Checkpoint({{"a", a}, {"b", b}}).write(dir / "x");
  Variable a2 = var("a", {0}, Shape{1});
  {
    LogCapture logs;
    {
      Checkpoint c({{"a", a2}});
      c.read(path);
    }  // as TF: the warning comes when the checkpoint goes away
    EXPECT_TRUE(logs.contains("1 value(s) were never restored"));
  }
  {
    LogCapture logs;
    {
      Checkpoint c({{"a", a2}});
      c.read(path).expect_partial();
    }
    EXPECT_FALSE(logs.contains("never restored"));
  }
}

TEST_F(CheckpointTest, ReadIgnoresTheSaveCounterAndWriteDoesNotCount) {
  TempDir dir;
  Variable a = var("a", {4}, Shape{1});
  Checkpoint ckpt({{"a", a}});
  const std::string written = ckpt.write(dir / "plain");
  EXPECT_EQ(written, dir / "plain");
  EXPECT_FALSE(BundleReader(written).contains("save_counter/.ATTRIBUTES/VARIABLE_VALUE"));
  const std::string saved = ckpt.save(dir / "ckpt");  // has the counter
  Variable a2 = var("a", {0}, Shape{1});
  Checkpoint fresh({{"a", a2}});
  fresh.read(saved).assert_consumed();  // the counter is neither expected nor reported
  EXPECT_EQ(values(a2), std::vector<float>{4});
  fresh.restore(written).assert_consumed();
}

TEST_F(CheckpointTest, RestoreBeforeCreationAssignsOnCreation) {
  TempDir dir;
  auto saved = std::make_shared<Counter>();
  saved->create_weight({5, 6});
  saved->count = 42;
  const std::string path = Checkpoint({{"c", saved}}).write(dir / "x");

  auto later = std::make_shared<Counter>();
  Checkpoint ckpt({{"c", later}});
  LoadStatus s = ckpt.read(path);
  EXPECT_EQ(later->count, 42);  // attributes at once
  EXPECT_EQ(s.unused_keys(), std::vector<std::string>{"c/weight/.ATTRIBUTES/VARIABLE_VALUE"});
  later->create_weight({0, 0});  // restore-on-create
  EXPECT_EQ(values(later->weight()), (std::vector<float>{5, 6}));
  s.assert_consumed();

  // A deferred value that does not fit is reported when the object appears.
  auto wrong = std::make_shared<Counter>();
  Checkpoint ckpt2({{"c", wrong}});
  ckpt2.read(path).expect_partial();
  EXPECT_THROW_WITH(wrong->create_weight({0, 0, 0}), InvalidArgumentError, "c/weight/.ATTRIBUTES/VARIABLE_VALUE",
                    "float32(2,)", "float32(3,)");
}

TEST_F(CheckpointTest, IteratorAndGeneratorResumeExactly) {
  TempDir dir;
  auto ds = data::Dataset::range(100).shuffle(16, 7).batch(4);
  data::Iterator it = ds.make_iterator();
  ops::Generator gen = ops::Generator::from_seed(3);
  for (int i = 0; i < 3; ++i) it.next();
  gen.uniform({5});
  Checkpoint ckpt({{"data", it}, {"rng", gen}});
  const std::string path = ckpt.save(dir / "ckpt");
  std::vector<std::vector<std::int64_t>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(it.next()->at(0).to_vector<std::int64_t>());
  const std::vector<float> draws = gen.uniform({8}).to_vector<float>();

  data::Iterator it2 = ds.make_iterator();
  ops::Generator gen2 = ops::Generator::from_seed(99);
  Checkpoint ckpt2({{"data", it2}, {"rng", gen2}});
  ckpt2.restore(path).assert_consumed();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(it2.next()->at(0).to_vector<std::int64_t>(), expected[static_cast<std::size_t>(i)]);
  EXPECT_EQ(gen2.uniform({8}).to_vector<float>(), draws);
}

// Every stage of issue 23 item 9 in one pipeline, saved mid-stream through a checkpoint (with
// worker threads, buffered elements and a half-written cache file in flight) and restored.
TEST_F(CheckpointTest, NewDataStagesResumeExactlyThroughACheckpoint) {
  TempDir dir;
  auto value = [](const data::Element& e, std::size_t c) { return e[c].item<std::int64_t>(); };
  auto pairs = [&](std::int64_t a, std::int64_t b) {
    return data::Dataset::zip(
        {data::Dataset::range(a, b).filter([&](const data::Element& e) { return value(e, 0) % 5 != 0; }).enumerate(),
         data::Dataset::range(100 + a, 100 + b)});
  };
  auto ds = pairs(0, 30)
                .concatenate(pairs(50, 70))
                .shard(2, 1)
                .interleave([](const data::Element& e) { return data::Dataset::from_tensors(e).repeat(2); }, 3, 2, 2)
                .flat_map([](const data::Element& e) { return data::Dataset::from_tensors(e); })
                .map(
                    [&](const data::Element& e) {
                      return data::Element{
                          Tensor::full(Shape{value(e, 0) % 3}, static_cast<double>(value(e, 1)), DType::kInt64)};
                    },
                    data::kAutotune)
                .padded_batch(3)
                .unbatch()
                .cache(dir / "cache")
                .prefetch(data::kAutotune);
  auto rows = [](data::Iterator& it, int n) {
    std::vector<std::vector<std::int64_t>> out;
    for (int i = 0; i < n; ++i) {
      auto e = it.next();
      if (!e) break;
      out.push_back(e->at(0).to_vector<std::int64_t>());
    }
    return out;
  };
  data::Iterator it = ds.make_iterator();
  rows(it, 7);
  Checkpoint ckpt({{"data", it}});
  const std::string path = ckpt.save(dir / "ckpt");
  const auto expected = rows(it, 1000);
  ASSERT_GT(expected.size(), 20u);

  data::Iterator it2 = ds.make_iterator();
  Checkpoint ckpt2({{"data", it2}});
  ckpt2.restore(path).assert_consumed();
  EXPECT_EQ(rows(it2, 1000), expected);
}

TEST_F(CheckpointTest, NameBasedRestoreWithoutAnObjectGraph) {
  TempDir dir;
  {
    BundleWriter w(dir / "tf");
    w.add("dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
    w.finish();
  }
  auto dense = std::make_shared<Counter>();
  dense->create_weight({0, 0, 0, 0});  // named "weight", not "kernel": unmatched
  Variable kernel = var("kernel", {0, 0, 0, 0}, Shape{2, 2});
  class Dense final : public Trackable {
   public:
    explicit Dense(Variable k) : k_(std::move(k)) {}
    std::vector<TrackableChild> trackable_children() const override { return {{"kernel", k_}}; }
    Variable k_;
  };
  auto d = std::make_shared<Dense>(kernel);
  LogCapture logs;
  Checkpoint({{"dense", d}}).read(dir / "tf").assert_consumed();
  EXPECT_EQ(values(kernel), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(logs.contains("no object graph: restoring by name"));
}

TEST_F(CheckpointTest, MissingAndCorruptCheckpointsAssignNothing) {
  TempDir dir;
  Variable a = var("a", {1, 2, 3}, Shape{3});
  Checkpoint ckpt({{"a", a}});
  EXPECT_THROW_WITH(ckpt.restore(dir / "nope-1"), NotFoundError, "nope-1.index");
  const std::string path = ckpt.save(dir / "ckpt");
  // Flip a byte of the tensor data: the CRC check fails before anything is assigned.
  std::string bytes = testing::slurp(data_filename(path));
  bytes[1] ^= 0x40;
  testing::spit(data_filename(path), bytes);
  a.assign(Tensor::from_vector<float>({7, 7, 7}, {3}));
  EXPECT_THROW_WITH(ckpt.restore(path), DataLossError, "a/.ATTRIBUTES/VARIABLE_VALUE");
  EXPECT_EQ(values(a), (std::vector<float>{7, 7, 7}));
}

TEST_F(CheckpointTest, AsyncSaveSnapshotsBeforeReturning) {
  TempDir dir;
  std::vector<float> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  Variable a = var("a", big, Shape{static_cast<std::int64_t>(big.size())});
  Checkpoint ckpt({{"a", a}});
  const std::string path = ckpt.save(dir / "ckpt", {.async = true});
  a.assign(Tensor::zeros({static_cast<std::int64_t>(big.size())}));  // training goes on at once
  ckpt.sync();
  Variable b = var("a", std::vector<float>(big.size(), 1), Shape{static_cast<std::int64_t>(big.size())});
  Checkpoint({{"a", b}}).read(path).expect_partial();
  EXPECT_EQ(values(b), big);
}

// An async save does not copy on the caller's thread: it holds writes into the variables until
// its writer thread copied them. The caller returns at once, reads go through, a write waits, and
// the bundle has the values of the call, however soon training writes after it.
TEST_F(CheckpointTest, AsyncSaveHoldsWritesUntilItsWriterCopiedThem) {
  TempDir dir;
  const std::int64_t n = 4 << 20;  // 16 MiB: the copy takes a while
  std::vector<float> big(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 997);
  Variable a = var("a", big, Shape{n});
  Variable b = var("b", {1, 2}, Shape{2});
  Checkpoint ckpt({{"a", a}, {"b", b}});
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> expect_a = values(a), expect_b = values(b);
    const std::string path = ckpt.write(dir / ("ckpt" + std::to_string(round)), {.async = true});
    EXPECT_EQ(a.value().to_vector<float>()[5], expect_a[5]);  // reading never waits
    a.assign_add(Tensor::ones({n}));                          // writes wait for the copy, then land
    b.assign(Tensor::from_vector<float>({-1, -1}));
    EXPECT_EQ(values(a)[5], expect_a[5] + 1);
    ckpt.sync();
    Variable ra = var("a", std::vector<float>(big.size(), 0), Shape{n});
    Variable rb = var("b", {0, 0}, Shape{2});
    Checkpoint({{"a", ra}, {"b", rb}}).read(path).assert_consumed();
    EXPECT_EQ(values(ra), expect_a) << "round " << round;
    EXPECT_EQ(values(rb), expect_b) << "round " << round;
  }
}

TEST_F(CheckpointTest, AsyncErrorsSurfaceAtTheNextSaveOrSync) {
  TempDir dir;
  Variable a = var("a", {1}, Shape{1});
  Checkpoint ckpt({{"a", a}});
  ckpt.save(dir / "missing-dir/ckpt", {.async = true});  // fails on the writer thread
  EXPECT_THROW(ckpt.sync(), NotFoundError);
  a.assign(Tensor::from_vector<float>({2}));  // the failed save left no write hold behind
  EXPECT_EQ(values(a), (std::vector<float>{2}));
  ckpt.sync();  // reported once
  ckpt.save(dir / "missing-dir/ckpt", {.async = true});
  EXPECT_THROW(ckpt.save(dir / "ckpt"), NotFoundError);
  EXPECT_EQ(ckpt.save(dir / "ckpt"), dir / "ckpt-3");  // the failed saves were counted, the refused one not
}

// The background writer runs at SCHED_BATCH (async_writer.cc says why and what it measured): a
// fair share of a core, no wake-up preemption of training threads; the job's own work runs under
// that policy, and the caller's policy is not changed.
TEST(AsyncWriterTest, TheWriterThreadRunsAtSchedBatch) {
  internal::AsyncWriter writer;
  int policy = -1;
  writer.start([&] { policy = ::sched_getscheduler(0); });
  writer.wait();
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the caller's own policy must not change";
}

// Training waits for the writer (a write into a held variable, the next save), so the writer must
// not starve while other threads keep every core busy. With one busy thread per core, 20 ms of the
// writer's CPU took 6.1 s at SCHED_IDLE (2-core VM, 2026-11-28); at a fair share it takes about
// (busy threads + 1) / cores x 20 ms, 30 ms there: 2 s leaves room for a loaded machine.
TEST(AsyncWriterTest, TheWriterIsNotStarvedWhenEveryCoreIsBusy) {
  std::atomic<bool> done{false};
  std::vector<std::thread> busy;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    busy.emplace_back([&] {
      while (!done.load(std::memory_order_relaxed)) {
      }
    });
  internal::AsyncWriter writer;
  const auto start = std::chrono::steady_clock::now();
  writer.start([&] {
    const std::int64_t until = profile::internal::thread_cpu_ns() + 20'000'000;
    while (profile::internal::thread_cpu_ns() < until) {
    }
    done = true;
  });
  const auto deadline = start + std::chrono::seconds(2);
  while (!done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool finished = done.load();
  done = true;  // ends the busy threads (and the job, if it is still starved)
  for (auto& t : busy) t.join();
  writer.wait();
  EXPECT_TRUE(finished) << "20 ms of the writer's CPU not done within 2 s with every core busy: starved";
}

TEST_F(CheckpointTest, BadChildrenAreRefused) {
  Variable a = var("a", {1}, Shape{1});
  EXPECT_THROW_WITH(Checkpoint({{"a", a}, {"a", a}}), InvalidArgumentError, "two children named 'a'");
  EXPECT_THROW_WITH(Checkpoint({{"", a}}), InvalidArgumentError, "non-empty name");
  EXPECT_THROW_WITH(Checkpoint({{"save_counter", a}}), InvalidArgumentError, "reserved");
  EXPECT_THROW(TrackableRef{Variable{}}, InvalidArgumentError);
}

TEST_F(CheckpointTest, ObjectGraphErrorsAreDataLoss) {
  // One node whose child refers to node 5 of 1.
  EXPECT_THROW(internal::parse_object_graph(std::string("\x0a\x04\x0a\x02\x08\x05", 6), "f"), DataLossError);
  EXPECT_THROW(internal::parse_object_graph("\xff", "f"), DataLossError);  // a truncated varint
  EXPECT_THROW(internal::parse_object_graph("", "f"), DataLossError);      // no nodes
}

}  // namespace
}  // namespace chorus::train
