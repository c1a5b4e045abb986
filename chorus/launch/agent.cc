#include <chorus/launch/agent.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>

#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>
#include <chorus/launch/agent_store.h>
#include <chorus/launch/worker_group.h>

extern char** environ;

namespace chorus::launch {
namespace {

using internal::str_cat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};       // the longest a signal or a worker's end waits to be seen
constexpr milliseconds kStorePoll{250};  // how often the agents' store is read while workers run
constexpr milliseconds kConnectSlice{1000};
// The longest one call to the agents' store waits for its answer (a host that vanished without a
// reset): then the store counts as lost.
constexpr milliseconds kStoreAnswer{10000};
// How long node 0's agent keeps serving the agents' store for the others after a stop signal
// before they started workers (so that they read why).
constexpr milliseconds kLeaveAfterStop{2000};

std::string join_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

// How one attempt ended on this node.
struct Outcome {
  enum Kind { kSucceeded, kFailed, kStopped } kind = kSucceeded;
  int status = 0;        // the agent's exit status if this is the last attempt
  bool restart = false;  // the job decided to start again
};

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o), group_{o.node_rank, o.nnodes} {}
  int run();

 private:
  bool connect();
  std::optional<int> join(int attempt);
  Outcome run_attempt(int attempt);
  // `decided`: the job's decision, which this agent does not report again: read from the store
  // (another node's report), or — `found_here` — one this agent reached itself (a silent node,
  // already reported; the store lost, nobody to tell).
  Outcome end_attempt(WorkerGroup& group, int attempt, const std::vector<RankExit>& failed,
                      const std::optional<AgentStore::Decision>& decided, bool found_here = false);
  std::vector<WorkerSpec> worker_specs(const RdzvEndpoint& endpoint, int attempt) const;
  std::string ranks_of_node() const {
    const int first = group_.rank * o_.nproc_per_node;
    return o_.nproc_per_node == 1 ? str_cat("rank ", first)
                                  : str_cat("ranks ", first, "..", first + o_.nproc_per_node - 1);
  }

  const AgentOptions& o_;
  SignalIntake intake_;  // first: the store server's thread inherits the mask
  std::unique_ptr<collective::TcpStoreServer> server_;
  std::unique_ptr<collective::TcpStoreServer> worker_server_;  // node 0: the workers' store (agent.h)
  std::unique_ptr<AgentStore> agents_;
  int stop_signal_ = 0;
  NodeGroup group_;  // this node among the current attempt's members
};

int Agent::run() {
  try {
    if (o_.nnodes > 1 && !connect()) return 128 + stop_signal_;
    for (int attempt = 0;; ++attempt) {
      if (agents_)
        if (const auto status = join(attempt)) return *status;
      const Outcome out = run_attempt(attempt);
      if (out.kind == Outcome::kFailed && out.restart) {
        std::cerr << "chorus-run: restart " << attempt + 1 << " of " << o_.max_restarts << "\n";
        continue;
      }
      // Node 0 serves the others until they have read the end (not long after a stop signal).
      if (agents_)
        agents_->leave(out.kind == Outcome::kStopped ? kLeaveAfterStop : o_.failure_grace + std::chrono::seconds(5));
      return out.status;
    }
  } catch (const Error& e) {
    std::cerr << "chorus-run: " << e.what() << "\n";
    if (agents_) agents_->leave(milliseconds(0));
    return 1;
  }
}

// The agents' store: node 0 serves it, every agent (node 0 too) registers there. The first contact
// is retried in slices so that a stop signal is taken while node 0 is awaited.
bool Agent::connect() {
  const RdzvEndpoint& ep = *o_.endpoint;
  const int port = agent_store_port(ep);
  if (o_.node_rank == 0) {
    worker_server_ = std::make_unique<collective::TcpStoreServer>(ep.port, "0.0.0.0");
    server_ = std::make_unique<collective::TcpStoreServer>(port, "0.0.0.0");
  }
  const std::string host = o_.node_rank == 0 ? "127.0.0.1" : ep.host;
  auto store = std::make_shared<collective::TcpStore>(
      host, port, collective::TcpStoreOptions{.connect_timeout = kConnectSlice, .timeout = kStoreAnswer});
  agents_ = std::make_unique<AgentStore>(store, o_.node_rank, o_.nnodes, o_.min_nodes);
  const std::string job = str_cat("nnodes=", o_.elastic() ? str_cat(o_.min_nodes, ":") : std::string(), o_.nnodes,
                                  " nproc_per_node=", o_.nproc_per_node, " max_restarts=", o_.max_restarts);
  const auto deadline = Clock::now() + o_.rdzv_timeout;
  for (;;) {
    try {
      agents_->register_node(job, o_.rdzv_timeout);
      return true;
    } catch (const UnavailableError& e) {
      if (Clock::now() >= deadline)
        throw UnavailableError(str_cat("node ", o_.node_rank, ": the agent of node 0 did not answer at ", host, ":",
                                       port, " within --rdzv-timeout ", o_.rdzv_timeout.count(),
                                       " s (is chorus-run --node-rank 0 running there with the same "
                                       "--rdzv-endpoint? the agents' store is on the endpoint's port + 1): ",
                                       e.message()));
    }
    if (const int sig = intake_.wait(kTick); SignalIntake::is_stop(sig)) {
      stop_signal_ = sig;
      return false;
    }
  }
}

// The barrier before `attempt` (agent_store.h). nullopt: the attempt's members are known (group_
// is this node's place among them); else the agent's exit status (told to stop, another agent
// ended the job meanwhile, or the attempt started without this node).
std::optional<int> Agent::join(int attempt) {
  agents_->arrive(attempt);
  const auto deadline = Clock::now() + o_.rdzv_timeout;
  std::optional<std::vector<int>> members;
  while (!(members = agents_->members(attempt, o_.rdzv_last_call))) {
    if (Clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (int n : agents_->missing(attempt)) missing.push_back(std::to_string(n));
      throw DeadlineExceededError(
          str_cat("node(s) ", join_list(missing), " did not join attempt ", attempt, " within --rdzv-timeout ",
                  o_.rdzv_timeout.count(), " s (",
                  o_.elastic() ? str_cat("fewer than the least ", o_.min_nodes, " of ", o_.nnodes, " nodes; ") : "",
                  agents_->store().describe(), "); not starting the workers"));
    }
    if (const int sig = intake_.wait(kTick); SignalIntake::is_stop(sig)) {
      stop_signal_ = sig;
      agents_->report_failure(
          attempt, false, str_cat("node ", o_.node_rank, ": chorus-run was asked to stop (", signal_name(sig), ")"));
      agents_->leave(kLeaveAfterStop);
      return 128 + sig;
    }
    if (const auto d = agents_->decision(attempt); d.kind == AgentStore::Decision::kFail) {
      std::cerr << "chorus-run: another node reported: " << d.what << "\n";
      agents_->leave(kLeaveAfterStop);
      return 1;
    }
  }
  const auto me = std::find(members->begin(), members->end(), o_.node_rank);
  if (me == members->end()) {
    std::cerr << "chorus-run: node " << o_.node_rank << " came too late: attempt " << attempt
              << " started without it (node 0 closed the rendezvous --rdzv-last-call " << o_.rdzv_last_call.count()
              << " s after the least " << o_.min_nodes << " nodes had joined)\n";
    return 1;
  }
  group_ = {static_cast<int>(me - members->begin()), static_cast<int>(members->size())};
  if (group_.size < o_.nnodes) {
    std::vector<std::string> absent;
    for (int n = 0; n < o_.nnodes; ++n)
      if (std::find(members->begin(), members->end(), n) == members->end()) absent.push_back(std::to_string(n));
    std::cerr << "chorus-run: attempt " << attempt << " goes on with " << group_.size << " of " << o_.nnodes
              << " nodes (without node(s) " << join_list(absent) << "): this is node " << o_.node_rank
              << " as group rank " << group_.rank << "\n";
  }
  return std::nullopt;
}

std::vector<WorkerSpec> Agent::worker_specs(const RdzvEndpoint& endpoint, int attempt) const {
  std::vector<std::string> base;
  for (char** e = environ; e && *e; ++e) base.emplace_back(*e);
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < o_.nproc_per_node; ++local)
    specs.push_back({std::to_string(group_.rank * o_.nproc_per_node + local), o_.program,
                     worker_environment(base, o_, endpoint, local, attempt, group_)});
  return specs;
}

Outcome Agent::run_attempt(int attempt) {
  const RdzvEndpoint endpoint = o_.endpoint ? *o_.endpoint : RdzvEndpoint{"127.0.0.1", free_local_port()};
  if (agents_)
    std::cerr << "chorus-run: node " << o_.node_rank << " of " << o_.nnodes << ": starting " << ranks_of_node()
              << " of " << group_.size * o_.nproc_per_node << " (attempt " << attempt << ", rendezvous at "
              << endpoint.host << ":" << endpoint.port << ")\n";
  WorkerGroup group(worker_specs(endpoint, attempt));
  std::vector<RankExit> failed;
  bool done_reported = false;
  auto next_poll = Clock::now();
  for (;;) {
    const int sig = intake_.wait(kTick);
    if (SignalIntake::is_stop(sig)) {
      stop_signal_ = sig;
      return end_attempt(group, attempt, {}, std::nullopt);
    }
    if (sig != 0 && sig != SIGCHLD) group.signal(sig);  // SIGUSR1, SIGUSR2, SIGCONT
    for (auto& e : group.reap())
      if (!e.ok()) failed.push_back(std::move(e));
    if (!failed.empty()) return end_attempt(group, attempt, failed, std::nullopt);
    if (group.running() == 0 && !agents_) return {Outcome::kSucceeded, 0, false};
    if (!agents_ || Clock::now() < next_poll) continue;
    next_poll = Clock::now() + kStorePoll;
    try {
      if (group.running() == 0 && !done_reported) {
        agents_->report_done(attempt);
        done_reported = true;
      }
      const auto d = agents_->decision(attempt);
      if (d.kind == AgentStore::Decision::kDone) return {Outcome::kSucceeded, 0, false};
      if (d.kind != AgentStore::Decision::kRunning) return end_attempt(group, attempt, {}, d);
      const auto silent = agents_->beat(o_.failure_grace + std::chrono::seconds(10));
      if (!silent.empty()) {
        std::vector<std::string> nodes;
        for (int n : silent) nodes.push_back(std::to_string(n));
        const std::string what =
            str_cat("the agent of node(s) ", join_list(nodes), " has not been heard from for ",
                    (o_.failure_grace + std::chrono::seconds(10)).count(), " s (its host may be down)");
        // A restart goes on without it when the job is elastic, else waits for it (--rdzv-timeout).
        const bool restart = attempt < o_.max_restarts;
        agents_->report_failure(attempt, restart, what);
        return end_attempt(
            group, attempt, {},
            AgentStore::Decision{restart ? AgentStore::Decision::kRestart : AgentStore::Decision::kFail, what},
            /*found_here=*/true);
      }
    } catch (const Error& e) {
      std::cerr << "chorus-run: node " << o_.node_rank << " lost the agents' store: " << e.what() << "\n";
      agents_.reset();  // nobody to tell: end here, without a restart
      return end_attempt(group, attempt, {}, AgentStore::Decision{AgentStore::Decision::kFail, e.what()},
                         /*found_here=*/true);
    }
  }
}

// Stops what still runs, reports, and (for a local failure or stop) tells the other agents.
Outcome Agent::end_attempt(WorkerGroup& group, int attempt, const std::vector<RankExit>& failed,
                           const std::optional<AgentStore::Decision>& decided, bool found_here) {
  const bool remote = decided.has_value() && !found_here;  // another node's report
  std::string why;
  if (stop_signal_ != 0)
    why = str_cat("chorus-run was asked to stop (", signal_name(stop_signal_), ")");
  else if (!failed.empty())
    why = failed.front().describe() + (failed.size() > 1 ? str_cat(" (and ", failed.size() - 1, " more)") : "");
  else
    why = decided->what;
  std::vector<std::string> killed;
  auto stopped = group.stop(o_.failure_grace, stop_signal_ != 0 ? stop_signal_ : SIGTERM, &killed);
  // In rank order (the ranks are this agent's numbers), not the order they happened to end in.
  std::sort(stopped.begin(), stopped.end(),
            [](const RankExit& a, const RankExit& b) { return std::stoi(a.rank) < std::stoi(b.rank); });
  std::sort(killed.begin(), killed.end(),
            [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); });
  for (const auto& f : failed) std::cerr << "chorus-run: " << f.describe() << "\n";
  if (!stopped.empty()) {
    std::vector<std::string> ranks;
    for (const auto& s : stopped) ranks.push_back(s.rank);
    // How they were stopped: SIGTERM, or the signal chorus-run got (already named in `why`).
    std::string how = stop_signal_ != 0 ? "" : "SIGTERM";
    if (!killed.empty())
      how += str_cat(how.empty() ? "" : "; ", "SIGKILL after --failure-grace ", o_.failure_grace.count(),
                     " s: ", join_list(killed));
    std::cerr << "chorus-run: stopped rank" << (ranks.size() == 1 ? " " : "s ") << join_list(ranks) << " because "
              << (remote ? "another node reported: " : "") << why << (how.empty() ? "" : " (" + how + ")") << "\n";
  } else if (remote) {
    std::cerr << "chorus-run: another node reported: " << why << "\n";
  }
  Outcome out{stop_signal_ != 0 ? Outcome::kStopped : Outcome::kFailed, 1, false};
  if (stop_signal_ != 0) {
    out.status = 128 + stop_signal_;
  } else if (!failed.empty()) {
    out.status = failed.front().status();
    out.restart = attempt < o_.max_restarts;
  } else {
    out.restart = decided->kind == AgentStore::Decision::kRestart;
  }
  if (agents_ && !decided) {
    try {
      agents_->report_failure(attempt, out.restart, str_cat("node ", o_.node_rank, ": ", why));
    } catch (const Error& e) {
      std::cerr << "chorus-run: cannot tell the other agents (" << e.what() << "); not restarting\n";
      out.restart = false;
    }
  }
  if (out.restart) std::cerr << "chorus-run: the job failed (" << why << ")\n";
  return out;
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHORUS_REQUIRE(fd >= 0, UnavailableError, "cannot make a socket to find a free port: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  CHORUS_REQUIRE(ok, UnavailableError, "cannot bind 127.0.0.1:0 to find a free port: ", std::strerror(err));
  return ntohs(addr.sin_port);
}

int run_agent(const AgentOptions& options) {
  validate_agent_options(options);
  Agent agent(options);
  return agent.run();
}

}  // namespace chorus::launch
