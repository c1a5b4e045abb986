// Environment knobs, read in one place (docs/style.md habit 12). Every variable chorus reads is
// listed here with its meaning; docs/errors.md ("Environment variables") is the user-facing copy of this list.
//
//   CHORUS_LOG_LEVEL            DEBUG | INFO | WARNING | ERROR (or 0-3). Default INFO.
//   TF_CPP_MIN_LOG_LEVEL        0-3, TensorFlow's: hides the lowest severities (3: all), when
//                               CHORUS_LOG_LEVEL is unset (core/logging.h).
//   TF_CPP_MAX_VLOG_LEVEL       >= 1: DEBUG lines too, when CHORUS_LOG_LEVEL is unset.
//   CHORUS_PROGRESS             bar | epoch | none: fit's progress output (model/callbacks.h);
//                               unset: a bar on a person's terminal, else a line per epoch.
//   CI                          set (by CI systems): fit prints a line per epoch, no bar.
//   TF_FORCE_GPU_ALLOW_GROWTH   "true"/"false": memory growth for every GPU, as in TensorFlow.
//   CUDA_VISIBLE_DEVICES        honoured by the CUDA runtime (chorus-devices prints it).
//   OMPI_COMM_WORLD_RANK/SIZE   set by Open MPI's mpirun (PMI_RANK/PMI_SIZE by MPICH/Slurm): the
//                               process rank, shown in log lines of multi-process runs.
//   CHORUS_COLLECTIVE_TIMEOUT   seconds (a number from 0.01 to 2592000, e.g. 60 or 2.5): the default timeout of every
//                               collective (collective::default_timeout()); unset: 300.
//                               chorus-run's --collective-timeout sets it on every rank.
//   CHORUS_PEER_MONITOR         true/false (default true): MPI communicators watch the other
//                               processes over TCP and fail within seconds when one dies
//                               (collective/peer_monitor/peer_monitor.h); false leaves it to the timeout.
//   CHORUS_TIMELINE             a path: record a Chrome trace-event timeline of every replica and
//                               write it there at exit (core/timeline.h; "%r" → the rank).
//   CHORUS_FLIGHT_RECORD_DIR    a directory: when a collective times out or a peer process is lost,
//                               each rank writes its collective history there as flight-<rank>.json
//                               (collective/flight_record.h); unset or empty (the default): off.
//   CHORUS_ONEDNN_BF16          true/false (default true): bfloat16 matmul/convolution/pooling on
//                               the CPU through oneDNN where its ISA allows; false forces the
//                               float32 fallback (ops/cpu/dnn.h). Read once.
//
// Thread-safe: getenv is only read, never written, by chorus.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::env {

// The variable's value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> get(const char* name);

// Parses "1/0/true/false/yes/no/on/off" (any case). Unset → nullopt.
// A value outside that set throws InvalidArgumentError naming the variable and the valid values.
std::optional<bool> get_bool(const char* name);

// The rank of this process when a launcher started several (OMPI_COMM_WORLD_RANK with
// OMPI_COMM_WORLD_SIZE > 1, else PMI_RANK with PMI_SIZE > 1, else torchrun's RANK with
// WORLD_SIZE > 1 — chorus-run --nproc-per-node sets those); nullopt for a single process or
// unparsable values. Read once.
std::optional<int> launcher_rank();

// This process's worker rank: the one set_process_rank registered, else launcher_rank().
// MultiWorkerMirroredStrategy registers its worker index when it spans several workers, so that
// workers no launcher numbered (TF_CONFIG started by hand, a Kubernetes operator) know it too:
// checkpoint.h's is_checkpoint_chief, the timeline's pid and file name, log lines. Any thread.
std::optional<int> process_rank();
// nullopt goes back to launcher_rank().
void set_process_rank(std::optional<int> rank);

// The variable behind collective::default_timeout().
inline constexpr const char* kCollectiveTimeoutVariable = "CHORUS_COLLECTIVE_TIMEOUT";
// The longest timeout accepted, in seconds (30 days): longer is a typo, not a plan.
inline constexpr double kMaxTimeoutSeconds = 30.0 * 24 * 3600;
// The shortest timeout accepted from the variable or a flag, in seconds (10 ms). Below it no
// collective between processes can be counted on to complete: creating an MPI communicator is a
// duplicate of MPI_COMM_WORLD plus an all-gather (two rounds between every pair of ranks), and a
// rank that is merely descheduled for one scheduler tick (4 ms at HZ=250, 10 ms at HZ=100) misses
// the deadline — so a smaller value fails healthy jobs, at random, and exercises nothing but the
// failure paths (CHORUS_COLLECTIVE_TIMEOUT=1e-9 made the communicators time out on creation; issue
// 40). Options structs set in code (MpiCommunicatorOptions::timeout, CollectiveOptions::timeout)
// are not held to it: tests use 1 ms there on purpose.
inline constexpr double kMinTimeoutSeconds = 0.01;

// A timeout written in seconds ("300", "2.5", "1e3") as milliseconds, rounded up to a whole
// millisecond. Valid: a finite decimal number >= kMinTimeoutSeconds and <= kMaxTimeoutSeconds, nothing else around it
// (no unit, no spaces). Otherwise InvalidArgumentError naming `source` (the variable or flag the text
// came from), the text and what is valid. Shared by the variable and the chorus-train/chorus-run flags.
std::chrono::milliseconds parse_timeout_seconds(std::string_view text, std::string_view source);

// CHORUS_COLLECTIVE_TIMEOUT parsed by parse_timeout_seconds; nullopt when unset. Read at every call
// (cheap: one getenv), so a program that sets it before its first collective is honoured.
// InvalidArgumentError naming the variable when it is set to anything else than a valid timeout
// (an empty value included).
std::optional<std::chrono::milliseconds> collective_timeout();

// CHORUS_PEER_MONITOR as a boolean (get_bool), true when unset.
bool peer_monitor_enabled();
// CHORUS_BUSY_POLL as a boolean (get_bool), true when unset: whether host collectives keep a CPU
// busy while they wait (collective/busy_poll.h).
bool busy_poll_enabled();
// CHORUS_FUSED_OPTIMIZER as a boolean (get_bool), true when unset: whether the built-in optimizers
// update their variables with the fused multi-tensor kernels (ops/training.h) or variable by
// variable with the op sequence (the same bits; the switch is for A/B measurements). Read at every
// apply_gradients.
bool fused_optimizer_enabled();
// CHORUS_FLIGHT_RECORD_DIR; "" when unset or empty (no flight records). Read at every failure, so a
// test may set it while the process runs.
std::string flight_record_dir();

}  // namespace chorus::env
