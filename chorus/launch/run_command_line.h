// chorus-run's own command line, parsed into a plain struct (the tool in launch/tools/chorus_run.cc
// turns it into MpirunOptions and executes it).
//
//   chorus-run [options] [--] program [args...]
//
//   -np N, -n N             number of processes (default with -H: the sum of its slots)
//   -H SPEC, --host SPEC    host[:slots],... (launch/mpirun_command.h)
//   --hostfile FILE         the hosts from an Open MPI / Horovod hostfile ("host slots=N" lines)
//   --rsh-agent CMD         how mpirun starts its daemons on the other hosts (Open MPI's
//                           plm_rsh_agent; default ssh); also what the host check runs
//   --network-interface IF  the interface(s) or subnet(s) the ranks talk over ("eth1",
//                           "10.0.0.0/24", comma-separated): Open MPI's TCP traffic and daemons
//   --mca NAME VALUE        any Open MPI MCA parameter (repeatable), passed on as given
//   --no-host-check         do not check that every other host answers before the job starts
//   --max-restarts N        start a failed job again, up to N times (torchrun's --max-restarts),
//                           on the hosts that answer the host check then
//   --min-hosts M           with hosts: start (or restart) on the hosts that answer when at least
//                           M do (default: every host must answer)
//   --failure-grace S       when a rank's record shows it failed and mpirun has not ended the job
//                           S seconds later (a host that cannot be reached), end mpirun (default 30;
//                           needs the rank records: every rank on this machine, or --status-dir)
//   --bind-to WHAT          passed to mpirun's --bind-to (default none)
//   --oversubscribe         always pass --oversubscribe
//   -x NAME[=VALUE]         forward one more environment variable (repeatable)
//   --collective-timeout S  every rank's default collective timeout, in seconds (forwarded as
//                           -x CHORUS_COLLECTIVE_TIMEOUT=S; validated here)
//   --enable-recovery       mpirun keeps the other ranks running when one dies, so that they can
//                           report it (and save); chorus-run still exits non-zero
//   --status-dir DIR        where each rank records how it ended (a directory every rank can see,
//                           e.g. on a shared file system; default: a new temporary directory when
//                           every rank runs on this machine — launch/rank_status.h)
//   --record-exit-status DIR  internal: chorus-run as the per-rank wrapper (launch/rank_status.h)
//   --dry-run               print the mpirun line instead of running it
//   --check-build           print what this build of chorus contains and exit
//   --version               chorus's version, git commit, build type, and the same build facts
//   -h, --help              usage
//
// Long options also take the `--name=value` form. The program starts at `--` or at the first word
// that does not start with '-' (as with mpirun); everything from there on belongs to the program,
// untouched. Flags are case-sensitive, as mpirun's.
//
// Errors: an unknown option, an option without its value, a non-numeric -np, a missing -np without
// -H or --hostfile, -H with --hostfile, an MCA name that is not [a-z0-9_]+, a --collective-timeout that is not a number
// of seconds >= 0.01 (core/env.h's floor), an empty
// --status-dir, no program (unless --help, --version or --check-build) → InvalidArgumentError whose message names the
// problem; the tool prints it and exits 2. Range checks (-np > 0, slots vs -np) are
// build_mpirun_argv's. Thread-safe: pure functions.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chorus::launch {

inline constexpr int kMaxRestarts = 100;

struct RunCommandLine {
  bool help = false;
  bool check_build = false;
  bool version = false;
  bool dry_run = false;
  bool oversubscribe = false;
  bool enable_recovery = false;
  std::optional<std::string> collective_timeout;         // as given (validated: seconds > 0)
  std::optional<std::string> status_dir;                 // --status-dir
  std::optional<std::string> record_exit_status;         // the wrapper mode: its DIR
  std::optional<int> num_processes;                      // -np as given (validated later)
  std::optional<std::string> hosts;                      // -H as given (parsed by parse_host_spec)
  std::optional<std::string> hostfile;                   // --hostfile as given (read_hostfile)
  std::optional<std::string> rsh_agent;                  // --rsh-agent
  std::optional<std::string> network_interfaces;         // --network-interface, comma-separated
  std::vector<std::pair<std::string, std::string>> mca;  // --mca NAME VALUE, in order
  bool check_hosts = true;                               // false: --no-host-check
  int max_restarts = 0;                                  // --max-restarts
  std::optional<int> min_hosts;                          // --min-hosts
  int failure_grace_seconds = 30;                        // --failure-grace
  std::string bind_to = "none";
  std::vector<std::string> extra_environment;
  std::vector<std::string> program;  // program and arguments
};

// `args` excludes argv[0].
RunCommandLine parse_run_command_line(const std::vector<std::string>& args);

// The text of `chorus-run --help`.
std::string run_usage();

}  // namespace chorus::launch
