#include <chorus/core/step_policy.h>

#include <chorus/core/error.h>

namespace chorus {
namespace {

// The default strategy's policy: one replica, so nothing to sum and every variable updated whole.
// A strategy's sharded variable has no whole storage to update here: it must be updated inside
// its strategy (whose policy knows its layout).
class OneReplicaPolicy final : public StepPolicy {
 public:
  std::vector<Summed> sum_gradients(std::vector<Tensor>&& grads, const std::vector<Variable>& vars,
                                    const std::vector<Variable>& state,
                                    std::shared_ptr<GradientReduction> begun) override {
    (void)vars;
    (void)state;
    CHORUS_REQUIRE(begun == nullptr, InvalidArgumentError,
                   "apply_gradients: a gradient sum begun under a strategy was passed outside its strategy.run");
    std::vector<Summed> out(grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) out[i].gradient = std::move(grads[i]);
    return out;
  }

  Tensor sum_partials(const Tensor& partial) override { return partial; }

  void update(const std::vector<Variable>& vars, std::vector<Summed>&& summed,
              const std::vector<std::vector<Variable>>& slots, const UpdateFn& fn) override {
    std::vector<UpdateItem> items(vars.size());
    for (std::size_t i = 0; i < vars.size(); ++i) {
      require_whole(vars[i]);
      UpdateItem& item = items[i];
      item.index = i;
      // Same storage, a fresh id no tape knows (ops::stop_gradient): the update is not recorded.
      item.weight = vars[i].value();
      item.weight = item.weight.reshape(item.weight.shape());
      item.gradient = std::move(summed[i].gradient);
      if (item.gradient.device_name() != item.weight.device_name())
        item.gradient = item.gradient.to(item.weight.device_name());
      item.slots.reserve(slots[i].size());
      for (const Variable& s : slots[i]) {
        require_whole(s);
        item.slots.push_back(s.value());
      }
    }
    if (!items.empty()) fn(items);
  }

 private:
  static void require_whole(const Variable& v) {
    CHORUS_REQUIRE(as_sharded(v) == nullptr, FailedPreconditionError, "apply_gradients: '", v.name(),
                   "' is sharded over the replicas of its strategy (ZeRO); update it inside that strategy's "
                   "scope or run");
  }
};

// Stateless: one instance serves every thread.
StepPolicy& one_replica_policy() {
  static OneReplicaPolicy policy;
  return policy;
}

}  // namespace

StepPolicy& ReplicaContext::step_policy() { return one_replica_policy(); }
StepPolicy& DistributionStrategy::step_policy() { return one_replica_policy(); }

StepPolicy& step_policy() {
  if (ReplicaContext* ctx = get_replica_context()) return ctx->step_policy();
  return get_strategy().step_policy();
}

}  // namespace chorus
