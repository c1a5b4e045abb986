// How the agents of one chorus-run job without MPI (launch/agent.h, one per node) agree on when to
// start, restart and stop their workers, through a store (collective/store/store.h) that the agent
// of node 0 serves (a TcpStoreServer on the rendezvous endpoint's port + 1, agent_options.h).
// torchrun's agents do the same through their c10d store.
//
// Keys (all under "chorus-run/"; A is the attempt, N a node rank):
//   node/N            add()ed by the agent of node N when it registers: 1, or more when two agents
//                     were given the same --node-rank
//   job               node 0's "nnodes=.. nproc_per_node=.. max_restarts=.."; every agent compares
//   join/A, join/A/N  the barrier before attempt A: each agent sets join/A/N and add()s join/A
//   members/A         set by node 0's agent when attempt A's rendezvous closes: the nodes in it,
//                     ascending ("0,1,2"); every node once all nnodes joined, or, elastic
//                     (min_nodes < nnodes, torchrun's --nnodes MIN:MAX), those that joined once at
//                     least min_nodes have and `last_call` passed without the rest
//   restart/A         set by an agent whose worker failed in attempt A when restarts are left: what
//                     failed ("node 1: rank 3 exited with status 1")
//   fail/A            the same when none are left: the job ends, non-zero on every node
//   done/A            add()ed by an agent whose workers all exited 0 in attempt A
//   beat/N            add()ed by agent N on every poll: a heartbeat
//   left/N            set by agent N once it has seen the end; node 0's agent serves the store
//                     until every member of the last attempt has left (or `leave_timeout`)
// The protocol: register; then for each attempt A: join (the agents arrive, all workers of A-1
// stopped everywhere before any worker of A starts, so the workers' own rendezvous never meets a
// stale rank 0; node 0 closes the round and lists the members), run the workers while polling
// decision(A); the first failure anywhere writes restart/A or fail/A and every agent stops its
// workers; done/A reaching the number of members ends the job. An attempt's members are numbered
// by their position in members/A (group rank), so a job that lost a node goes on with the others
// renumbered 0..m-1, as mpirun's --min-hosts restarts on the hosts that answer.
//
// Errors: a second agent with the same node rank, or one whose job differs from node 0's →
// InvalidArgumentError naming both; the store's own errors pass through (UnavailableError when
// node 0's agent is gone, DeadlineExceededError, DataLossError: store.h). Values read back are
// bounded by the store (store.h) and cut to kMaxWhatBytes for messages.
//
// Thread-safety: one thread uses an AgentStore.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/collective/store/store.h>

namespace chorus::launch {

class AgentStore {
 public:
  static constexpr std::size_t kMaxWhatBytes = 1024;

  // min_nodes: 0 or nnodes → every node must join each attempt; else 1..nnodes-1 (elastic).
  AgentStore(std::shared_ptr<collective::Store> store, int node_rank, int nnodes, int min_nodes = 0);

  // Claims this node rank, then publishes `job` (node 0) or compares it with node 0's, waiting up
  // to `timeout` for it. See Errors above.
  void register_node(const std::string& job, std::chrono::milliseconds timeout);

  // The barrier before attempt `attempt`: arrive() once, then ask members() until it has a value.
  void arrive(int attempt);
  // Node 0 closes the round when every node has arrived, or (elastic) when at least min_nodes have
  // and `last_call` has passed since it first saw them (its clock, from its first call that saw
  // min_nodes); the others read what node 0 published. nullopt while open. The members, ascending,
  // are then this agent's for decision() and beat(). DataLossError when members/A is not a list
  // of node ranks.
  std::optional<std::vector<int>> members(int attempt, std::chrono::milliseconds last_call);
  // The nodes that have not arrived at `attempt` (for a timeout's message).
  std::vector<int> missing(int attempt);

  // This node's workers failed (`what` says how): restart/A when `restart`, else fail/A.
  void report_failure(int attempt, bool restart, std::string_view what);
  // Every worker of this node exited 0.
  void report_done(int attempt);

  struct Decision {
    enum Kind { kRunning, kRestart, kFail, kDone } kind = kRunning;
    std::string what;  // restart/fail: what failed, as reported
  };
  // What the job decided for `attempt` so far: fail/A, then restart/A, then done/A = the number of
  // its members (members() must have returned them).
  Decision decision(int attempt);

  // A heartbeat of this agent; returns the members whose heartbeat has not moved for `silence` (the
  // clock of each starts at its first sight by this agent, so a slow start is not silence).
  std::vector<int> beat(std::chrono::milliseconds silence);

  // This agent has seen the end. The agent of node 0 then waits until every agent of the last
  // attempt's members (every node before any attempt) has left or
  // `timeout` (it serves the store: leaving earlier would cut the others off). Errors of the store
  // are swallowed: the job is over either way.
  void leave(std::chrono::milliseconds timeout);

  const collective::Store& store() const { return *store_; }

 private:
  std::string key(std::string_view what) const;
  struct Seen {
    std::int64_t value = -1;
    std::chrono::steady_clock::time_point since;
  };
  std::shared_ptr<collective::Store> store_;
  int node_rank_;
  int nnodes_;
  int min_nodes_;
  std::vector<int> members_;   // the current attempt's (every node until members() returned)
  std::map<int, Seen> beats_;  // other nodes' heartbeats
  std::optional<std::chrono::steady_clock::time_point> quorum_since_;  // node 0: min_nodes seen
  int quorum_attempt_ = -1;
};

}  // namespace chorus::launch
