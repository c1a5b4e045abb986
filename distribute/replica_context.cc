#include "distribute/replica_context.h"

#include "distribute/uneven_all_gather.h"

#include <algorithm>

#include "collective/communicator.h"
#include "core/error.h"
#include "core/profile.h"
#include "distribute/merge_barrier.h"
#include "distribute/strategy.h"
#include "ops/elementwise.h"
#include "ops/shape_ops.h"

namespace chorus::distribute {

using chorus::internal::str_cat;

namespace {
collective::ReduceOp to_collective(ReduceOp op) {
  return op == ReduceOp::kSum ? collective::ReduceOp::kSum : collective::ReduceOp::kMean;
}
}  // namespace

StrategyReplicaContext::StrategyReplicaContext(Strategy& strategy, int replica)
    : strategy_(strategy), replica_(replica) {}

DistributionStrategy& StrategyReplicaContext::strategy() const { return strategy_; }
int StrategyReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }
int StrategyReplicaContext::replica_id_in_sync_group() const { return strategy_.worker_offset() + replica_; }

collective::Communicator& StrategyReplicaContext::comm() const {
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

Tensor StrategyReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "all_reduce: undefined tensor (replica ", replica_, ")");
  if (num_replicas_in_sync() == 1) return value;
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  Tensor in = local(value, device);
  Tensor out = Tensor::empty(in.shape(), in.dtype(), device);
  {
    drain_if_profiling(in);
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
    comm().all_reduce(in, out, {.op = to_collective(op), .timeout = strategy_.timeout()})->wait(strategy_.timeout());
  }
  return out;
}

std::vector<Tensor> StrategyReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values) {
  return all_reduce(op, values, CommunicationOptions{});
}

std::vector<Tensor> StrategyReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values,
                                                       const CommunicationOptions& options) {
  CHORUS_REQUIRE(options.bytes_per_pack >= 0 && options.timeout_seconds >= 0, InvalidArgumentError,
                 "CommunicationOptions: bytes_per_pack and timeout_seconds must be >= 0, got ", options.bytes_per_pack,
                 " and ", options.timeout_seconds);
  const CrossDeviceChoice& choice = strategy_.cross_device_ops();
  CHORUS_REQUIRE(options.implementation == CrossDeviceOps::kAuto || options.implementation == choice.ops,
                 InvalidArgumentError, "CommunicationOptions: implementation ",
                 cross_device_ops_name(options.implementation), " differs from the strategy's ",
                 cross_device_ops_name(choice.ops), " (", choice.reason, "); choose it when building the strategy");
  std::vector<Tensor> out(values.size());
  if (num_replicas_in_sync() == 1) return values;
  const std::int64_t pack_bytes = options.bytes_per_pack > 0 ? options.bytes_per_pack : kDefaultBytesPerPack;
  const auto timeout = options.timeout_seconds > 0
                           ? std::chrono::milliseconds(static_cast<std::int64_t>(options.timeout_seconds * 1000))
                           : strategy_.timeout();
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  // Packs: consecutive defined tensors of one dtype up to pack_bytes (the order depends only on
  // the shapes and dtypes, so it is the same on every replica).
  std::size_t i = 0;
  while (i < values.size()) {
    if (!values[i].defined()) {
      ++i;
      continue;
    }
    std::vector<std::size_t> members{i};
    std::int64_t bytes = static_cast<std::int64_t>(values[i].nbytes());
    std::size_t j = i + 1;
    while (j < values.size() && values[j].defined() && values[j].dtype() == values[i].dtype() &&
           bytes + static_cast<std::int64_t>(values[j].nbytes()) <= pack_bytes) {
      bytes += static_cast<std::int64_t>(values[j].nbytes());
      members.push_back(j++);
    }
    if (members.size() == 1) {
      Tensor in = local(values[i], device);
      Tensor res = Tensor::empty(in.shape(), in.dtype(), device);
      {
        drain_if_profiling(in);
        profile::ScopedTimer timer(profile::TimeCategory::kCollective);
        comm().all_reduce(in, res, {.op = to_collective(op), .timeout = timeout})->wait(timeout);
      }
      out[i] = res;
    } else {
      std::vector<Tensor> flat;
      std::vector<std::int64_t> sizes;
      for (std::size_t m : members) {
        flat.push_back(ops::reshape(local(values[m], device), {-1}));
        sizes.push_back(values[m].num_elements());
      }
      Tensor packed = ops::concat(flat, 0);
      Tensor reduced = Tensor::empty(packed.shape(), packed.dtype(), device);
      {
        drain_if_profiling(packed);
        profile::ScopedTimer timer(profile::TimeCategory::kCollective);
        comm().all_reduce(packed, reduced, {.op = to_collective(op), .timeout = timeout})->wait(timeout);
      }
      std::vector<Tensor> parts = ops::split(reduced, sizes, 0);
      for (std::size_t k = 0; k < members.size(); ++k)
        out[members[k]] = ops::reshape(parts[k], values[members[k]].shape().dims());
    }
    i = j;
  }
  return out;
}

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

Tensor StrategyReplicaContext::broadcast(const Tensor& value, int root) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "broadcast: undefined tensor (replica ", replica_, ")");
  if (num_replicas_in_sync() == 1) return value;
  const std::string& device = strategy_.devices_[static_cast<std::size_t>(replica_)];
  Tensor t = value.to(device);  // a fresh copy: the collective writes into it
  {
    drain_if_profiling(t);
    profile::ScopedTimer timer(profile::TimeCategory::kCollective);
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
