// SummaryWriter: file naming and header as TF, round trips through our reader, buffering and
// flushing, errors, thread-safety, and the chief-only rule (replica 0 under a MirroredStrategy
// on 2 logical CPU devices; launcher rank; the `chief` option).
#include <chorus/summary/summary_writer.h>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/summary/event_file_reader.h>
#include <chorus/summary/png.h>
#include <chorus/summary/record.h>

namespace chorus::summary {
namespace {

using namespace std::chrono_literals;
using testing::read_file;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

std::string only_event_file(const std::string& dir) {
  const auto files = list_event_files(dir);
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? "" : files[0];
}

// The summary values of all events after the header, as (tag, step, event).
std::vector<std::pair<SummaryValue, std::int64_t>> values_of(const std::string& path) {
  std::vector<std::pair<SummaryValue, std::int64_t>> out;
  for (const Event& e : read_events(path))
    if (e.summary)
      for (const SummaryValue& v : e.summary->value) out.emplace_back(v, e.step);
  return out;
}

TEST(SummaryWriter, NamesTheFileAsTfAndWritesTheHeaderAtOnce) {
  TempDir dir;
  const std::string logdir = dir.str("runs/train");  // parents are created
  const auto before = static_cast<std::int64_t>(std::time(nullptr));
  SummaryWriter writer(logdir);
  const auto after = static_cast<std::int64_t>(std::time(nullptr));
  EXPECT_TRUE(writer.is_chief());
  EXPECT_EQ(writer.logdir(), logdir);
  const std::string path = only_event_file(logdir);
  EXPECT_EQ(writer.path(), path);

  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  // events.out.tfevents.<10 digits>.<host>.<pid>.<n>.v2 (the host may itself contain dots).
  const std::string base = fs::path(path).filename().string();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(base.rfind(prefix, 0), 0u) << base;
  ASSERT_GE(base.size(), prefix.size() + 11 + 3) << base;
  ASSERT_EQ(base.substr(base.size() - 3), ".v2") << base;
  const std::string digits = base.substr(prefix.size(), 10);
  ASSERT_TRUE(std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) << base;
  ASSERT_EQ(base[prefix.size() + 10], '.') << base;
  std::string rest = base.substr(prefix.size() + 11, base.size() - prefix.size() - 11 - 3);  // host.pid.n
  const std::size_t dot_n = rest.rfind('.');
  ASSERT_NE(dot_n, std::string::npos) << base;
  const std::size_t dot_pid = rest.rfind('.', dot_n - 1);
  ASSERT_NE(dot_pid, std::string::npos) << base;
  const std::int64_t seconds = std::stoll(digits);
  EXPECT_GE(seconds, before);
  EXPECT_LE(seconds, after);
  EXPECT_EQ(rest.substr(0, dot_pid), std::string(host));
  EXPECT_EQ(std::stoll(rest.substr(dot_pid + 1, dot_n - dot_pid - 1)), static_cast<long long>(getpid()));
  const std::int64_t n = std::stoll(rest.substr(dot_n + 1));
  EXPECT_GE(n, 1);
  EXPECT_EQ(base, event_file_name(seconds, host, getpid(), n));

  // Before any flush, the header is on disk: 40 bytes, Event{wall_time = the name's seconds,
  // file_version "brain.Event:2"}.
  const std::string bytes = read_file(path);
  ASSERT_EQ(bytes.size(), 40u);
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version.value_or(""), "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, static_cast<double>(seconds));
  EXPECT_EQ(events[0].step, 0);
}

TEST(SummaryWriter, FirstRecordHasTheStructureOfTfsHeaderOnlyFile) {
  CHORUS_TF_TESTDATA_OR_SKIP(tf_dir);
  const std::string tf = read_file(tf_dir + "/events.out.tfevents.header-only.v2");
  TempDir dir;
  SummaryWriter writer(dir.str());
  const std::string ours = read_file(writer.path());
  ASSERT_EQ(ours.size(), tf.size());
  EXPECT_EQ(ours.substr(0, 12), tf.substr(0, 12)) << "same length and length CRC";
  EXPECT_EQ(ours[12], tf[12]) << "wall_time key (field 1, fixed64)";
  EXPECT_EQ(ours.substr(21, 15), tf.substr(21, 15)) << "file_version key, length, \"brain.Event:2\"";
  // Only the 8 wall_time bytes and hence the data CRC differ.
}

TEST(SummaryWriter, EverySummaryKindRoundTrips) {
  TempDir dir;
  std::string path;
  std::vector<std::uint8_t> px(2 * 4 * 5 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i);
  {
    SummaryWriter writer(dir.str());
    path = writer.path();
    EXPECT_TRUE(writer.scalar("loss", 0.75, 1));
    EXPECT_TRUE(writer.scalar("loss", 0.5, 2));
    EXPECT_TRUE(writer.histogram("weights", std::vector<double>{0, 1, 2, 3}, 2, 2));
    EXPECT_TRUE(writer.histogram("t", Tensor::from_vector<float>({1, 1, 1}, Shape{3}), 3));
    EXPECT_TRUE(writer.image("inputs", Tensor::from_vector(px, Shape{2, 4, 5, 3}), 4, 1));
    EXPECT_TRUE(writer.text("notes", "hello *world*", 5));
    Event restart;
    restart.step = 6;
    restart.session_log = SessionLog{SessionStatus::kStart, "", ""};
    EXPECT_TRUE(writer.write_event(restart));
  }  // the destructor flushes
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 8u);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const Event& e : events) {
    EXPECT_LE(e.wall_time, now);
    EXPECT_GT(e.wall_time, now - 600);
  }
  EXPECT_EQ(events[7].what, event_what::kSessionLog);
  EXPECT_EQ(events[7].step, 6);
  EXPECT_EQ(events[7].session_log->status, SessionStatus::kStart);

  const auto vals = values_of(path);
  ASSERT_EQ(vals.size(), 6u);
  EXPECT_EQ(vals[0].first.tag, "loss");
  EXPECT_EQ(vals[0].second, 1);
  EXPECT_EQ(vals[0].first.tensor->to_doubles(), std::vector<double>{0.75});
  EXPECT_EQ(vals[1].first.tensor->to_doubles(), std::vector<double>{0.5});
  EXPECT_EQ(vals[1].second, 2);

  // {0,1,2,3} in 2 buckets of width 1.5: [0, 1.5] holds 0, 1; [1.5, 3] holds 2, 3.
  EXPECT_EQ(vals[2].first.plugin_name(), "histograms");
  EXPECT_EQ(*vals[2].first.tensor->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(vals[2].first.tensor->to_doubles(), (std::vector<double>{0, 1.5, 2, 1.5, 3, 2}));
  // Three equal values in 30 buckets: all in the last.
  const std::vector<double> t = vals[3].first.tensor->to_doubles();
  ASSERT_EQ(t.size(), 90u);
  EXPECT_EQ(t[87], 1);
  EXPECT_EQ(t[88], 1);
  EXPECT_EQ(t[89], 3);

  EXPECT_EQ(vals[4].first.plugin_name(), "images");
  EXPECT_EQ(vals[4].second, 4);
  EXPECT_EQ(vals[4].first.tensor->string_val, (std::vector<std::string>{"5", "4", encode_png(px.data(), 4, 5, 3)}));

  EXPECT_EQ(vals[5].first.plugin_name(), "text");
  EXPECT_EQ(vals[5].first.tensor->string_val, std::vector<std::string>{"hello *world*"});
}

TEST(SummaryWriter, BuffersUpToMaxQueueThenWrites) {
  TempDir dir;
  SummaryWriter writer(dir.str(), {.max_queue = 3, .flush_millis = std::chrono::hours(1)});
  const auto size = [&] { return read_file(writer.path()).size(); };
  const std::size_t header = size();
  writer.scalar("a", 1, 1);
  writer.scalar("a", 2, 2);
  EXPECT_EQ(size(), header) << "two events stay buffered";
  writer.scalar("a", 3, 3);
  EXPECT_GT(size(), header) << "the third reaches max_queue";
  const std::size_t three = size();
  writer.scalar("a", 4, 4);
  EXPECT_EQ(size(), three);
  writer.flush();
  EXPECT_EQ(values_of(writer.path()).size(), 4u);
}

TEST(SummaryWriter, TheBackgroundThreadFlushesEveryFlushMillis) {
  TempDir dir;
  SummaryWriter writer(dir.str(), {.max_queue = 1000, .flush_millis = 20ms});
  writer.scalar("a", 1, 1);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (values_of(writer.path()).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(values_of(writer.path()).size(), 1u);
}

TEST(SummaryWriter, TwoWritersOnOneLogdirGetTwoFiles) {
  TempDir dir;
  SummaryWriter a(dir.str()), b(dir.str());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(list_event_files(dir.str()).size(), 2u);
}

TEST(SummaryWriter, ConcurrentWritesAreAllRecordedIntact) {
  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.str(), {.max_queue = 7});
    path = writer.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 100; ++i) writer.scalar("thread" + std::to_string(t), i, i);
      });
    for (auto& th : threads) th.join();
  }
  const auto vals = values_of(path);
  ASSERT_EQ(vals.size(), 400u);
  std::set<std::pair<std::string, std::int64_t>> seen;
  for (const auto& [v, step] : vals) {
    EXPECT_EQ(v.tensor->to_doubles(), std::vector<double>{static_cast<double>(step)});
    seen.emplace(v.tag, step);
  }
  EXPECT_EQ(seen.size(), 400u);
}

TEST(SummaryWriter, CloseIsFinalAndIdempotent) {
  TempDir dir;
  SummaryWriter writer(dir.str());
  writer.scalar("a", 1, 1);
  writer.close();
  writer.close();
  EXPECT_EQ(values_of(writer.path()).size(), 1u);
  EXPECT_THROW(writer.scalar("a", 2, 2), FailedPreconditionError);
  EXPECT_THROW(writer.flush(), FailedPreconditionError);

  SummaryWriter moved(std::move(writer));
  EXPECT_THROW(writer.flush(), FailedPreconditionError);  // NOLINT(bugprone-use-after-move): on purpose
}

TEST(SummaryWriter, BadArgumentsAreInvalidArgument) {
  TempDir dir;
  EXPECT_THROW(SummaryWriter(dir.str(), {.max_queue = 0}), InvalidArgumentError);
  EXPECT_THROW(SummaryWriter(dir.str(), {.flush_millis = 0ms}), InvalidArgumentError);
  EXPECT_THROW(SummaryWriter(""), InvalidArgumentError);
  SummaryWriter writer(dir.str());
  EXPECT_THROW(writer.scalar("", 1, 1), InvalidArgumentError);
  EXPECT_THROW(writer.histogram("h", std::vector<double>{1}, 1, -1), InvalidArgumentError);
  EXPECT_THROW(writer.histogram("h", std::vector<double>{1, NAN}, 1), InvalidArgumentError);
  EXPECT_THROW(writer.histogram("h", Tensor(), 1), InvalidArgumentError);
  EXPECT_THROW(writer.image("i", Tensor::zeros(Shape{2, 2}), 1), InvalidArgumentError);
  writer.close();
  EXPECT_TRUE(values_of(writer.path()).empty()) << "nothing half-written";
}

template <typename E>
void expect_error_naming(const std::string& logdir, const char* kind) {
  try {
    SummaryWriter writer(logdir);
    ADD_FAILURE() << "no " << kind << " for " << logdir;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(logdir), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << kind << " for " << logdir << ", got " << e.what();
  }
}

TEST(SummaryWriter, UnusableLogdirsAreTypedErrorsNamingThePath) {
  TempDir dir;
  write_file(dir.str("a_file"), "x");
  expect_error_naming<FailedPreconditionError>(dir.str("a_file"), "FailedPreconditionError");       // exists, not a dir
  expect_error_naming<FailedPreconditionError>(dir.str("a_file/logs"), "FailedPreconditionError");  // ENOTDIR
  if (fs::is_directory("/proc/self")) expect_error_naming<NotFoundError>("/proc/chorus_summary_logs", "NotFoundError");
  if (geteuid() != 0) {
    fs::create_directories(dir.str("ro"));
    ::chmod(dir.str("ro").c_str(), 0500);
    expect_error_naming<PermissionDeniedError>(dir.str("ro/logs"), "PermissionDeniedError");
    ::chmod(dir.str("ro").c_str(), 0700);
  } else if (fs::is_directory("/sys/kernel")) {
    // root ignores mode bits; sysfs refuses mkdir (EPERM, or EROFS when mounted read-only).
    expect_error_naming<PermissionDeniedError>("/sys/kernel/chorus_summary_logs", "PermissionDeniedError");
  }
}

TEST(SummaryWriter, ANonChiefWriterCreatesNothingAndRecordsNothing) {
  TempDir dir;
  const std::string logdir = dir.str("worker1");
  SummaryWriter writer(logdir, {.chief = false});
  EXPECT_FALSE(writer.is_chief());
  EXPECT_FALSE(writer.should_record());
  EXPECT_EQ(writer.path(), "");
  EXPECT_FALSE(writer.scalar("loss", 1, 1));
  EXPECT_FALSE(writer.histogram("h", std::vector<double>{1, 2}, 1));
  EXPECT_FALSE(writer.image("i", Tensor::zeros(Shape{1, 2, 2, 1}, DType::kUInt8), 1));
  EXPECT_FALSE(writer.text("t", "x", 1));
  writer.flush();
  writer.close();
  EXPECT_FALSE(fs::exists(logdir));
  // Still validates, so chief and non-chief fail alike.
  SummaryWriter other(logdir, {.chief = false});
  EXPECT_THROW(other.scalar("", 1, 1), InvalidArgumentError);
}

// A TF_CONFIG worker: no launcher rank, but the strategy registered worker index 1.
TEST(SummaryWriter, AWorkerIndexRegisteredByTheStrategyOtherThanZeroIsNotTheChief) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const std::string logdir = dir.str("worker1");
  EXPECT_EXIT(
      {
        for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"}) unsetenv(v);
        env::set_process_rank(1);
        SummaryWriter writer(logdir);
        const bool ok = !writer.is_chief() && !writer.scalar("loss", 1, 1) && !fs::exists(logdir);
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SummaryWriter, ALauncherRankOtherThanZeroIsNotTheChief) {
  // launcher_rank() is read once per process: check in freshly started copies of this binary.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const std::string logdir = dir.str("rank1");
  EXPECT_EXIT(
      {
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("OMPI_COMM_WORLD_RANK", "1", 1);
        SummaryWriter writer(logdir);
        const bool ok = !writer.is_chief() && !writer.scalar("loss", 1, 1) && !fs::exists(logdir);
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("OMPI_COMM_WORLD_RANK", "0", 1);
        SummaryWriter writer(logdir);
        const bool ok = writer.is_chief() && writer.scalar("loss", 1, 1);
        writer.close();
        std::exit(ok && values_of(writer.path()).size() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        // The `chief` option wins over the launcher's rank.
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("OMPI_COMM_WORLD_RANK", "1", 1);
        SummaryWriter writer(logdir + "_forced", {.chief = true});
        std::exit(writer.is_chief() && writer.scalar("loss", 1, 1) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SummaryWriter, UnderAMirroredStrategyOnlyReplicaZeroRecords) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 128}, {.memory_limit_mb = 128}});
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);

  TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.str());
    path = writer.path();
    for (int step = 1; step <= 3; ++step) {
      const auto recorded = strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        const Tensor mine = Tensor::full(Shape{1, 2, 2, 1}, r, DType::kUInt8);
        std::vector<bool> got{writer.should_record(), writer.scalar("replica_value", 10.0 * r + step, step),
                              writer.histogram("replica_hist", mine, step), writer.image("replica_image", mine, step),
                              writer.text("replica_text", "replica " + std::to_string(r), step)};
        return got;
      });
      const auto& per_replica = strategy.experimental_local_results(recorded);
      ASSERT_EQ(per_replica.size(), 2u);
      EXPECT_EQ(per_replica[0], std::vector<bool>(5, true)) << "replica 0 records";
      EXPECT_EQ(per_replica[1], std::vector<bool>(5, false)) << "replica 1 does not";
    }
    // The program's thread, in cross-replica context inside the scope, records.
    auto scope = strategy.scope();
    EXPECT_TRUE(in_cross_replica_context());
    EXPECT_TRUE(writer.should_record());
    EXPECT_TRUE(writer.scalar("cross_replica", 1, 9));
  }
  const auto vals = values_of(path);
  ASSERT_EQ(vals.size(), 3u * 4 + 1);
  for (const auto& [v, step] : vals) {
    if (v.tag == "replica_value") {
      EXPECT_EQ(v.tensor->to_doubles(), std::vector<double>{double(step)}) << "replica 0's value";
    } else if (v.tag == "replica_text") {
      EXPECT_EQ(v.tensor->string_val, std::vector<std::string>{"replica 0"});
    } else if (v.tag == "replica_hist") {
      EXPECT_EQ(v.tensor->to_doubles().back(), 4) << "four pixels of value 0";
    }
  }
  EXPECT_EQ(vals.back().first.tag, "cross_replica");
}

}  // namespace
}  // namespace chorus::summary
