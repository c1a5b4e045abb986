// summary/trace.h misused: every misuse is a typed chorus::Error (core/error.h) whose message says
// what to do, thrown before anything is half done, never an abort or a hang; a refused call leaves
// no trace and no timeline recording behind it (or leaves the running trace as it was, as
// documented); and a failed export over a directory that went away is the documented file error.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/timeline.h>
#include <chorus/summary/summary_writer.h>
#include <chorus/summary/trace.h>

namespace chorus::summary {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class Trace : public ::testing::Test {
 protected:
  void TearDown() override {
    trace_off();
    timeline::stop_capture();
    EXPECT_FALSE(is_tracing());
    EXPECT_FALSE(timeline::enabled());
  }
};

GraphDef one_node() { return GraphDef{.node = {{.name = "m/input", .op = "Placeholder"}}}; }

std::size_t profile_runs(const std::string& outdir) {
  const fs::path dir = fs::path(outdir) / "plugins" / "profile";
  if (!fs::is_directory(dir)) return 0;
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

template <typename E, typename F>
void expect_error(F&& f, const std::string& says) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying: " << says;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error class: " << e.what();
  }
}

TEST_F(Trace, ExportWithoutTraceOnIsFailedPrecondition) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  expect_error<FailedPreconditionError>([&] { trace_export(writer, "t", 0); }, "call summary::trace_on");
  trace_on();
  EXPECT_FALSE(trace_export(writer, "t", 0));  // nothing recorded: nothing written, the trace ends
  expect_error<FailedPreconditionError>([&] { trace_export(writer, "t", 0); }, "no trace is on");
  trace_off();  // without a trace: nothing, as TF
}

TEST_F(Trace, TraceOnTwiceIsFailedPrecondition) {
  trace_on();
  expect_error<FailedPreconditionError>([] { trace_on(); }, "already on");
  EXPECT_TRUE(is_tracing());  // the first trace goes on
}

TEST_F(Trace, ProfilerNeedsAnOutdir) {
  expect_error<InvalidArgumentError>([] { trace_on({.profiler = true}); }, "profiler_outdir is empty");
  EXPECT_FALSE(is_tracing());
  EXPECT_FALSE(timeline::enabled());
}

TEST_F(Trace, UnwritableOutdirFailsAtTraceOn) {
  TempDir dir;
  testing::write_file(dir.str("file"), "x");
  // A path through a regular file: ENOTDIR.
  expect_error<FailedPreconditionError>(
      [&] { trace_on({.profiler = true, .profiler_outdir = dir.str("file") + "/logs"}); }, "file/logs");
  // /proc refuses new directories whoever asks (root included).
  EXPECT_THROW(trace_on({.profiler = true, .profiler_outdir = "/proc/chorus-no/logs"}), Error);
  EXPECT_FALSE(is_tracing());
  EXPECT_FALSE(timeline::enabled());
}

TEST_F(Trace, OneTimelineRecordingAtATime) {
  TempDir dir;
  timeline::start(dir.str("t.json"));
  expect_error<FailedPreconditionError>([&] { trace_on({.profiler = true, .profiler_outdir = dir.str()}); },
                                        "already recording");
  EXPECT_FALSE(is_tracing());
  EXPECT_EQ(timeline::stop(), dir.str("t.json"));  // the file recording was not disturbed
  trace_on({.profiler = true, .profiler_outdir = dir.str()});
  expect_error<FailedPreconditionError>([&] { timeline::start(dir.str("u.json")); }, "a capture is recording");
  expect_error<FailedPreconditionError>([] { timeline::start_capture(); }, "another capture");
}

TEST_F(Trace, EmptyNameOrClosedWriterKeepsTheTraceOn) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  trace_on();
  record_graph("m", one_node());
  expect_error<InvalidArgumentError>([&] { trace_export(writer, "", 0); }, "name is empty");
  EXPECT_TRUE(is_tracing());
  writer.close();
  EXPECT_THROW(trace_export(writer, "t", 0), FailedPreconditionError);
  EXPECT_TRUE(is_tracing());
  SummaryWriter other(dir.str("other"));
  EXPECT_TRUE(trace_export(other, "t", 0));  // the trace was kept for a writer that works
}

TEST_F(Trace, ProfileDirectoryRemovedBeforeExportIsATypedError) {
  TempDir dir;
  SummaryWriter writer(dir.str("run"));
  const std::string outdir = dir.str("prof");
  trace_on({.graph = false, .profiler = true, .profiler_outdir = outdir});
  timeline::record("forward", "x", 1, 2);
  fs::remove_all(outdir);
  testing::write_file(outdir, "now a file");  // plugins/profile cannot be made under it
  EXPECT_THROW(trace_export(writer, "t", 0), FailedPreconditionError);
  EXPECT_FALSE(is_tracing());  // the trace is over (its timeline lost), as documented
  EXPECT_FALSE(timeline::enabled());
}

TEST_F(Trace, NonChiefWriterWritesNoGraphButItsProfile) {
  TempDir dir;
  SummaryWriter writer(dir.str("run"), {.chief = false});
  trace_on({.graph = true, .profiler = true, .profiler_outdir = dir.str("run")});
  record_graph("m", one_node());
  timeline::record("forward", "x", 1, 2);
  EXPECT_TRUE(trace_export(writer, "t", 0));  // the profile
  EXPECT_EQ(profile_runs(dir.str("run")), 1u);
  for (const auto& e : fs::directory_iterator(dir.str("run")))
    EXPECT_EQ(e.path().filename().string().find("tfevents"), std::string::npos) << e.path();
}

TEST_F(Trace, AGraphTensorBoardCannotDrawIsRefusedAndTheTraceStaysOn) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  trace_on();
  record_graph("bad model", GraphDef{.node = {{.name = "bad model/input", .op = "Placeholder"}}});
  expect_error<InvalidArgumentError>([&] { trace_export(writer, "t", 0); }, "node name 'bad model/input'");
  EXPECT_TRUE(is_tracing());
}

TEST_F(Trace, ConcurrentExportsEndOneTraceOnce) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  trace_on({.graph = true, .profiler = true, .profiler_outdir = dir.str()});
  record_graph("m", one_node());
  timeline::record("forward", "x", 1, 2);
  std::atomic<int> exported{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      try {
        if (trace_export(writer, "t", 0)) ++exported;
      } catch (const FailedPreconditionError&) {
        ++refused;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(exported.load(), 1);
  EXPECT_EQ(refused.load(), 3);
  EXPECT_EQ(profile_runs(dir.str()), 1u);
}

}  // namespace
}  // namespace chorus::summary
