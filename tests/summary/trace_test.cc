// summary/trace.h: trace_on / trace_export write the recorded graph as Event.graph_def into the
// writer's file and the captured timeline as <outdir>/plugins/profile/<run>/<host>.xplane.pb and
// <host>.trace.json.gz; both are read back here (the GraphDef with summary/graph_def.h's decoder,
// the XSpace field by field with core/proto_wire.h, the gzip with zlib). TensorBoard's own loaders
// read them in tests/model/trace_tensorboard_test.cc. The hostile cases: every misuse is a typed
// chorus::Error with a message that says what to do, and leaves no trace running behind it.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/proto_wire.h>
#include <chorus/core/runtime.h>
#include <chorus/core/timeline.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/summary/event_file_reader.h>
#include <chorus/summary/summary_writer.h>
#include <chorus/summary/trace.h>

namespace chorus::summary {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;

// Every test leaves no trace and no timeline recording behind, whatever it threw.
class Trace : public ::testing::Test {
 protected:
  void TearDown() override {
    trace_off();
    timeline::stop_capture();
    EXPECT_FALSE(is_tracing());
    EXPECT_FALSE(timeline::enabled());
  }
};

GraphDef two_nodes(const std::string& model) {
  GraphDef g;
  g.node.push_back({.name = model + "/input",
                    .op = "Placeholder",
                    .device = "/device:CPU:0",
                    .attr = {{"_output_shapes", AttrValue::shapes({{-1, 4}})}}});
  g.node.push_back({.name = model + "/dense",
                    .op = "Dense",
                    .input = {model + "/input"},
                    .device = "/device:CPU:0",
                    .attr = {{"_output_shapes", AttrValue::shapes({{-1, 2}})}}});
  return g;
}

std::string gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

std::vector<Event> graph_events(const std::string& logdir) {
  std::vector<Event> out;
  for (const std::string& f : list_event_files(logdir))
    for (Event& e : read_events(f))
      if (e.graph_def) out.push_back(std::move(e));
  return out;
}

// The profile run directories under <outdir>/plugins/profile.
std::vector<fs::path> profile_runs(const std::string& outdir) {
  std::vector<fs::path> runs;
  const fs::path dir = fs::path(outdir) / "plugins" / "profile";
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir)) runs.push_back(e.path());
  std::sort(runs.begin(), runs.end());
  return runs;
}

TEST_F(Trace, GraphOfEveryRecordedModelIsOneGraphDefEvent) {
  TempDir dir;
  SummaryWriter writer(dir.str("train"));
  EXPECT_FALSE(graph_wanted("net"));  // no trace on
  trace_on({.graph = true});
  EXPECT_TRUE(is_tracing());
  ASSERT_TRUE(graph_wanted("net"));
  record_graph("net", two_nodes("net"));
  EXPECT_FALSE(graph_wanted("net"));  // the first graph per model is kept
  record_graph("net", two_nodes("other_name_same_key"));
  record_graph("aux", two_nodes("aux"));
  EXPECT_TRUE(trace_export(writer, "model_trace", 5));
  EXPECT_FALSE(is_tracing());
  EXPECT_FALSE(graph_wanted("x"));
  writer.close();

  const std::vector<Event> events = graph_events(dir.str("train"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].step, 5);
  const GraphDef g = decode_graph_def(*events[0].graph_def);
  GraphDef expected = two_nodes("aux");  // models in name order
  for (const NodeDef& n : two_nodes("net").node) expected.node.push_back(n);
  EXPECT_EQ(g, expected);
  EXPECT_TRUE(profile_runs(dir.str("train")).empty());  // no profiler asked for
}

TEST_F(Trace, ProfilerWritesTheTimelineWhereTheProfilePluginLooks) {
  TempDir dir;
  const std::string logdir = dir.str("logs");
  SummaryWriter writer(logdir);
  trace_on({.graph = false, .profiler = true, .profiler_outdir = logdir});
  EXPECT_TRUE(timeline::enabled());
  EXPECT_TRUE(fs::is_directory(logdir + "/plugins/profile"));  // made by trace_on
  timeline::record("forward", "net/dense", 100, 250, "\"bytes\": 64");
  timeline::record("optimizer", "apply_gradients", 300, 310);
  EXPECT_EQ(timeline::stop(), "");  // stop() leaves a capture alone
  EXPECT_TRUE(timeline::enabled());
  EXPECT_TRUE(trace_export(writer, "profile", 0));
  EXPECT_FALSE(timeline::enabled());
  EXPECT_TRUE(graph_events(logdir).empty());  // graph = false

  const std::vector<fs::path> runs = profile_runs(logdir);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_TRUE(std::regex_match(runs[0].filename().string(), std::regex(R"(\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d)")))
      << runs[0];
  const std::string host = host_name_or("localhost");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(runs[0])) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{host + ".trace.json.gz", host + ".xplane.pb"}));

  // The Chrome trace: the same document timeline::stop() writes.
  const nlohmann::json doc = nlohmann::json::parse(gunzip(read_file((runs[0] / (host + ".trace.json.gz")).string())));
  std::vector<nlohmann::json> spans;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") spans.push_back(e);
  ASSERT_EQ(spans.size(), 2u) << doc.dump();
  EXPECT_EQ(spans[0].at("name"), "net/dense");
  EXPECT_EQ(spans[0].at("cat"), "forward");
  EXPECT_EQ(spans[0].at("ts"), 100);
  EXPECT_EQ(spans[0].at("dur"), 150);
  EXPECT_EQ(spans[0].at("args").at("bytes"), 64);
  EXPECT_EQ(spans[1].at("name"), "apply_gradients");

  // The XSpace: one plane "/host:CPU", one line (this thread's track), two events with their
  // offsets and durations in picoseconds, the names in event_metadata, the host name.
  const std::string xspace = read_file((runs[0] / (host + ".xplane.pb")).string());
  std::string plane_bytes, hostname;
  wire::ProtoReader space(xspace);
  while (space.next())
    if (space.field() == 1)
      plane_bytes = std::string(space.read_bytes());
    else if (space.field() == 4)
      hostname = std::string(space.read_bytes());
    else
      space.skip();
  EXPECT_EQ(hostname, host);
  std::string plane_name;
  std::vector<std::string> lines;
  std::map<std::int64_t, std::string> names;
  wire::ProtoReader plane(plane_bytes);
  while (plane.next()) {
    if (plane.field() == 2) {
      plane_name = std::string(plane.read_bytes());
    } else if (plane.field() == 3) {
      lines.emplace_back(plane.read_bytes());
    } else if (plane.field() == 4) {
      wire::ProtoReader entry(plane.read_bytes());
      std::int64_t key = 0;
      std::string name;
      while (entry.next())
        if (entry.field() == 1) {
          key = entry.read_int64();
        } else {
          wire::ProtoReader m(entry.read_bytes());
          while (m.next())
            if (m.field() == 2)
              name = std::string(m.read_bytes());
            else
              m.skip();
        }
      names[key] = name;
    } else {
      plane.skip();
    }
  }
  EXPECT_EQ(plane_name, "/host:CPU");
  EXPECT_EQ(names, (std::map<std::int64_t, std::string>{{1, "net/dense"}, {2, "apply_gradients"}}));
  ASSERT_EQ(lines.size(), 1u);
  std::int64_t timestamp_ns = -1;
  std::vector<std::vector<std::int64_t>> events;  // metadata id, offset ps, duration ps
  wire::ProtoReader line(lines[0]);
  while (line.next()) {
    if (line.field() == 3) {
      timestamp_ns = line.read_int64();
    } else if (line.field() == 4) {
      std::vector<std::int64_t> ev(3, 0);
      wire::ProtoReader e(line.read_bytes());
      while (e.next())
        if (e.field() >= 1 && e.field() <= 3)
          ev[e.field() - 1] = e.read_int64();
        else
          e.skip();
      events.push_back(ev);
    } else {
      line.skip();
    }
  }
  EXPECT_EQ(timestamp_ns, 100000);
  EXPECT_EQ(events, (std::vector<std::vector<std::int64_t>>{{1, 0, 150000000}, {2, 200000000, 10000000}}));
}

TEST_F(Trace, TwoExportsInOneSecondGetTwoRuns) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  for (int i = 0; i < 2; ++i) {
    trace_on({.graph = false, .profiler = true, .profiler_outdir = dir.str()});
    timeline::record("forward", "x", 1, 2);
    EXPECT_TRUE(trace_export(writer, "t", i));
  }
  EXPECT_EQ(profile_runs(dir.str()).size(), 2u);  // "<stamp>" and "<stamp>_1" within one second
}

TEST_F(Trace, InsideStrategyRunOnlyReplicaZeroExports) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 128}, {.memory_limit_mb = 128}});
  {
    distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
    TempDir dir;
    SummaryWriter writer(dir.str());
    trace_on();
    record_graph("m", two_nodes("m"));
    const auto wrote = strategy.run([&] { return trace_export(writer, "t", 1); });
    EXPECT_EQ(strategy.experimental_local_results(wrote), (std::vector<bool>{true, false}));
    EXPECT_FALSE(is_tracing());
    writer.close();
    EXPECT_EQ(graph_events(dir.str()).size(), 1u);
  }
  chorus::internal::reset_runtime_for_testing();
}

TEST_F(Trace, GraphWritesAGraphDefEventNow) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  EXPECT_TRUE(graph(writer, two_nodes("m"), 2));
  EXPECT_THROW(graph(writer, GraphDef{.node = {{.name = "a", .op = "X", .input = {"missing"}}}}), InvalidArgumentError);
  writer.close();
  const std::vector<Event> events = graph_events(dir.str());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(decode_graph_def(*events[0].graph_def), two_nodes("m"));
}

}  // namespace
}  // namespace chorus::summary
