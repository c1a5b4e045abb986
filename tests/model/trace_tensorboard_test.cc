// Graphs and Profile (summary/trace.h with Model::graph_def): a Sequential model's graph is its
// layers as nodes, chained, with their output shapes (batch dimension -1) and replica 0's device;
// a trace around fit on 2 logical CPU replicas records that graph (once, though every replica calls
// the model) and the step timeline; trace_export writes them where TensorBoard looks. Then
// TensorBoard's own loaders read them (tests/model/tensorboard_trace_check.py in the interop
// Python, tests/core/interop_python.h: skipped without it outside CI, FAILED under CI=true):
//   EventAccumulator(...).Graph() and the Graphs plugin's run graph give the expected nodes,
//   shapes and devices; the profile plugin (tensorboard-plugin-profile, xprof) lists the profile
//   run, its host and the trace viewer, and converts our XSpace into trace events holding the
//   timeline's layer spans on each replica's thread; <host>.trace.json.gz is gzip'ed Chrome JSON.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/timeline.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/sgd.h>
#include <chorus/summary/event_file_reader.h>
#include <chorus/summary/summary_writer.h>
#include <chorus/summary/trace.h>

namespace chorus {
namespace {

namespace fs = std::filesystem;
using chorus::testing::TempDir;
using summary::AttrValue;

// Conv2D(4, 3) on 8×8×1 → 6×6×4; MaxPooling2D(2) → 3×3×4; Flatten → 36; Dense(10) → 10.
struct Expected {
  std::string name, op;
  std::vector<std::int64_t> shape;
};
const std::vector<Expected> kNodes = {{"net/input", "Placeholder", {-1, 8, 8, 1}},
                                      {"net/conv2d", "Conv2D", {-1, 6, 6, 4}},
                                      {"net/max_pooling2d", "MaxPooling2D", {-1, 3, 3, 4}},
                                      {"net/flatten", "Flatten", {-1, 36}},
                                      {"net/dense", "Dense", {-1, 10}}};

std::unique_ptr<model::Sequential> make_model() {
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Conv2D(4, 3, "relu"), layers::MaxPooling2D(2), layers::Flatten(),
                                    layers::Dense(10)},
      "net");
  m->compile(std::make_shared<optimizers::SGD>(0.01), std::make_shared<losses::MeanSquaredError>());
  return m;
}

void expect_graph(const summary::GraphDef& g, const std::vector<std::string>& devices) {
  ASSERT_EQ(g.node.size(), kNodes.size());
  for (std::size_t i = 0; i < kNodes.size(); ++i) {
    const summary::NodeDef& n = g.node[i];
    EXPECT_EQ(n.name, kNodes[i].name);
    EXPECT_EQ(n.op, kNodes[i].op);
    EXPECT_EQ(n.device, devices[0]);
    EXPECT_EQ(n.input, i == 0 ? std::vector<std::string>{} : std::vector<std::string>{kNodes[i - 1].name});
    EXPECT_EQ(n.attr.at("_output_shapes"), AttrValue::shapes({kNodes[i].shape})) << n.name;
    if (devices.size() > 1)
      EXPECT_EQ(n.attr.at("_replica_devices"), AttrValue::strings(devices));
    else
      EXPECT_EQ(n.attr.count("_replica_devices"), 0u);
    if (i == 0) {
      EXPECT_EQ(n.attr.at("dtype"), AttrValue::dtype(1));
      EXPECT_EQ(n.attr.at("shape"), AttrValue::tensor_shape({kNodes[0].shape}));
    } else {
      EXPECT_EQ(n.attr.at("T"), AttrValue::dtype(1));  // DT_FLOAT
    }
  }
}

int count_graphs(const std::string& run, const std::vector<std::string>& devices) {
  int graphs = 0;
  for (const std::string& f : summary::list_event_files(run))
    for (const summary::Event& e : summary::read_events(f))
      if (e.graph_def) {
        ++graphs;
        expect_graph(summary::decode_graph_def(*e.graph_def), devices);
      }
  return graphs;
}

TEST(ModelGraph, SequentialIsAChainOfItsLayersWithShapesAndDevice) {
  auto m = make_model();
  EXPECT_THROW(m->graph_def(), FailedPreconditionError);  // not built yet
  m->build(Shape{2, 8, 8, 1});
  const summary::GraphDef g = m->graph_def();
  expect_graph(g, m->strategy().replica_devices());
  EXPECT_EQ(summary::decode_graph_def(summary::encode_graph_def(g)), g);
}

// Writes logs/train (the graph event) and logs/plugins/profile/<run>/ from a trace around fit on
// 2 replicas; returns the replica devices.
std::vector<std::string> traced_fit(const std::string& logdir) {
  chorus::testing::make_cpus(2, 128);
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2));
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model();
  }
  const Tensor x = ops::stateless_random_uniform({16, 8, 8, 1}, {1, 2});
  const Tensor y = ops::stateless_random_uniform({16, 10}, {3, 4});
  summary::SummaryWriter writer(logdir + "/train");
  summary::trace_on({.graph = true, .profiler = true, .profiler_outdir = logdir});
  m->fit(data::Dataset::from_tensor_slices({x, y}).batch(8), {.epochs = 1, .verbose = 0});  // 2 steps
  EXPECT_TRUE(summary::trace_export(writer, "model_trace", 0));
  writer.close();
  return strategy.replica_devices();
}

TEST(ModelGraph, TraceAroundFitRecordsTheGraphOnceAndTheTimeline) {
  TempDir dir;
  const std::vector<std::string> devices = traced_fit(dir.str("logs"));
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(count_graphs(dir.str("logs/train"), devices), 1);
  int runs = 0;
  for (const auto& run : fs::directory_iterator(dir.str("logs/plugins/profile"))) {
    ++runs;
    EXPECT_TRUE(fs::is_regular_file(run.path() / (host_name_or("localhost") + ".xplane.pb")));
    EXPECT_TRUE(fs::is_regular_file(run.path() / (host_name_or("localhost") + ".trace.json.gz")));
  }
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(summary::is_tracing());
  EXPECT_FALSE(timeline::enabled());
  chorus::internal::reset_runtime_for_testing();
}

TEST(ModelGraph, TensorBoardCallbackWritesTheGraphOnceUnlessToldNot) {
  TempDir dir;
  const Tensor x = ops::stateless_random_uniform({16, 8, 8, 1}, {1, 2});
  const Tensor y = ops::stateless_random_uniform({16, 10}, {3, 4});
  for (const bool write_graph : {true, false}) {
    auto m = make_model();
    const std::string logdir = dir.str(write_graph ? "with" : "without");
    m->fit(
        data::Dataset::from_tensor_slices({x, y}).batch(4),
        {.epochs = 2, .callbacks = {std::make_shared<callbacks::TensorBoard>(logdir, 0, write_graph)}, .verbose = 0});
    EXPECT_EQ(count_graphs(logdir + "/train", m->strategy().replica_devices()), write_graph ? 1 : 0);
  }
}

std::string check_script() { return std::string(CHORUS_SOURCE_ROOT) + "/tests/model/tensorboard_trace_check.py"; }

// What the script must find: one line per node (name, op, device, input or "-", shape as
// comma-separated dims), then the host.
void write_expected(const std::string& path, const std::vector<std::string>& devices) {
  std::ofstream out(path);
  for (std::size_t i = 0; i < kNodes.size(); ++i) {
    std::string dims;
    for (const std::int64_t d : kNodes[i].shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    out << "node\t" << kNodes[i].name << '\t' << kNodes[i].op << '\t' << devices[0] << '\t'
        << (i == 0 ? "-" : kNodes[i - 1].name) << '\t' << dims << '\n';
  }
  out << "host\t" << host_name_or("localhost") << '\n';
}

TEST(TensorBoardTrace, GraphsAndProfilePluginsLoadTheTrace) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorboard, tensorflow, xprof");
  TempDir dir;
  const std::vector<std::string> devices = traced_fit(dir.str("logs"));
  chorus::internal::reset_runtime_for_testing();
  write_expected(dir.str("expected.tsv"), devices);
  EXPECT_EQ(chorus::testing::run_interop_command(
                "'" + python + "' '" + check_script() + "' '" + dir.str("logs") + "' '" + dir.str("expected.tsv") + "'",
                "tensorboard"),
            0);
}

}  // namespace
}  // namespace chorus
