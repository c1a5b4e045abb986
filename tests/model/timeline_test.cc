// The timeline (core/timeline.h): fit on 2 logical CPU replicas with a checkpoint save writes a
// Chrome trace-event JSON that parses (RFC 8259), with a track per replica and one for the main
// thread; each replica's track holds every layer's forward span, the tape's backward with each
// layer's share, the all-reduce (bytes, dtype, backend) and the optimizer; the main track the
// steps, the waits for input and the save; on every track spans nest (never overlap partially);
// all-reduces come after the backward pass that produced their gradients. Off by default; "%r" in
// the path is the rank; a planted symbolic link at the path is replaced, its target untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/core/test_util.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/env.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/timeline.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus {
namespace {

using chorus::internal::Json;
using chorus::testing::TempDir;

struct Span {
  std::string name, cat;
  double ts = 0, dur = 0;
  int tid = 0;
  const Json* args = nullptr;
  double end() const { return ts + dur; }
};

struct Trace {
  Json doc;
  std::map<int, std::string> tracks;  // tid → thread name
  std::vector<Span> spans;
  std::vector<const Span*> on(int tid, const std::string& cat) const {
    std::vector<const Span*> out;
    for (const Span& s : spans)
      if (s.tid == tid && s.cat == cat) out.push_back(&s);
    return out;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fills `t` (args point into t.doc: parse into the Trace that keeps them).
void parse(const std::string& path, Trace& t) {
  t.doc = chorus::internal::parse_json(slurp(path), path);
  EXPECT_TRUE(t.doc.contains("traceEvents"));
  if (!t.doc.contains("traceEvents")) return;
  for (const Json& e : t.doc.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "M") {
      if (e.at("name") == "thread_name") t.tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
      continue;
    }
    EXPECT_EQ(ph, "X");
    t.spans.push_back({e.at("name").get<std::string>(), e.at("cat").get<std::string>(), e.at("ts").get<double>(),
                       e.at("dur").get<double>(), e.at("tid").get<int>(),
                       e.contains("args") ? &e.at("args") : nullptr});
  }
}

void expect_spans_nest(const Trace& t);

TEST(Timeline, OffByDefault) {
  EXPECT_FALSE(timeline::enabled());
  EXPECT_EQ(timeline::stop(), "");
  EXPECT_THROW(timeline::start(""), InvalidArgumentError);
}

TEST(Timeline, FitOnTwoReplicasShowsEveryReplicaOnOneClock) {
  chorus::testing::make_cpus(2, 128);
  TempDir dir;
  // Overlap off: the all-reduce runs on the replica's own thread, inside the optimizer's span
  // (with it on, the next test).
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2), {.overlap_gradient_all_reduce = false});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Adam> adam;
  {
    auto scope = strategy.scope();
    m = std::make_unique<model::Sequential>(std::vector<layers::LayerPtr>{layers::Dense(16, "relu"), layers::Dense(4)},
                                            "net");
    adam = std::make_shared<optimizers::Adam>(1e-3);
    m->compile(adam, std::make_shared<losses::MeanSquaredError>());
  }
  const Tensor x = ops::stateless_random_uniform({32, 8}, {1, 2});
  const Tensor y = ops::stateless_random_uniform({32, 4}, {3, 4});
  const std::string path = dir.path() + "/timeline-%r.json";
  timeline::start(path);
  m->fit(data::Dataset::from_tensor_slices({x, y}).batch(8), {.epochs = 1, .verbose = 0});  // 4 steps
  train::Checkpoint({{"model", *m}}).write(dir.path() + "/ckpt");
  const std::string file = timeline::stop();
  EXPECT_EQ(file, dir.path() + "/timeline-0.json");
  EXPECT_FALSE(timeline::enabled());
  Trace t;
  parse(file, t);

  EXPECT_EQ(t.tracks.at(1000), "replica 0");
  EXPECT_EQ(t.tracks.at(1001), "replica 1");
  int main_tid = 0;
  for (const auto& [tid, name] : t.tracks)
    if (name == "main") main_tid = tid;
  ASSERT_NE(main_tid, 0);

  for (const int tid : {1000, 1001}) {
    std::map<std::string, int> forward;
    for (const Span* s : t.on(tid, "forward")) ++forward[s->name];
    EXPECT_EQ(forward["net"], 4) << "replica track " << tid;
    EXPECT_EQ(forward["dense"], 4);
    EXPECT_EQ(forward["dense_1"], 4);
    std::map<std::string, int> backward;
    for (const Span* s : t.on(tid, "backward")) ++backward[s->name];
    EXPECT_EQ(backward["gradient"], 4);
    EXPECT_EQ(backward["net/dense"], 4) << "each layer's share of the backward pass";
    EXPECT_EQ(backward["net/dense_1"], 4);
    const std::vector<const Span*> reduces = t.on(tid, "collective");
    ASSERT_FALSE(reduces.empty());
    for (const Span* s : reduces) {
      if (s->name != "all-reduce") continue;
      ASSERT_NE(s->args, nullptr);
      EXPECT_GT(s->args->at("bytes").get<double>(), 0);
      EXPECT_EQ(s->args->at("backend"), "shared_memory");
    }
    EXPECT_EQ(t.on(tid, "optimizer").size(), 4u);
    // Each step's gradient ends before its all-reduce starts (no overlap) and the optimizer span
    // contains the all-reduce.
    const std::vector<const Span*> grads = t.on(tid, "backward"), opts = t.on(tid, "optimizer");
    for (const Span* o : opts) {
      bool has_reduce = false;
      for (const Span* r : reduces) has_reduce |= r->ts >= o->ts && r->end() <= o->end();
      EXPECT_TRUE(has_reduce) << "optimizer span at " << o->ts << " holds no all-reduce";
    }
  }
  EXPECT_EQ(t.on(main_tid, "step").size(), 4u);
  int step = 0;
  for (const Span* s : t.on(main_tid, "step")) {  // the arguments the GPU test of host waits reads
    ASSERT_NE(s->args, nullptr);
    EXPECT_EQ(s->args->at("step"), ++step);
    EXPECT_EQ(s->args->at("host_waits"), 0) << "no GPU here: no host waits";
  }
  EXPECT_GE(t.on(main_tid, "input").size(), 4u);
  ASSERT_EQ(t.on(main_tid, "checkpoint").size(), 1u);
  EXPECT_EQ(t.on(main_tid, "checkpoint")[0]->args->at("path"), dir.path() + "/ckpt");

  expect_spans_nest(t);
  chorus::internal::reset_runtime_for_testing();
}

// On every track, two spans are disjoint or one contains the other.
void expect_spans_nest(const Trace& t) {
  for (const auto& [tid, name] : t.tracks) {
    std::vector<const Span*> mine;
    for (const Span& s : t.spans)
      if (s.tid == tid) mine.push_back(&s);
    for (const Span* a : mine)
      for (const Span* b : mine) {
        if (a == b) continue;
        const bool disjoint = a->end() <= b->ts || b->end() <= a->ts;
        const bool nested = (a->ts >= b->ts && a->end() <= b->end()) || (b->ts >= a->ts && b->end() <= a->end());
        EXPECT_TRUE(disjoint || nested) << name << ": " << a->cat << "/" << a->name << " [" << a->ts << ", " << a->end()
                                        << ") and " << b->cat << "/" << b->name << " [" << b->ts << ", " << b->end()
                                        << ")";
      }
  }
}

// Overlap on: each replica's buckets are all-reduced by its communication thread,
// on its own track ("replica R all-reduce", tid 2000 + R), while the replica's backward pass runs.
TEST(Timeline, OverlappedAllReducesRunOnTheirOwnTrackDuringTheBackwardPass) {
  chorus::testing::make_cpus(2, 512);
  TempDir dir;
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2), {.communication_options = {.bytes_per_pack = 1 << 20},
                                                                   .overlap_gradient_all_reduce = true});
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    // A backward pass of several milliseconds per replica, so that a communication thread woken
    // during it gets a core before it ends even on a loaded machine.
    m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(768, "relu"), layers::Dense(768, "relu"),
                                      layers::Dense(768, "relu"), layers::Dense(8)},
        "net");
    m->compile(std::make_shared<optimizers::Adam>(1e-3), std::make_shared<losses::MeanSquaredError>());
  }
  const Tensor x = ops::stateless_random_uniform({512, 256}, {1, 2});
  const Tensor y = ops::stateless_random_uniform({512, 8}, {3, 4});
  timeline::start(dir.path() + "/overlap.json");
  m->fit(data::Dataset::from_tensor_slices({x, y}).batch(256), {.epochs = 3, .verbose = 0});  // 6 steps
  const std::string file = timeline::stop();
  Trace t;
  parse(file, t);
  expect_spans_nest(t);
  for (const int r : {0, 1}) {
    ASSERT_EQ(t.tracks.count(2000 + r), 1u);
    EXPECT_EQ(t.tracks.at(2000 + r), "replica " + std::to_string(r) + " all-reduce");
    const std::vector<const Span*> reduces = t.on(2000 + r, "collective");
    // 4 layers' kernels (768² floats, 2.25 MiB: alone) and biases in packs of at most 1 MiB:
    // several buckets per step, each handed over ("bucket", on the replica's track) inside the
    // backward pass and all-reduced once on the communication thread's track.
    EXPECT_GE(reduces.size(), 6u * 4);
    std::vector<const Span*> buckets, grads;
    for (const Span* s : t.on(1000 + r, "collective")) {
      EXPECT_NE(s->name, "all-reduce") << "on the replica track";
      if (s->name == "bucket") buckets.push_back(s);
    }
    for (const Span* g : t.on(1000 + r, "backward"))
      if (g->name == "gradient") grads.push_back(g);
    EXPECT_EQ(buckets.size(), reduces.size());
    for (const Span* b : buckets) {
      bool inside = false;
      for (const Span* g : grads) inside |= b->ts >= g->ts && b->end() <= g->end();
      EXPECT_TRUE(inside) << "bucket at " << b->ts << " outside every backward pass";
    }
    // Hidden: the part of the all-reduce time inside the replica's backward ("gradient") spans.
    double total = 0, hidden = 0;
    for (const Span* a : reduces) {
      total += a->dur;
      for (const Span* g : t.on(1000 + r, "backward"))
        if (g->name == "gradient") hidden += std::max(0.0, std::min(a->end(), g->end()) - std::max(a->ts, g->ts));
    }
    EXPECT_GT(hidden, 0) << "no all-reduce of replica " << r << " overlapped its backward pass (" << total
                         << " us of all-reduce)";
  }
  chorus::internal::reset_runtime_for_testing();
}

TEST(Timeline, APlantedLinkIsReplacedNotFollowed) {
  TempDir dir;
  const std::string target = dir.path() + "/precious", link = dir.path() + "/trace.json";
  std::ofstream(target) << "keep me";
  std::filesystem::create_symlink(target, link);
  timeline::start(link);
  timeline::record("test", "one", 1, 2);
  EXPECT_EQ(timeline::stop(), link);
  EXPECT_EQ(slurp(target), "keep me");
  EXPECT_FALSE(std::filesystem::is_symlink(link));
  Trace t;
  parse(link, t);
  ASSERT_EQ(t.spans.size(), 1u);
  EXPECT_EQ(t.spans[0].name, "one");
}

// Workers started from TF_CONFIG have no launcher rank: the strategy sets the worker index, which
// names the file and the process. A second recording keeps the tracks' names.
TEST(Timeline, TheProcessRankCanBeSetAndTracksKeepTheirNamesAcrossRecordings) {
  TempDir dir;
  env::set_process_rank(3);
  timeline::start(dir.path() + "/t-%r.json");
  timeline::record("test", "first", 1, 2);
  EXPECT_EQ(timeline::stop(), dir.path() + "/t-3.json");
  env::set_process_rank(std::nullopt);
  Trace t;
  parse(dir.path() + "/t-3.json", t);
  EXPECT_EQ(t.doc.at("dropped_events"), 0);
  for (const Json& e : t.doc.at("traceEvents")) EXPECT_EQ(e.at("pid"), 3);
  timeline::start(dir.path() + "/again.json");
  timeline::record("test", "second", 3, 4);
  timeline::stop();
  Trace again;
  parse(dir.path() + "/again.json", again);
  ASSERT_EQ(again.spans.size(), 1u);
  EXPECT_FALSE(again.tracks.at(again.spans[0].tid).empty()) << "the thread's track lost its name";
}

}  // namespace
}  // namespace chorus
