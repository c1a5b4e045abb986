#include <chorus/summary/trace.h>

#include <unistd.h>
#include <zlib.h>

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>
#include <chorus/core/strings.h>
#include <chorus/core/timeline.h>
#include <chorus/summary/event.h>
#include <chorus/summary/summary_writer.h>
#include <chorus/summary/xplane.h>

namespace chorus::summary {

namespace {

struct TraceState {
  std::mutex mu;
  bool on = false;
  TraceOptions options;
  std::map<std::string, GraphDef> graphs;  // model name → its graph (the first recorded)
};

TraceState& state() {
  static TraceState* s = new TraceState;  // never destroyed: models may call the hooks at exit
  return *s;
}

std::atomic<bool> g_graph_on{false};

// gzip (RFC 1952) of `data`, zlib's default level.
std::string gzip(std::string_view data) {
  z_stream z{};
  CHORUS_REQUIRE(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                 InternalError, "gzip: zlib deflateInit2 failed");
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int ret = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  CHORUS_REQUIRE(ret == Z_STREAM_END, InternalError, "gzip: zlib deflate failed (", ret, ")");
  return out;
}

// A new <dir>/<local time as TF names profile runs>[_k] directory.
std::string new_run_dir(const std::string& dir) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", &tm);
  for (int k = 0;; ++k) {
    const std::string run =
        k == 0 ? chorus::internal::str_cat(dir, "/", stamp) : chorus::internal::str_cat(dir, "/", stamp, "_", k);
    if (::mkdir(run.c_str(), 0777) == 0) return run;
    const int err = errno;
    if (err != EEXIST) io::throw_errno(err, "cannot create directory", run);
  }
}

std::string profile_dir(const std::string& outdir) { return outdir + "/plugins/profile"; }

// Writes the profile run; returns its directory.
std::string write_profile(const std::string& outdir, const timeline::Capture& capture) {
  std::string host = host_name_or("localhost");
  if (env::process_rank().has_value() || capture.pid != 0) host = chorus::internal::str_cat(host, ".rank", capture.pid);
  io::create_directories(profile_dir(outdir));
  const std::string run = new_run_dir(profile_dir(outdir));
  io::replace_file(run + "/" + host + ".xplane.pb", encode_xspace(capture, host), /*durable=*/true);
  io::replace_file(run + "/" + host + ".trace.json.gz", gzip(capture.json), /*durable=*/true);
  if (capture.dropped > 0)
    CHORUS_LOG(WARNING) << "trace_export: the timeline dropped " << capture.dropped << " events past its cap";
  return run;
}

GraphDef merged(const std::map<std::string, GraphDef>& graphs) {
  GraphDef all;
  for (const auto& [key, g] : graphs) {
    all.node.insert(all.node.end(), g.node.begin(), g.node.end());
    all.producer = std::max(all.producer, g.producer);
  }
  return all;
}

}  // namespace

void trace_on(const TraceOptions& options) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  CHORUS_REQUIRE(!s.on, FailedPreconditionError,
                 "trace_on: a trace is already on; call trace_export or trace_off to end it first");
  if (options.profiler) {
    CHORUS_REQUIRE(!options.profiler_outdir.empty(), InvalidArgumentError,
                   "trace_on(profiler = true): profiler_outdir is empty; give the directory for plugins/profile "
                   "(the writer's logdir)");
    io::create_directories(profile_dir(options.profiler_outdir));
    timeline::start_capture();  // FailedPreconditionError when the timeline already records
  }
  s.on = true;
  s.options = options;
  s.graphs.clear();
  g_graph_on.store(options.graph, std::memory_order_relaxed);
}

bool trace_export(SummaryWriter& writer, std::string_view name, std::int64_t step) {
  CHORUS_REQUIRE(!name.empty(), InvalidArgumentError, "trace_export: the trace's name is empty");
  if (const ReplicaContext* replica = get_replica_context();
      replica != nullptr && replica->replica_id_in_sync_group() != 0)
    return false;  // a replica other than 0, as the writer's own writes
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  CHORUS_REQUIRE(s.on, FailedPreconditionError, "trace_export('", name,
                 "'): no trace is on; call summary::trace_on(...) before the work to trace");
  bool wrote = false;
  if (s.options.graph) {
    if (s.graphs.empty()) {
      CHORUS_LOG(WARNING) << "trace_export('" << name << "'): no model was called while tracing: no graph written";
    } else {
      Event e;
      e.step = step;
      e.graph_def = encode_graph_def(merged(s.graphs));
      wrote = writer.write_event(std::move(e));  // a closed writer throws here: the trace stays on
    }
  }
  s.on = false;
  g_graph_on.store(false, std::memory_order_relaxed);
  s.graphs.clear();
  if (s.options.profiler) {
    const std::optional<timeline::Capture> capture = timeline::stop_capture();
    if (capture) {
      const std::string run = write_profile(s.options.profiler_outdir, *capture);
      CHORUS_LOG(INFO) << "trace_export('" << name << "'): profile of " << capture->events.size()
                       << " timeline events written to " << run;
      wrote = true;
    }
  }
  return wrote;
}

void trace_off() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.on) return;
  s.on = false;
  g_graph_on.store(false, std::memory_order_relaxed);
  s.graphs.clear();
  if (s.options.profiler) timeline::stop_capture();
}

bool is_tracing() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.on;
}

bool graph(SummaryWriter& writer, const GraphDef& graph, std::int64_t step) {
  Event e;
  e.step = step;
  e.graph_def = encode_graph_def(graph);  // validates, on every caller
  return writer.write_event(std::move(e));
}

bool graph_wanted(std::string_view key) {
  if (!g_graph_on.load(std::memory_order_relaxed)) return false;
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.on && s.options.graph && s.graphs.find(std::string(key)) == s.graphs.end();
}

void record_graph(const std::string& key, GraphDef graph) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.on && s.options.graph) s.graphs.try_emplace(key, std::move(graph));
}

}  // namespace chorus::summary
