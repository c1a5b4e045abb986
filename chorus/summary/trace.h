// TensorBoard's Graphs and Profile tabs: tf.summary.trace_on / trace_export / trace_off, and
// tf.summary.graph.
//
//   TensorFlow:
//     tf.summary.trace_on(graph=True, profiler=True, profiler_outdir="./logs/train")
//     model.fit(...)
//     with writer.as_default():
//       tf.summary.trace_export("model_trace", step=0)
//   chorus (the writer is an argument: there is no default writer):
//     summary::trace_on({.graph = true, .profiler = true, .profiler_outdir = "./logs/train"});
//     model.fit(...);
//     summary::trace_export(writer, "model_trace", 0);
//   tf.summary.trace_off()        → summary::trace_off();
//   tf.summary.graph(graph_def)   → summary::graph(writer, model.graph_def());
//
// What is recorded between trace_on and trace_export:
//   graph     the graph of every model::Model called while tracing (model/ records it through the
//             two hooks at the end of this header; the first graph per model name is kept): its
//             layers as GraphDef nodes with their output shapes and device (Model::graph_def()).
//   profiler  the step timeline (core/timeline.h: forward/backward spans per layer and replica,
//             collectives, optimizer, input waits), captured in memory (timeline::start_capture).
// What trace_export writes:
//   graph     one Event{step, graph_def = the serialized GraphDef of all recorded models} in the
//             writer's event file — what Keras's TensorBoard(write_graph=True) writes, and what
//             TensorBoard's Graphs tab and EventAccumulator(...).Graph() read. (TF's own
//             trace_export stores function graphs as a `graph_run_metadata_graph` summary named
//             `name` instead; chorus has no function graphs, only the model's.) Nothing when no
//             model was called while tracing (a warning is logged).
//   profiler  `<profiler_outdir>/plugins/profile/<run>/` with <run> = the local time of the export
//             as TF names it ("2026_11_27_03_04_05", "_1", "_2", ... appended if it exists), and
//             in it, for this process's host (`<host>` is the host name, `<host>.rank<R>` under a
//             launcher with ranks, so that the ranks of one host do not collide):
//               <host>.xplane.pb       an XSpace (summary/xplane.h): what the profile plugin
//                                      (tensorboard-plugin-profile / xprof 2.24) reads — its trace
//                                      viewer shows one thread per timeline track;
//               <host>.trace.json.gz   the same timeline as gzip'ed Chrome trace JSON, which
//                                      profile plugins before XPlane read as the trace viewer's
//                                      input, and which Perfetto opens.
//             TensorBoard lists the profile run when profiler_outdir is the writer's logdir or an
//             ancestor of it (use the writer's logdir, as TF's docs do).
// The trace ends with trace_export (or trace_off): the next trace needs a new trace_on.
//
// Who writes: trace_export from a replica thread other than replica 0 (inside strategy.run) does
// nothing and returns false, like the writer's own writes; call it from the program's thread.
// The graph event follows the writer's chief-only rule (summary_writer.h); the profile is
// written by every process, each for its own host and rank.
//
// Errors (all chorus::Error, never an abort; state unchanged unless said):
//   trace_on while tracing                       → FailedPreconditionError
//   trace_on(profiler) with empty profiler_outdir → InvalidArgumentError
//   trace_on(profiler) while the timeline records (timeline::start, CHORUS_TIMELINE) → FailedPreconditionError
//   trace_on(profiler) with a profiler_outdir that cannot be created → core/file_io.h's error
//                                                  (PermissionDeniedError, NotFoundError, ...)
//   trace_export without trace_on                 → FailedPreconditionError (TF only logs a warning)
//   trace_export with an empty name               → InvalidArgumentError (the trace stays on)
//   trace_export with a graph to write on a closed writer → FailedPreconditionError (the trace stays on)
//   trace_export whose profile files cannot be written → core/file_io.h's error; the trace is
//                                                  over and its timeline lost (the graph event,
//                                                  written first, stays)
//   trace_off without trace_on                    → nothing (as TF)
// Thread-safety: all functions may be called from any thread; one trace per process at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/summary/graph_def.h>

namespace chorus::summary {

class SummaryWriter;

struct TraceOptions {
  bool graph = true;            // record the graphs of the models called while tracing
  bool profiler = false;        // record the step timeline for TensorBoard's profile plugin
  std::string profiler_outdir;  // required with profiler: where plugins/profile/<run>/ goes
};

// tf.summary.trace_on: starts a trace (see above). Creates <profiler_outdir>/plugins/profile
// with profiler, so that an unwritable directory fails here, before the work is traced.
void trace_on(const TraceOptions& options = {});
// tf.summary.trace_export: writes what the trace recorded (see above) and ends the trace. `name`
// (non-empty) names the trace in the log; `step` is the graph event's step. Returns true when it
// wrote something (a graph event or a profile).
bool trace_export(SummaryWriter& writer, std::string_view name, std::int64_t step = 0);
// tf.summary.trace_off: ends the trace without writing anything.
void trace_off();
// Whether a trace is on.
bool is_tracing();

// tf.summary.graph: writes `graph` as Event{step, graph_def} (validated first:
// InvalidArgumentError, graph_def.h). Same gating as the writer's writes; true when recorded.
bool graph(SummaryWriter& writer, const GraphDef& graph, std::int64_t step = 0);

// Hooks for model/ (above summary/ in DESIGN.md, which is why summary/ takes graphs, not models):
// graph_wanted(key) is true while a trace records graphs and has none under `key` (a relaxed
// atomic load when no trace is on); record_graph keeps the first graph given under `key`.
bool graph_wanted(std::string_view key);
void record_graph(const std::string& key, GraphDef graph);

}  // namespace chorus::summary
