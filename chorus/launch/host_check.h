// Before a job on several hosts starts, chorus-run asks every other host to run `true` through
// the remote shell mpirun will use (horovodrun's "checking whether all hosts are reachable"). A
// host that does not answer — a typo, no ssh key, a machine down, a firewall — is named within
// seconds, with what the remote shell said, instead of mpirun failing later with Open MPI's "ORTE
// was unable to reliably start one or more daemons" or waiting on a daemon that never calls back.
//
//   auto answers = chorus::launch::check_hosts(chorus::launch::split_command("ssh"), {"node1", "node2"});
//   for (const auto& a : answers) if (!a.answered) std::cerr << a.host << ": " << a.detail << "\n";
//
// How: one child per host, all at once (at most kMaxParallelChecks at a time), each
// host_check_argv(AGENT, HOST) — `AGENT... [--] HOST true` — with stdin from /dev/null and its stdout and stderr
// captured (the last 4 KiB), in its own process group; a check still running at the deadline is killed with its group
// and counts as no answer. This machine itself (is_this_machine) is not checked.
//
// Errors: InvalidArgumentError for an empty agent or a host name that host_name_problem
// (mpirun_command.h) refuses — nothing is run then; UnknownError when a pipe or fork fails. A host
// that does not answer is a result, not an exception. Thread-safety: reentrant; it forks, so call
// it before starting threads (chorus-run is single-threaded).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::launch {

inline constexpr std::size_t kMaxParallelChecks = 64;
inline constexpr std::chrono::seconds kHostCheckTimeout{10};

struct HostAnswer {
  std::string host;
  bool answered = false;
  // Without an answer: "no answer within 10 s", "exit 255: ssh: Could not resolve hostname x",
  // "killed by signal 9", "cannot run ssh: No such file or directory". Empty when it answered.
  std::string detail;
};

// Asks each of `hosts` in order; the answers are in the same order.
std::vector<HostAnswer> check_hosts(const std::vector<std::string>& agent, const std::vector<std::string>& hosts,
                                    std::chrono::milliseconds timeout = kHostCheckTimeout);

// The words run to check `host`: the agent's words, then "--" when the agent is ssh (its program's
// file name is "ssh": OpenSSH stops reading options at "--", so a host name can never be taken for
// one such as -F/path/evil.cfg or -oProxyCommand=...), then the host and "true". Other agents get
// no "--": not every remote shell takes it (rsh, a site's wrapper script); for them, and for Open
// MPI's own `ssh HOST orted` which has no "--" either, the host-name rule is the protection.
std::vector<std::string> host_check_argv(const std::vector<std::string>& agent, const std::string& host);

// True for "localhost", "127.0.0.1", this machine's host name and its first label ("node1" for
// "node1.cluster"): mpirun starts those ranks itself, without the remote shell.
bool is_this_machine(std::string_view host);

// An agent command split into words on whitespace (core/strings.h), as Open MPI splits plm_rsh_agent
// ("ssh -p 2222" → {"ssh", "-p", "2222"}). No quoting.
std::vector<std::string> split_command(std::string_view command);

}  // namespace chorus::launch
