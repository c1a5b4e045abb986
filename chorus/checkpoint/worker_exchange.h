// Internal to checkpoint/: what a sharded save needs to know about the worker processes of a
// strategy, and the one collective it makes — every worker's small metadata (never tensor data)
// gathered to every worker. Only here does checkpoint/ look past core/'s DistributionStrategy
// into distribute/'s Strategy (worker index and offset, gather); the rest of checkpoint/ sees
// sharded variables through core/sharded_variable.h.
//
// Thread-safety: call from the program's thread in cross-replica context, every worker in the
// same order (gather_across_workers is a collective with the strategy's timeout: a worker that
// does not arrive makes the others throw DeadlineExceededError/AbortedError, never hang).
#pragma once

#include <string>

#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>

namespace chorus::train::internal {

struct WorkerGroup {
  int num_workers = 1;
  int worker_index = 0;
};

// The worker processes of `strategy` (MultiWorkerMirroredStrategy: its workers; any other: one).
WorkerGroup worker_group(const DistributionStrategy& strategy);
// Every worker's `mine`, concatenated in worker order (one worker: `mine`). A collective.
std::string gather_across_workers(const DistributionStrategy& strategy, const std::string& mine);
// The global shard index of `variable`'s first local component (its strategy's worker_offset()).
int first_local_shard(const ShardedVariable& variable);

}  // namespace chorus::train::internal
