// The operating-system side of chorus-run: finding executables on PATH, reading the environment,
// running mpirun (and, on each rank, the program) as a child and forwarding signals to it. Kept apart from
// mpirun_command.h so that the command builder stays a pure, testable function.
//
// Thread-safety: environment_names() reads `environ`; do not call it while another thread calls
// setenv. exec_program() replaces the whole process (every thread) when it succeeds. run_child()
// takes signals while it waits: see there.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::launch {

// The path `name` resolves to, as execvp would find it: a name containing '/' is checked as it is;
// otherwise each directory of `search_path` (a PATH value; empty entries mean ".") is tried in
// order. Only regular files executable by this user count. nullopt when none is found.
std::optional<std::string> find_executable(std::string_view name, std::string_view search_path);

// The names of every variable in this process's environment, in environ's order.
std::vector<std::string> environment_names();

// True when the effective user id is 0 (Open MPI then needs --allow-run-as-root).
bool running_as_root();

// Replaces this process with argv[0] (a path, not searched) run with `argv`, keeping the
// environment. Returns only on failure, by throwing: a missing file → NotFoundError, no permission
// → PermissionDeniedError, anything else → UnknownError, each naming the path and strerror.
[[noreturn]] void exec_program(const std::vector<std::string>& argv);

// How a child process ended.
struct ChildExit {
  bool signaled = false;
  int code = 0;  // the exit status, or the signal number when signaled
  // A stop this process was asked for while it waited: SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to
  // it (or typed at the terminal). 0: none. A supervisor does not restart a job it was told to end.
  int stop_signal = 0;
  bool ended_by_watchdog = false;  // the watchdog below ended the child
  // The shell's convention: the exit status, or 128 + signal.
  int status() const { return signaled ? 128 + code : code; }
};

struct ChildOptions {
  bool search_path = false;     // look argv[0] up in PATH (execvp) instead of taking it as a path
  int parent_death_signal = 0;  // Linux: the child gets this signal if this process dies first (0: none)
  // The child runs in this process's terminal process group, so SIGINT and SIGQUIT typed at the
  // terminal reach it directly: those (si_code SI_KERNEL) are not forwarded a second time.
  bool shares_terminal = false;
  // Asked about once a second while the child runs: a non-empty answer is why the child must end
  // now (it gets SIGTERM, then SIGKILL 5 s later if still there, both to its process id). Empty
  // function: never.
  std::function<std::string()> watchdog;
};

// Runs `argv` as a child process with this environment and waits for it. While waiting, SIGTERM,
// SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGCONT sent to this process are forwarded to the
// child (this process does not die of them): they are blocked in the calling thread and taken
// with sigtimedwait, so call it from a single-threaded program (chorus-run is one) or with those
// signals blocked in every other thread. The signal mask and SIGCHLD's disposition are restored
// afterwards (a signal still pending then is delivered as usual). A child that cannot execute
// argv[0] prints why on stderr and exits 127 (126: not executable). Throws UnknownError when fork
// fails. Not reentrant: one child at a time per process.
ChildExit run_child(const std::vector<std::string>& argv, const ChildOptions& options = {});

// The absolute path of the running executable (/proc/self/exe). Throws UnknownError without /proc.
std::string self_executable();

// Where temporary files go: $TMPDIR when set and not empty, else /tmp (not checked).
std::string temp_directory();

// A new directory, mode 0700, made by mkdtemp in temp_directory(): "<tmp>/<prefix>XXXXXX".
// Throws UnknownError naming the path and strerror.
std::string make_temp_directory(std::string_view prefix);

}  // namespace chorus::launch
