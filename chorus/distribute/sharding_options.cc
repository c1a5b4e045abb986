#include <chorus/distribute/sharding_options.h>

#include <chorus/core/error.h>

namespace chorus::distribute {

void check_sharding(const ShardingOptions& options, const char* strategy) {
  CHORUS_REQUIRE(options.stage >= 0 && options.stage <= 3, InvalidArgumentError, strategy,
                 ": sharding.stage must be 0 (off), 1 (ZeRO stage 1: optimizer slots partitioned), 2 (slots and "
                 "gradients partitioned) or 3 (slots, gradients and parameters partitioned), got ",
                 options.stage);
  CHORUS_REQUIRE(!options.offload_optimizer_state || options.stage >= 1, InvalidArgumentError, strategy,
                 ": sharding.offload_optimizer_state needs sharding.stage 1, 2 or 3 (it offloads each replica's "
                 "shards of the optimizer slots to host memory), got stage ",
                 options.stage);
  CHORUS_REQUIRE(options.prefetch_limit >= 0 && options.prefetch_limit <= kMaxPrefetchLimit, InvalidArgumentError,
                 strategy, ": sharding.prefetch_limit must be 0 (no prefetch) to ", kMaxPrefetchLimit,
                 " (layers whose parameters are gathered ahead at ZeRO stage 3), got ", options.prefetch_limit);
}

std::string sharding_description(int stage, int replicas) {
  static const char* const kWhat[] = {"", "optimizer slots", "optimizer slots and gradients",
                                      "optimizer slots, gradients and parameters"};
  if (stage <= 0 || stage > 3) return "; sharding: off (ZeRO stage 0)";
  return chorus::internal::str_cat("; sharding: ZeRO stage ", stage, " (", kWhat[stage], " partitioned over ", replicas,
                                   " replicas)");
}

std::string offload_description(bool offload) {
  return offload ? "; optimizer state offloaded to host memory (ZeRO-Offload)" : "";
}

}  // namespace chorus::distribute
