// Cluster resolution (tf.distribute.cluster_resolver): who the workers of a multi-worker job are
// and which one this process is. MultiWorkerMirroredStrategy reads it; programs may too (e.g. to
// let only the chief write logs).
//
//   auto r = chorus::distribute::ClusterResolver::from_environment();
//   std::cout << "worker " << r.worker_index() << " of " << r.num_workers()
//             << (r.is_chief() ? " (chief)" : "") << ", local rank " << r.local_rank() << "\n";
//
// Sources, in the order from_environment() tries them:
//   1. TF_CONFIG (launchers that are not MPI; TF's TFConfigClusterResolver), a JSON object:
//        {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
//         "task": {"type": "worker", "index": 0}}
//      Jobs other than "chief" and "worker" (ps, evaluator) are kept in cluster_spec() but are not
//      workers. Worker order: the chief (if any) is worker 0, then "worker" 0..n-1 — so with a
//      chief, task {"worker", i} is worker_index i + 1 (TF's numbering). local_rank/local_size count
//      the workers whose address has the same host part as this task's.
//   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (MPICH/Slurm PMI:
//      PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/MPI_LOCALNRANKS). Worker index = rank.
//   3. torchrun's variables (PyTorch's launchers, Kubernetes operators), when RANK or WORLD_SIZE is
//      set: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (both optional: 0 of 1), MASTER_ADDR
//      and MASTER_PORT (required when WORLD_SIZE > 1: the store's address), and
//      TORCHELASTIC_RESTART_COUNT (optional: the restart attempt), TORCHELASTIC_USE_AGENT_STORE
//      (optional: True when the launcher's agent serves the store). Worker index = RANK.
//   4. MPI itself, when it is initialized (MPI_Comm_rank/size of MPI_COMM_WORLD; local rank from
//      MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)).
//   5. Nothing: one worker, index 0 ("single process").
// The chief is worker 0 (task type "chief", or rank 0 under MPI and torchrun), as in TF.
// TF_CONFIG together with RANK/WORLD_SIZE is accepted only when they agree with it (worker index
// and number of workers).
//
// Where the store is (store_address(): the rendezvous without MPI, collective/store/
// store_rendezvous.h): under TF_CONFIG the chief's address (worker 0's when there is no chief) —
// its port is where the chief serves the store; under torchrun MASTER_ADDR:MASTER_PORT; none under
// MPI or for one process. store_rendezvous_options() turns a resolver into the rendezvous's options.
//
// Errors (InvalidArgumentError, naming the variable and what is valid): TF_CONFIG that is not
// JSON names the byte position, line and column ("expected ':' at position 17 (line 1, column
// 18)"); a TF_CONFIG without "cluster", with a task type missing from the cluster, an index out of
// range, a duplicate address; OMPI_/PMI_ variables that are not integers or are inconsistent
// (rank >= size, local_rank >= local_size); the same for torchrun's, a MASTER_PORT that is missing
// (WORLD_SIZE > 1) or not a port 1..65535, an empty MASTER_ADDR; RANK/WORLD_SIZE that disagree
// with TF_CONFIG. store_rendezvous_options: no store address (MPI, or a TF_CONFIG chief address
// without a valid port).
//
// Thread-safety: a ClusterResolver is a value; the factories only read the environment (through
// the lookup function, env::get by default) and, for from_mpi(), call MPI under no lock — call them
// before other threads use MPI.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/collective/store/store_rendezvous.h>

namespace chorus::distribute {

// Where the rendezvous store is served: "10.0.0.1" and 29500.
struct StoreAddress {
  std::string host;
  int port = 0;
  std::string to_string() const;  // "10.0.0.1:29500", "[fe80::1]:29500"
};

// Job name → task addresses in task order (TF's ClusterSpec). Under MPI the addresses are
// "mpi:rank<N>" (MPI does not tell ports); under TF_CONFIG they are the JSON's strings.
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;
  int num_tasks(const std::string& job) const;
  // {"chief": [...], "worker": [...]} as JSON-ish text for messages and logs.
  std::string to_string() const;
};

// Reads an environment variable: nullopt when unset. Tests pass fakes.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;

class ClusterResolver {
 public:
  // One worker, index 0, local rank 0 of 1.
  ClusterResolver();

  // Tries TF_CONFIG, the MPI launcher's variables, initialized MPI, then one worker (see above).
  static ClusterResolver from_environment(const EnvLookup& env = {});
  // Parses a TF_CONFIG value. InvalidArgumentError for bad JSON (with its line and column), a key
  // repeated in one object, or bad content (naming the field).
  static ClusterResolver from_tf_config(std::string_view json);
  // From OMPI_COMM_WORLD_* (or PMI_*) variables; nullopt when no launcher variables are set.
  static std::optional<ClusterResolver> from_mpi_launcher(const EnvLookup& env = {});
  // From torchrun's variables (RANK, WORLD_SIZE, ...; see above); nullopt when neither RANK nor
  // WORLD_SIZE is set.
  static std::optional<ClusterResolver> from_torchrun(const EnvLookup& env = {});
  // From MPI_COMM_WORLD. FailedPreconditionError when MPI is not initialized (create an
  // collective::MpiEnvironment first); UnavailableError in a build without MPI.
  static ClusterResolver from_mpi();

  // "TF_CONFIG", "Open MPI environment", "PMI environment", "torchrun environment", "MPI",
  // "single process".
  const std::string& source() const { return source_; }
  const ClusterSpec& cluster_spec() const { return spec_; }
  // TF's task_type / task_id: "worker" or "chief" (other job names are kept as given).
  const std::string& task_type() const { return task_type_; }
  int task_id() const { return task_id_; }

  // Workers taking part in the strategy (chief + workers) and this process's position among them
  // (-1 when this task is not a worker, e.g. an evaluator).
  int num_workers() const { return num_workers_; }
  int worker_index() const { return worker_index_; }
  bool is_chief() const { return worker_index_ == 0; }
  // Position among the workers on this host, and their count (selects "this process's GPU").
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // The rendezvous store's address (see above); nullopt under MPI and for one process.
  const std::optional<StoreAddress>& store_address() const { return store_address_; }
  // Under TF_CONFIG: the addresses of workers 0..num_workers-1 (chief first); else empty.
  std::vector<std::string> worker_addresses() const;
  // The restart attempt (TORCHELASTIC_RESTART_COUNT; 0 when unset or under other sources).
  int restart_count() const { return restart_count_; }
  // Whether the launcher's agent serves the store (torchrun's TORCHELASTIC_USE_AGENT_STORE=True,
  // set by chorus-run across nodes): then worker 0 connects to it instead of serving it.
  bool agent_serves_store() const { return agent_serves_store_; }

  // "worker 1 of 2 (task worker:1, local rank 1 of 2, from Open MPI environment)".
  std::string to_string() const;

 private:
  std::string source_ = "single process";
  ClusterSpec spec_;
  std::string task_type_ = "worker";
  int task_id_ = 0;
  int num_workers_ = 1;
  int worker_index_ = 0;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::optional<StoreAddress> store_address_;
  int restart_count_ = 0;
  bool agent_serves_store_ = false;
};

// The options of collective::store_rendezvous for this worker: its rank and the world size, the
// store's address, the attempt (restart_count), the workers' addresses under TF_CONFIG, `timeout`.
// InvalidArgumentError when the resolver has no store address (MPI: use the MPI backend; TF_CONFIG
// whose chief address has no valid port) or this task is not a worker (an evaluator).
collective::StoreRendezvousOptions store_rendezvous_options(const ClusterResolver& r,
                                                            std::chrono::milliseconds timeout);

namespace internal {
// True when MPI is initialized and not finalized (false in a build without MPI).
bool mpi_initialized();
}  // namespace internal

}  // namespace chorus::distribute
