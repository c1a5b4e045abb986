#include <chorus/distribute/strategy.h>

#include <algorithm>
#include <optional>
#include <set>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/placement.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/distributed_dataset.h>
#include <chorus/distribute/merge_barrier.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/optimizer_offload.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/replica_pool.h>
#include <chorus/distribute/step_policy.h>
#include <chorus/distribute/zero_variable.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {

// The default strategy: one replica on the default device, on the calling thread, no scope effect.
class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy()
      : Strategy("DefaultDistributionStrategy", {chorus::get_strategy().replica_devices()[0]}, CrossDeviceOps::kAuto,
                 false, collective::kDefaultTimeout) {
    mirrored_variables_ = false;
  }
};

Strategy* g_default = nullptr;

bool is_default(const Strategy* s) { return s == g_default && s != nullptr; }

// RAII: pushes a strategy on the calling thread's stack (core/distribution.h).
struct PushStrategy {
  explicit PushStrategy(DistributionStrategy* s) { chorus::internal::push_strategy(s); }
  ~PushStrategy() { chorus::internal::pop_strategy(); }
};

}  // namespace

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  CHORUS_REQUIRE(num_replicas_in_sync > 0 && global_batch_size % num_replicas_in_sync == 0, InvalidArgumentError,
                 "The `global_batch_size` ", global_batch_size, " should be divisible by `num_replicas_in_sync` ",
                 num_replicas_in_sync);
  return global_batch_size / num_replicas_in_sync;
}

Strategy::Strategy(std::string name, std::vector<std::string> devices, CrossDeviceOps requested, bool use_threads,
                   std::chrono::milliseconds timeout)
    : name_(std::move(name)), timeout_(timeout) {
  resolve_devices(std::move(devices));
  choice_ = choose_cross_device_ops(logical_, requested);
  if (use_threads) pool_ = std::make_unique<ReplicaPool>(devices_);
  make_communicators();
}

Strategy::Strategy(std::string name, std::vector<std::string> devices, const WorkerGroup& group, bool use_threads,
                   std::chrono::milliseconds timeout)
    : name_(std::move(name)), timeout_(timeout), num_workers_(group.num_workers), worker_index_(group.worker_index) {
  CHORUS_REQUIRE(group.num_workers >= 1 && group.worker_index >= 0 && group.worker_index < group.num_workers,
                 InvalidArgumentError, name_, ": worker ", group.worker_index, " of ", group.num_workers,
                 " is out of range");
  resolve_devices(std::move(devices));
  choice_ = group.choice;
  if (use_threads) pool_ = std::make_unique<ReplicaPool>(devices_);
}

StepPolicy& Strategy::step_policy() {
  if (cross_replica_policy_ == nullptr) cross_replica_policy_ = std::make_unique<ReplicaStepPolicy>(*this, nullptr);
  return *cross_replica_policy_;
}

void Strategy::resolve_devices(std::vector<std::string> devices) {
  CHORUS_REQUIRE(!devices.empty(), InvalidArgumentError, name_, ": no devices");
  std::set<std::string> seen;
  for (const std::string& d : devices) {
    auto ctx = runtime::find(d);  // InvalidArgumentError listing devices when unknown
    CHORUS_REQUIRE(seen.insert(ctx->name()).second, InvalidArgumentError, name_, ": device ", ctx->name(),
                   " is listed twice (one replica per device)");
    devices_.push_back(ctx->name());
    logical_.push_back(ctx->device());
  }
}

Strategy::~Strategy() = default;

void Strategy::set_communication_options(const CommunicationOptions& options) {
  internal::validate_communication_options(options, name_);
  CHORUS_REQUIRE(options.implementation == CrossDeviceOps::kAuto || options.implementation == choice_.ops,
                 InvalidArgumentError, name_, ": communication_options.implementation ",
                 cross_device_ops_name(options.implementation), " differs from the strategy's ",
                 cross_device_ops_name(choice_.ops), " (", choice_.reason,
                 "); choose the implementation with the strategy's own option");
  communication_options_ = options;
  if (!communication_options_.compression) communication_options_.compression = Compression::kNone;
}

OffloadCounters Strategy::offload_counters() const {
  return {counters_.offload_staged.load(), counters_.offload_copied.load()};
}

AllReduceCounters Strategy::all_reduce_counters() const {
  return {counters_.collectives.load(), counters_.bytes.load(), counters_.uncompressed_bytes.load(),
          counters_.overlapped.load()};
}

AllReduceCounters Strategy::read_and_reset_all_reduce_counters() {
  return {counters_.collectives.exchange(0), counters_.bytes.exchange(0), counters_.uncompressed_bytes.exchange(0),
          counters_.overlapped.exchange(0)};
}

std::vector<std::unique_ptr<collective::Communicator>> Strategy::create_communicators() {
  if (num_local_replicas() == 1) return {};
  return make_cross_device_communicators(logical_, choice_);
}

void Strategy::set_overlap(std::optional<bool> requested, int processes_on_host, bool across_processes) {
  overlap_ = false;
  if (requested) {
    overlap_ = *requested;
    overlap_reason_ = overlap_ ? "on: requested" : "off: requested";
    return;
  }
  for (const LogicalDevice& d : logical_) {
    if (d.device_type == "CPU") continue;
    // GPU replicas reduce on each device's side stream (docs/overlap.md). Between virtual GPUs of
    // one GPU in one process it ran bitwise equal to the packed all-reduce and faster, so on: the
    // seed CNN on an H200, 2.74 -> 2.40 ms/step at batch 128 and 4.41 -> 3.92 at 2048
    // (docs/gpu-validation.md, 2026-11-29). Over NCCL (several GPUs, or processes) it has not run
    // yet: only on request.
    if (choice_.ops == CrossDeviceOps::kVirtualGpu && !across_processes) {
      overlap_ = true;
      overlap_reason_ = "on: virtual GPUs of one GPU (measured faster there, docs/overlap.md)";
    } else {
      overlap_reason_ =
          "off: GPUs reducing over NCCL overlap only when requested until validated on 2+ GPUs "
          "(docs/gpu-validation.md)";
    }
    return;
  }
  int threads = 0;
  for (const LogicalDevice& d : logical_) threads += std::max(1, d.intra_op_threads);
  threads *= std::max(1, processes_on_host);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  overlap_ = threads < cores;
  overlap_reason_ = str_cat(overlap_ ? "on" : "off", ": the op threads use ", threads, " of the host's ", cores,
                            " cores", overlap_ ? "" : " (no core left to hide the all-reduce in)");
}

void Strategy::make_communicators() {
  const int n = num_local_replicas();
  contexts_.clear();  // their communication threads use the communicators: they go first
  comms_.clear();
  if (num_replicas_in_sync() > 1) comms_ = create_communicators();
  merge_ = std::make_unique<internal::MergeBarrier>(n, timeout_);
  for (int r = 0; r < n; ++r) contexts_.push_back(std::make_unique<StrategyReplicaContext>(*this, r));
}

Strategy::Scope::Scope(Strategy& strategy) : strategy_(&strategy) {
  if (is_default(strategy_)) return;  // the default strategy's scope changes nothing (as TF)
  DistributionStrategy* current = chorus::internal::current_strategy();
  CHORUS_REQUIRE(current == nullptr || current == strategy_, FailedPreconditionError,
                 "Mixing different tf.distribute.Strategy objects: entering the scope of ", strategy_->name(), " (",
                 strategy_->num_replicas_in_sync(), " replicas) while the scope of ", current ? current->name() : "",
                 " is active; leave that scope first (variables belong to the strategy whose scope created them)");
  chorus::internal::push_strategy(strategy_);
  // Re-entered (a nested scope(), or Model::build/compile/fit inside the user's scope): the
  // outermost entry on this thread — a scope or run()'s replica — already put this strategy's
  // creator on the chain; a second one would mirror each component again (TF: a no-op).
  if (current == strategy_) return;
  Strategy* s = strategy_;
  creator_ = std::make_unique<VariableCreatorScope>(
      [s](const VariableArgs& args, const NextCreator& next) { return s->create_variable(args, next); });
}

Strategy::Scope::Scope(Scope&& other) noexcept : strategy_(other.strategy_), creator_(std::move(other.creator_)) {
  other.strategy_ = nullptr;
}

Strategy::Scope::~Scope() {
  if (strategy_ == nullptr || is_default(strategy_)) return;
  creator_.reset();
  chorus::internal::pop_strategy();
}

StrategyReplicaContext* Strategy::current_replica_context() const {
  auto* c = dynamic_cast<StrategyReplicaContext*>(chorus::get_replica_context());
  return c != nullptr && &c->owner() == this ? c : nullptr;
}

void Strategy::run_replicas(const std::function<void(int)>& body) {
  if (is_default(this)) {
    body(0);  // TF: the default strategy's run just calls fn
    return;
  }
  CHORUS_REQUIRE(current_replica_context() == nullptr, FailedPreconditionError, name_,
                 ".run called from inside one of its replicas: call the step function directly instead");
  if (broken_) {
    make_communicators();  // the last step failed: its communicators are aborted for good
    broken_ = false;
  }
  try {
    before_run();
  } catch (...) {
    broken_ = true;  // a failed check may have aborted the cross-worker communication
    throw;
  }
  auto replica = [this, &body](int r) {
    // Without a pool the replica runs on the calling thread, which may be inside this strategy's
    // scope: its creator is then on the chain already (see Scope::Scope).
    const bool has_creator = chorus::internal::current_strategy() == this;
    PushStrategy push(this);
    chorus::internal::ReplicaContextScope ctx(contexts_[static_cast<std::size_t>(r)].get());
    std::optional<VariableCreatorScope> creator;
    if (!has_creator) {
      creator.emplace(
          [this](const VariableArgs& args, const NextCreator& next) { return create_variable(args, next); });
    }
    body(r);
    // A reduction nobody took, and what the communication thread still has (its error is the step's).
    contexts_[static_cast<std::size_t>(r)]->end_step();
  };
  try {
    if (!pool_) {
      DeviceScope device(devices_[0]);
      replica(0);
    } else {
      pool_->run(replica, [this](int, const std::string& why) {
        for (auto& c : comms_) c->abort(why);
        merge_->abort(why);
      });
    }
  } catch (...) {
    broken_ = true;
    throw;
  }
}

Variable Strategy::create_variable(const VariableArgs& args, const NextCreator& next) {
  if (!mirrored_variables_) {
    VariableArgs a = args;
    if (a.device.empty()) a.device = devices_[0];
    return next(a);
  }
  StrategyReplicaContext* ctx = current_replica_context();
  if (ctx != nullptr && num_replicas_in_sync() > 1) {
    // Inside run(): the replicas create the variable together, once (TF does this via merge_call).
    return ctx->merge_call<Variable, VariableArgs>(
        [this, &next](const std::vector<VariableArgs>& all) { return create_mirrored(all[0], next); }, args);
  }
  return create_mirrored(args, next);
}

Variable Strategy::create_mirrored(const VariableArgs& args, const NextCreator& next) {
  VariableSynchronization sync = args.synchronization;
  if (sync == VariableSynchronization::kAuto) sync = VariableSynchronization::kOnWrite;
  CHORUS_REQUIRE(sync != VariableSynchronization::kNone, InvalidArgumentError,
                 "`NONE` variable synchronization mode is not supported with tf.distribute strategy. Please change the "
                 "`synchronization` for variable: ",
                 args.name);
  if (sync == VariableSynchronization::kOnWrite) {
    // Stage 3 (FSDP) shards the parameters too: trainable floating variables, gathered for each use.
    const bool parameter = sharding_stage_ >= 3 && !args.shard_over_replicas && args.trainable &&
                           args.initial_value.defined() && is_floating(args.initial_value.dtype());
    if (parameter || (args.shard_over_replicas && sharding_stage_ >= 1)) return create_sharded(args, next, parameter);
  }
  std::vector<Variable> components;
  for (std::size_t r = 0; r < devices_.size(); ++r) {
    VariableArgs a = args;
    a.device = devices_[r];
    a.synchronization = sync;
    if (sync == VariableSynchronization::kOnRead) a.trainable = false;
    if (r > 0) a.name = str_cat(args.name, "/replica_", r);
    components.push_back(next(a));
  }
  initialize_components(args, components);
  return Variable(std::make_shared<MirroredVariable>(*this, std::move(components), args, sync));
}

Variable Strategy::create_sharded(const VariableArgs& args, const NextCreator& next, bool parameter) {
  CHORUS_REQUIRE(args.initial_value.defined(), InvalidArgumentError, "variable '", args.name,
                 "': undefined initial_value");
  // The layout spans every worker's replicas; this process holds the shards of its own
  // (global ids worker_offset() + r), cut from the chief's initial value.
  const Tensor init = num_workers_ > 1 ? chief_initial_value(args.initial_value) : args.initial_value;
  const ShardLayout layout = ShardLayout::of(init.num_elements(), num_replicas_in_sync());
  const Tensor flat = ops::reshape(init, {-1});
  std::vector<Variable> shards;
  for (std::size_t r = 0; r < devices_.size(); ++r) {
    const int g = worker_offset() + static_cast<int>(r);
    VariableArgs a = args;
    a.initial_value = ops::slice(flat, {layout.begin(g)}, {layout.length(g)});
    a.name = str_cat(args.name, "/shard_", r);
    // Offload: an optimizer slot's shard lives in host memory (distribute/optimizer_offload.h).
    a.device = offload_optimizer_state_ && !parameter ? offload_device(devices_[r], static_cast<int>(r)) : devices_[r];
    a.synchronization = VariableSynchronization::kOnWrite;
    a.shard_over_replicas = false;
    shards.push_back(next(a));
  }
  return Variable(
      std::make_shared<ZeroVariable>(*this, std::move(shards), args, init.shape(), init.dtype(), layout, parameter));
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis) const {
  CHORUS_REQUIRE(value.num_replicas() > 0, InvalidArgumentError, "reduce: no values");
  const std::string& dest = devices_[0];
  Tensor total;
  std::int64_t count = 0;
  for (const Tensor& t : value.values()) {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "reduce: a replica's value is undefined");
    Tensor part = t;
    if (axis) {
      const int a = *axis < 0 ? *axis + t.shape().rank() : *axis;
      CHORUS_REQUIRE(a >= 0 && a < t.shape().rank(), InvalidArgumentError, "reduce: axis ", *axis,
                     " is out of range for shape ", t.shape().to_string());
      count += t.shape().dims()[static_cast<std::size_t>(a)];
      part = ops::reduce_sum(t, a);
    }
    part = part.device_name() == dest ? part : part.to(dest);
    total = total.defined() ? ops::add(total, part) : part;
  }
  if (op == ReduceOp::kMean) {
    const double n = axis ? static_cast<double>(count) : static_cast<double>(value.num_replicas());
    total = ops::div(total, ops::scalar_like(total, n));
  }
  return total;
}

Tensor Strategy::reduce(ReduceOp op, const Tensor& value, std::optional<int> axis) const {
  return reduce(op, PerReplica<Tensor>(std::vector<Tensor>(devices_.size(), value)), axis);
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int axis) const {
  std::vector<Tensor> parts;
  for (const Tensor& t : value.values()) {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "gather: a replica's value is undefined");
    parts.push_back(t.device_name() == devices_[0] ? t : t.to(devices_[0]));
  }
  return ops::concat(parts, axis);
}

DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset) const {
  return DistributedDataset(dataset, devices_, DistributedDataset::Mode::kSplitGlobalBatch);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const InputContext&)>& fn) const {
  CHORUS_REQUIRE(fn != nullptr, InvalidArgumentError, "distribute_datasets_from_function: fn is empty");
  InputContext ctx{num_workers_, worker_index_, num_replicas_in_sync()};
  return DistributedDataset(fn(ctx), devices_, DistributedDataset::Mode::kPerReplicaElements);
}

Strategy& get_strategy() {
  if (auto* s = dynamic_cast<Strategy*>(&chorus::get_strategy())) return *s;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // Rebuilt when the device runtime was reset (tests) — its device may be gone.
  static std::unique_ptr<Strategy> holder;
  if (!holder || !runtime::initialized()) {
    holder = std::make_unique<DefaultStrategy>();
    g_default = holder.get();
  }
  return *holder;
}

}  // namespace chorus::distribute
