#include <chorus/launch/host_check.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/strings.h>
#include <chorus/launch/mpirun_command.h>

namespace chorus::launch {
namespace {

using internal::str_cat;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kKeptOutput = 4096;

struct Check {
  std::size_t index = 0;  // into the answers
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout + stderr; -1 once drained
  bool exited = false;
  int status = 0;
  std::string output;
};

// The child's side: its own process group, stdin from /dev/null, stdout and stderr into `out`.
[[noreturn]] void exec_check(const std::vector<std::string>& agent, const std::string& host, int out) {
  setpgid(0, 0);
  const int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, STDIN_FILENO);
  dup2(out, STDOUT_FILENO);
  dup2(out, STDERR_FILENO);
  std::vector<std::string> words = host_check_argv(agent, host);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const std::string why = str_cat("cannot run ", agent[0], ": ", std::strerror(errno), "\n");
  (void)!write(STDOUT_FILENO, why.data(), why.size());
  _exit(127);
}

// The last line of what the agent printed, for the message.
std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const std::size_t nl = text.find_last_of('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

void run_batch(const std::vector<std::string>& agent, const std::vector<std::string>& hosts, std::size_t first,
               std::size_t count, std::chrono::milliseconds timeout, std::vector<HostAnswer>& answers) {
  std::vector<Check> checks;
  for (std::size_t i = first; i < first + count; ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw UnknownError(str_cat("host check: pipe: ", std::strerror(errno)));
    fcntl(fds[0], F_SETFL, O_NONBLOCK);  // read only what poll saw
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      close(fds[0]);
      close(fds[1]);
      for (const Check& c : checks) kill(-c.pid, SIGKILL);
      for (Check& c : checks) waitpid(c.pid, nullptr, 0);
      throw UnknownError(str_cat("host check: fork: ", std::strerror(err)));
    }
    if (pid == 0) exec_check(agent, hosts[i], fds[1]);
    close(fds[1]);
    setpgid(pid, pid);  // also here: no race with the kill below
    checks.push_back({.index = i, .pid = pid, .out = fds[0]});
  }
  const auto deadline = Clock::now() + timeout;
  const auto pending = [&] {
    return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return !c.exited || c.out >= 0; });
  };
  while (pending() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (const Check& c : checks)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left, 0, 50)));
    } else {
      usleep(10000);  // all drained, some still running
    }
    for (Check& c : checks) {
      if (c.out >= 0) {
        char buf[1024];
        const ssize_t n = read(c.out, buf, sizeof buf);
        if (n > 0) {
          c.output.append(buf, static_cast<std::size_t>(n));
          if (c.output.size() > kKeptOutput) c.output.erase(0, c.output.size() - kKeptOutput);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close(c.out);
          c.out = -1;
        }
      }
      if (!c.exited && waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.exited = true;
    }
  }
  for (Check& c : checks) {
    HostAnswer& a = answers[c.index];
    if (!c.exited) {
      kill(-c.pid, SIGKILL);
      waitpid(c.pid, &c.status, 0);
      a.detail = str_cat("no answer within ", timeout.count() / 1000.0, " s");
    } else if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) {
      a.answered = true;
    } else if (WIFEXITED(c.status)) {
      const std::string said = last_line(c.output);
      a.detail = WEXITSTATUS(c.status) == 127 && said.rfind("cannot run ", 0) == 0
                     ? said
                     : str_cat("exit ", WEXITSTATUS(c.status), said.empty() ? "" : ": ", said);
    } else {
      a.detail = str_cat("killed by signal ", WTERMSIG(c.status));
    }
    if (c.out >= 0) close(c.out);
  }
}

}  // namespace

std::vector<std::string> split_command(std::string_view command) {
  std::vector<std::string> words;
  for (std::string_view w : internal::split_whitespace(command)) words.emplace_back(w);
  return words;
}

std::vector<std::string> host_check_argv(const std::vector<std::string>& agent, const std::string& host) {
  std::vector<std::string> words = agent;
  if (!agent.empty()) {
    const std::string_view program = agent[0];
    const std::size_t slash = program.find_last_of('/');
    if (program.substr(slash == std::string_view::npos ? 0 : slash + 1) == "ssh") words.emplace_back("--");
  }
  words.push_back(host);
  words.emplace_back("true");
  return words;
}

bool is_this_machine(std::string_view host) {
  if (host == "localhost" || host == "127.0.0.1") return true;
  const std::optional<std::string> name = host_name();
  if (!name) return false;
  const std::string_view me(*name);
  return host == me || host == me.substr(0, me.find('.'));
}

std::vector<HostAnswer> check_hosts(const std::vector<std::string>& agent, const std::vector<std::string>& hosts,
                                    std::chrono::milliseconds timeout) {
  CHORUS_REQUIRE(!agent.empty() && !agent[0].empty(), InvalidArgumentError,
                 "host check: the remote-shell command is empty");
  for (const std::string& host : hosts) {
    const std::string problem = host_name_problem(host);
    CHORUS_REQUIRE(problem.empty(), InvalidArgumentError, "host check: host name '", internal::printable(host), "' ",
                   problem, "; ", kHostNameRule, ". Nothing was run");
  }
  std::vector<HostAnswer> answers(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) answers[i].host = hosts[i];
  for (std::size_t first = 0; first < hosts.size(); first += kMaxParallelChecks)
    run_batch(agent, hosts, first, std::min(kMaxParallelChecks, hosts.size() - first), timeout, answers);
  return answers;
}

}  // namespace chorus::launch
