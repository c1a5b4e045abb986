// The local workers of chorus-run without MPI (launch/agent.h): started, watched and stopped by the
// agent itself, as torchrun's agent does, instead of by mpirun.
//
//   chorus::launch::SignalIntake intake;               // before any thread starts
//   chorus::launch::WorkerGroup group({{"0", {"./train"}, env0}, {"1", {"./train"}, env1}});
//   while (group.running() > 0) {
//     intake.wait(std::chrono::milliseconds(250));     // SIGCHLD, or a signal sent to the agent
//     for (const auto& e : group.reap()) ...           // RankExit (launch/rank_status.h)
//   }
//
// Each worker is a child process in a process group of its own (setpgid), so that stopping it
// reaches whatever it started too (signals go to the group); it gets SIGKILL when the agent dies
// (PR_SET_PDEATHSIG); argv[0] is searched in PATH (execvp's rule) and the worker runs with exactly
// the environment given. A worker that cannot execute its program prints why on stderr and exits
// 127 (126: not executable), as run_child's child does (launch/process.h). A worker's own process
// group is not the terminal's: a Ctrl-C typed at the terminal reaches the agent only, which passes
// it on (launch/agent.h), and a worker reading the terminal would be stopped (SIGTTIN), so when
// stdin is a terminal the workers read /dev/null instead (a pipe or file given as stdin is kept).
//
// Thread-safety: one thread drives a WorkerGroup. SignalIntake blocks signals in the thread that
// makes it (threads started afterwards inherit the mask): make it first, before any thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <chorus/launch/rank_status.h>

namespace chorus::launch {

// Blocks SIGCHLD and the signals the agent takes (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
// SIGUSR2, SIGCONT) for its lifetime and hands them out synchronously; SIGCHLD gets its default
// disposition (so that it is generated) meanwhile. The destructor restores the mask and SIGCHLD's
// disposition. Not copyable; one at a time per process.
class SignalIntake {
 public:
  SignalIntake();
  ~SignalIntake();
  SignalIntake(const SignalIntake&) = delete;
  SignalIntake& operator=(const SignalIntake&) = delete;

  // The next of those signals, waiting at most `timeout`: its number, or 0 when none came.
  int wait(std::chrono::milliseconds timeout);

  // True for the signals that ask the job to end (SIGTERM, SIGINT, SIGHUP, SIGQUIT).
  static bool is_stop(int sig);

 private:
  sigset_t set_{};
  sigset_t old_mask_{};
  struct sigaction old_chld_ {};
};

struct WorkerSpec {
  std::string rank;                      // for reports ("3")
  std::vector<std::string> argv;         // argv[0] searched in PATH
  std::vector<std::string> environment;  // the whole environment, NAME=VALUE
};

class WorkerGroup {
 public:
  // Starts every worker, in order. UnknownError naming the rank when fork fails (the workers
  // already started are killed and reaped first).
  explicit WorkerGroup(std::vector<WorkerSpec> specs);
  // Kills (SIGKILL to its group) and reaps every worker still running: none outlives the group.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // The workers that ended since the last call (never waits), in the order they were found.
  std::vector<RankExit> reap();
  // How many workers have not been reaped yet, and their ranks.
  std::size_t running() const;
  std::vector<std::string> running_ranks() const;

  // Sends `sig` to the process group of every worker not reaped yet.
  void signal(int sig);

  // Ends every worker still running: `first` (SIGTERM unless told) to each group now (then SIGCONT,
  // so that a stopped worker acts on it), SIGKILL to
  // those still there `grace` later; returns when all are reaped (a SIGKILLed worker always ends),
  // with their exits. `killed` (when given) receives the ranks that needed SIGKILL.
  std::vector<RankExit> stop(std::chrono::milliseconds grace, int first = SIGTERM,
                             std::vector<std::string>* killed = nullptr);

 private:
  struct Worker {
    std::string rank;
    pid_t pid = -1;
    bool reaped = false;
  };
  std::vector<Worker> workers_;
};

}  // namespace chorus::launch
