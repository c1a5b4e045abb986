// Strategy: the tf.distribute.Strategy API, shared by MirroredStrategy, OneDeviceStrategy and the
// default strategy (the first two in distribute/mirrored_strategy.h; the default one is get_strategy()
// below, defined in strategy.cc).
//
//   chorus::distribute::MirroredStrategy strategy;               // all logical GPUs, else CPUs
//   chorus::Variable w;
//   {
//     auto scope = strategy.scope();                            // variables become mirrored
//     w = chorus::make_variable({.initial_value = chorus::Tensor::ones({4}), .name = "w"});
//   }
//   auto per_replica = strategy.run([&] {                       // once per replica, concurrently
//     auto* ctx = chorus::get_replica_context();
//     return ctx->all_reduce(chorus::ReduceOp::kSum, w.value());  // this replica's component
//   });
//   chorus::Tensor total = strategy.reduce(chorus::ReduceOp::kSum, per_replica);
//
// Contexts (core/distribution.h): inside scope() the program's thread is in cross-replica
// context; inside run() each replica thread is in its replica context (replica_id_in_sync_group,
// num_replicas_in_sync, all_reduce, all_gather, merge_call), inside a DeviceScope of its device
// and, implicitly, inside the strategy's scope.
//
// Variables created in scope() or inside run() (by layers, optimizers, metrics, users) become
// MirroredVariables (distribute/mirrored_variable.h): one component per replica device, identical
// initial values. Created inside run(), creation is a merge_call: every replica must create the
// same variables in the same order, and they all get the same variable (replica 0's initial value).
//
// Multi-worker strategies (distribute/multi_worker_mirrored_strategy.h): this process runs
// num_local_replicas() of the num_replicas_in_sync() replicas, with replica ids in sync group
// worker_offset() + 0..k-1; PerReplica values, run() results and variable components are this
// process's; reduce() and gather() also combine across workers (collectives).
//
// Errors: entering the scope of a second, different strategy while one is active →
// FailedPreconditionError naming both; run() from inside a replica → FailedPreconditionError; an
// exception in any replica aborts the step's collectives (the other replicas return at once) and
// run() rethrows the root cause; the next run() starts with fresh communicators.
// Thread-safety: scope() and run() are called from the program's thread(s), one run at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/communication_options.h>
#include <chorus/distribute/cross_device_ops.h>
#include <chorus/distribute/distributed_dataset.h>
#include <chorus/distribute/optimizer_offload.h>
#include <chorus/distribute/per_replica.h>

namespace chorus::distribute {

class ReplicaPool;
class StrategyReplicaContext;
namespace internal {
class MergeBarrier;
}

// What distribute_datasets_from_function passes to the user's function (tf.distribute.InputContext).
struct InputContext {
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;
  // global_batch_size / num_replicas_in_sync; InvalidArgumentError unless divisible.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;
};

class Strategy : public DistributionStrategy {
 public:
  ~Strategy() override;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  std::string name() const override { return name_; }
  // The step policy for a one-replica strategy's updates in cross-replica context (inside
  // scope(), outside run); each replica's own is its StrategyReplicaContext's.
  StepPolicy& step_policy() override;
  // All replicas of all workers (MultiWorkerMirroredStrategy: workers × local devices).
  int num_replicas_in_sync() const override { return static_cast<int>(devices_.size()) * num_workers_; }
  // This process's replica devices, in local replica order.
  std::vector<std::string> replica_devices() const override { return devices_; }
  // Replicas of this process; replica ids in sync group are worker_offset() + 0..num_local_replicas()-1.
  int num_local_replicas() const { return static_cast<int>(devices_.size()); }
  int worker_offset() const { return worker_index_ * num_local_replicas(); }
  // Which reduction the replicas use and why (never kAuto).
  const CrossDeviceChoice& cross_device_ops() const { return choice_; }
  // Timeout of every collective and merge_call of this strategy.
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The defaults of StrategyReplicaContext::all_reduce(op, values): the strategy options'
  // communication_options (distribute/communication_options.h), compression always set.
  const CommunicationOptions& communication_options() const { return communication_options_; }
  // The ZeRO stage of this strategy's sharding (distribute/sharding_options.h): MirroredStrategy's
  // and MultiWorkerMirroredStrategy's options.sharding.stage; 0 (no sharding) for the others.
  int sharding_stage() const { return sharding_stage_; }
  // ShardingOptions::offload_optimizer_state (stages 1-3): the optimizer slots' shards live in host
  // memory and the update runs there (distribute/optimizer_offload.h). false for the others.
  bool offloads_optimizer_state() const { return offload_optimizer_state_; }
  // Stage 3's gathers run ahead by this many layers (ShardingOptions::prefetch_limit; 0: none).
  int prefetch_limit() const { return sharding_stage_ >= 3 ? prefetch_limit_ : 0; }
  // Whether the replicas reduce the gradients during the backward pass (the options'
  // overlap_gradient_all_reduce: all-reduced at ZeRO stage 0 or 1, reduce-scattered at 2 and 3:
  // replica_context.h), and why ("on: requested", "off: the op threads use every core (2 of 2)", ...).
  bool overlaps_gradient_all_reduce() const { return overlap_; }
  const std::string& overlap_reason() const { return overlap_reason_; }
  // With offload: how this process's replicas' offloaded updates got their gradients to the host
  // (distribute/optimizer_offload.h, "Staging"), since the strategy was made.
  OffloadCounters offload_counters() const;
  // What this process's replicas' all-reduces moved (communication_options.h, AllReduceCounters).
  AllReduceCounters all_reduce_counters() const;
  // The same, and sets the counters to zero (call between runs, not while replicas reduce).
  AllReduceCounters read_and_reset_all_reduce_counters();

  // RAII: the calling thread is in this strategy's scope (cross-replica context) until the
  // returned object dies. Re-entering the same strategy's scope (a nested scope(), or
  // Model::build/compile/fit called inside the user's scope) is allowed and changes nothing, as in
  // TF: variables are mirrored once, never a MirroredVariable of MirroredVariables. Entering
  // another strategy's scope while this one is active on the thread → FailedPreconditionError
  // "Mixing different tf.distribute.Strategy objects" (TF: RuntimeError). The default strategy's
  // scope changes nothing, even inside another strategy's (where TF raises the same error).
  class Scope {
   public:
    explicit Scope(Strategy& strategy);
    ~Scope();
    Scope(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;

   private:
    Strategy* strategy_;
    std::unique_ptr<VariableCreatorScope> creator_;
  };
  Scope scope() { return Scope(*this); }

  // fn(args...) once per replica (PerReplica arguments are split by replica). Returns
  // PerReplica<result> (nothing for void). PerReplica values hold this process's replicas only.
  template <typename F, typename... Args>
  auto run(F&& fn, const Args&... args) {
    using R = std::invoke_result_t<F&, const detail::component_t<Args>&...>;
    if constexpr (std::is_void_v<R>) {
      run_replicas([&]([[maybe_unused]] int r) { fn(detail::component(args, r)...); });
    } else {
      std::vector<std::optional<R>> out(static_cast<std::size_t>(num_local_replicas()));
      run_replicas([&](int r) { out[static_cast<std::size_t>(r)].emplace(fn(detail::component(args, r)...)); });
      std::vector<R> values;
      values.reserve(out.size());
      for (auto& o : out) values.push_back(std::move(*o));
      return PerReplica<R>(std::move(values));
    }
  }

  // Cross-replica reduction (tf.distribute.Strategy.reduce). axis unset: elementwise over
  // replicas (MEAN divides by the replica count). axis set: each component is first summed along
  // `axis`, then over replicas; MEAN divides by the total length of `axis` over all replicas, so
  // uneven batches average per example, as TF. The result lives on replica 0's device.
  // Multi-worker strategies also reduce across workers: a collective, every worker must call it.
  virtual Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis = std::nullopt) const;
  // A value that is the same on every replica (e.g. a plain Tensor): SUM → value × replicas.
  Tensor reduce(ReduceOp op, const Tensor& value, std::optional<int> axis = std::nullopt) const;
  // The components concatenated along `axis` in replica order, on replica 0's device (multi-worker:
  // of all workers' replicas, a collective).
  virtual Tensor gather(const PerReplica<Tensor>& value, int axis) const;
  template <typename T>
  std::vector<T> experimental_local_results(const PerReplica<T>& value) const {
    return value.values();
  }

  // The sum of `local` over all worker processes (a collective in multi-worker strategies: every
  // worker must call it; here: `local`). Model::fit uses it for the global batch's row count.
  virtual std::int64_t sum_over_workers(std::int64_t local) const { return local; }
  // The same for a vector of float64 sums, elementwise (Model::fit's and evaluate's metric
  // states: every worker's totals and counts). Every worker passes the same length.
  virtual std::vector<double> sum_over_workers(std::vector<double> local) const { return local; }

  // Splits each global batch of `dataset` across the replicas (see distributed_dataset.h).
  virtual DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset) const;
  // fn(InputContext) builds a dataset of per-replica batches (see distributed_dataset.h).
  virtual DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const InputContext&)>& fn) const;

  // --- for distribute/ internals (MirroredVariable, replica contexts) ---
  // Runs body(r) on every replica in its replica context (the engine behind run()).
  void run_replicas(const std::function<void(int)>& body);
  // The replica context of this strategy on the calling thread, or nullptr.
  StrategyReplicaContext* current_replica_context() const;
  // Creates the variable for `args` as this strategy does (mirrored, or on the one device).
  Variable create_variable(const VariableArgs& args, const NextCreator& next);

 protected:
  // `use_threads`: replicas run on persistent per-replica threads (MirroredStrategy); false:
  // the single replica runs on the calling thread (OneDeviceStrategy, default strategy).
  Strategy(std::string name, std::vector<std::string> devices, CrossDeviceOps requested, bool use_threads,
           std::chrono::milliseconds timeout);
  // For strategies spanning several processes (MultiWorkerMirroredStrategy): `choice` is used as
  // given and no communicators are made — the derived constructor calls make_communicators() once
  // it can (create_communicators() is virtual, so the base constructor cannot call it).
  struct WorkerGroup {
    int num_workers = 1;
    int worker_index = 0;
    CrossDeviceChoice choice;
  };
  Strategy(std::string name, std::vector<std::string> devices, const WorkerGroup& group, bool use_threads,
           std::chrono::milliseconds timeout);
  // Variables of this strategy are MirroredVariables (true) or plain ones on the device (false).
  bool mirrored_variables_ = true;
  // ZeRO stage (sharding_options.h), set by the derived constructor (already validated): at >= 1,
  // ON_WRITE variables created with VariableArgs::shard_over_replicas become ZeroVariables
  // (distribute/zero_variable.h): each worker holds its replicas' shards of the global layout;
  // at 3, trainable floating ON_WRITE variables too (parameters, gathered for each use).
  int sharding_stage_ = 0;
  // Set with sharding_stage_ (validated): slots' shards are created in host memory.
  bool offload_optimizer_state_ = false;
  int prefetch_limit_ = 0;  // ShardingOptions::prefetch_limit, set with sharding_stage_
  // The options' overlap_gradient_all_reduce: as requested; nullopt: on GPU devices, on for virtual
  // GPUs reduced inside one process (the virtual-GPU reduction; `across_processes` false) and off
  // over NCCL (until validated on 2+ GPUs); on CPU devices, on when `processes_on_host` processes
  // like this one leave a core free (their replicas' op threads < the host's cores).
  void set_overlap(std::optional<bool> requested, int processes_on_host = 1, bool across_processes = false);
  // Off, for `reason` (a multi-worker strategy whose other workers do not overlap).
  void turn_overlap_off(std::string reason) {
    overlap_ = false;
    overlap_reason_ = std::move(reason);
  }
  // Validates `options` against this strategy (communication_options.h, "Validation"; `choice_`
  // must be set) and makes them the defaults. InvalidArgumentError naming the strategy.
  void set_communication_options(const CommunicationOptions& options);

  // (Re)builds the per-replica communicators, merge barrier and replica contexts.
  void make_communicators();
  // One communicator per local replica, spanning all num_replicas_in_sync() replicas (rank =
  // worker_offset() + local replica). Default: the in-process group of `choice_`.
  virtual std::vector<std::unique_ptr<collective::Communicator>> create_communicators();
  // Called once a mirrored variable's components exist (each holding its own initial value), in
  // cross-replica context; a multi-worker strategy makes them equal across workers here.
  virtual void initialize_components(const VariableArgs& args, std::vector<Variable>& components) {}
  // Called on the program's thread at the start of every run(), before any replica starts.
  virtual void before_run() {}
  // The initial value a sharded variable takes its shards from (create_sharded, cross-replica
  // context): `value` itself in one process; a multi-worker strategy returns the chief's (a
  // collective: every worker creates the same sharded variables in the same order).
  virtual Tensor chief_initial_value(const Tensor& value) { return value; }
  const std::vector<LogicalDevice>& logical_devices() const { return logical_; }

 private:
  friend class StrategyReplicaContext;
  friend class ReplicaStepPolicy;  // counts offload (counters_)
  Variable create_mirrored(const VariableArgs& args, const NextCreator& next);
  Variable create_sharded(const VariableArgs& args, const NextCreator& next, bool parameter);
  void resolve_devices(std::vector<std::string> devices);

  std::string name_;
  std::vector<std::string> devices_;  // canonical names, replica order
  std::vector<LogicalDevice> logical_;
  CrossDeviceChoice choice_;
  std::chrono::milliseconds timeout_;
  CommunicationOptions communication_options_{.compression = Compression::kNone};
  struct Counters {
    std::atomic<std::int64_t> collectives{0}, bytes{0}, uncompressed_bytes{0}, overlapped{0};
    std::atomic<std::int64_t> offload_staged{0}, offload_copied{0};
  } counters_;
  std::unique_ptr<ReplicaPool> pool_;  // null: run on the calling thread
  std::vector<std::unique_ptr<collective::Communicator>> comms_;
  std::unique_ptr<internal::MergeBarrier> merge_;
  std::vector<std::unique_ptr<StrategyReplicaContext>> contexts_;
  int num_workers_ = 1;
  int worker_index_ = 0;
  bool broken_ = false;  // a step failed: rebuild communicators before the next
  bool overlap_ = false;
  std::string overlap_reason_;
  std::unique_ptr<StepPolicy> cross_replica_policy_;  // made by the first step_policy()
};

// The strategy of the calling thread (tf.distribute.get_strategy()): the innermost scope's or
// run's, else the default strategy (one replica on the default device; run() calls fn directly).
Strategy& get_strategy();

}  // namespace chorus::distribute
