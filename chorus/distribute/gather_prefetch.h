// ZeRO stage 3's prefetch (FSDP's forward_prefetch and backward_prefetch, with limit_all_gathers):
// while a layer runs, the all-gathers of the next layers' parameters run on the replica's
// communication thread (distribute/comm_worker.h) instead of on the critical path.
//
// Order. FSDP records the order of its units on the first iteration; so does this: every layer
// call's gather of a step (forward, in call order) and every RegatherParameters node that ran
// (backward, in the order the backward pass reached them) is observed, and at the end of the step
// (StrategyReplicaContext::end_step) the observed orders become the recorded ones when they
// differ (a step without a backward pass keeps the recorded backward order). In the next step,
// once layer call k of the recorded forward order gathered, the gathers of calls k+1..k+limit are
// issued; once the backward pass regathered call p, the regathers of the next `limit` calls of the
// recorded backward order. The first step prefetches nothing.
//
// Matching. A layer call takes the oldest gather in flight when it is for its own parameters (the
// same variables, in order; backward: the same call of this step); otherwise everything in flight
// is waited for and dropped (those collectives still ran, on every replica alike) and the call
// gathers on its own thread, as without prefetch, and prefetching stops until the step ends. So a
// step whose calls differ from the recorded ones (another model, a branch) is correct, only slower.
//
// Collectives. Every replica observes the same calls, so it records the same order and issues the
// same prefetches in the same order: they are the gathers all_gather_shards runs, queued on the
// communication thread, which a collective of the replica thread waits for first (comm()), so the
// collectives meet in one order everywhere. The gathered bytes are those of the gather without
// prefetch: the weights are bitwise the same.
//
// Memory. At most `limit` gathers are in flight, each holding one layer call's whole parameters,
// plus the running call's: whole parameters of at most limit + 1 layer calls at once (nested calls
// add their enclosing calls'). A backward prefetch restores the call's released storage when it is
// issued; it is released again by the call's GatherParameters node, as without prefetch.
//
// Safety. The worker writes a prefetched call's wholes (fresh storage in forward; storage nobody
// reads, released until then, in backward — a call whose storage is live is not prefetched) and
// reads the shards: settle() (ReplicaStepPolicy::update, before the optimizer writes shards in
// place; end_step) waits for all of it.
//
// Thread-safety: the replica thread only (the communication thread runs what it is handed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include <chorus/core/sharded_variable.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus::distribute {

class StrategyReplicaContext;
class ZeroVariable;

namespace internal {

struct PendingGather;

// One layer call's stage-3 parameters (FSDP's unit): what it gathers, and where.
struct GatherUnit {
  std::vector<Variable> vars;  // keeps the variables alive for the call
  std::vector<ZeroVariable*> zero;
  std::vector<Tensor> shards;  // this replica's, as the tape saw them
  std::vector<Tensor> wholes;  // the whole values (one Buffer each)
  std::vector<ShardLayout> layouts;
  std::size_t position = 0;  // among this step's layer-call gathers (set by forward())
};

class GatherPrefetcher {
 public:
  GatherPrefetcher(StrategyReplicaContext& ctx, int limit);
  // Waits for what is in flight (a failed collective is reported where the step waits).
  ~GatherPrefetcher();
  GatherPrefetcher(const GatherPrefetcher&) = delete;
  GatherPrefetcher& operator=(const GatherPrefetcher&) = delete;

  // A layer call's gather (zero, vars, shards, layouts set): fills unit->wholes with the whole
  // values (a prefetched gather, or gathered now), then issues the next prefetches. A collective.
  void forward(const std::shared_ptr<GatherUnit>& unit);
  // The RegatherParameters node of `unit` (a call of this step): restores unit->wholes' storage and
  // fills it again, then issues the next prefetches. A collective.
  void backward(const std::shared_ptr<GatherUnit>& unit);
  // Waits for every gather in flight and drops it (their errors are rethrown).
  void settle();
  // The step is over: settle(), then the observed orders become the recorded ones.
  void end_step();

  // Since construction: gathers issued ahead, and of those taken by their call (the rest were dropped).
  struct Stats {
    std::int64_t issued = 0;
    std::int64_t taken = 0;
  };
  Stats stats() const { return stats_; }

 private:
  // A layer call as the orders record it: its variables (weakly: a model may go between steps).
  struct Call {
    std::vector<const VariableBase*> ids;
    std::vector<std::weak_ptr<VariableBase>> vars;
  };
  struct InFlight {
    bool backward = false;
    std::size_t index = 0;                 // in the recorded order it was issued from
    std::vector<const VariableBase*> ids;  // forward: the call's variables
    std::vector<Variable> vars;            // forward: kept alive while in flight
    std::shared_ptr<GatherUnit> unit;      // backward: the call whose storage it fills
    std::shared_ptr<PendingGather> pending;
  };
  static constexpr std::size_t kStopped = std::numeric_limits<std::size_t>::max();

  void issue_forward();
  void issue_backward(const GatherUnit* running);

  StrategyReplicaContext& ctx_;
  const std::size_t limit_;
  std::vector<Call> recorded_forward_, observed_forward_;
  std::vector<std::size_t> recorded_backward_, observed_backward_;  // positions of the step's calls
  // This step's layer-call gathers, by position (weakly: a call no tape recorded dies after it).
  std::vector<std::weak_ptr<GatherUnit>> calls_;
  std::deque<InFlight> in_flight_;
  std::size_t forward_next_ = 0, backward_next_ = 0;  // the next recorded entry to issue; kStopped: none
  std::size_t forward_at_ = 0, backward_at_ = 0;      // the next recorded entry expected; kStopped: lost
  Stats stats_;
};

}  // namespace internal
}  // namespace chorus::distribute
