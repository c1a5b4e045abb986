// MultiWorkerMirroredStrategy (tf.distribute.MultiWorkerMirroredStrategy): synchronous training
// over several processes ("workers"), each with one or more local devices. The workers are
// started by mpirun (or chorus-run), or without MPI by anything that sets TF_CONFIG or torchrun's
// variables (Kubernetes operators, torchrun, a shell loop).
//
//   int main() {
//     chorus::collective::MpiEnvironment mpi;                 // under mpirun: MPI outlives the strategy
//     chorus::distribute::MultiWorkerMirroredStrategy strategy;  // cluster from the environment
//     // strategy.num_replicas_in_sync() == workers × local devices; same API as MirroredStrategy
//   }
//   $ mpirun -np 2 ./train
//   $ for r in 0 1; do MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=$r ./train & done
//
// Cluster: options.cluster_resolver, else ClusterResolver::from_environment() (TF_CONFIG, then
// mpirun's variables, then torchrun's, then MPI; distribute/cluster_resolver.h). Create one
// strategy per program, at its start, as TF asks. With more than one worker the transport between
// the processes (distribute/worker_transport.h) is:
//   - MPI when it is initialized (an MpiEnvironment created before the strategy, destroyed after
//     it); the resolver must then agree with MPI_COMM_WORLD (num_workers == size, worker_index ==
//     rank; checked on every worker) → FailedPreconditionError otherwise;
//   - else the store: the workers meet through collective::store_rendezvous at the resolver's
//     store address (rank 0 — the chief — serves a TCP store there: TF_CONFIG's chief address, or
//     MASTER_ADDR:MASTER_PORT), then talk over Gloo (CPU) and NCCL bootstrapped over the store
//     (GPU). The rendezvous blocks until every worker arrived, at most options.timeout
//     (DeadlineExceededError naming the missing ranks). Built without Gloo → UnavailableError
//     (install libgloo-dev, or use mpirun). Under an MPI launcher without MpiEnvironment (no store
//     address) → FailedPreconditionError saying to create one.
// One worker works without MPI or a store.
//
// Local devices (options.devices, else device_policy):
//   kAuto           GPUs when the process sees any (kLocalRankGpu), else kCpu
//   kLocalRankGpu   the logical GPUs carved out of physical GPU (local_rank mod physical GPUs):
//                   one physical GPU per process, split into virtual GPUs if configured so
//   kAllLocalGpus   every logical GPU of this process (one process per host)
//   kCpu            the first cpu_devices_per_worker logical CPU devices (default 1; configure more
//                   with config::set_logical_device_configuration before the strategy)
// Every worker must have the same number of local devices (InvalidArgumentError naming the
// workers). Two workers on one host claiming the same physical GPU (same PCI bus id) are refused
// on every worker before NCCL sees them: InvalidArgumentError naming both ranks, the GPU, the host.
//
// Replicas: replica id in sync group = worker_index × k + local index; PerReplica values hold this
// worker's k replicas. Reduction (cross_device_ops().reason and the INFO line say which, e.g.
// "2 workers x 1 CPU device: Gloo between processes (store at 10.0.0.1:29500)"):
//   CPU devices:  MPI (under mpirun) or Gloo (otherwise) between processes (k = 1), or
//                 hierarchical: shared memory in the process, then MPI or Gloo between the
//                 processes' first replicas (k > 1)
//   GPU devices:  NCCL between processes (unique id over MPI or over the store; k = 1), or
//                 hierarchical: the local GPU group (NCCL / virtual GPU) + NCCL between processes
// implementation forces kRing (MPI under mpirun, Gloo otherwise; CPU devices only) or kNccl (GPU
// devices only): anything else → InvalidArgumentError; NCCL missing from the build →
// UnavailableError.
//
// Variables: created in scope() or run() as MirroredVariables; right after creation each
// variable's initial value is broadcast from the chief (worker 0) to every worker, so all start
// equal even when their initializers were seeded differently. At the start of the first run(), and
// of later runs when variables were created since, the variables not checked yet are compared
// across workers (CRC32C of their bytes, all-gathered): a
// difference → FailedPreconditionError on every worker naming the first differing variable, its
// checksum on the chief and on the differing rank(s).
//
// reduce() and gather() also combine across workers (collectives: every worker calls them, in
// the same order); experimental_distribute_dataset() shards across workers (see
// distributed_dataset.h, AutoShardPolicy); distribute_datasets_from_function passes an
// InputContext with num_input_pipelines = num_workers, input_pipeline_id = worker_index.
//
// Failure: every collective honours options.timeout (default: collective::default_timeout(), i.e.
// CHORUS_COLLECTIVE_TIMEOUT or 300 s). A worker that dies (killed, crashed, host lost) makes the
// others' run() throw UnavailableError naming its rank and host within about a second — the MPI
// backend's peer monitor (collective/mpi/mpi.h, "Failure"), or Gloo's own TCP connections
// (collective/gloo/gloo.h), see its connection close. A worker that
// stops calling the collectives makes them throw DeadlineExceededError naming the missing rank(s)
// within the timeout (or AbortedError naming the rank that failed and why), never a hang. The
// strategy is then unusable across workers (its next run() rebuilds the communicators, which
// times out the same way while a worker is gone; on the store each rebuilt communicator has keys
// of its own): save what you can and exit non-zero; mpirun then ends the job.
//
// End (store only): the destructor first waits for every worker to reach its own destructor (a
// barrier through the store, so that no worker closes its connections under a peer still in its
// last collective), then closes the communicators and leaves the rendezvous; rank 0 keeps serving
// the store until every worker left. Each wait is bounded by options.timeout and skipped once a
// failure was recorded; the destructor never throws (a failure to say goodbye is logged).
//
// Thread-safety: as Strategy. worker_communicator(), reduce(), gather() and the variable checks
// use one process-level communicator: call them from the program's thread, not from replicas.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/distribute/cluster_resolver.h>
#include <chorus/distribute/sharding_options.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

// tf.distribute.experimental.CommunicationImplementation: AUTO, RING (here: MPI), NCCL.
enum class CommunicationImplementation { kAuto, kRing, kNccl };

enum class WorkerDevicePolicy { kAuto, kLocalRankGpu, kAllLocalGpus, kCpu };

class WorkerTransport;  // distribute/worker_transport.h

namespace internal {
// Holds the strategy's transport (the rendezvous, rank 0's store server) in a base listed before
// Strategy: bases are destroyed in reverse order, so the transport outlives the communicators that
// Strategy owns (a Gloo communicator writes failures to the store and must go first).
struct WorkerTransportOwner {
  WorkerTransportOwner();
  ~WorkerTransportOwner();
  std::unique_ptr<WorkerTransport> transport_;
};
}  // namespace internal

struct MultiWorkerMirroredStrategyOptions {
  std::optional<ClusterResolver> cluster_resolver;  // default: ClusterResolver::from_environment()
  std::vector<std::string> devices;                 // this worker's devices; empty: device_policy
  WorkerDevicePolicy device_policy = WorkerDevicePolicy::kAuto;
  int cpu_devices_per_worker = 1;
  CommunicationImplementation implementation = CommunicationImplementation::kAuto;
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;  // for experimental_distribute_dataset
  bool check_variables = true;                                 // the cross-worker checksum at run(); false skips it
  std::chrono::milliseconds timeout = collective::default_timeout();  // every collective / merge_call
  // Defaults of the replicas' all_reduce(op, values) — TF's communication_options= — e.g. gradient
  // compression (distribute/communication_options.h). Its implementation must be kAuto or the
  // local choice (InvalidArgumentError): the cross-process transport is `implementation` above.
  CommunicationOptions communication_options;
  // ZeRO sharding (distribute/sharding_options.h, docs/sharding.md), as MirroredStrategy's: {.stage =
  // 1} partitions the optimizer slots over all workers' replicas (replica r of num_replicas_in_sync()
  // holds shard r, r = worker_offset() + local replica), {.stage = 2} the gradients too, {.stage =
  // 3} the parameters too. Checkpoints gather every worker's shards (every worker saves, in the same
  // order, as always). A value outside 0..3 → InvalidArgumentError at construction.
  ShardingOptions sharding;
  // As MirroredStrategyOptions::overlap_gradient_all_reduce: the gradient all-reduce during the
  // backward pass (docs/overlap.md); nullopt: on CPU devices, on when this host's workers' op
  // threads leave a core free; on GPUs, as MirroredStrategy's within one worker, off across workers
  // (NCCL, until validated on 2+ GPUs).
  std::optional<bool> overlap_gradient_all_reduce;
};

class MultiWorkerMirroredStrategy final : private internal::WorkerTransportOwner, public Strategy {
 public:
  explicit MultiWorkerMirroredStrategy(const MultiWorkerMirroredStrategyOptions& options = {});
  ~MultiWorkerMirroredStrategy() override;

  const ClusterResolver& cluster_resolver() const { return resolver_; }
  bool is_chief() const override { return resolver_.is_chief(); }
  // Checkpoints meet here after the chief's save (core/distribution.h): a barrier of all workers
  // with the strategy's timeout (DeadlineExceededError naming the missing ranks).
  void worker_barrier(std::string_view tag) const override;
  std::int64_t sum_over_workers(std::int64_t local) const override;
  std::vector<double> sum_over_workers(std::vector<double> local) const override;
  // One named count of this worker (e.g. {"training examples", 600}).
  struct WorkerCount {
    std::string name;
    std::int64_t value;  // data::kUnknownCardinality (-2): unknown here, not compared
  };
  // Collective (one small all-gather; every worker passes the same names, in the same order):
  // checks that every worker reports the same counts, so that every worker reaches the same verdict
  // before the first step instead of waiting for a collective to time out. A difference →
  // InvalidArgumentError on every worker: "<what> differ across workers: worker 0: 600 training
  // examples, ...; worker 1: 1000 training examples, ...". A count unknown on some worker is not
  // compared. One worker: nothing happens.
  void check_counts_agree(std::string_view what, const std::vector<WorkerCount>& counts) const;
  int worker_index() const { return resolver_.worker_index(); }
  int num_workers() const { return resolver_.num_workers(); }

  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis = std::nullopt) const override;
  using Strategy::reduce;
  Tensor gather(const PerReplica<Tensor>& value, int axis) const override;
  // Shards by options.auto_shard_policy; the overload takes the policy for this dataset. With
  // several workers and kData/kAuto it is collective: the workers compare their datasets'
  // cardinality (number of global batches, check_counts_agree) and a difference is an
  // InvalidArgumentError on every worker (their steps could not match: fit would wait for the
  // worker with fewer batches until the timeout). Unknown cardinalities are not compared.
  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset) const override;
  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset, AutoShardPolicy policy) const;

  // One participant per worker (rank = worker_index), host tensors, options.timeout; nullptr with
  // one worker. For small control exchanges between runs (PreemptionWatcher uses it).
  collective::Communicator* worker_communicator() const { return worker_comm_.get(); }

 protected:
  std::vector<std::unique_ptr<collective::Communicator>> create_communicators() override;
  void initialize_components(const VariableArgs& args, std::vector<Variable>& components) override;
  void before_run() override;
  Tensor chief_initial_value(const Tensor& value) override;

 private:
  struct Plan;
  static Plan make_plan(const MultiWorkerMirroredStrategyOptions& options);
  MultiWorkerMirroredStrategy(const MultiWorkerMirroredStrategyOptions& options, Plan plan);
  void check_variables_equal();

  ClusterResolver resolver_;
  MultiWorkerMirroredStrategyOptions options_;
  bool gpu_ = false;
  std::unique_ptr<collective::Communicator> worker_comm_;
  std::mutex mu_;  // guards unchecked_ (variables may be created on replica threads)
  std::vector<std::pair<std::string, std::weak_ptr<VariableBase>>> unchecked_;
  bool checked_once_ = false;
};

// --- pieces with no MPI or device dependence, public for tests ---

// This worker's devices under `policy` (see above), from the process's logical devices.
// InvalidArgumentError when the policy cannot be met (no GPU for kLocalRankGpu, too few CPU
// devices for cpu_devices_per_worker), naming what exists.
std::vector<std::string> select_worker_devices(const std::vector<LogicalDevice>& logical, int local_rank,
                                               WorkerDevicePolicy policy, int cpu_devices_per_worker);

// What one worker reported in the creation exchange: its host and the PCI bus ids of the physical
// GPUs its devices live on (one per device; virtual GPUs of one physical GPU repeat it).
struct WorkerGpus {
  int rank = 0;
  std::string host;
  std::vector<std::string> pci_bus_ids;
};
// collective::check_distinct_gpus (collective/gpu_claim.h) over every worker's GPUs, one claim per
// distinct GPU: InvalidArgumentError when two workers on one host use the same GPU: "ranks 0 and 1
// both use GPU 0000:19:00.0 on host node7: NCCL needs one GPU per rank; ...".
void check_unique_gpus(const std::vector<WorkerGpus>& workers);

}  // namespace chorus::distribute
