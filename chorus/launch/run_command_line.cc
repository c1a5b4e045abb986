#include <chorus/launch/run_command_line.h>

#include <charconv>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/launch/agent_options.h>
#include <chorus/launch/mpirun_command.h>
#include <chorus/launch/rank_status.h>

namespace chorus::launch {
namespace {

int parse_count(const std::string& flag, const std::string& value) {
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  CHORUS_REQUIRE(!value.empty() && ec == std::errc() && end == value.data() + value.size(), InvalidArgumentError, flag,
                 " expects a whole number of processes, got '", value, "'");
  return n;
}

// A whole number in [low, high] given to `flag`.
int parse_bounded(const std::string& flag, const std::string& value, int low, int high) {
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  CHORUS_REQUIRE(!value.empty() && ec == std::errc() && end == value.data() + value.size() && n >= low && n <= high,
                 InvalidArgumentError, flag, " expects a whole number from ", low, " to ", high, ", got '", value, "'");
  return n;
}

// mpirun's own flags: they mean nothing without MPI.
bool is_mpirun_flag(const std::string& flag) {
  for (const char* f : {"-np", "-n", "--np", "-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile",
                        "--rsh-agent", "--network-interface", "--mca", "--no-host-check", "--bind-to",
                        "--oversubscribe", "--enable-recovery", "--status-dir"})
    if (flag == f) return true;
  return false;
}

// torchrun's flags, in both spellings, by their '-' name.
std::string agent_flag_name(const std::string& flag) {
  std::string name = flag;
  if (name.rfind("--", 0) == 0)
    for (std::size_t k = 2; k < name.size(); ++k)
      if (name[k] == '_') name[k] = '-';
  for (const char* f :
       {"--nnodes", "--nproc-per-node", "--node-rank", "--rdzv-endpoint", "--rdzv-timeout", "--rdzv-last-call"})
    if (name == f) return name;
  return "";
}

}  // namespace

RunCommandLine parse_run_command_line(const std::vector<std::string>& args) {
  RunCommandLine out;
  std::size_t i = 0;
  std::string first_mpirun_flag, first_agent_flag;  // as typed, for the message when they are mixed
  // The value of the option at args[i]: the "=value" part of a long option, else the next word.
  const auto value_of = [&](const std::string& flag, const std::string* inline_value) -> std::string {
    if (inline_value) return *inline_value;
    CHORUS_REQUIRE(i + 1 < args.size(), InvalidArgumentError, "option ", flag, " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (word.empty() || word[0] != '-') break;  // the program starts here, as with mpirun

    std::string flag = word;
    std::optional<std::string> inline_value;
    if (word.rfind("--", 0) == 0) {
      if (const auto eq = word.find('='); eq != std::string::npos) {
        flag = word.substr(0, eq);
        inline_value = word.substr(eq + 1);
      }
    }
    const std::string* iv = inline_value ? &*inline_value : nullptr;
    if (first_mpirun_flag.empty() && is_mpirun_flag(flag)) first_mpirun_flag = flag;
    const std::string agent_flag = agent_flag_name(flag);
    if (!agent_flag.empty()) {
      if (first_agent_flag.empty()) first_agent_flag = flag;
      flag = agent_flag;
    }
    const auto no_value = [&] {
      CHORUS_REQUIRE(!inline_value, InvalidArgumentError, "option ", flag, " takes no value, got '", word, "'");
    };
    if (flag == "-np" || flag == "-n" || flag == "--np") {
      out.num_processes = parse_count(flag, value_of(flag, iv));
    } else if (flag == "-H" || flag == "--host" || flag == "-host") {
      out.hosts = value_of(flag, iv);
    } else if (flag == "--hostfile" || flag == "-hostfile" || flag == "--machinefile") {
      out.hostfile = value_of(flag, iv);
      CHORUS_REQUIRE(!out.hostfile->empty(), InvalidArgumentError, flag, " is empty; give the hostfile's path");
    } else if (flag == "--rsh-agent") {
      out.rsh_agent = value_of(flag, iv);
      CHORUS_REQUIRE(!out.rsh_agent->empty(), InvalidArgumentError,
                     "--rsh-agent is empty; give a command such as ssh or 'ssh -p 2222'");
    } else if (flag == "--network-interface") {
      out.network_interfaces = value_of(flag, iv);
    } else if (flag == "--mca") {
      CHORUS_REQUIRE(!inline_value && i + 2 < args.size(), InvalidArgumentError,
                     "option --mca needs a name and a value, e.g. --mca btl tcp,self");
      out.mca.emplace_back(args[i + 1], args[i + 2]);
      i += 2;
    } else if (flag == "--max-restarts") {
      out.max_restarts = parse_bounded(flag, value_of(flag, iv), 0, kMaxRestarts);
    } else if (flag == "--min-hosts") {
      out.min_hosts = parse_bounded(flag, value_of(flag, iv), 1, static_cast<int>(kMaxProcesses));
    } else if (flag == "--failure-grace") {
      out.failure_grace_seconds = parse_bounded(flag, value_of(flag, iv), 1, 86400);
    } else if (flag == "--nnodes") {
      // torchrun's elastic MIN:MAX: start (and restart) with the nodes there once at least MIN are
      const std::string v = value_of(flag, iv);
      const std::size_t colon = v.find(':');
      out.nnodes =
          parse_bounded(flag, v.substr(colon == std::string::npos ? 0 : colon + 1), 1, static_cast<int>(kMaxProcesses));
      if (colon != std::string::npos) {
        out.min_hosts = parse_bounded(flag, v.substr(0, colon), 1, static_cast<int>(kMaxProcesses));
        CHORUS_REQUIRE(*out.min_hosts <= *out.nnodes, InvalidArgumentError, "--nnodes '", v, "': MIN ", *out.min_hosts,
                       " is above MAX ", *out.nnodes, " (torchrun's MIN:MAX)");
      }
    } else if (flag == "--nproc-per-node") {
      out.nproc_per_node = parse_bounded(flag, value_of(flag, iv), 1, static_cast<int>(kMaxProcesses));
    } else if (flag == "--node-rank") {
      out.node_rank = parse_bounded(flag, value_of(flag, iv), 0, static_cast<int>(kMaxProcesses) - 1);
    } else if (flag == "--rdzv-endpoint") {
      out.rdzv_endpoint = value_of(flag, iv);
      parse_rdzv_endpoint(*out.rdzv_endpoint);  // throws when invalid
    } else if (flag == "--rdzv-timeout") {
      out.rdzv_timeout_seconds = parse_bounded(flag, value_of(flag, iv), 1, 86400);
    } else if (flag == "--rdzv-last-call") {
      out.rdzv_last_call_seconds = parse_bounded(flag, value_of(flag, iv), 0, 86400);
    } else if (flag == "--no-host-check") {
      no_value();
      out.check_hosts = false;
    } else if (flag == "--bind-to") {
      out.bind_to = value_of(flag, iv);
    } else if (flag == "-x") {
      out.extra_environment.push_back(value_of(flag, iv));
    } else if (flag == "--oversubscribe") {
      no_value();
      out.oversubscribe = true;
    } else if (flag == "--enable-recovery") {
      no_value();
      out.enable_recovery = true;
    } else if (flag == "--collective-timeout") {
      out.collective_timeout = value_of(flag, iv);
      env::parse_timeout_seconds(*out.collective_timeout, "--collective-timeout");  // throws when invalid
    } else if (flag == "--status-dir") {
      out.status_dir = value_of(flag, iv);
      CHORUS_REQUIRE(!out.status_dir->empty(), InvalidArgumentError,
                     "--status-dir is empty; give a directory every rank can write (or omit it)");
    } else if (flag == kRecordExitStatusFlag) {
      out.record_exit_status = value_of(flag, iv);
    } else if (flag == "--dry-run") {
      no_value();
      out.dry_run = true;
    } else if (flag == "--check-build") {
      no_value();
      out.check_build = true;
    } else if (flag == "-h" || flag == "--help") {
      no_value();
      out.help = true;
    } else if (flag == "--version") {
      no_value();
      out.version = true;
    } else {
      throw InvalidArgumentError(internal::str_cat(
          "unknown option '", word,
          "'; chorus-run takes -np, -H, --hostfile, --rsh-agent, --network-interface, --mca, --no-host-check, "
          "--max-restarts, --min-hosts, --failure-grace, --nnodes, --nproc-per-node, --node-rank, --rdzv-endpoint, "
          "--rdzv-timeout, "
          "--bind-to, --oversubscribe, -x, --collective-timeout, --enable-recovery, --status-dir, --dry-run, --check-build, --version, --help, then the "
          "program "
          "(after '--' if its name starts with '-')"));
    }
  }
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (out.help || out.check_build || out.version) return out;
  if (out.record_exit_status) {
    CHORUS_REQUIRE(!out.program.empty(), InvalidArgumentError, kRecordExitStatusFlag, " needs a program after '--'");
    return out;
  }

  CHORUS_REQUIRE(!out.program.empty(), InvalidArgumentError,
                 "no program to run: put it after the options, e.g. chorus-run -np 2 -- ./chorus-train");
  if (out.without_mpi()) {
    CHORUS_REQUIRE(!out.min_hosts || *out.min_hosts <= out.nnodes.value_or(1), InvalidArgumentError, "--min-hosts ",
                   *out.min_hosts, " is above --nnodes ", out.nnodes.value_or(1),
                   ": at least M of the nodes must join each start");
    CHORUS_REQUIRE(first_mpirun_flag.empty(), InvalidArgumentError, first_agent_flag, " (chorus-run without MPI) and ",
                   first_mpirun_flag,
                   " (mpirun's) cannot be mixed: give --nproc-per-node (with --nnodes, --node-rank, "
                   "--rdzv-endpoint) or -np/-H/--hostfile");
    return out;
  }
  CHORUS_REQUIRE(!(out.hosts && out.hostfile), InvalidArgumentError,
                 "-H and --hostfile both name the hosts: give one of them");
  CHORUS_REQUIRE(!out.rdzv_last_call_seconds, InvalidArgumentError,
                 "--rdzv-last-call is for chorus-run without MPI (with --nnodes MIN:MAX)");
  CHORUS_REQUIRE(!out.min_hosts || out.hosts || out.hostfile, InvalidArgumentError,
                 "--min-hosts needs the hosts (-H or --hostfile), or --nnodes without MPI");
  CHORUS_REQUIRE(out.num_processes || out.hosts || out.hostfile, InvalidArgumentError,
                 "-np is missing: say how many processes to start (e.g. -np 2), or give -H host:slots,... or "
                 "--hostfile FILE to start one per slot");
  return out;
}

std::string run_usage() {
  return R"(chorus-run: start a chorus program on several processes with Open MPI's mpirun.

usage: chorus-run [options] [--] program [args...]
       chorus-run --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT] [options] [--] program
       chorus-run --check-build

options:
  -np N, -n N          number of processes to start (> 0); with -H it defaults to the sum of the
                       slots and must equal it
  -H, --host SPEC      hosts as host[:slots],... (a host without :slots has 1 slot), e.g.
                       -H node1:4,node2:4; without -H every process runs on this machine.
                       A host name is letters, digits, '-', '_' and '.' (RFC 1123 labels; no
                       leading '-', no user@, no IPv6 literal)
  --hostfile FILE      the hosts from a hostfile instead: one "host slots=N" per line (Open MPI's
                       and Horovod's format; '#' comments)
  --rsh-agent CMD      how mpirun reaches the other hosts (default ssh; e.g. 'ssh -p 2222')
  --network-interface IF
                       the interface(s) or subnet(s) the ranks use between hosts, e.g. eth1 or
                       10.0.0.0/24 (comma-separated): Open MPI's TCP traffic and its daemons
  --mca NAME VALUE     pass an Open MPI MCA parameter (repeatable), e.g. --mca btl tcp,self
  --no-host-check      start without first checking that every other host answers (by
                       default each is asked to run `true` through the rsh agent, 10 s at most)
  --max-restarts N     start the job again when it fails, up to N times (0..100; default 0), each
                       time on the hosts that answer then; the program resumes from its latest
                       checkpoint (chorus-train --checkpoint-dir); CHORUS_RESTART_COUNT tells it
                       which start this is. Not after SIGTERM/SIGINT to chorus-run
  --min-hosts M        start or restart on the hosts that answer when at least M of them do,
                       -np following their slots (default: all hosts must answer). Without
                       MPI: the same as --nnodes M:N
  --failure-grace S    a rank failed and mpirun has not ended the job S seconds later (a host that
                       cannot be reached): end mpirun (default 30; needs the rank records)
  --bind-to WHAT       mpirun's process binding (default none: each chorus process runs several
                       threads, which binding to one core would crowd; socket or numa suit
                       multi-socket GPU servers)
  --oversubscribe      allow more processes than this machine's cores (without -H, -np above the
                       core count is refused unless given; at most 8 per core either way)
  -x NAME[=VALUE]      also forward this environment variable (CHORUS_*, TF_*, NCCL_*,
                       CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, LD_LIBRARY_PATH and PATH are
                       forwarded already when set)
  --collective-timeout SECONDS
                       how long a collective waits for the other ranks before it fails (every
                       rank; at least 0.01; default 300, or CHORUS_COLLECTIVE_TIMEOUT). A killed rank is noticed
                       within seconds regardless (the ranks watch each other over TCP)
  --enable-recovery    passed to mpirun: when a rank dies the others keep running, so that they
                       report the loss themselves (mpirun then exits 0; chorus-run does not)
  --status-dir DIR     where each rank records how it ended; with -H give a directory every host
                       sees (shared file system), else chorus-run makes a temporary one
  --dry-run            print the mpirun command line (shell-quoted) instead of running it; without
                       MPI, each local worker's variables and program

without MPI (torchrun style: chorus-run starts this node's workers itself; no mpirun, no ssh):
  --nnodes M           nodes in the job: one chorus-run per node (default 1)
  --nnodes MIN:MAX     elastic (torchrun's): each start (and restart) goes ahead with the nodes
                       that joined once at least MIN of the MAX have and --rdzv-last-call passed;
                       their workers are numbered anew (a lost node's place is taken)
  --rdzv-last-call S   with MIN:MAX: how long node 0 waits for the rest once MIN nodes joined
                       (default 30, torchrun's last call)
  --nproc-per-node N   workers this node starts (default 1)
  --node-rank R        this node, 0..M-1 (default 0); worker RANK = R * N + LOCAL_RANK
  --rdzv-endpoint HOST:PORT
                       node 0's address: its chorus-run serves the workers' rendezvous store on
                       PORT (worker rank 0 does with one node) and the agents' store on PORT+1
                       (both must be open between the nodes). Needed with M > 1; default
                       127.0.0.1 and a free port
  --rdzv-timeout S     how long the agents wait for each other before each start (default 300)
  Each worker gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  GROUP_RANK, GROUP_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT (and CHORUS_RESTART_COUNT),
  TORCHELASTIC_USE_AGENT_STORE (True with M > 1). When a
  worker fails, the others (on every node) get SIGTERM, SIGKILL after --failure-grace; with
  --max-restarts left every node starts its workers again. -x NAME=VALUE, --collective-timeout,
  --max-restarts, --failure-grace and --dry-run apply; mpirun's flags (-np, -H, --hostfile,
  --min-hosts, --mca, ...) do not mix with these.
  --check-build        print what this build of chorus contains (CUDA, cuDNN, cuBLAS, NCCL, MPI,
                       oneDNN) and how many GPUs are visible, then exit
  --version            chorus's version, git commit and build type, then the same facts
  -h, --help           this text

chorus-run adds --allow-run-as-root when run as root. Each rank runs under chorus-run itself
(--record-exit-status), which records how it ended: chorus-run exits non-zero when any rank did,
even where mpirun exits 0, and names each rank that failed. (With -H and no --status-dir the ranks
are not wrapped, and mpirun's exit status is returned.)
Exit status: mpirun's when non-zero, else the first failed rank's (128 + signal for a killed one),
else 0; 2: a bad command line; 3: a host did not answer the host check; 127: mpirun not found
(apt-get install openmpi-bin).
Without MPI: 0 when every worker of every node exited 0, else the first failed local rank's status
(128 + signal), 128 + signal when chorus-run was told to stop, 1 when another node failed the job.
Example: chorus-run -np 2 -- chorus-train --strategy multi_worker --epochs 1
         chorus-run --nproc-per-node 2 -- ./train
)";
}

}  // namespace chorus::launch
