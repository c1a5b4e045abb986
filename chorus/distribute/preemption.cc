#include <chorus/distribute/preemption.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/tensor.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {

// Lock-free, so storing it from a signal handler is safe.
std::atomic<int> g_signalled{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_preemption_signal(int) { g_signalled.store(1, std::memory_order_relaxed); }

}  // namespace

PreemptionWatcher::PreemptionWatcher(Strategy& strategy, const PreemptionWatcherOptions& options)
    : strategy_(strategy), signals_(options.signals) {
  CHORUS_REQUIRE(!signals_.empty(), InvalidArgumentError, "PreemptionWatcher: no signals to watch");
  CHORUS_REQUIRE(!g_installed.exchange(true), FailedPreconditionError,
                 "PreemptionWatcher: another watcher is active in this process; destroy it first");
  g_signalled.store(0);
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted system calls continue: the flag is polled, not waited on
  for (int s : signals_) {
    // A second Ctrl-C is the user insisting: SIGINT's handler runs once, then the default ends us.
    action.sa_flags = s == SIGINT ? (SA_RESTART | SA_RESETHAND) : SA_RESTART;
    struct sigaction old {};
    if (sigaction(s, &action, &old) != 0) {
      const int err = errno;
      for (std::size_t i = 0; i < previous_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
      g_installed.store(false);
      throw InvalidArgumentError(str_cat("PreemptionWatcher: sigaction(", s, ") failed: ", std::strerror(err)));
    }
    previous_.push_back(old);
  }
}

PreemptionWatcher::~PreemptionWatcher() {
  for (std::size_t i = 0; i < previous_.size(); ++i) {
    // After an agreed stop the process is shutting down for a preemption, and the scheduler's
    // signal may still reach this rank (another rank saw it first) while it saves and exits: its
    // default action would turn the clean exit into a death by signal — under mpirun
    // --enable-recovery a hang of mpirun (tests/hosts "sigterm every host", 2 in 55 runs). Such
    // signals stay caught (recorded, nothing else). SIGINT is restored: a second Ctrl-C still ends us.
    if (stop_step_ && signals_[i] != SIGINT) continue;
    sigaction(signals_[i], &previous_[i], nullptr);
  }
  g_installed.store(false);
}

bool PreemptionWatcher::signal_received() { return g_signalled.load(std::memory_order_relaxed) != 0; }
void PreemptionWatcher::simulate_signal() { g_signalled.store(1, std::memory_order_relaxed); }

bool PreemptionWatcher::should_stop(std::int64_t step) {
  if (stop_step_) return true;
  const bool mine = signal_received();
  auto* mw = dynamic_cast<MultiWorkerMirroredStrategy*>(&strategy_);
  collective::Communicator* comm = mw != nullptr ? mw->worker_communicator() : nullptr;
  if (comm == nullptr) {
    if (mine) {
      stop_step_ = step;
      signalled_ = {0};
    }
    return mine;
  }
  const auto timeout = strategy_.timeout();
  const int workers = comm->size();
  Tensor in = Tensor::from_vector<std::int64_t>({mine ? 1 : 0, step}, {2}, "/cpu:0");
  Tensor all = Tensor::empty({2 * workers}, DType::kInt64, "/cpu:0");
  comm->all_gather(in, all, {.timeout = timeout})->wait(timeout);
  const std::vector<std::int64_t> v = all.to_vector<std::int64_t>();
  std::vector<int> signalled;
  std::string steps;
  bool same_step = true;
  for (int r = 0; r < workers; ++r) {
    if (v[static_cast<std::size_t>(2 * r)] != 0) signalled.push_back(r);
    same_step = same_step && v[static_cast<std::size_t>(2 * r + 1)] == step;
    steps += str_cat(r ? ", " : "", "rank ", r, ": ", v[static_cast<std::size_t>(2 * r + 1)]);
  }
  CHORUS_REQUIRE(same_step, FailedPreconditionError, "PreemptionWatcher::should_stop was called at different steps (",
                 steps, "); every worker must call it at the same steps so that all stop together");
  if (signalled.empty()) return false;
  stop_step_ = step;
  signalled_ = signalled;
  std::string who;
  for (int r : signalled) who += str_cat(who.empty() ? "" : ", ", r);
  CHORUS_LOG(WARNING) << "preemption signal received by rank(s) [" << who << "]: all " << workers
                      << " workers stop after step " << step;
  return true;
}

}  // namespace chorus::distribute
