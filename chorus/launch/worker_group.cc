#include <chorus/launch/worker_group.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/launch/process.h>

namespace chorus::launch {
namespace {

constexpr int kTaken[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGCHLD};

RankExit exit_of(const std::string& rank, int status) {
  RankExit e;
  e.rank = rank;
  e.signaled = WIFSIGNALED(status);
  e.code = e.signaled ? WTERMSIG(status) : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return e;
}

// Forks one worker (see the header). Everything the child touches is prepared before fork: a
// process with threads (the agents' store server) may fork, and the child then calls only
// async-signal-safe functions until exec.
pid_t start_worker(const WorkerSpec& spec) {
  // PATH is searched here (execvp's rule, launch/process.h), not in the child: a search there may
  // allocate. A program not found keeps its name, and the child's execve names the failure.
  const char* search = std::getenv("PATH");
  const std::string path = find_executable(spec.argv[0], search ? search : "").value_or(spec.argv[0]);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  sigset_t none;
  sigemptyset(&none);
  const pid_t parent = ::getpid();
  const bool stdin_is_terminal = ::isatty(0) == 1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    throw UnknownError(
        internal::str_cat("cannot start rank ", spec.rank, " (", spec.argv[0], "): fork failed: ", std::strerror(err)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the agent is already gone
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);     // the agent's blocked signals are not the program's
    if (stdin_is_terminal) {  // read from a group that is not the terminal's, it would stop the worker (SIGTTIN)
      const int null = ::open("/dev/null", O_RDONLY);
      if (null > 0) {
        ::dup2(null, 0);
        ::close(null);
      }
    }
    ::execve(path.c_str(), argv.data(), envp.data());
    const int err = errno;
    const char* parts[] = {"chorus-run: cannot execute ", argv[0], ": ", std::strerror(err), "\n"};
    for (const char* part : parts) {
      [[maybe_unused]] const auto n = ::write(2, part, std::strlen(part));
    }
    ::_exit(err == EACCES || err == EPERM ? 126 : 127);
  }
  ::setpgid(pid, pid);  // here too: the group exists before either side runs on (EACCES after exec is harmless)
  return pid;
}

}  // namespace

SignalIntake::SignalIntake() {
  sigemptyset(&set_);
  for (int sig : kTaken) sigaddset(&set_, sig);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGCHLD, &dfl, &old_chld_);
  ::pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
}

SignalIntake::~SignalIntake() {
  // Drain what is still pending (SIGCHLD of reaped workers) so that it is not delivered with the
  // old mask; a pending stop signal is delivered as usual once unblocked.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const timespec zero{0, 0};
  while (::sigtimedwait(&chld, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
}

int SignalIntake::wait(std::chrono::milliseconds timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec t{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int sig = ::sigtimedwait(&set_, nullptr, &t);
  return sig > 0 ? sig : 0;
}

bool SignalIntake::is_stop(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT; }

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> specs) {
  for (const auto& s : specs) {
    CHORUS_REQUIRE(!s.argv.empty() && !s.argv[0].empty(), InvalidArgumentError, "rank ", s.rank, ": no program to run");
  }
  workers_.reserve(specs.size());
  for (const auto& s : specs) {
    try {
      workers_.push_back({s.rank, start_worker(s), false});
    } catch (...) {
      stop(std::chrono::milliseconds(0), SIGKILL);
      throw;
    }
  }
}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (w.reaped) continue;
    ::killpg(w.pid, SIGKILL);
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.reaped = true;
  }
}

std::vector<RankExit> WorkerGroup::reap() {
  std::vector<RankExit> out;
  for (auto& w : workers_) {
    if (w.reaped) continue;
    int status = 0;
    const pid_t done = ::waitpid(w.pid, &status, WNOHANG);
    if (done == w.pid) {
      w.reaped = true;
      out.push_back(exit_of(w.rank, status));
    } else if (done < 0 && errno == ECHILD) {  // reaped elsewhere: its end is unknown
      w.reaped = true;
      out.push_back({w.rank, false, 255});
    }
  }
  return out;
}

std::size_t WorkerGroup::running() const {
  std::size_t n = 0;
  for (const auto& w : workers_) n += w.reaped ? 0 : 1;
  return n;
}

std::vector<std::string> WorkerGroup::running_ranks() const {
  std::vector<std::string> out;
  for (const auto& w : workers_)
    if (!w.reaped) out.push_back(w.rank);
  return out;
}

void WorkerGroup::signal(int sig) {
  for (const auto& w : workers_)
    if (!w.reaped) ::killpg(w.pid, sig);
}

std::vector<RankExit> WorkerGroup::stop(std::chrono::milliseconds grace, int first, std::vector<std::string>* killed) {
  std::vector<RankExit> out;
  signal(first);
  if (first != SIGKILL) signal(SIGCONT);  // a stopped worker acts on `first` only once it runs again
  const auto kill_at = std::chrono::steady_clock::now() + grace;
  bool sent_kill = first == SIGKILL;
  for (;;) {
    for (auto& e : reap()) out.push_back(std::move(e));
    if (running() == 0) return out;
    if (!sent_kill && std::chrono::steady_clock::now() >= kill_at) {
      if (killed) {
        const auto ranks = running_ranks();
        killed->insert(killed->end(), ranks.begin(), ranks.end());
      }
      signal(SIGKILL);
      sent_kill = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace chorus::launch
