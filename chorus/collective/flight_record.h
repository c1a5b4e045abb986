// Flight record: what a rank was doing when a collective failed, written to a file for the
// post-mortem (PyTorch's NCCL flight recorder: TORCH_NCCL_DUMP_ON_TIMEOUT and
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE; TF has no file of its own, its timeout error lists the call).
//
//   CHORUS_FLIGHT_RECORD_DIR=/tmp/flight mpirun -np 2 ./train
//   # a collective times out, or a peer process is lost:
//   #   DEADLINE_EXCEEDED: mpi#1: all_reduce #812 float32(1024,) op=sum timed out ... Flight record:
//   #   /tmp/flight/flight-0.json
//
// When it is written. A backend that fails a collective because of a timeout or a lost peer
// (MPI: mpi_failure.cc; the in-process backends: rendezvous.cc) calls write_flight_record() once
// per failing call, on the failing rank's thread, off the hot path. An MPI rank told of another's
// timeout by its notice writes one too (PyTorch's other ranks dump when one times out). Nothing is written when
// CHORUS_FLIGHT_RECORD_DIR (core/env.h) is unset or empty: the default, and in tests unless a test
// sets it.
//
// The file, <dir>/flight-<rank>.json: Chrome trace JSON (chrome://tracing, ui.perfetto.dev open it;
// timestamps are CLOCK_MONOTONIC microseconds, the clock of core/timeline.h, so it lines up with a
// CHORUS_TIMELINE file of the same host), plus the record itself:
//   {"traceEvents": [ {"ph": "X", "cat": "collective", "name": "all_reduce #811 ...", "ts", "dur",
//                      "pid": rank, "tid": 1, "args": {"state": "completed"}}, ...,
//                     {... the failing call, "args": {"state": "timed out"}} ],
//    "chorus_flight_record": {"version": 1, "rank", "size", "host", "pid", "time" (UTC, ISO 8601),
//      "communicator", "backend", "trigger" ("timeout" | "peer lost"), "error" (the message thrown,
//      without the file's name), "failing_call": {"call", "sequence", "start_us"},
//      "completed": [{"call", "sequence", "start_us", "end_us"}, ...] (oldest first; start/end 0
//      where the backend does not time its calls), "peers": {"<rank>": ["call", ...]} (in-process
//      backends: what the other replicas completed)}}
// The in-process backends' ranks are replicas of one process: their files are flight-<replica>.json.
// What it does not hold: the timeline's open spans (core/timeline.h records a span when it ends,
// and only when the timeline is on); a CHORUS_TIMELINE file of the same run has the finished ones.
//
// Errors: write_flight_record never throws. A directory that cannot be made, a file that cannot be
// written (core/file_io.h's replace_file: an unpredictable temporary renamed into place, never
// through a link; a device, FIFO or directory at the name is refused) is logged as a WARNING and ""
// returned: the collective's own error is thrown as if no record had been asked for.
// Thread-safety: any thread; two ranks write two files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace chorus::collective {

// How many completed collectives a backend keeps for the record (its timeout messages show 3).
inline constexpr std::size_t kFlightHistory = 64;

struct FlightEntry {
  std::string call;  // the Fingerprint's to_string(): "all_reduce #3 float32(1024,) op=sum"
  std::uint64_t sequence = 0;
  std::int64_t start_us = 0, end_us = 0;  // CLOCK_MONOTONIC µs; 0: not timed
};

struct FlightRecord {
  int rank = 0;
  int size = 1;
  std::string communicator;                       // "mpi#1", the rendezvous' name, ...
  std::string backend;                            // "mpi", "shared_memory", ...
  std::string trigger;                            // "timeout" or "peer lost"
  std::string error;                              // the error's message
  FlightEntry failing_call;                       // end_us unused
  std::vector<FlightEntry> completed;             // oldest first
  std::map<int, std::vector<std::string>> peers;  // other ranks' completed calls, where known
};

// The record as the file's JSON text (above). Pure; for tests and write_flight_record.
std::string flight_record_json(const FlightRecord& record);

// Writes <CHORUS_FLIGHT_RECORD_DIR>/flight-<rank>.json (making the directory if it is missing) and
// returns its path; "" when the knob is unset or writing failed (logged). Never throws.
std::string write_flight_record(const FlightRecord& record) noexcept;

// " Flight record: <path>" when `path` is not empty, else "": for the end of an error message
// (which ends with a full stop).
std::string flight_record_note(const std::string& path);

}  // namespace chorus::collective
