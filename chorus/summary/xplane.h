// The step timeline (core/timeline.h) as a tensorflow.profiler.XSpace, the file TensorBoard's
// profile plugin reads: `<logdir>/plugins/profile/<run>/<host>.xplane.pb` (summary/trace.h writes
// it). The plugin (tensorboard-plugin-profile / xprof 2.24) lists a run's tools from its
// `*.xplane.pb` files only and converts them to the trace viewer's events itself; older plugins
// (before XPlane) read `<host>.trace.json.gz` instead, which trace.h writes beside it.
//
// Mapping (tsl/profiler/protobuf/xplane.proto; field numbers in the .cc):
//   XSpace{planes: [one XPlane], hostnames: [host]}
//   XPlane{id 0, name "/host:CPU" (TF's host-threads plane), event_metadata: one per distinct event
//          name (ids from 1), stat_metadata: {1 "category", 2 "args"}}
//   one XLine per timeline track: id = display_id = the track's tid, name = the track's name
//          ("replica 0", "main", ...), timestamp_ns = its first event's start;
//   one XEvent per timeline event: metadata_id = its name's, offset_ps = start − the line's
//          timestamp, duration_ps, stats {category: str, args: str (the event's JSON args body)
//          when it has any}.
// The trace viewer shows each line as a thread of process "/host:CPU", events named as in the
// timeline, timestamps in CLOCK_MONOTONIC (the same clock as the JSON timeline).
// Pure function: thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <chorus/core/timeline.h>

namespace chorus::summary {

// Serialized XSpace of `capture`, for host `hostname`.
std::string encode_xspace(const timeline::Capture& capture, std::string_view hostname);

}  // namespace chorus::summary
