#include <chorus/core/timeline.h>

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/host.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/logging.h>

#if defined(CHORUS_WITH_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>  // header-only NVTX v3 (the CUDA toolkit's)
#define CHORUS_WITH_NVTX 1
#endif

namespace chorus::timeline {

std::atomic<bool> internal::g_on{false};

namespace {

struct Event {
  std::string category, name, args;
  std::int64_t start_us, end_us;
  int tid;
};

struct Recorder {
  std::mutex mu;
  std::string path;
  std::vector<Event> events;
  std::map<int, std::string> thread_names;  // tid → track name (kept across recordings: threads keep their tids)
  int next_tid = 1;
  std::int64_t dropped = 0;  // events past kMaxEvents
  bool capture = false;      // recording for stop_capture(), not for a file
};

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: hooks may run during static destruction
  return *r;
}

thread_local int t_plain_tid = 0;                        // this thread's track when it is not a replica
thread_local std::pair<int, std::string> t_named_track;  // set_thread_track's, when set
thread_local std::string t_scope;

constexpr std::size_t kMaxEvents = std::size_t{1} << 22;
std::optional<int> process_rank() { return env::process_rank(); }
int rank() { return process_rank().value_or(0); }

using chorus::internal::Json;

// Text as JSON: bytes that are not UTF-8 become U+FFFD instead of failing the whole trace.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// An event's args: the body of a JSON object as its caller wrote it ("\"bytes\": 42"). A body that
// is not valid JSON is kept as text under "args_text", so that one bad caller cannot lose a trace.
Json args_object(const std::string& body) {
  Json args = Json::parse("{" + body + "}", nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded() || !args.is_object()) return Json{{"args_text", body}};
  return args;
}

// The calling thread's track (under r.mu).
int track(Recorder& r) {
  if (!t_named_track.second.empty()) {
    r.thread_names.try_emplace(t_named_track.first, t_named_track.second);
    return t_named_track.first;
  }
  if (has_strategy()) {
    if (ReplicaContext* ctx = get_replica_context()) {
      const int tid = 1000 + ctx->replica_id_in_sync_group();
      r.thread_names.try_emplace(tid, chorus::internal::str_cat("replica ", ctx->replica_id_in_sync_group()));
      return tid;
    }
  }
  if (t_plain_tid == 0) {
    t_plain_tid = r.next_tid++;
    r.thread_names[t_plain_tid] = t_plain_tid == 1 ? "main" : chorus::internal::str_cat("thread ", t_plain_tid);
  }
  return t_plain_tid;
}

std::string file_for(const std::string& path) {
  const std::optional<int> launcher = process_rank();
  if (const auto pos = path.find("%r"); pos != std::string::npos)
    return path.substr(0, pos) + std::to_string(launcher.value_or(0)) + path.substr(pos + 2);
  return launcher ? chorus::internal::str_cat(path, ".rank", *launcher) : path;
}

// The Chrome trace document of what is recorded (under r.mu).
std::string render_locked(Recorder& r) {
  const int pid = rank();
  // One event per line (a trace of 10^5 events stays readable with grep), each written by nlohmann-json.
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += dump({{"name", "process_name"},
               {"ph", "M"},
               {"pid", pid},
               {"args", {{"name", chorus::internal::str_cat("rank ", pid, " (", host_name_or("unknown host"), ")")}}}});
  std::set<int> used;  // the tracks of this recording (names outlive recordings, as threads do)
  for (const Event& e : r.events) used.insert(e.tid);
  for (const auto& [tid, name] : r.thread_names)
    if (used.count(tid) != 0)
      out +=
          ",\n" + dump({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  for (const Event& e : r.events) {
    Json event = {
        {"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.end_us - e.start_us},
        {"pid", pid},     {"tid", e.tid}};
    if (!e.args.empty()) event["args"] = args_object(e.args);
    out += ",\n" + dump(event);
  }
  out += chorus::internal::str_cat("\n], \"dropped_events\": ", r.dropped, "}\n");
  return out;
}

std::string write_locked(Recorder& r) {
  const std::string out = render_locked(r);
  const std::string file = file_for(r.path);
  io::replace_file(file, out);  // a fresh temporary renamed over the path
  r.events.clear();
  r.dropped = 0;
  return file;
}

void write_at_exit() {
  try {
    const std::string file = stop();
    if (!file.empty()) CHORUS_LOG(INFO) << "timeline written to " << file;
  } catch (const std::exception& e) {
    CHORUS_LOG(ERROR) << "CHORUS_TIMELINE: " << e.what();
  }
}

}  // namespace

void set_thread_track(int tid, std::string name) { t_named_track = {tid, std::move(name)}; }

std::string quoted(std::string_view s) { return dump(Json(std::string(s))); }

std::int64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void start(const std::string& path) {
  CHORUS_REQUIRE(!path.empty(), InvalidArgumentError, "timeline::start: empty path");
  // A device, FIFO or directory at the path is refused now, not after the run when the file is
  // written (a rename over /dev/null would replace it).
  io::require_replaceable(file_for(path));
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_REQUIRE(!(enabled() && r.capture), FailedPreconditionError, "timeline::start('", path,
                 "'): a capture is recording (summary::trace_on(profiler)): export or stop it first");
  r.path = path;
  r.events.clear();
  r.dropped = 0;
  internal::g_on.store(true, std::memory_order_relaxed);
}

std::string stop() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.capture || !internal::g_on.exchange(false)) return "";
  return write_locked(r);
}

void start_capture() {
  start_from_environment();  // so that CHORUS_TIMELINE's recording, if any, is the one refused below
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  CHORUS_REQUIRE(
      !enabled(), FailedPreconditionError, "the timeline is already recording (",
      r.capture ? std::string("another capture") : "to '" + r.path + "', from timeline::start or CHORUS_TIMELINE",
      "): one recording at a time; stop it first");
  r.capture = true;
  r.events.clear();
  r.dropped = 0;
  internal::g_on.store(true, std::memory_order_relaxed);
}

std::optional<Capture> stop_capture() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.capture || !enabled()) return std::nullopt;
  internal::g_on.store(false);
  r.capture = false;
  Capture c;
  c.pid = rank();
  c.process_name = chorus::internal::str_cat("rank ", c.pid, " (", host_name_or("unknown host"), ")");
  c.json = render_locked(r);
  for (const Event& e : r.events) {
    c.threads.try_emplace(e.tid, r.thread_names[e.tid]);
    c.events.push_back({e.category, e.name, e.args, e.start_us, e.end_us, e.tid});
  }
  c.dropped = r.dropped;
  r.events.clear();
  r.dropped = 0;
  return c;
}

void start_from_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::optional<std::string> path = env::get("CHORUS_TIMELINE");
    if (!path || path->empty()) return;
    try {
      start(*path);
    } catch (const Error& e) {
      throw_error(e.code(), chorus::internal::str_cat("CHORUS_TIMELINE: ", e.message()));
    }
    std::atexit(write_at_exit);
  });
}

void record(std::string_view category, std::string_view name, std::int64_t start_us, std::int64_t end_us,
            std::string_view args_json) {
  if (!enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return;
  }
  r.events.push_back({std::string(category), std::string(name), std::string(args_json), start_us, end_us, track(r)});
}

#ifdef CHORUS_WITH_NVTX
namespace {
// Whether an NVTX tool is attached: it sets NVTX_INJECTION64_PATH before the process starts (read
// once). Without one, a Span builds no label.
bool nvtx_attached() {
  static const bool attached = std::getenv("NVTX_INJECTION64_PATH") != nullptr;
  return attached;
}
}  // namespace
#endif

Span::Span(std::string_view category, std::string_view name, std::string args_json) : on_(enabled()) {
#ifdef CHORUS_WITH_NVTX
  if (nvtx_attached()) {
    std::string label(category);
    label += '/';
    label += name;
    nvtxRangePushA(label.c_str());
    nvtx_ = true;
  }
#endif
  if (!on_) return;
  category_ = category;
  name_ = name;
  args_ = std::move(args_json);
  start_ = now_us();
}

Span::~Span() {
  if (on_) record(category_, name_, start_, now_us(), args_);
#ifdef CHORUS_WITH_NVTX
  if (nvtx_) nvtxRangePop();
#endif
}

ScopeName::ScopeName(std::string_view name) : on_(enabled()) {
  if (!on_) return;
  previous_size_ = t_scope.size();
  if (!t_scope.empty()) t_scope += '/';
  t_scope += name;
}

ScopeName::~ScopeName() {
  if (on_) t_scope.resize(previous_size_);
}

const std::string& current_scope() { return t_scope; }

}  // namespace chorus::timeline
