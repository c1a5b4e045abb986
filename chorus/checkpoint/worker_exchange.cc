#include <chorus/checkpoint/worker_exchange.h>

#include <cstring>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/distribute/per_replica.h>
#include <chorus/distribute/strategy.h>

namespace chorus::train::internal {

namespace {

const distribute::Strategy* as_strategy(const DistributionStrategy& strategy) {
  return dynamic_cast<const distribute::Strategy*>(&strategy);
}

}  // namespace

WorkerGroup worker_group(const DistributionStrategy& strategy) {
  const distribute::Strategy* s = as_strategy(strategy);
  if (!s || s->num_local_replicas() == 0) return {};
  return {s->num_replicas_in_sync() / s->num_local_replicas(), s->worker_offset() / s->num_local_replicas()};
}

std::string gather_across_workers(const DistributionStrategy& strategy, const std::string& mine) {
  const distribute::Strategy* s = as_strategy(strategy);
  if (!s || worker_group(strategy).num_workers == 1) return mine;
  // Replica 0 carries the bytes, the other local replicas nothing: the gather over all replicas
  // is then every worker's bytes in worker order.
  const std::vector<std::string> devices = s->replica_devices();
  std::vector<Tensor> parts;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const auto n = static_cast<std::int64_t>(r == 0 ? mine.size() : 0);
    Tensor t = Tensor::empty({n}, DType::kUInt8, devices[r]);
    if (n > 0) std::memcpy(t.data(), mine.data(), mine.size());
    parts.push_back(std::move(t));
  }
  const Tensor all = s->gather(distribute::PerReplica<Tensor>(std::move(parts)), 0);
  std::string out(static_cast<std::size_t>(all.num_elements()), '\0');
  if (!out.empty()) all.copy_to_host(out.data());
  return out;
}

int first_local_shard(const ShardedVariable& variable) {
  const distribute::Strategy* s = as_strategy(variable.strategy());
  return s ? s->worker_offset() : 0;
}

}  // namespace chorus::train::internal
