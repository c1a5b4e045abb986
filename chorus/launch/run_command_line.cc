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

// One pass over the options: each flag is taken by the common, the mpirun or the agent group (in
// that order); the checks that depend on the mode run after the program is found.
class Parser {
 public:
  explicit Parser(const std::vector<std::string>& args) : args_(args) {}

  RunCommandLine parse() {
    for (; i_ < args_.size(); ++i_) {
      word_ = args_[i_];
      if (word_ == "--") {
        ++i_;
        break;
      }
      if (word_.empty() || word_[0] != '-') break;  // the program starts here, as with mpirun
      split(word_);
      if (first_mpirun_flag_.empty() && is_mpirun_flag(flag_)) first_mpirun_flag_ = flag_;
      if (const std::string agent = agent_flag_name(flag_); !agent.empty()) {
        if (first_agent_flag_.empty()) first_agent_flag_ = flag_;
        flag_ = agent;
      }
      if (!common_flag() && !mpirun_flag() && !agent_flag())
        throw InvalidArgumentError(internal::str_cat(
            "unknown option '", word_,
            "'; chorus-run takes -np, -H, --hostfile, --rsh-agent, --network-interface, --mca, --no-host-check, "
            "--max-restarts, --min-hosts, --failure-grace, --nnodes, --nproc-per-node, --node-rank, --rdzv-endpoint, "
            "--rdzv-timeout, --rdzv-last-call, --bind-to, --oversubscribe, -x, --collective-timeout, "
            "--enable-recovery, --status-dir, --dry-run, --check-build, --version, --help, then the program (after "
            "'--' if its name starts with '-')"));
    }
    out_.program.assign(args_.begin() + static_cast<std::ptrdiff_t>(i_), args_.end());
    if (out_.help || out_.check_build || out_.version) return out_;
    if (out_.record_exit_status) {
      CHORUS_REQUIRE(!out_.program.empty(), InvalidArgumentError, kRecordExitStatusFlag, " needs a program after '--'");
      return out_;
    }
    CHORUS_REQUIRE(!out_.program.empty(), InvalidArgumentError,
                   "no program to run: put it after the options, e.g. chorus-run -np 2 -- ./chorus-train");
    if (out_.without_mpi())
      check_agent_mode();
    else
      check_mpirun_mode();
    return out_;
  }

 private:
  // "--flag=value" → flag_ "--flag", value_ "value" (long options only); else flag_ = word.
  void split(const std::string& word) {
    flag_ = word;
    inline_value_.reset();
    if (word.rfind("--", 0) != 0) return;
    if (const auto eq = word.find('='); eq != std::string::npos) {
      flag_ = word.substr(0, eq);
      inline_value_ = word.substr(eq + 1);
    }
  }
  // The value of the option: the "=value" part of a long option, else the next word.
  std::string value() {
    if (inline_value_) return *inline_value_;
    CHORUS_REQUIRE(i_ + 1 < args_.size(), InvalidArgumentError, "option ", flag_, " needs a value");
    return args_[++i_];
  }
  void no_value() const {
    CHORUS_REQUIRE(!inline_value_, InvalidArgumentError, "option ", flag_, " takes no value, got '", word_, "'");
  }
  int bounded(int low, int high) { return parse_bounded(flag_, value(), low, high); }

  // Flags of both modes.
  bool common_flag() {
    const std::string& f = flag_;
    if (f == "--max-restarts") {
      out_.max_restarts = bounded(0, kMaxRestarts);
    } else if (f == "--min-hosts") {
      out_.min_hosts = bounded(1, static_cast<int>(kMaxProcesses));
    } else if (f == "--failure-grace") {
      out_.failure_grace_seconds = bounded(1, 86400);
    } else if (f == "-x") {
      out_.extra_environment.push_back(value());
    } else if (f == "--collective-timeout") {
      out_.collective_timeout = value();
      env::parse_timeout_seconds(*out_.collective_timeout, "--collective-timeout");  // throws when invalid
    } else if (f == kRecordExitStatusFlag) {
      out_.record_exit_status = value();
    } else if (f == "--dry-run") {
      no_value();
      out_.dry_run = true;
    } else if (f == "--check-build") {
      no_value();
      out_.check_build = true;
    } else if (f == "-h" || f == "--help") {
      no_value();
      out_.help = true;
    } else if (f == "--version") {
      no_value();
      out_.version = true;
    } else {
      return false;
    }
    return true;
  }

  // mpirun's own flags (is_mpirun_flag).
  bool mpirun_flag() {
    const std::string& f = flag_;
    if (f == "-np" || f == "-n" || f == "--np") {
      out_.num_processes = parse_count(f, value());
    } else if (f == "-H" || f == "--host" || f == "-host") {
      out_.hosts = value();
    } else if (f == "--hostfile" || f == "-hostfile" || f == "--machinefile") {
      out_.hostfile = value();
      CHORUS_REQUIRE(!out_.hostfile->empty(), InvalidArgumentError, f, " is empty; give the hostfile's path");
    } else if (f == "--rsh-agent") {
      out_.rsh_agent = value();
      CHORUS_REQUIRE(!out_.rsh_agent->empty(), InvalidArgumentError,
                     "--rsh-agent is empty; give a command such as ssh or 'ssh -p 2222'");
    } else if (f == "--network-interface") {
      out_.network_interfaces = value();
    } else if (f == "--mca") {
      CHORUS_REQUIRE(!inline_value_ && i_ + 2 < args_.size(), InvalidArgumentError,
                     "option --mca needs a name and a value, e.g. --mca btl tcp,self");
      out_.mca.emplace_back(args_[i_ + 1], args_[i_ + 2]);
      i_ += 2;
    } else if (f == "--no-host-check") {
      no_value();
      out_.check_hosts = false;
    } else if (f == "--bind-to") {
      out_.bind_to = value();
    } else if (f == "--oversubscribe") {
      no_value();
      out_.oversubscribe = true;
    } else if (f == "--enable-recovery") {
      no_value();
      out_.enable_recovery = true;
    } else if (f == "--status-dir") {
      out_.status_dir = value();
      CHORUS_REQUIRE(!out_.status_dir->empty(), InvalidArgumentError,
                     "--status-dir is empty; give a directory every rank can write (or omit it)");
    } else {
      return false;
    }
    return true;
  }

  // torchrun's flags (agent_flag_name, already in their '-' spelling).
  bool agent_flag() {
    const std::string& f = flag_;
    if (f == "--nnodes") {
      // torchrun's elastic MIN:MAX: start (and restart) with the nodes there once at least MIN are
      const std::string v = value();
      const std::size_t colon = v.find(':');
      out_.nnodes =
          parse_bounded(f, v.substr(colon == std::string::npos ? 0 : colon + 1), 1, static_cast<int>(kMaxProcesses));
      if (colon != std::string::npos) {
        out_.min_hosts = parse_bounded(f, v.substr(0, colon), 1, static_cast<int>(kMaxProcesses));
        CHORUS_REQUIRE(*out_.min_hosts <= *out_.nnodes, InvalidArgumentError, "--nnodes '", v, "': MIN ",
                       *out_.min_hosts, " is above MAX ", *out_.nnodes, " (torchrun's MIN:MAX)");
      }
    } else if (f == "--nproc-per-node") {
      out_.nproc_per_node = bounded(1, static_cast<int>(kMaxProcesses));
    } else if (f == "--node-rank") {
      out_.node_rank = bounded(0, static_cast<int>(kMaxProcesses) - 1);
    } else if (f == "--rdzv-endpoint") {
      out_.rdzv_endpoint = value();
      parse_rdzv_endpoint(*out_.rdzv_endpoint);  // throws when invalid
    } else if (f == "--rdzv-timeout") {
      out_.rdzv_timeout_seconds = bounded(1, 86400);
    } else if (f == "--rdzv-last-call") {
      out_.rdzv_last_call_seconds = bounded(0, 86400);
    } else {
      return false;
    }
    return true;
  }

  void check_agent_mode() const {
    CHORUS_REQUIRE(!out_.min_hosts || *out_.min_hosts <= out_.nnodes.value_or(1), InvalidArgumentError, "--min-hosts ",
                   *out_.min_hosts, " is above --nnodes ", out_.nnodes.value_or(1),
                   ": at least M of the nodes must join each start");
    CHORUS_REQUIRE(first_mpirun_flag_.empty(), InvalidArgumentError, first_agent_flag_,
                   " (chorus-run without MPI) and ", first_mpirun_flag_,
                   " (mpirun's) cannot be mixed: give --nproc-per-node (with --nnodes, --node-rank, "
                   "--rdzv-endpoint) or -np/-H/--hostfile");
  }

  void check_mpirun_mode() const {
    CHORUS_REQUIRE(!(out_.hosts && out_.hostfile), InvalidArgumentError,
                   "-H and --hostfile both name the hosts: give one of them");
    CHORUS_REQUIRE(!out_.min_hosts || out_.hosts || out_.hostfile, InvalidArgumentError,
                   "--min-hosts needs the hosts (-H or --hostfile), or --nnodes without MPI");
    CHORUS_REQUIRE(out_.num_processes || out_.hosts || out_.hostfile, InvalidArgumentError,
                   "-np is missing: say how many processes to start (e.g. -np 2), or give -H host:slots,... or "
                   "--hostfile FILE to start one per slot");
  }

  const std::vector<std::string>& args_;
  std::size_t i_ = 0;
  RunCommandLine out_;
  std::string word_, flag_;
  std::optional<std::string> inline_value_;
  std::string first_mpirun_flag_, first_agent_flag_;  // as typed, for the message when they are mixed
};

}  // namespace

RunCommandLine parse_run_command_line(const std::vector<std::string>& args) { return Parser(args).parse(); }

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
