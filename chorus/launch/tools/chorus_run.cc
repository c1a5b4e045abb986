// chorus-run: starts a chorus program on several processes with Open MPI's mpirun, with the flags
// a chorus job needs (process binding, forwarded environment, root and oversubscription flags);
// `--dry-run` prints the command, `--check-build` prints what this build contains. With
// --nproc-per-node/--nnodes/--node-rank/--rdzv-endpoint it runs without MPI instead, as torchrun
// does: it starts this node's workers itself (launch/agent.h, whose exit statuses apply then).
// Usage: launch/run_command_line.cc (run_usage); guide: docs/launch.md.
//
// Exit status: mpirun's when it is non-zero, else the first failed rank's (each rank runs under
// `chorus-run --record-exit-status DIR`, launch/rank_status.h, so a rank that failed is known even
// when mpirun --enable-recovery exits 0), else 0; 0 for --dry-run, --check-build and --help; 2 for a
// bad command line; 3 when a host did not answer the host check (launch/host_check.h); 127 when
// mpirun (or a local program given with a path) is not found.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/launch/agent.h>
#include <chorus/launch/agent_options.h>
#include <chorus/launch/build_info.h>
#include <chorus/launch/cli.h>
#include <chorus/launch/host_check.h>
#include <chorus/launch/hostfile.h>
#include <chorus/launch/mpirun_command.h>
#include <chorus/launch/process.h>
#include <chorus/launch/rank_status.h>
#include <chorus/launch/run_command_line.h>

namespace cx = chorus;
namespace launch = chorus::launch;

namespace {

constexpr int kUsageError = 2;
constexpr int kHostsUnreachable = 3;
constexpr int kNotFound = 127;

// The remote shell mpirun will use: --rsh-agent, else Open MPI's own setting from the
// environment, else ssh.
std::string rsh_agent(const launch::RunCommandLine& cl) {
  if (cl.rsh_agent) return *cl.rsh_agent;
  const char* env = std::getenv("OMPI_MCA_plm_rsh_agent");
  return env && *env ? env : "ssh";
}

// Every host other than this machine runs `true` through the agent. Returns the hosts that
// answered (this machine's always), after printing who did not and why.
std::vector<launch::HostSlots> answering_hosts(const std::vector<launch::HostSlots>& hosts, const std::string& agent) {
  std::vector<std::string> remote;
  for (const auto& h : hosts)
    if (!launch::is_this_machine(h.host)) remote.push_back(h.host);
  if (remote.empty()) return hosts;
  std::vector<std::string> words = launch::split_command(agent);
  // ssh must fail instead of asking for a password or a host key nobody will type.
  if (agent == "ssh") words.insert(words.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=5"});
  const auto answers = launch::check_hosts(words, remote);
  std::vector<std::string> silent;
  for (const auto& a : answers)
    if (!a.answered) silent.push_back(a.host);
  if (silent.empty()) return hosts;
  std::cerr << "chorus-run: " << silent.size() << " of " << remote.size() << " host" << (remote.size() == 1 ? "" : "s")
            << " did not answer through '" << agent << "' (the remote shell mpirun would use):\n";
  for (const auto& a : answers)
    if (!a.answered) std::cerr << "  " << a.host << ": " << a.detail << "\n";
  std::vector<launch::HostSlots> out;
  for (const auto& h : hosts)
    if (std::find(silent.begin(), silent.end(), h.host) == silent.end()) out.push_back(h);
  return out;
}

// The watchdog of one job (launch/process.h): once a rank's record says it failed, mpirun gets
// `grace` to end the job; past that (a host that cannot be reached keeps mpirun waiting on its
// daemon until TCP gives up, minutes) chorus-run ends mpirun itself.
std::function<std::string()> failure_watchdog(const std::string& status_dir, std::chrono::seconds grace) {
  auto first = std::make_shared<std::optional<std::pair<std::chrono::steady_clock::time_point, std::string>>>();
  return [status_dir, grace, first]() -> std::string {
    if (!*first) {
      for (const auto& r : launch::read_exit_records(status_dir))
        if (!r.ok()) {
          *first = std::make_pair(std::chrono::steady_clock::now(), r.describe());
          break;
        }
      return "";
    }
    if (std::chrono::steady_clock::now() - (*first)->first < grace) return "";
    return cx::internal::str_cat(
        (*first)->second, " ", grace.count(),
        " s ago and mpirun has not ended the job (a host that cannot be reached keeps it waiting)");
  };
}

// chorus-run's command line as mpirun options, but for the rank wrapper and mpirun's path (set by
// run); build_mpirun_argv validates them.
launch::MpirunOptions mpirun_options(const launch::RunCommandLine& cl) {
  launch::MpirunOptions o;
  if (cl.hosts) o.hosts = launch::parse_host_spec(*cl.hosts);
  if (cl.hostfile) o.hosts = launch::read_hostfile(*cl.hostfile);
  if (cl.rsh_agent) o.rsh_agent = *cl.rsh_agent;
  if (cl.network_interfaces) {
    o.network_interfaces.clear();
    std::string_view list = *cl.network_interfaces;
    for (std::size_t start = 0;;) {
      const std::size_t comma = list.find(',', start);
      o.network_interfaces.emplace_back(list.substr(start, comma == std::string_view::npos ? comma : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  o.mca = cl.mca;
  if (cl.num_processes) {
    o.num_processes = *cl.num_processes;
  } else {
    for (const auto& h : o.hosts) o.num_processes += h.slots;
  }
  o.bind_to = cl.bind_to;
  o.oversubscribe = cl.oversubscribe;
  o.local_cores = static_cast<int>(std::thread::hardware_concurrency());
  o.run_as_root = launch::running_as_root();
  o.environment = launch::environment_names();
  o.extra_environment = cl.extra_environment;
  if (cl.collective_timeout) o.extra_environment.push_back("CHORUS_COLLECTIVE_TIMEOUT=" + *cl.collective_timeout);
  o.enable_recovery = cl.enable_recovery;
  o.program = cl.program;
  return o;
}

// chorus-run's command line for the agent (without MPI); validate_agent_options checks it.
launch::AgentOptions agent_options(const launch::RunCommandLine& cl) {
  launch::AgentOptions o;
  o.nnodes = cl.nnodes.value_or(1);
  o.nproc_per_node = cl.nproc_per_node.value_or(1);
  o.node_rank = cl.node_rank.value_or(0);
  if (cl.rdzv_endpoint) o.endpoint = launch::parse_rdzv_endpoint(*cl.rdzv_endpoint);
  o.max_restarts = cl.max_restarts;
  o.failure_grace = std::chrono::seconds(cl.failure_grace_seconds);
  if (cl.rdzv_timeout_seconds) o.rdzv_timeout = std::chrono::seconds(*cl.rdzv_timeout_seconds);
  if (cl.rdzv_last_call_seconds) o.rdzv_last_call = std::chrono::seconds(*cl.rdzv_last_call_seconds);
  o.min_nodes = cl.min_hosts.value_or(0);
  o.extra_environment = cl.extra_environment;
  if (cl.collective_timeout) o.extra_environment.push_back("CHORUS_COLLECTIVE_TIMEOUT=" + *cl.collective_timeout);
  o.program = cl.program;
  launch::validate_agent_options(o);
  return o;
}

// --dry-run without MPI: one line per local worker, its variables and program as `env` would run
// them (the whole environment of this process is inherited besides).
void print_agent_dry_run(const launch::AgentOptions& o) {
  const launch::RdzvEndpoint endpoint = o.endpoint ? *o.endpoint : launch::RdzvEndpoint{"127.0.0.1", 0};
  for (int local = 0; local < o.nproc_per_node; ++local) {
    std::vector<std::string> words{"env"};
    for (auto& v : launch::worker_environment({}, o, endpoint, local, 0)) words.push_back(std::move(v));
    words.insert(words.end(), o.program.begin(), o.program.end());
    std::cout << launch::shell_join(words) << "\n";
  }
  if (!o.endpoint) std::cout << "# MASTER_PORT=0: a free port of 127.0.0.1 is chosen at each start\n";
}

// One start of the job with its ranks wrapped: their exits are recorded in `status_dir` (emptied
// of an earlier job's records first; a fresh temporary folder, removed after, without
// --status-dir) and judged. Returns the job's exit status; `job` says how mpirun ended.
int run_wrapped_job(launch::MpirunOptions& o, const launch::RunCommandLine& cl, std::string& status_dir,
                    launch::ChildExit& job) {
  if (cl.status_dir) {
    std::error_code ec;
    std::filesystem::create_directories(status_dir, ec);
    for (const auto& r : launch::read_exit_records(status_dir))  // records of an earlier job would count
      std::filesystem::remove(std::filesystem::path(status_dir) / ("rank-" + r.rank), ec);
  } else {
    status_dir = launch::make_temp_directory("chorus-run-");
  }
  o.rank_wrapper[2] = status_dir;
  // mpirun gets SIGTERM (and ends its job) if chorus-run is killed.
  job = launch::run_child(launch::build_mpirun_argv(o),
                          {.parent_death_signal = SIGTERM,
                           .shares_terminal = true,
                           .watchdog = failure_watchdog(status_dir, std::chrono::seconds(cl.failure_grace_seconds))});
  const auto verdict = launch::judge_job(job.status(), launch::read_exit_records(status_dir), o.num_processes,
                                         /*expect_every_rank=*/!job.ended_by_watchdog);
  for (const auto& line : verdict.lines) std::cerr << line << "\n";
  const int status = job.ended_by_watchdog && verdict.exit_status == 0 ? 1 : verdict.exit_status;
  if (!cl.status_dir) {
    std::error_code ec;
    std::filesystem::remove_all(status_dir, ec);
  }
  return status;
}

int run_mpirun(const launch::RunCommandLine& cl, launch::MpirunOptions& o, bool wrap, std::string& status_dir);

int run(const std::vector<std::string>& args) {
  launch::RunCommandLine cl;
  launch::MpirunOptions o;
  // The ranks are wrapped (their exits recorded) where the record directory is visible to all.
  bool wrap = false;
  std::string status_dir;
  std::optional<launch::AgentOptions> agent;  // without MPI
  try {
    cl = launch::parse_run_command_line(args);
    if (cl.record_exit_status) return launch::run_rank_and_record(*cl.record_exit_status, cl.program);
    if (cl.help) {
      std::cout << launch::run_usage();
      return 0;
    }
    if (cl.version) {
      std::cout << launch::version_text("chorus-run");
      return 0;
    }
    if (cl.check_build) {
      for (const auto& c : launch::query_build_info()) std::cout << launch::format_component(c) << "\n";
      return 0;
    }
    // Every rank would refuse a bad CHORUS_COLLECTIVE_TIMEOUT (one under the floor included): say so
    // once, before mpirun starts.
    cx::env::collective_timeout();
    if (cl.without_mpi()) {
      agent = agent_options(cl);
      if (cl.dry_run) {
        print_agent_dry_run(*agent);
        return 0;
      }
    } else {
      o = mpirun_options(cl);
      wrap = o.hosts.empty() || cl.status_dir;
      // The directory is made only for a real run; --dry-run shows where it would be.
      status_dir = cl.status_dir ? *cl.status_dir : launch::temp_directory() + "/chorus-run-XXXXXX";
      if (wrap)
        o.rank_wrapper = {launch::self_executable(), std::string(launch::kRecordExitStatusFlag), status_dir, "--"};
      const auto argv = launch::build_mpirun_argv(o);  // validates with the name "mpirun"
      if (cl.dry_run) {
        std::cout << launch::shell_join(argv) << "\n";
        return 0;
      }
    }
  } catch (const cx::InvalidArgumentError& e) {
    launch::print_error("chorus-run", e.message(), "Run 'chorus-run --help' for usage.");
    return kUsageError;
  }
  if (agent) return launch::run_agent(*agent);
  return run_mpirun(cl, o, wrap, status_dir);
}

// The job under mpirun, restarted up to --max-restarts times. `o` and `status_dir` are checked
// already (run: build_mpirun_argv).
int run_mpirun(const launch::RunCommandLine& cl, launch::MpirunOptions& o, bool wrap, std::string& status_dir) {
  const char* path = std::getenv("PATH");
  const auto mpirun = launch::find_executable("mpirun", path ? path : "");
  if (!mpirun) {
    std::cerr << "chorus-run: mpirun was not found on PATH (" << (path ? path : "unset")
              << "); install Open MPI: apt-get install openmpi-bin (and libopenmpi-dev to build chorus with MPI)\n";
    return kNotFound;
  }
  // A program named with a path must exist here (mpirun's own error for it is obscure); a bare
  // name is looked up by mpirun on every host.
  if (o.program[0].find('/') != std::string::npos && !launch::find_executable(o.program[0], "")) {
    std::cerr << "chorus-run: program " << o.program[0] << " was not found or is not executable\n";
    return kNotFound;
  }
  o.mpirun = *mpirun;
  const std::vector<launch::HostSlots> all_hosts = o.hosts;
  const std::size_t min_hosts = cl.min_hosts ? static_cast<std::size_t>(*cl.min_hosts) : all_hosts.size();
  const std::vector<std::string> base_environment = o.extra_environment;
  for (int attempt = 0;; ++attempt) {
    // Each start runs on the hosts that answer now (at least --min-hosts of them), -np following
    // their slots when that changes.
    if (!all_hosts.empty() && cl.check_hosts) {
      o.hosts = answering_hosts(all_hosts, rsh_agent(cl));
      if (o.hosts.size() < min_hosts) {
        std::cerr << "chorus-run: " << o.hosts.size() << " of " << all_hosts.size() << " hosts answer, fewer than "
                  << (cl.min_hosts ? "--min-hosts " + std::to_string(min_hosts) : std::string("all of them"))
                  << "; not starting. Check the host names, that '" << rsh_agent(cl)
                  << " HOST true' works without a password prompt, and the network; or use --no-host-check"
                  << (cl.min_hosts ? "" : " or --min-hosts") << ".\n";
        return kHostsUnreachable;
      }
      if (o.hosts.size() < all_hosts.size()) {
        o.num_processes = 0;
        for (const auto& h : o.hosts) o.num_processes += h.slots;
        std::cerr << "chorus-run: starting on the " << o.hosts.size() << " hosts that answer ("
                  << launch::format_host_spec(o.hosts) << "), " << o.num_processes << " processes\n";
      }
    }
    o.extra_environment = base_environment;
    o.extra_environment.push_back("CHORUS_RESTART_COUNT=" + std::to_string(attempt));
    launch::ChildExit job;
    int status = 0;
    if (!wrap) {
      job = launch::run_child(launch::build_mpirun_argv(o), {.parent_death_signal = SIGTERM, .shares_terminal = true});
      status = job.status();
    } else {
      status = run_wrapped_job(o, cl, status_dir, job);
    }
    if (status == 0 || attempt >= cl.max_restarts) return status;
    if (job.stop_signal != 0) {
      std::cerr << "chorus-run: not restarting: chorus-run was asked to stop (signal " << job.stop_signal << ")\n";
      return status;
    }
    std::cerr << "chorus-run: the job failed (exit status " << status << "); restart " << attempt + 1 << " of "
              << cl.max_restarts << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    launch::print_error("chorus-run", e.what());
    return 1;
  }
}
