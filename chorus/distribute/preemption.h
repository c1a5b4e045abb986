// Preemption handling (TF's tf.distribute.experimental.PreemptionCheckpointHandler idea): when a
// cluster scheduler preempts a worker it sends SIGTERM and, after a grace period, SIGKILL. Every
// worker must then stop at the same step — a worker that stops alone leaves the others waiting in
// a collective — save a checkpoint and exit cleanly.
//
//   chorus::distribute::PreemptionWatcher watcher(strategy);   // installs the SIGTERM/SIGINT handler
//   for (std::int64_t step = 0; step < steps; ++step) {
//     strategy.run(train_step, *it.next());
//     if (watcher.should_stop(step)) {                        // every worker, same steps
//       manager.save();                                       // all workers agree it is `step`
//       return 0;
//     }
//   }
//
// The handler only sets an atomic flag (async-signal-safe); nothing else happens in the signal.
// should_stop(step) is a collective over the workers (MultiWorkerMirroredStrategy's
// worker_communicator(); for a single-process strategy just the local flag): one small all-gather
// of (flag, step) per call. It returns true on every worker once any worker has seen a signal, so
// all stop after the same step. Call it at the same steps on every worker (e.g. every step, or
// every N); calling it at different steps → FailedPreconditionError on every worker naming the
// ranks and their steps. A worker that does not call it → DeadlineExceededError naming it after the
// strategy's timeout (the collective's), never a hang.
//
// One watcher at a time per process (a second → FailedPreconditionError). The destructor restores
// the signal dispositions that were in place before — except after a stop (should_stop returned
// true): the process is then shutting down for a preemption, and the signals it watched other than
// SIGINT stay caught by the handler, which only records them, so that the scheduler's signal
// reaching this rank late (another rank saw it first) cannot kill it while it saves and exits.
// Use it from the program's thread (the one that calls strategy.run), never from replicas.
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::distribute {

class Strategy;

// SIGTERM is how schedulers (Kubernetes, Slurm, mpirun) preempt; SIGINT (Ctrl-C, or a scheduler
// that interrupts) gets the same agreement and backup, as an interruption in Keras's
// BackupAndRestore does. The first SIGINT is handled; the handler is then reset (SA_RESETHAND), so
// a second Ctrl-C ends the process at once, as a user expects.
struct PreemptionWatcherOptions {
  std::vector<int> signals = {SIGTERM, SIGINT};  // the signals that mean "preempted"
};

class PreemptionWatcher {
 public:
  explicit PreemptionWatcher(Strategy& strategy, const PreemptionWatcherOptions& options = {});
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Collective: true on every worker when any worker received one of the signals (see above).
  // Once it returned true it keeps returning true (without communicating again).
  bool should_stop(std::int64_t step);
  // Whether this process received a signal (no communication).
  static bool signal_received();
  // The step at which should_stop first returned true, and which ranks had received a signal then.
  std::optional<std::int64_t> stop_step() const { return stop_step_; }
  const std::vector<int>& signalled_ranks() const { return signalled_; }

  // For tests: behave as if a signal arrived (what the handler does).
  static void simulate_signal();

 private:
  Strategy& strategy_;
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  std::optional<std::int64_t> stop_step_;
  std::vector<int> signalled_;
};

}  // namespace chorus::distribute
