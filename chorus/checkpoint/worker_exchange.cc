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
  // Collectives move numbers, not bytes: each worker sends int32 words — its byte count, then its
  // bytes padded to whole words. Replica 0 carries them, the other local replicas nothing: the
  // gather over all replicas is then every worker's words in worker order.
  CHORUS_REQUIRE(mine.size() < (std::size_t{1} << 30), ResourceExhaustedError, "checkpoint metadata of ", mine.size(),
                 " bytes is too large to exchange between workers");
  const std::vector<std::string> devices = s->replica_devices();
  std::vector<Tensor> parts;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const auto words = static_cast<std::int64_t>(r == 0 ? 1 + (mine.size() + 3) / 4 : 0);
    Tensor t = Tensor::zeros({words}, DType::kInt32, devices[r]);
    if (words > 0) {
      auto* w = static_cast<std::int32_t*>(t.data());
      w[0] = static_cast<std::int32_t>(mine.size());
      std::memcpy(w + 1, mine.data(), mine.size());
    }
    parts.push_back(std::move(t));
  }
  const Tensor all = s->gather(distribute::PerReplica<Tensor>(std::move(parts)), 0);
  std::vector<std::int32_t> words(static_cast<std::size_t>(all.num_elements()));
  if (!words.empty()) all.copy_to_host(words.data());
  std::string out;
  for (std::size_t at = 0; at < words.size();) {
    const auto n = static_cast<std::size_t>(words[at]);
    const std::size_t padded = (n + 3) / 4;
    CHORUS_REQUIRE(words[at] >= 0 && padded <= words.size() - at - 1, DataLossError,
                   "checkpoint metadata exchange: a worker's part claims ", words[at], " bytes, ",
                   4 * (words.size() - at - 1), " remain");
    out.append(reinterpret_cast<const char*>(words.data() + at + 1), n);
    at += 1 + padded;
  }
  return out;
}

int first_local_shard(const ShardedVariable& variable) {
  const distribute::Strategy* s = as_strategy(variable.strategy());
  return s ? s->worker_offset() : 0;
}

}  // namespace chorus::train::internal
