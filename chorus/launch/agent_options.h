// What chorus-run needs to run a job without MPI, torchrun style (launch/agent.h runs it): how many
// nodes (agents) the job has, how many workers this node starts, which node this is, where the job
// meets, and what each worker is told. Pure functions: every rule here is unit-tested without
// starting a process.
//
//   chorus::launch::AgentOptions o;
//   o.nnodes = 2;
//   o.nproc_per_node = 4;
//   o.node_rank = 1;
//   o.endpoint = chorus::launch::parse_rdzv_endpoint("10.0.0.1:29500");
//   o.program = {"./train"};
//   chorus::launch::validate_agent_options(o);
//   auto env = chorus::launch::worker_environment(base, o, *o.endpoint, /*local_rank=*/2, /*attempt=*/0);
//   // ... MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 RANK=6 WORLD_SIZE=8 LOCAL_RANK=2 ...
//
// The rules (docs/launch.md, "Without MPI", explains them to users):
//   - 1 <= nnodes, 1 <= nproc_per_node, nnodes * nproc_per_node <= kMaxProcesses (mpirun_command.h);
//     0 <= node_rank < nnodes.
//   - The endpoint is HOST:PORT: HOST follows mpirun_command.h's host-name rule without "user@"
//     (IPv6 literals are not supported), PORT is 1..65535. Worker rank 0 serves the workers' store
//     there (collective/store/store_rendezvous.h). With nnodes > 1 the endpoint is required and the
//     agent of node 0 also serves the agents' store on PORT + 1 (agent_store.h), so PORT <= 65534.
//     With nnodes = 1 it may be left out: 127.0.0.1 and a free port (chosen by the agent).
//   - 0 <= max_restarts <= kMaxRestarts (run_command_line.h); failure_grace and rdzv_timeout >= 1 s;
//     min_nodes is 0 or 1..nnodes; rdzv_last_call >= 0 s.
//   - extra_environment entries are NAME=VALUE (NAME: [A-Za-z_][A-Za-z0-9_]*), set in every worker; a
//     bare NAME is allowed and changes nothing (workers inherit this process's environment).
//   - program is non-empty.
// Errors: InvalidArgumentError naming the flag (--nnodes, --node-rank, --rdzv-endpoint, ...), the
// value seen and what is valid. Thread-safe: pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::launch {

struct RdzvEndpoint {
  std::string host;
  int port = 0;
  bool operator==(const RdzvEndpoint&) const = default;
};

// "host:port" → {host, port}. InvalidArgumentError (naming --rdzv-endpoint and the text) for a
// missing or empty host, a missing port, a port that is not 1..65535, or an IPv6 literal.
RdzvEndpoint parse_rdzv_endpoint(std::string_view text);

struct AgentOptions {
  int nnodes = 1;          // --nnodes: agents in the job, one per node (MAX of MIN:MAX)
  int min_nodes = 0;       // --nnodes MIN:MAX's MIN (or --min-hosts); 0: every node, nnodes
  int nproc_per_node = 1;  // --nproc-per-node: workers this agent starts
  int node_rank = 0;       // --node-rank: this agent's node, 0..nnodes-1
  // --rdzv-endpoint; nullopt: 127.0.0.1 and a free port (nnodes = 1 only).
  std::optional<RdzvEndpoint> endpoint;
  int max_restarts = 0;                        // --max-restarts
  std::chrono::seconds failure_grace{30};      // --failure-grace: SIGTERM → SIGKILL
  std::chrono::seconds rdzv_timeout{300};      // --rdzv-timeout: how long agents wait for each other
  std::chrono::seconds rdzv_last_call{30};     // --rdzv-last-call: elastic, the wait for the rest
  std::vector<std::string> extra_environment;  // NAME=VALUE set in every worker (-x, --collective-timeout)
  std::vector<std::string> program;            // the program and its arguments (PATH searched)
  int world_size() const { return nnodes * nproc_per_node; }
  bool elastic() const { return min_nodes != 0 && min_nodes < nnodes; }
};

// This node's place among the members of one attempt (agent_store.h): its group rank (position
// among them) and their number. Without elastic nodes: node_rank of nnodes.
struct NodeGroup {
  int rank = 0;
  int size = 1;
};

// Throws InvalidArgumentError for any rule above.
void validate_agent_options(const AgentOptions& options);

// The port of the agents' store (node 0's agent serves it): the endpoint's port + 1.
int agent_store_port(const RdzvEndpoint& endpoint);

// The variables a worker gets, set on top of `base` (the agent's own environment as NAME=VALUE
// entries, e.g. from environ; entries naming a variable set here are dropped):
//   MASTER_ADDR, MASTER_PORT         the endpoint
//   RANK                             group.rank * nproc_per_node + local_rank
//   WORLD_SIZE                       group.size * nproc_per_node
//   LOCAL_RANK, LOCAL_WORLD_SIZE     local_rank, nproc_per_node
//   GROUP_RANK, GROUP_WORLD_SIZE     group.rank, group.size
// (group: nullopt → {node_rank, nnodes}; an elastic attempt's place among its members)
//   TORCHELASTIC_RESTART_COUNT       attempt (also CHORUS_RESTART_COUNT, as under mpirun)
//   TORCHELASTIC_MAX_RESTARTS        max_restarts
//   TORCHELASTIC_USE_AGENT_STORE     True with nnodes > 1 (node 0's agent serves the store), else False
// then each NAME=VALUE of extra_environment (one naming a variable above replaces its value there).
// The launcher variables of an enclosing MPI job
// (OMPI_COMM_WORLD_*, PMI_RANK, PMI_SIZE) are dropped: distribute/cluster_resolver.h would
// prefer them to the torchrun variables. Order: base's, then the list above, then the extras.
std::vector<std::string> worker_environment(const std::vector<std::string>& base, const AgentOptions& options,
                                            const RdzvEndpoint& endpoint, int local_rank, int attempt,
                                            std::optional<NodeGroup> group = std::nullopt);

}  // namespace chorus::launch
