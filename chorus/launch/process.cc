#include <chorus/launch/process.h>

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <chorus/core/error.h>

extern char** environ;

namespace chorus::launch {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> find_executable(std::string_view name, std::string_view search_path) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::string path(name);
    return is_executable_file(path) ? std::optional<std::string>(path) : std::nullopt;
  }
  std::size_t start = 0;
  while (start <= search_path.size()) {
    const std::size_t colon = std::min(search_path.find(':', start), search_path.size());
    // An empty PATH entry means the current directory.
    std::string candidate(colon > start ? search_path.substr(start, colon - start) : std::string_view("."));
    start = colon + 1;
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    names.emplace_back(*e, eq ? static_cast<std::size_t>(eq - *e) : std::strlen(*e));
  }
  return names;
}

bool running_as_root() { return ::geteuid() == 0; }

void exec_program(const std::vector<std::string>& argv) {
  CHORUS_REQUIRE(!argv.empty() && !argv[0].empty(), InvalidArgumentError, "exec_program: empty argv");
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execv(raw[0], raw.data());
  const int err = errno;
  const std::string what = internal::str_cat("cannot execute ", argv[0], ": ", std::strerror(err));
  if (err == ENOENT) throw NotFoundError(what);
  if (err == EACCES || err == EPERM) throw PermissionDeniedError(what);
  throw UnknownError(what);
}

ChildExit run_child(const std::vector<std::string>& argv, const ChildOptions& options) {
  CHORUS_REQUIRE(!argv.empty() && !argv[0].empty(), InvalidArgumentError, "run_child: empty argv");
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);

  // Signals are taken synchronously (blocked, then sigtimedwait), not by handlers: nothing runs in
  // signal context, no signal is lost between fork and the pid being known, and a sanitizer that
  // defers handlers cannot leave one waiting. SIGCHLD (default disposition, so it is generated)
  // wakes the loop when the child ends.
  sigset_t set, old_mask;
  sigemptyset(&set);
  for (int sig : kForwarded) sigaddset(&set, sig);
  sigaddset(&set, SIGCHLD);
  struct sigaction dfl {
  }, old_chld{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGCHLD, &dfl, &old_chld);
  ::pthread_sigmask(SIG_BLOCK, &set, &old_mask);
  const auto restore = [&] {
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::sigaction(SIGCHLD, &old_chld, nullptr);
  };

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    restore();
    throw UnknownError(internal::str_cat("cannot start ", argv[0], ": fork failed: ", std::strerror(err)));
  }
  if (pid == 0) {
    // The mask and SIGCHLD's disposition survive exec: give the program what this process had.
    // Only async-signal-safe calls here.
    ::sigaction(SIGCHLD, &old_chld, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    if (options.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (::getppid() != parent) ::_exit(128 + options.parent_death_signal);  // the parent is already gone
    }
    if (options.search_path)
      ::execvp(raw[0], raw.data());
    else
      ::execv(raw[0], raw.data());
    const int err = errno;
    const char* parts[] = {"chorus-run: cannot execute ", raw[0], ": ", std::strerror(err), "\n"};
    for (const char* part : parts) {
      [[maybe_unused]] const auto n = ::write(2, part, std::strlen(part));
    }
    ::_exit(err == EACCES || err == EPERM ? 126 : 127);
  }
  int status = 0;
  ChildExit result;
  std::optional<std::chrono::steady_clock::time_point> kill_at;  // the watchdog's SIGKILL
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (options.watchdog && !result.ended_by_watchdog) {
      const std::string why = options.watchdog();
      if (!why.empty()) {
        std::fprintf(stderr, "chorus-run: ending %s: %s\n", argv[0].c_str(), why.c_str());
        result.ended_by_watchdog = true;
        ::kill(pid, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      ::kill(pid, SIGKILL);
      kill_at.reset();
    }
    siginfo_t info{};
    const timespec tick{1, 0};  // a missed SIGCHLD costs at most this
    const int sig = ::sigtimedwait(&set, &info, &tick);
    if (sig <= 0 || sig == SIGCHLD) continue;
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) result.stop_signal = sig;
    // Typed at the terminal: the child, in the same process group, got it from the kernel too.
    if ((sig == SIGINT || sig == SIGQUIT) && options.shares_terminal && info.si_code == SI_KERNEL) continue;
    ::kill(pid, sig);
  }
  restore();
  result.signaled = WIFSIGNALED(status);
  result.code = result.signaled ? WTERMSIG(status) : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return result;
}

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw UnknownError(internal::str_cat("cannot find this program's path in /proc/self/exe: ", ec.message()));
  return path.string();
}

std::string temp_directory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? std::string(tmp) : std::string("/tmp");
}

std::string make_temp_directory(std::string_view prefix) {
  std::string pattern = temp_directory() + "/" + std::string(prefix) + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    const int err = errno;
    throw UnknownError(internal::str_cat("cannot create a temporary directory ", pattern, ": ", std::strerror(err)));
  }
  return pattern;
}

}  // namespace chorus::launch
