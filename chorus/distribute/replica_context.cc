#include <chorus/distribute/replica_context.h>

#include <chorus/distribute/uneven_all_gather.h>

#include <algorithm>
#include <functional>

#include <chorus/collective/communicator.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/profile.h>
#include <chorus/core/timeline.h>
#include <chorus/distribute/comm_worker.h>
#include <chorus/distribute/merge_barrier.h>
#include <chorus/distribute/overlapped_reduction.h>
#include <chorus/distribute/parameter_gather.h>
#include <chorus/distribute/step_policy.h>
#include <chorus/distribute/strategy.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {
collective::ReduceOp to_collective(ReduceOp op) {
  return op == ReduceOp::kSum ? collective::ReduceOp::kSum : collective::ReduceOp::kMean;
}
}  // namespace

StrategyReplicaContext::StrategyReplicaContext(Strategy& strategy, int replica)
    : strategy_(strategy), replica_(replica), policy_(std::make_unique<ReplicaStepPolicy>(strategy, this)) {}

DistributionStrategy& StrategyReplicaContext::strategy() const { return strategy_; }
int StrategyReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }
int StrategyReplicaContext::replica_id_in_sync_group() const { return strategy_.worker_offset() + replica_; }

StrategyReplicaContext::~StrategyReplicaContext() {
  // A step that failed may have left buckets with the communication thread: end their
  // collectives at once (the communicator is rebuilt after a failed step anyway), then join.
  if (worker_ != nullptr && !worker_->idle())
    strategy_.comms_[static_cast<std::size_t>(replica_)]->abort(
        str_cat("replica ", replica_id_in_sync_group(), " is being torn down with all-reduces still queued"));
  // Its tasks use this context: they must be done before it goes, even when a gradient sum held
  // elsewhere keeps the worker itself alive.
  if (worker_ != nullptr) {
    try {
      worker_->drain();
    } catch (const std::exception&) {  // the failed step already reported it
    }
  }
  worker_.reset();
}

collective::Communicator& StrategyReplicaContext::comm() {
  if (worker_ != nullptr && !worker_->idle()) worker_->drain();
  return *strategy_.comms_[static_cast<std::size_t>(replica_)];
}

namespace {
// `t` on this replica's device (a copy when it lives elsewhere).
Tensor local(const Tensor& t, const std::string& device) { return t.device_name() == device ? t : t.to(device); }

// With profiling on, drains `t`'s stream before a timed collective, so waiting for the kernels
// that produce `t` counts as their time (kLibraryKernel), not the collective's. CPU communicators
// drain it anyway; with profiling off nothing changes (GPU collectives stay asynchronous).
void drain_if_profiling(const Tensor& t) {
  if (profile::profiling_enabled()) t.device_context().stream().synchronize();
}
}  // namespace

namespace {
// The dtype a pack of `dtype` is all-reduced in under `compression`: only float32 and float64 are
// compressed (integers must stay exact; 16-bit floats already are).
DType wire_dtype(DType dtype, Compression compression) {
  if (compression == Compression::kNone || (dtype != DType::kFloat32 && dtype != DType::kFloat64)) return dtype;
  return compression == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
}
// The arguments of a collective's timeline span (core/timeline.h): what moved, and how.
std::string collective_args(const Tensor& sent, const Strategy& strategy) {
  if (!timeline::enabled()) return {};
  return chorus::internal::str_cat("\"bytes\": ", sent.nbytes(), ", \"dtype\": \"", dtype_name(sent.dtype()),
                                   "\", \"backend\": \"", cross_device_ops_name(strategy.cross_device_ops().ops), "\"");
}

// The options' pack size (bytes_per_pack, or the default) and collective timeout (timeout_seconds,
// or the strategy's).
std::int64_t pack_bytes_of(const CommunicationOptions& options) {
  return options.bytes_per_pack > 0 ? options.bytes_per_pack : kDefaultBytesPerPack;
}
std::chrono::milliseconds timeout_of(const CommunicationOptions& options, const Strategy& strategy) {
  return options.timeout_seconds > 0
             ? std::chrono::milliseconds(static_cast<std::int64_t>(options.timeout_seconds * 1000))
             : strategy.timeout();
}

}  // namespace

void StrategyReplicaContext::reduce_pack(collective::Communicator& communicator, ReduceOp op, internal::Pack& pack,
                                         std::chrono::milliseconds timeout, bool overlapped) {
  {
    if (!overlapped) drain_if_profiling(pack.send);  // the communication thread must not drain the replica's stream
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
    timeline::Span span("collective", "all-reduce", collective_args(pack.send, strategy_));
    // A GPU bucket (pack.ready set): on the device's side stream, after the pack is complete.
    const bool side = pack.ready != nullptr;
    if (side) pack.send.device_context().side_stream().wait_event(pack.ready);
    const std::shared_ptr<collective::Work> work = communicator.all_reduce(
        pack.send, pack.out, {.op = to_collective(op), .timeout = timeout, .side_stream = side});
    if (side) pack.done = work->event();
    work->wait(timeout);
  }
  auto& c = strategy_.counters_;
  c.collectives.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(static_cast<std::int64_t>(pack.send.nbytes()), std::memory_order_relaxed);
  c.uncompressed_bytes.fetch_add(pack.value_bytes, std::memory_order_relaxed);
  if (overlapped) c.overlapped.fetch_add(1, std::memory_order_relaxed);
  pack.send = Tensor();  // `out` alone holds the result (when compressed, the same buffer)
}

Tensor StrategyReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "all_reduce: undefined tensor (replica ", replica_, ")");
  if (num_replicas_in_sync() == 1) return value;
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  internal::Pack pack = internal::make_pack({value}, {0}, value.dtype(), device);
  reduce_pack(comm(), op, pack, strategy_.timeout(), false);
  std::vector<Tensor> reduced(1);
  internal::unpack(pack, reduced);
  return reduced[0];
}

std::vector<Tensor> StrategyReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values) {
  return all_reduce(op, values, CommunicationOptions{});
}

std::vector<Tensor> StrategyReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values,
                                                       const CommunicationOptions& explicit_options) {
  internal::validate_communication_options(explicit_options, "all_reduce");
  const CrossDeviceChoice& choice = strategy_.cross_device_ops();
  CHORUS_REQUIRE(
      explicit_options.implementation == CrossDeviceOps::kAuto || explicit_options.implementation == choice.ops,
      InvalidArgumentError, "CommunicationOptions: implementation ",
      cross_device_ops_name(explicit_options.implementation), " differs from the strategy's ",
      cross_device_ops_name(choice.ops), " (", choice.reason, "); choose it when building the strategy");
  const CommunicationOptions options =
      internal::merge_communication_options(strategy_.communication_options(), explicit_options);
  const Compression compression = options.compression.value_or(Compression::kNone);
  if (num_replicas_in_sync() == 1) return values;
  const std::int64_t pack_bytes = pack_bytes_of(options);
  const auto timeout = timeout_of(options, strategy_);
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  // Packs (distribute/all_reduce_packs.h): the order depends only on the shapes and dtypes, so it
  // is the same on every replica; undefined values stay undefined. Reduced last first, the order
  // in which the overlapped reduction launches them.
  std::vector<Tensor> out(values.size());
  std::vector<std::vector<std::size_t>> packs = internal::plan_all_reduce_packs(values, pack_bytes);
  for (auto members = packs.rbegin(); members != packs.rend(); ++members) {
    const DType wire = wire_dtype(values[members->front()].dtype(), compression);
    internal::Pack pack = internal::make_pack(values, std::move(*members), wire, device);
    reduce_pack(comm(), op, pack, timeout, false);
    internal::unpack(pack, out);
  }
  return out;
}

std::shared_ptr<GradientReduction> StrategyReplicaContext::begin_overlapped_sum(const std::vector<Tensor>& sources) {
  if (!strategy_.overlaps_gradient_all_reduce() || num_replicas_in_sync() == 1) return nullptr;
  const CommunicationOptions& options = strategy_.communication_options();
  const Compression compression = options.compression.value_or(Compression::kNone);
  if (worker_ == nullptr) {
    const int id = replica_id_in_sync_group();
    worker_ = std::make_shared<internal::CommWorker>(2000 + id, str_cat("replica ", id, " all-reduce"));
  }
  const auto timeout = timeout_of(options, strategy_);
  collective::Communicator* communicator = strategy_.comms_[static_cast<std::size_t>(replica_)].get();
  internal::CommWorker* worker = worker_.get();
  // Buckets are launched during the backward pass, on this replica's thread, while this context
  // lives; the reduction waits for them through the worker it shares, whoever holds it last.
  return std::make_shared<internal::OverlappedReduction>(
      sources, pack_bytes_of(options), [compression](DType d) { return wire_dtype(d, compression); },
      strategy_.devices_[static_cast<std::size_t>(replica_)],
      [this, communicator, worker, timeout](std::shared_ptr<internal::Pack> pack) {
        return worker->submit([this, communicator, pack = std::move(pack), timeout] {
          reduce_pack(*communicator, ReduceOp::kSum, *pack, timeout, true);
        });
      },
      [shared = worker_](std::uint64_t ticket) { shared->wait(ticket); });
}

void StrategyReplicaContext::end_step() {
  if (worker_ != nullptr) worker_->drain();
}

StepPolicy& StrategyReplicaContext::step_policy() { return *policy_; }

Tensor StrategyReplicaContext::all_gather(const Tensor& value, int axis) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "all_gather: undefined tensor (replica ", replica_, ")");
  const int n = num_replicas_in_sync();
  if (n == 1) return value;
  const int rank = value.shape().rank();
  CHORUS_REQUIRE(rank >= 1, InvalidArgumentError, "all_gather: needs rank >= 1, got a scalar");
  const int a = axis < 0 ? axis + rank : axis;
  CHORUS_REQUIRE(a >= 0 && a < rank, InvalidArgumentError, "all_gather: axis ", axis, " is out of range for shape ",
                 value.shape().to_string());
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  return internal::all_gather_uneven(comm(), local(value, device), a, device, strategy_.timeout());
}

namespace {
// Whether a value of `layout` and dtype size `size` moves on its own, straight from or into its
// storage (ShardingCollectives: E = n·c and at least kDirectShardBytes).
bool moves_directly(const ShardLayout& layout, std::size_t size) {
  return layout.num_elements > 0 &&
         layout.num_elements == static_cast<std::int64_t>(layout.num_shards) * layout.padded &&
         layout.num_elements * static_cast<std::int64_t>(size) >= kDirectShardBytes;
}
}  // namespace

namespace {
// The packs of the sharding collectives, in the order of `layouts` — so the same on every replica:
// they depend only on the layouts and dtypes. A value without elements moves nothing (`empty(i)`);
// `alone(i)` may move a value by itself (it returns whether it did); the others go in runs of one
// dtype of at most `pack_bytes` padded bytes (n·c elements each) to `send(members)`.
void for_each_shard_pack(const std::vector<ShardLayout>& layouts, const std::function<DType(std::size_t)>& dtype,
                         std::int64_t pack_bytes, const std::function<void(std::size_t)>& empty,
                         const std::function<bool(std::size_t)>& alone,
                         const std::function<void(const std::vector<std::size_t>&)>& send) {
  auto padded_bytes = [&](std::size_t i) {
    return static_cast<std::int64_t>(layouts[i].num_shards) * layouts[i].padded *
           static_cast<std::int64_t>(dtype_size(dtype(i)));
  };
  std::vector<std::size_t> pack;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    if (layouts[i].num_elements == 0) {
      empty(i);
      continue;
    }
    if (alone(i)) continue;
    if (!pack.empty() && (dtype(i) != dtype(pack.front()) || bytes + padded_bytes(i) > pack_bytes)) {
      send(pack);
      pack.clear();
      bytes = 0;
    }
    pack.push_back(i);
    bytes += padded_bytes(i);
  }
  if (!pack.empty()) send(pack);
}
}  // namespace

std::vector<Tensor> StrategyReplicaContext::reduce_scatter_shards(ReduceOp op, std::vector<Tensor>&& values,
                                                                  const std::vector<ShardLayout>& layouts) {
  const int n = num_replicas_in_sync();
  const int r = replica_id_in_sync_group();
  CHORUS_REQUIRE(values.size() == layouts.size(), InvalidArgumentError, "reduce_scatter_shards: ", values.size(),
                 " values and ", layouts.size(), " layouts");
  for (std::size_t i = 0; i < values.size(); ++i) {
    CHORUS_REQUIRE(values[i].defined(), InvalidArgumentError, "reduce_scatter_shards: value ", i,
                   " is undefined (replica ", replica_, ")");
    CHORUS_REQUIRE(values[i].num_elements() == layouts[i].num_elements && layouts[i].num_shards == n,
                   InvalidArgumentError, "reduce_scatter_shards: value ", i, " has ", values[i].num_elements(),
                   " elements, its layout ", layouts[i].num_elements, " over ", layouts[i].num_shards, " shards (", n,
                   " replicas)");
  }
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  std::vector<Tensor> out(values.size());
  if (n == 1) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      out[i] = ops::reshape(local(values[i], device), {-1});
      values[i] = Tensor();
    }
    return out;
  }
  const CommunicationOptions& options = strategy_.communication_options();
  const Compression compression = options.compression.value_or(Compression::kNone);
  const std::int64_t pack_bytes = pack_bytes_of(options);
  const auto timeout = timeout_of(options, strategy_);
  // Reduce-scatters `members` (one dtype) as one rank-major pack [n, Σc] and gives each its shard.
  // A single member without padding is sent as it is (its flat storage is the [n, c] pack).
  auto scatter = [&](const std::vector<std::size_t>& members) {
    const DType dtype = values[members.front()].dtype();
    const DType wire = wire_dtype(dtype, compression);
    std::int64_t width = 0;
    std::vector<Tensor> blocks;
    for (std::size_t m : members) {
      const ShardLayout& l = layouts[m];
      Tensor flat = ops::reshape(local(values[m], device), {-1});
      const std::int64_t pad = static_cast<std::int64_t>(n) * l.padded - l.num_elements;
      if (pad > 0) flat = ops::concat({flat, Tensor::zeros({pad}, dtype, device)}, 0);
      blocks.push_back(ops::reshape(flat, {n, l.padded}));
      width += l.padded;
    }
    Tensor packed = blocks.size() == 1 ? blocks[0] : ops::concat(blocks, 1);
    blocks.clear();
    packed = ops::reshape(packed, {-1});
    // Copied into the pack (or the pack is the value itself: then `packed` keeps it until sent).
    for (std::size_t m : members) values[m] = Tensor();
    const bool compress = wire != dtype;
    Tensor send = compress ? ops::cast(packed, wire) : packed;
    const std::int64_t in_bytes = static_cast<std::int64_t>(packed.nbytes());
    packed = Tensor();
    Tensor received = Tensor::empty({width}, wire, device);
    {
      drain_if_profiling(send);
      profile::ScopedTimer timer(profile::TimeCategory::kCollective);
      timeline::Span span("collective", "reduce-scatter", collective_args(send, strategy_));
      comm().reduce_scatter(send, received, {.op = to_collective(op), .timeout = timeout})->wait(timeout);
    }
    auto& c = strategy_.counters_;
    c.collectives.fetch_add(1, std::memory_order_relaxed);
    c.bytes.fetch_add(static_cast<std::int64_t>(send.nbytes()), std::memory_order_relaxed);
    c.uncompressed_bytes.fetch_add(in_bytes, std::memory_order_relaxed);
    send = Tensor();
    if (compress) received = ops::cast(received, dtype);
    std::int64_t offset = 0;
    for (std::size_t m : members) {
      const ShardLayout& l = layouts[m];
      const std::int64_t len = l.length(r);
      // A slice is a copy, so the shard does not keep the whole pack alive.
      out[m] = len == width ? received : ops::slice(received, {offset}, {len});
      offset += l.padded;
    }
  };
  // A value that moves directly (core/sharded_variable.h) goes alone, as it is; the others in packs.
  for_each_shard_pack(
      layouts, [&](std::size_t i) { return values[i].dtype(); }, pack_bytes,
      [&](std::size_t i) {  // an empty shard everywhere: nothing to move
        out[i] = Tensor::zeros({0}, values[i].dtype(), device);
        values[i] = Tensor();
      },
      [&](std::size_t i) {
        if (!moves_directly(layouts[i], dtype_size(values[i].dtype()))) return false;
        scatter({i});
        return true;
      },
      scatter);
  return out;
}

void StrategyReplicaContext::all_gather_shards(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                                               const std::vector<ShardLayout>& layouts) {
  const int n = num_replicas_in_sync();
  const int r = replica_id_in_sync_group();
  CHORUS_REQUIRE(shards.size() == layouts.size() && wholes.size() == layouts.size(), InvalidArgumentError,
                 "all_gather_shards: ", shards.size(), " shards, ", wholes.size(), " wholes and ", layouts.size(),
                 " layouts");
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    CHORUS_REQUIRE(shards[i].defined() && wholes[i].defined(), InvalidArgumentError, "all_gather_shards: entry ", i,
                   " is undefined (replica ", replica_, ")");
    CHORUS_REQUIRE(layouts[i].num_shards == n && wholes[i].num_elements() == layouts[i].num_elements &&
                       shards[i].num_elements() == layouts[i].length(r) && shards[i].dtype() == wholes[i].dtype(),
                   InvalidArgumentError, "all_gather_shards: entry ", i, " has a shard of ", shards[i].num_elements(),
                   " and a whole of ", wholes[i].num_elements(), " elements on ", wholes[i].device_name(),
                   ", its layout ", layouts[i].num_elements, " over ", layouts[i].num_shards, " shards (replica ", r,
                   " of ", n, " on ", device, ")");
  }
  if (n == 1) {
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      Tensor whole = wholes[i];
      if (layouts[i].num_elements > 0) whole.copy_from(ops::reshape(shards[i], whole.shape().dims()));
    }
    return;
  }
  const CommunicationOptions& options = strategy_.communication_options();
  const std::int64_t pack_bytes = pack_bytes_of(options);
  const auto timeout = timeout_of(options, strategy_);
  auto gather = [&](const Tensor& in, const Tensor& result) {
    drain_if_profiling(in);
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
    timeline::Span span("collective", "all-gather", collective_args(result, strategy_));
    comm().all_gather(in, result, {.timeout = timeout})->wait(timeout);
  };
  // A padded pack: each member's shard zero-padded to c, gathered to [n, Σc] (row q: replica q's
  // shards), each member's c columns flattened (its shards in replica order), the first E copied
  // into its whole.
  auto gather_pack = [&](const std::vector<std::size_t>& members) {
    const DType dtype = wholes[members.front()].dtype();
    std::int64_t width = 0;
    std::vector<Tensor> pieces;
    for (std::size_t m : members) {
      const std::int64_t c = layouts[m].padded, len = shards[m].num_elements();
      width += c;
      if (len > 0) pieces.push_back(ops::reshape(local(shards[m], device), {-1}));
      if (len < c) pieces.push_back(Tensor::zeros({c - len}, dtype, device));
    }
    Tensor send = pieces.size() == 1 ? pieces[0] : ops::concat(pieces, 0);
    pieces.clear();
    Tensor all = Tensor::empty({static_cast<std::int64_t>(n) * width}, dtype, device);
    gather(send, all);
    send = Tensor();
    all = ops::reshape(all, {n, width});
    std::int64_t offset = 0;
    for (std::size_t m : members) {
      const std::int64_t c = layouts[m].padded, e = layouts[m].num_elements;
      const Tensor flat = ops::reshape(c == width ? all : ops::slice(all, {0, offset}, {n, c}), {-1});
      Tensor whole = wholes[m];
      whole.copy_from(ops::reshape(e == n * c ? flat : ops::slice(flat, {0}, {e}), whole.shape().dims()));
      offset += c;
    }
  };
  for_each_shard_pack(
      layouts, [&](std::size_t i) { return wholes[i].dtype(); }, pack_bytes, [](std::size_t) {},
      [&](std::size_t i) {
        if (!moves_directly(layouts[i], dtype_size(wholes[i].dtype())) || wholes[i].device_name() != device)
          return false;
        // The whole's flat storage is the gathered [n·c]: replica q's shard lands at q·c.
        gather(ops::reshape(local(shards[i], device), {-1}), wholes[i].reshape(Shape{layouts[i].num_elements}));
        return true;
      },
      gather_pack);
}

Tensor StrategyReplicaContext::broadcast(const Tensor& value, int root) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "broadcast: undefined tensor (replica ", replica_, ")");
  if (num_replicas_in_sync() == 1) return value;
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  Tensor t = value.to(device);  // a fresh copy: the collective writes into it
  {
    drain_if_profiling(t);
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
    timeline::Span span("collective", "broadcast", collective_args(t, strategy_));
    comm().broadcast(t, {.root = root, .timeout = strategy_.timeout()})->wait(strategy_.timeout());
  }
  return t;
}

std::any StrategyReplicaContext::merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) {
  auto cross = [&fn](std::vector<std::any>& all) {
    chorus::internal::ReplicaContextScope cross_replica(nullptr);  // fn runs in cross-replica context
    return fn(all);
  };
  if (strategy_.num_local_replicas() == 1) {  // merge_call is per process, as in TF
    std::vector<std::any> all{std::move(mine)};
    return cross(all);
  }
  return strategy_.merge_->arrive(replica_, std::move(mine), cross);
}

}  // namespace chorus::distribute
