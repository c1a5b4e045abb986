#include "launch/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

extern char** environ;

namespace chorus::launch {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

// The child that signals go to, and whether terminal-generated SIGINT/SIGQUIT reach it directly.
std::atomic<pid_t> g_forward_to{0};
std::atomic<bool> g_shares_terminal{false};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

void forward_signal(int sig, siginfo_t* info, void*) {
  const pid_t child = g_forward_to.load();
  if (child <= 0) return;  // also in a child between fork and exec: never kill(0, ...)
  if ((sig == SIGINT || sig == SIGQUIT) && g_shares_terminal.load() && info && info->si_code == SI_KERNEL) return;
  const int saved = errno;
  ::kill(child, sig);
  errno = saved;
}

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

  g_forward_to.store(0);
  g_shares_terminal.store(options.shares_terminal);
  struct sigaction action {};
  action.sa_sigaction = forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  struct sigaction saved[std::size(kForwarded)];
  for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &action, &saved[i]);
  const auto restore = [&] {
    g_forward_to.store(0);
    for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);
  };

  // Signals that come before the child's pid is known wait (blocked) instead of being lost.
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    restore();
    throw UnknownError(internal::str_cat("cannot start ", argv[0], ": fork failed: ", std::strerror(err)));
  }
  if (pid == 0) {
    // Handlers become the defaults at exec; the mask is inherited, so restore it. Only
    // async-signal-safe calls here.
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (options.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (::getppid() != parent) ::_exit(128 + options.parent_death_signal);  // the parent is already gone
    }
    if (options.search_path) ::execvp(raw[0], raw.data());
    else ::execv(raw[0], raw.data());
    const int err = errno;
    const char* parts[] = {"chorus-run: cannot execute ", raw[0], ": ", std::strerror(err), "\n"};
    for (const char* part : parts) {
      [[maybe_unused]] const auto n = ::write(2, part, std::strlen(part));
    }
    ::_exit(err == EACCES || err == EPERM ? 126 : 127);
  }
  g_forward_to.store(pid);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  restore();
  if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
  return {false, WIFEXITED(status) ? WEXITSTATUS(status) : 1};
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
