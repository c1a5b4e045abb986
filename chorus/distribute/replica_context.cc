#include <chorus/distribute/replica_context.h>

#include <chorus/distribute/uneven_all_gather.h>

#include <algorithm>
#include <functional>

#include <chorus/collective/communicator.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/profile.h>
#include <chorus/core/runtime.h>
#include <chorus/core/timeline.h>
#include <chorus/distribute/comm_worker.h>
#include <chorus/distribute/gather_prefetch.h>
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
  // Prefetched gathers (waited for; their errors were the failed step's) go before the worker.
  prefetcher_.reset();
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

internal::CommWorker& StrategyReplicaContext::worker() {
  if (worker_ == nullptr) {
    const int id = replica_id_in_sync_group();
    worker_ = std::make_shared<internal::CommWorker>(2000 + id, str_cat("replica ", id, " all-reduce"));
  }
  return *worker_;
}

std::shared_ptr<GradientReduction> StrategyReplicaContext::begin_overlapped_sum(const std::vector<Tensor>& sources) {
  if (!strategy_.overlaps_gradient_all_reduce() || num_replicas_in_sync() == 1) return nullptr;
  const CommunicationOptions& options = strategy_.communication_options();
  const Compression compression = options.compression.value_or(Compression::kNone);
  const auto timeout = timeout_of(options, strategy_);
  collective::Communicator* communicator = strategy_.comms_[static_cast<std::size_t>(replica_)].get();
  internal::CommWorker* w = &worker();
  // Buckets are launched during the backward pass, on this replica's thread, while this context
  // lives; the reduction waits for them through the worker it shares, whoever holds it last.
  return std::make_shared<internal::OverlappedReduction>(
      sources, pack_bytes_of(options), [compression](DType d) { return wire_dtype(d, compression); },
      strategy_.devices_[static_cast<std::size_t>(replica_)],
      [this, communicator, w, timeout](std::shared_ptr<internal::Pack> pack) {
        return w->submit([this, communicator, pack = std::move(pack), timeout] {
          reduce_pack(*communicator, ReduceOp::kSum, *pack, timeout, true);
        });
      },
      [shared = worker_](std::uint64_t ticket) { shared->wait(ticket); });
}

std::shared_ptr<GradientReduction> StrategyReplicaContext::begin_overlapped_sharded_sum(
    const std::vector<Tensor>& sources, const std::vector<char>& kinds, const std::vector<ShardLayout>& layouts,
    const std::vector<const void*>& to_host) {
  if (!strategy_.overlaps_gradient_all_reduce() || num_replicas_in_sync() == 1) return nullptr;
  CHORUS_ENFORCE(kinds.size() == sources.size() && layouts.size() == sources.size(),
                 "begin_overlapped_sharded_sum: ", sources.size(), " sources, ", kinds.size(), " kinds, ",
                 layouts.size(), " layouts");
  // The plans of the non-overlapped path (ReplicaStepPolicy::scatter_and_reduce): all_reduce of the
  // list with only the whole ones defined, reduce_scatter_shards of the scattered ones in order
  // (the others' layouts empty: in no piece, as if left out).
  const CommunicationOptions& options = strategy_.communication_options();
  std::vector<Tensor> whole(sources.size());
  std::vector<ShardLayout> scattered(sources.size());
  std::vector<DType> dtypes(sources.size(), DType::kFloat32);
  bool any = false;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].defined() || kinds[i] == 0) continue;
    dtypes[i] = sources[i].dtype();
    if (kinds[i] == 1) whole[i] = sources[i];
    if (kinds[i] == 2) scattered[i] = layouts[i];
    any = true;
  }
  if (!any) return nullptr;
  std::vector<internal::ShardPiece> pieces = plan_shard_pieces(scattered, dtypes, std::vector<char>(sources.size(), 1));
  const Compression compression = options.compression.value_or(Compression::kNone);
  const auto timeout = timeout_of(options, strategy_);
  collective::Communicator* communicator = strategy_.comms_[static_cast<std::size_t>(replica_)].get();
  internal::CommWorker* w = &worker();
  // Offload's staging: which shards the communication thread copies to the host once reduced.
  std::shared_ptr<DeviceContext> host;
  std::vector<const void*> stage(sources.size(), nullptr);
  for (std::size_t i = 0; i < to_host.size() && i < sources.size(); ++i)
    if (kinds[i] == 2) stage[i] = to_host[i];
  if (std::any_of(stage.begin(), stage.end(), [](const void* v) { return v != nullptr; })) host = offload_host();
  const int r = replica_id_in_sync_group();
  internal::OverlappedReduction::ScatterOps scatter{
      [this, scattered](internal::ShardPiece& piece, std::vector<Tensor>& grads) {
        pack_scatter(piece, grads, scattered);
      },
      [this, communicator, w, host, stage, scattered, r](std::shared_ptr<internal::ShardPiece> piece) {
        return w->submit([this, communicator, piece = std::move(piece), host, stage, scattered, r] {
          run_scatter(*communicator, ReduceOp::kSum, *piece, true);
          if (host == nullptr || piece->received.dtype() != piece->dtype) return;  // compressed: cast on the device
          piece->staged.resize(piece->members.size());
          std::int64_t offset = 0;
          for (std::size_t k = 0; k < piece->members.size(); ++k) {
            const std::size_t m = piece->members[k];
            if (stage[m] != nullptr) {
              piece->staged[k] = Tensor::empty_on(host, {scattered[m].length(r)}, piece->dtype);
              internal::start_host_copy(piece->received, offset, piece->staged[k], piece->done);
            }
            offset += scattered[m].padded;
          }
        });
      },
      [this, scattered, stage](internal::ShardPiece& piece, std::vector<Tensor>& out) {
        std::vector<Tensor> staged = std::move(piece.staged);
        unpack_scatter(piece, scattered, out);
        for (std::size_t k = 0; k < staged.size(); ++k) {
          const std::size_t m = piece.members[k];
          if (staged[k].defined()) staging_.add(stage[m], out[m], std::move(staged[k]));
        }
      }};
  return std::make_shared<internal::OverlappedReduction>(
      sources, internal::plan_all_reduce_packs(whole, pack_bytes_of(options)), std::move(pieces),
      [compression](DType d) { return wire_dtype(d, compression); },
      strategy_.devices_[static_cast<std::size_t>(replica_)],
      [this, communicator, w, timeout](std::shared_ptr<internal::Pack> pack) {
        return w->submit([this, communicator, pack = std::move(pack), timeout] {
          reduce_pack(*communicator, ReduceOp::kSum, *pack, timeout, true);
        });
      },
      std::move(scatter), [shared = worker_](std::uint64_t ticket) { shared->wait(ticket); });
}

internal::GatherPrefetcher* StrategyReplicaContext::prefetcher() {
  const int limit = strategy_.prefetch_limit();
  if (limit <= 0 || num_replicas_in_sync() == 1) return nullptr;
  if (prefetcher_ == nullptr) prefetcher_ = std::make_unique<internal::GatherPrefetcher>(*this, limit);
  return prefetcher_.get();
}

void StrategyReplicaContext::end_step() {
  if (prefetcher_ != nullptr) prefetcher_->end_step();
  if (worker_ != nullptr) worker_->drain();
  staging_.clear();
}

std::shared_ptr<DeviceContext> StrategyReplicaContext::offload_host() const {
  if (!strategy_.offloads_optimizer_state()) return nullptr;
  return runtime::find(offload_device(strategy_.devices_[static_cast<std::size_t>(replica_)], replica_));
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

std::vector<internal::ShardPiece> StrategyReplicaContext::plan_shard_pieces(
    const std::vector<ShardLayout>& layouts, const std::vector<DType>& dtypes,
    const std::vector<char>& may_go_direct) const {
  // In the order of `layouts` — so the same on every replica: the pieces depend only on the
  // layouts and dtypes. A value without elements moves nothing (in no piece); a large even one
  // may go alone; the others go in runs of one dtype of at most bytes_per_pack padded bytes.
  const std::int64_t pack_bytes = pack_bytes_of(strategy_.communication_options());
  auto padded_bytes = [&](std::size_t i) {
    return static_cast<std::int64_t>(layouts[i].num_shards) * layouts[i].padded *
           static_cast<std::int64_t>(dtype_size(dtypes[i]));
  };
  std::vector<internal::ShardPiece> pieces;
  internal::ShardPiece run;
  std::int64_t bytes = 0;
  auto flush = [&] {
    if (run.members.empty()) return;
    pieces.push_back(std::move(run));
    run = internal::ShardPiece();
    bytes = 0;
  };
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    if (layouts[i].num_elements == 0) continue;
    if (may_go_direct[i] && moves_directly(layouts[i], dtype_size(dtypes[i]))) {
      internal::ShardPiece alone;
      alone.members = {i};
      alone.dtype = dtypes[i];
      alone.direct = true;
      pieces.push_back(std::move(alone));
      continue;
    }
    if (!run.members.empty() && (dtypes[i] != run.dtype || bytes + padded_bytes(i) > pack_bytes)) flush();
    run.dtype = dtypes[i];
    run.members.push_back(i);
    bytes += padded_bytes(i);
  }
  flush();
  return pieces;
}

void StrategyReplicaContext::check_shard_values(const std::vector<Tensor>& values,
                                                const std::vector<ShardLayout>& layouts) const {
  const int n = num_replicas_in_sync();
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
}

void StrategyReplicaContext::pack_scatter(internal::ShardPiece& piece, std::vector<Tensor>& values,
                                          const std::vector<ShardLayout>& layouts) {
  // One rank-major pack [n, Σc] (each value flattened, zero-padded to n·c_i and viewed [n, c_i]);
  // a single member without padding is sent as it is (its flat storage is the [n, c] pack).
  const int n = num_replicas_in_sync();
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  const Compression compression = strategy_.communication_options().compression.value_or(Compression::kNone);
  const DType dtype = piece.dtype;
  const DType wire = wire_dtype(dtype, compression);
  std::int64_t width = 0;
  std::vector<Tensor> blocks;
  for (std::size_t m : piece.members) {
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
  // Copied into the pack (or the pack is the value itself: then `send` keeps it until sent).
  for (std::size_t m : piece.members) values[m] = Tensor();
  piece.in_bytes = static_cast<std::int64_t>(packed.nbytes());
  piece.send = wire != dtype ? ops::cast(packed, wire) : packed;
  piece.received = Tensor::empty({width}, wire, device);
}

void StrategyReplicaContext::run_scatter(collective::Communicator& communicator, ReduceOp op,
                                         internal::ShardPiece& piece, bool overlapped) {
  const auto timeout = timeout_of(strategy_.communication_options(), strategy_);
  {
    if (!overlapped) drain_if_profiling(piece.send);  // the communication thread must not drain the replica's stream
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
    timeline::Span span("collective", "reduce-scatter", collective_args(piece.send, strategy_));
    const std::shared_ptr<collective::Work> work =
        communicator.reduce_scatter(piece.send, piece.received, {.op = to_collective(op), .timeout = timeout});
    work->wait(timeout);
    piece.done = work->event();
  }
  auto& c = strategy_.counters_;
  c.collectives.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(static_cast<std::int64_t>(piece.send.nbytes()), std::memory_order_relaxed);
  c.uncompressed_bytes.fetch_add(piece.in_bytes, std::memory_order_relaxed);
  if (overlapped) c.overlapped.fetch_add(1, std::memory_order_relaxed);
  piece.send = Tensor();
}

void StrategyReplicaContext::unpack_scatter(internal::ShardPiece& piece, const std::vector<ShardLayout>& layouts,
                                            std::vector<Tensor>& out) const {
  const int r = replica_id_in_sync_group();
  Tensor received = piece.received.dtype() != piece.dtype ? ops::cast(piece.received, piece.dtype) : piece.received;
  piece.received = Tensor();
  const std::int64_t width = received.num_elements();
  std::int64_t offset = 0;
  for (std::size_t m : piece.members) {
    const ShardLayout& l = layouts[m];
    const std::int64_t len = l.length(r);
    // A slice is a copy, so the shard does not keep the whole pack alive.
    out[m] = len == width ? received : ops::slice(received, {offset}, {len});
    offset += l.padded;
  }
}

std::vector<Tensor> StrategyReplicaContext::reduce_scatter_shards(ReduceOp op, std::vector<Tensor>&& values,
                                                                  const std::vector<ShardLayout>& layouts) {
  check_shard_values(values, layouts);
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  std::vector<Tensor> out(values.size());
  if (num_replicas_in_sync() == 1) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      out[i] = ops::reshape(local(values[i], device), {-1});
      values[i] = Tensor();
    }
    return out;
  }
  std::vector<DType> dtypes;
  for (const Tensor& v : values) dtypes.push_back(v.dtype());
  for (std::size_t i = 0; i < values.size(); ++i)
    if (layouts[i].num_elements == 0) {  // an empty shard everywhere: nothing to move
      out[i] = Tensor::zeros({0}, values[i].dtype(), device);
      values[i] = Tensor();
    }
  // One piece at a time, so the temporaries are one pack's.
  for (internal::ShardPiece& piece : plan_shard_pieces(layouts, dtypes, std::vector<char>(values.size(), 1))) {
    pack_scatter(piece, values, layouts);
    run_scatter(comm(), op, piece, false);
    unpack_scatter(piece, layouts, out);
  }
  return out;
}

void StrategyReplicaContext::check_gather(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                                          const std::vector<ShardLayout>& layouts) const {
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
}

std::vector<internal::ShardPiece> StrategyReplicaContext::plan_gather(const std::vector<Tensor>& wholes,
                                                                      const std::vector<ShardLayout>& layouts) const {
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  std::vector<DType> dtypes;
  std::vector<char> direct;
  for (const Tensor& w : wholes) {
    dtypes.push_back(w.dtype());
    direct.push_back(w.device_name() == device ? 1 : 0);  // the whole's storage is the collective's output
  }
  return plan_shard_pieces(layouts, dtypes, direct);
}

void StrategyReplicaContext::pack_gather(internal::ShardPiece& piece, const std::vector<Tensor>& shards,
                                         const std::vector<Tensor>& wholes,
                                         const std::vector<ShardLayout>& layouts) const {
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  if (piece.direct) {
    // The whole's flat storage is the gathered [n·c]: replica q's shard lands at q·c.
    const std::size_t m = piece.members.front();
    piece.send = ops::reshape(local(shards[m], device), {-1});
    piece.received = wholes[m].reshape(Shape{layouts[m].num_elements});
    return;
  }
  // A padded pack: each member's shard zero-padded to c, gathered to [n, Σc] (row q: replica q's shards).
  std::int64_t width = 0;
  std::vector<Tensor> pieces;
  for (std::size_t m : piece.members) {
    const std::int64_t c = layouts[m].padded, len = shards[m].num_elements();
    width += c;
    if (len > 0) pieces.push_back(ops::reshape(local(shards[m], device), {-1}));
    if (len < c) pieces.push_back(Tensor::zeros({c - len}, piece.dtype, device));
  }
  piece.send = pieces.size() == 1 ? pieces[0] : ops::concat(pieces, 0);
  piece.received = Tensor::empty({static_cast<std::int64_t>(num_replicas_in_sync()) * width}, piece.dtype, device);
}

void StrategyReplicaContext::run_gather(collective::Communicator& communicator, internal::ShardPiece& piece,
                                        bool overlapped) {
  const auto timeout = timeout_of(strategy_.communication_options(), strategy_);
  if (!overlapped) drain_if_profiling(piece.send);
  profile::ScopedTimer timer(profile::TimeCategory::kCollective);
  timeline::Span span("collective", "all-gather", collective_args(piece.received, strategy_));
  communicator.all_gather(piece.send, piece.received, {.timeout = timeout})->wait(timeout);
  piece.send = Tensor();
}

void StrategyReplicaContext::unpack_gather(internal::ShardPiece& piece, const std::vector<Tensor>& wholes,
                                           const std::vector<ShardLayout>& layouts) const {
  if (piece.direct) {
    piece.received = Tensor();
    return;
  }
  // Each member's c columns of [n, Σc] flattened (its shards in replica order), the first E copied
  // into its whole.
  const std::int64_t n = num_replicas_in_sync();
  const std::int64_t width = piece.received.num_elements() / n;
  const Tensor all = ops::reshape(piece.received, {n, width});
  piece.received = Tensor();
  std::int64_t offset = 0;
  for (std::size_t m : piece.members) {
    const std::int64_t c = layouts[m].padded, e = layouts[m].num_elements;
    const Tensor flat = ops::reshape(c == width ? all : ops::slice(all, {0, offset}, {n, c}), {-1});
    Tensor whole = wholes[m];
    whole.copy_from(ops::reshape(e == n * c ? flat : ops::slice(flat, {0}, {e}), whole.shape().dims()));
    offset += c;
  }
}

void StrategyReplicaContext::all_gather_shards(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                                               const std::vector<ShardLayout>& layouts) {
  check_gather(shards, wholes, layouts);
  if (num_replicas_in_sync() == 1) {
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      Tensor whole = wholes[i];
      if (layouts[i].num_elements > 0) whole.copy_from(ops::reshape(shards[i], whole.shape().dims()));
    }
    return;
  }
  // One piece at a time: the temporary is one pack (bytes_per_pack at most), never the model.
  for (internal::ShardPiece& piece : plan_gather(wholes, layouts)) {
    pack_gather(piece, shards, wholes, layouts);
    run_gather(comm(), piece, false);
    unpack_gather(piece, wholes, layouts);
  }
}

std::shared_ptr<internal::PendingGather> StrategyReplicaContext::begin_all_gather_shards(
    const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes, const std::vector<ShardLayout>& layouts) {
  check_gather(shards, wholes, layouts);
  auto pending = std::make_shared<internal::PendingGather>();
  pending->wholes = wholes;
  pending->layouts = layouts;
  if (num_replicas_in_sync() == 1) {
    all_gather_shards(shards, wholes, layouts);
    return pending;
  }
  // Every pack is built now, on this thread (the shards do not change before the update, which
  // settles what is in flight first); the worker only runs the collectives, in order.
  pending->pieces = plan_gather(wholes, layouts);
  for (internal::ShardPiece& piece : pending->pieces) pack_gather(piece, shards, wholes, layouts);
  collective::Communicator* communicator = strategy_.comms_[static_cast<std::size_t>(replica_)].get();
  internal::CommWorker& w = worker();
  pending->worker = worker_;
  pending->ticket = w.submit([this, communicator, pending] {
    for (internal::ShardPiece& piece : pending->pieces) run_gather(*communicator, piece, true);
  });
  return pending;
}

void StrategyReplicaContext::finish_gather(internal::PendingGather& pending) const {
  if (pending.worker != nullptr) {
    pending.worker->wait(pending.ticket);
    pending.worker.reset();
  }
  for (internal::ShardPiece& piece : pending.pieces) unpack_gather(piece, pending.wholes, pending.layouts);
  pending.pieces.clear();
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
