// chorus-run without MPI, torchrun style: this process is the agent of one node. It starts the
// node's workers itself (launch/worker_group.h), each with torchrun's variables
// (launch/agent_options.h: MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK, ...), which
// distribute/cluster_resolver.h reads; the workers then meet through collective/store's
// rendezvous on the endpoint's port, served by worker rank 0 on one node, and by node 0's agent
// across nodes (TORCHELASTIC_USE_AGENT_STORE=True, as torchrun's agent): the store then outlives
// rank 0, so the others can still record and read why a collective failed after rank 0 died.
//
//   chorus-run --nproc-per-node 2 -- ./train                      # one node
//   chorus-run --nnodes 2 --nproc-per-node 4 --node-rank 0 --rdzv-endpoint h0:29500 -- ./train
//
// One attempt of the job, on this node:
//   - with --nnodes > 1, the agents first meet through the agents' store (launch/agent_store.h,
//     served by node 0's agent on the endpoint's port + 1): every agent arrives before any starts
//     its workers, or DeadlineExceededError after --rdzv-timeout naming the nodes missing;
//   - the workers run; a worker that exits non-zero or is killed is a failure: the agent stops the
//     other local workers (SIGTERM to each one's process group, SIGKILL after --failure-grace),
//     prints one line per failed rank (RankExit::describe, as under mpirun) and one naming the ranks
//     it stopped, and tells the other agents (restart/<attempt> while restarts are left, else
//     fail/<attempt>); an agent that reads either stops its workers the same way;
//   - an agent whose heartbeat stops (--failure-grace + 10 s) fails the attempt the same way;
//   - with restarts left every agent starts attempt + 1 (TORCHELASTIC_RESTART_COUNT and
//     CHORUS_RESTART_COUNT = attempt + 1); otherwise the job ends.
// Elastic (--nnodes MIN:MAX, or --min-hosts MIN, as mpirun's restarts on the hosts that answer):
// each attempt goes ahead with the nodes that joined once at least MIN have and --rdzv-last-call
// passed without the rest; the members are numbered anew by node rank (GROUP_RANK, RANK,
// WORLD_SIZE follow), so a job that lost a host restarts on the others and resumes from its
// checkpoint. A node that arrives after its attempt started ends with status 1, naming why.
// Node 0 serves the stores: the job cannot go on without it.
// The job succeeds when every worker of every node exited 0 in the same attempt.
//
// Signals: SIGTERM, SIGINT, SIGHUP, SIGQUIT to the agent (a Ctrl-C at the terminal included: the
// workers have process groups of their own) are sent on to every worker's group, which gets
// SIGKILL after --failure-grace; the other agents are told (fail/<attempt>) and nothing restarts.
// SIGUSR1, SIGUSR2 and SIGCONT are passed on to the workers.
//
// Exit status: 0 when the job succeeded; the first failed local rank's status (128 + signal for a
// killed one) when a local worker failed and no restart is left; 128 + signal when the agent was
// told to stop; 1 when another node failed the job, when the agents' store was lost, or when the
// agents did not meet (the message names why).
//
// Thread-safety: run_agent is a process's main work: it blocks signals in the calling thread
// (SignalIntake, worker_group.h) and must be called before any other thread is started.
#pragma once

#include <chorus/launch/agent_options.h>

namespace chorus::launch {

// Runs the job as described above and returns the agent's exit status. InvalidArgumentError for
// options that break agent_options.h's rules (before anything starts).
int run_agent(const AgentOptions& options);

// A TCP port that is free on 127.0.0.1 now (bound with port 0, then closed): the single-node
// endpoint's. UnavailableError when no socket can be bound.
int free_local_port();

}  // namespace chorus::launch
