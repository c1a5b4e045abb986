// Timeline: what every replica did, on one clock, as a Chrome trace-event JSON file that Perfetto
// (ui.perfetto.dev) and chrome://tracing open — Horovod's HOROVOD_TIMELINE, with compute and
// communication on the same tracks.
//
//   CHORUS_TIMELINE=/tmp/step.json ./mnist_mirrored      // written when the process exits
//   chorus::timeline::start("/tmp/step.json");  ...  chorus::timeline::stop();   // written by stop()
//
// What is recorded (each a complete event, "ph": "X", with "cat"):
//   forward      each Layer call (model/layer.cc), named by the layer;
//   backward     GradientTape::gradient ("gradient") and, inside it, each layer's share of the
//                backward pass: consecutive gradient ops recorded under one layer (scope below);
//   collective   each collective of a replica context (distribute/replica_context.cc): all-reduce
//                packs, ZeRO reduce-scatters and all-gathers, with bytes, dtype and backend;
//   optimizer    Optimizer::apply_gradients;
//   step, input  Model::fit's step (strategy.run) and its wait for the next batch;
//   checkpoint   Checkpoint::write; an async save's write on the "checkpoint writer" track (tid
//                3000, with its CPU time, run-queue wait and page faults) and its snapshot copy;
//                a write into a variable waiting for that copy ("hold wait", core/tensor.cc).
// Tracks: one process per rank ("pid" = the launcher's rank, 0 without one; named "rank R
// (host)"), one thread track per replica ("tid" 1000 + replica id in sync group, named "replica
// R") and one per other thread ("main" for the first). Timestamps are CLOCK_MONOTONIC
// microseconds, the same clock for every process on a host, so the files of several ranks line up.
// Under a launcher with several ranks each rank writes its own file: "%r" in the path becomes the
// rank, and a path without "%r" gets ".rank<R>" appended ("/tmp/step.json.rank1").
//
// Memory: events are kept until written, at most 4 Mi of them (a few hundred MB); later ones are
// counted, not kept, and the file says how many were dropped ("dropped_events").
// Cost: off (the default), a hook is a relaxed atomic load and a few empty members (8 ns per
// Span, 0.005% of a small fit step: bench_timeline). On, an event is two clock reads, its strings
// and one short critical section (events are kept in memory until written): 1.04× the step time
// of that fit in bench_timeline.
// Errors: start("") → InvalidArgumentError; a path where something other than a regular file or a
// symbolic link exists (a device such as /dev/null, a FIFO, a directory) → FailedPreconditionError
// naming it and its type, from start() (and so from the first hook when CHORUS_TIMELINE names it);
// a file that cannot be written → the error of core/file_io.h (from stop(); at exit it is logged,
// never thrown).
// Thread-safety: everything may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::timeline {

namespace internal {
extern std::atomic<bool> g_on;
}  // namespace internal

inline bool enabled() { return internal::g_on.load(std::memory_order_relaxed); }

// Starts recording into memory (dropping events of an earlier recording not yet written).
void start(const std::string& path);
// Stops recording and writes the file; returns its path ("" when nothing was recording).
std::string stop();
// Starts recording from CHORUS_TIMELINE once per process (written at exit); called by the hooks'
// first use, so setting the variable is all a user does. Idempotent.
void start_from_environment();

// In-memory recording, for writers of other formats (summary/trace.h writes TensorBoard's
// profile plugin files from it). One recording at a time: start_capture() while start() or
// CHORUS_TIMELINE records, or while another capture runs, throws FailedPreconditionError, and so
// does start() while a capture runs. stop() leaves a capture alone (returns "").
struct CapturedEvent {
  std::string category, name, args_json;  // args_json: the body of a JSON object, or empty
  std::int64_t start_us = 0, end_us = 0;  // CLOCK_MONOTONIC microseconds
  int tid = 0;
};
struct Capture {
  int pid = 0;                         // this process's rank, as in the file
  std::string process_name;            // "rank R (host)"
  std::map<int, std::string> threads;  // tid → track name, for the tracks that have events
  std::vector<CapturedEvent> events;   // in recording order
  std::int64_t dropped = 0;            // events past the cap, not kept
  std::string json;                    // the Chrome trace document stop() would have written
};
// Starts recording into memory, with no file.
void start_capture();
// Stops a capture and returns what it recorded, writing nothing; nullopt when no capture runs.
std::optional<Capture> stop_capture();

// The calling thread's own track, instead of its replica's or a numbered one: `tid` (>= 2000,
// clear of the replicas' 1000 + id) named `name` — a replica's communication thread,
// distribute/comm_worker.h, "replica R all-reduce".
void set_thread_track(int tid, std::string name);

// CLOCK_MONOTONIC in microseconds.
std::int64_t now_us();
// One complete event of the calling thread. `args_json`: the body of a JSON object
// ("\"bytes\": 4096, \"backend\": \"mpi\""), or empty. Does nothing when off.
void record(std::string_view category, std::string_view name, std::int64_t start_us, std::int64_t end_us,
            std::string_view args_json = {});

// `s` as a JSON string, quotes included, for args_json values (a path, a name).
std::string quoted(std::string_view s);

// A complete event from construction to destruction (when on at construction).
// A Span is also an NVTX range "<category>/<name>" on its thread (Nsight Systems shows chorus's
// phases beside the kernels) when the process runs under an NVTX tool (NVTX_INJECTION64_PATH set,
// as `nsys profile` does) and chorus was built with CUDA, whether or not the timeline records.
// Events recorded after the fact (record()) are not NVTX ranges.
class Span {
 public:
  Span(std::string_view category, std::string_view name, std::string args_json = {});
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // Replaces the event's arguments (e.g. once a size is known).
  void set_args(std::string args_json) { args_ = std::move(args_json); }

 private:
  bool on_;
  bool nvtx_ = false;  // an NVTX range was pushed
  std::string category_, name_, args_;
  std::int64_t start_ = 0;
};

// The calling thread's scope path ("sequential/dense_1"): Layer::operator() pushes its name for
// the call, and the tape tags each recorded op with the path, so a layer's backward ops can be
// told apart. Pushed only while recording.
class ScopeName {
 public:
  explicit ScopeName(std::string_view name);
  ~ScopeName();
  ScopeName(const ScopeName&) = delete;
  ScopeName& operator=(const ScopeName&) = delete;

 private:
  bool on_;
  std::size_t previous_size_ = 0;
};
// The current path ("" outside any scope).
const std::string& current_scope();

}  // namespace chorus::timeline
