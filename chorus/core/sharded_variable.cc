#include <chorus/core/sharded_variable.h>

#include <chorus/core/error.h>

namespace chorus {

ShardLayout ShardLayout::of(std::int64_t num_elements, int num_shards) {
  CHORUS_REQUIRE(num_elements >= 0, InvalidArgumentError, "ShardLayout: num_elements must be >= 0, got ", num_elements);
  CHORUS_REQUIRE(num_shards >= 1, InvalidArgumentError, "ShardLayout: num_shards must be >= 1, got ", num_shards);
  return {num_elements, num_shards, (num_elements + num_shards - 1) / num_shards};
}

ShardedVariable* as_sharded(const Variable& v) { return dynamic_cast<ShardedVariable*>(v.impl().get()); }

const ShardedVariable* as_sharded_parameter(const Variable& v) {
  const ShardedVariable* s = as_sharded(v);
  return s != nullptr && s->gathers_parameters() ? s : nullptr;
}

}  // namespace chorus
