// The mpirun command line that chorus-run executes (Open MPI 4.x): a pure function from options to
// an argv vector, so every rule below is unit-tested without starting a process.
//
//   chorus::launch::MpirunOptions o;
//   o.num_processes = 4;
//   o.hosts = chorus::launch::parse_host_spec("node1:2,node2:2");
//   o.program = {"./chorus-train", "--strategy", "multi_worker"};
//   o.environment = {"CUDA_VISIBLE_DEVICES", "HOME", "NCCL_DEBUG"};   // names of set variables
//   auto argv = chorus::launch::build_mpirun_argv(o);
//   // mpirun -np 4 -H node1:2,node2:2 --bind-to none -x CUDA_VISIBLE_DEVICES -x NCCL_DEBUG
//   //        -- ./chorus-train --strategy multi_worker
//
// The rules (docs/launch.md explains them to users):
//   - `-np N`: N > 0.
//   - `-H host[:slots],...`: every host name follows kHostNameRule (checked again here, for hosts
//     set by hand); a host without ":slots" has one slot (Open MPI's and Horovod's rule
//     for -H). Hosts are passed on with their slot counts written out ("a,b" → "-H a:1,b:1"). When
//     hosts are given, N must equal the sum of their slots: fewer would leave slots idle without
//     saying so, more would oversubscribe remote machines; both are InvalidArgumentError naming N,
//     the sum and each host's slots.
//   - Without hosts all processes run on this machine. When N exceeds the cores known
//     (`local_cores` > 0; Open MPI gives a machine one slot per core) it is InvalidArgumentError
//     unless `oversubscribe` (--oversubscribe) is set, and even then N may be at most
//     kMaxLocalProcessesPerCore per core. `oversubscribe = true` adds `--oversubscribe`.
//   - N is at most kMaxProcesses in any case.
//   - `--bind-to none` by default: a chorus process runs several threads (one per replica, oneDNN's
//     OpenMP threads, input pipeline workers); Open MPI's default for -np <= 2 binds each process
//     to ONE core, so those threads would share it. "none" leaves placement to the OS; "socket"
//     or "numa" are the choices for a multi-socket GPU server (any value Open MPI takes is passed).
//   - `-x NAME` for every name in `environment` that is_forwarded_variable (prefixes CHORUS_, TF_,
//     NCCL_, and the exact names CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, LD_LIBRARY_PATH, PATH):
//     mpirun gives remote processes a bare environment, and these are the ones chorus, CUDA, NCCL
//     and OpenMP read. Then `-x E` for every entry of `extra_environment` ("NAME" or "NAME=VALUE";
//     NAME made of [A-Za-z0-9_], not starting with a digit). Names are sorted and de-duplicated,
//     so the line is the same whatever the order of environ. (Open MPI forwards OMPI_MCA_* itself.)
//   - `--allow-run-as-root` when `run_as_root` (Open MPI refuses to start as root without it).
//   - `--enable-recovery` when `enable_recovery`: Open MPI then lets the other processes run on
//     when one dies (they report the loss, chorus-run's wrapper records it).
//   - `--mca plm_rsh_agent AGENT` for a non-empty `rsh_agent`; `--mca btl_tcp_if_include L --mca
//     oob_tcp_if_include L` with L the `network_interfaces` joined by commas (each non-empty,
//     without ',' or whitespace); then `--mca NAME VALUE` for each of `mca`, NAME made of
//     [a-z0-9_] and VALUE non-empty.
//   - `--`, the `rank_wrapper` words, then the program and its arguments, unchanged: mpirun passes them to each process
//   as
//     separate argv entries, so no quoting happens here (shell_join quotes for printing only).
//
// Errors: InvalidArgumentError (core/error.h) for every rule above, with the value seen and what
// is valid. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::launch {

// Bounds on -np (a typo like -np 100000 must not fork the machine to death).
inline constexpr long long kMaxProcesses = 4096;
inline constexpr long long kMaxLocalProcessesPerCore = 8;

// One entry of a host list: "node1:4" → {"node1", 4, true}; "node1" → {"node1", 1, false}.
struct HostSlots {
  std::string host;
  int slots = 1;
  bool slots_given = false;  // false: the default of one slot was used
  bool operator==(const HostSlots&) const = default;
};

// Host names, the one rule for -H, --hostfile and MpirunOptions::hosts. A host name becomes a
// word of `ssh [opts] -- HOST true` (the host check, launch/host_check.h) and of Open MPI's own
// `ssh HOST orted ...`, which has no `--`: a name starting with '-' would be an option there
// (`-F/path/evil.cfg` makes ssh read that config and run its ProxyCommand on this machine), and
// an agent that goes through a shell would interpret ';', '$', '`'... So a host name is what
// RFC 1123 allows, checked before anything runs: labels separated by single '.', each 1 to 63
// letters, digits, '-' or '_', neither starting nor ending with '-'; 253 characters at most.
// IPv4 addresses (10.0.0.1) fit. '_' is outside RFC 1123 but common in ssh-config aliases and
// harmless to ssh. "user@host" is accepted, as Open MPI's hostfiles and ssh take it, with a
// portable user name (POSIX: letters, digits, '.', '_', '-', not starting with '-'; 32 at most).
// Not accepted: IPv6 literals (':' separates the slots in -H), a trailing '.'.
inline constexpr std::size_t kMaxHostNameLength = 253;
inline constexpr std::size_t kMaxUserNameLength = 32;
inline constexpr std::size_t kMaxHostLabelLength = 63;
inline constexpr std::string_view kHostNameRule =
    "a host name is labels separated by '.', each 1 to 63 letters, digits, '-' or '_', not starting or ending with "
    "'-', 253 characters at most, optionally after 'user@' (e.g. node1, node-1.cluster, 10.0.0.1, alice@node1)";
// Empty when `host` follows the rule above; else what is wrong with it ("starts with '-'", "has
// the character ';'", ...), for messages that add where the name came from and kHostNameRule.
std::string host_name_problem(std::string_view host);

// Parses "host[:slots],host[:slots],...". Host names follow the rule above (so no ':', ',' or
// whitespace; IPv6 literals are not supported); slots are decimal integers >= 1, and at most
// kMaxProcesses per host and in all (so sums of slots always fit an int). A host listed twice is
// an error (Open MPI would merge them silently; say "a:4" instead). Throws InvalidArgumentError
// naming the offending entry and its position (and, for a bad name, the name and kHostNameRule).
std::vector<HostSlots> parse_host_spec(std::string_view spec);

// "a:2,b:1" — the -H argument passed to mpirun (slots always written out).
std::string format_host_spec(const std::vector<HostSlots>& hosts);

// Environment variables forwarded with -x: names starting with one of kForwardedPrefixes, and the
// names in kForwardedNames.
inline constexpr std::string_view kForwardedPrefixes[] = {"CHORUS_", "TF_", "NCCL_"};
inline constexpr std::string_view kForwardedNames[] = {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LD_LIBRARY_PATH",
                                                       "PATH"};
// True when `name` is forwarded by the rules above.
bool is_forwarded_variable(std::string_view name);

struct MpirunOptions {
  std::string mpirun = "mpirun";               // argv[0]: a name or a resolved path
  int num_processes = 0;                       // -np; must be > 0
  std::vector<HostSlots> hosts;                // empty: every process on this machine
  std::string bind_to = "none";                // --bind-to value; must be non-empty
  int local_cores = 0;                         // cores of this machine (0: unknown); see --oversubscribe
  bool oversubscribe = false;                  // force --oversubscribe
  bool run_as_root = false;                    // add --allow-run-as-root
  std::vector<std::string> environment;        // names of the variables set in the caller's environment
  std::vector<std::string> extra_environment;  // passed as -x E unconditionally ("NAME[=VALUE]")
  std::vector<std::string> program;            // the program and its arguments; must be non-empty
  bool enable_recovery = false;                // add --enable-recovery (survivors keep running)
  std::string rsh_agent;                       // --mca plm_rsh_agent (empty: Open MPI's default, ssh)
  // --mca btl_tcp_if_include and --mca oob_tcp_if_include, joined by commas (interface names or
  // CIDR subnets; none: Open MPI picks).
  std::vector<std::string> network_interfaces;
  std::vector<std::pair<std::string, std::string>> mca;  // --mca NAME VALUE each, after the above
  // Words put between "--" and the program: the per-rank wrapper (launch/rank_status.h), e.g.
  // {"/usr/bin/chorus-run", "--record-exit-status", DIR, "--"}. Empty: none.
  std::vector<std::string> rank_wrapper;
};

// The full argv, argv[0] = options.mpirun. Throws InvalidArgumentError (see the rules above).
std::vector<std::string> build_mpirun_argv(const MpirunOptions& options);

// POSIX-shell quoting for printing a command a user can paste: words made only of
// [A-Za-z0-9_@%+=:,./-] stay as they are; any other word is wrapped in single quotes, with each
// ' written as '\''. The empty word is ''.
std::string shell_quote(std::string_view word);
// The words quoted and joined by single spaces.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace chorus::launch
