// chorus-run's own command line, parsed into a plain struct (the tool in launch/tools/chorus_run.cc
// turns it into MpirunOptions and executes it, or, without MPI, into AgentOptions for
// launch/agent.h).
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
//   --dry-run               print the mpirun line instead of running it (without MPI: each
//                           worker's variables and program)
//   --check-build           print what this build of chorus contains and exit
//   --version               chorus's version, git commit, build type, and the same build facts
//   -h, --help              usage
//
// Without MPI (torchrun style, launch/agent.h: chorus-run starts this node's workers itself):
//   --nnodes N              agents (nodes) in the job (default 1)
//   --nproc-per-node N      workers this node starts (default 1)
//   --node-rank R           this node, 0..N-1 (default 0)
//   --rdzv-endpoint H:P     where the job meets (node 0's address); optional with one node
//   --rdzv-timeout S        how long the agents wait for each other (default 300)
//   --nnodes MIN:MAX        elastic, torchrun's spelling (min_hosts = MIN; --min-hosts M is the same)
//   --rdzv-last-call S      elastic: how long node 0 waits for the rest once MIN joined (default 30)
// Any of these selects the mode; torchrun's spellings with '_' (--nproc_per_node, --node_rank,
// --rdzv_endpoint) are taken too. --max-restarts, --failure-grace, -x, --collective-timeout and
// --dry-run apply to both modes (--min-hosts too: the least nodes without MPI); mpirun's own flags
// (-np, -H, --hostfile, --rsh-agent, --network-interface, --mca, --no-host-check, --bind-to, --oversubscribe,
// --enable-recovery, --status-dir) do not mix with them: InvalidArgumentError naming both.
// Value rules (node rank below --nnodes, the endpoint's port...) are agent_options.h's.
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

  // Without MPI (launch/agent.h); set only when given.
  std::optional<int> nnodes;                  // --nnodes
  std::optional<int> nproc_per_node;          // --nproc-per-node
  std::optional<int> node_rank;               // --node-rank
  std::optional<std::string> rdzv_endpoint;   // --rdzv-endpoint as given (parse_rdzv_endpoint)
  std::optional<int> rdzv_timeout_seconds;    // --rdzv-timeout
  std::optional<int> rdzv_last_call_seconds;  // --rdzv-last-call
  // True when any of the six flags above was given.
  bool without_mpi() const {
    return nnodes || nproc_per_node || node_rank || rdzv_endpoint || rdzv_timeout_seconds || rdzv_last_call_seconds;
  }
};

// `args` excludes argv[0].
RunCommandLine parse_run_command_line(const std::vector<std::string>& args);

// The text of `chorus-run --help`.
std::string run_usage();

}  // namespace chorus::launch
