#include <chorus/distribute/parameter_gather.h>

#include <algorithm>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/distribute/gather_prefetch.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/zero_variable.h>
#include <chorus/ops/tape.h>

namespace chorus::distribute {

namespace {

// The replica context running a backward pass (the tape runs it on the replica's thread, inside
// strategy.run), for its sharding collectives.
StrategyReplicaContext& backward_collectives(const char* node) {
  auto* ctx = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
  CHORUS_REQUIRE(ctx != nullptr, FailedPreconditionError, "the gradient of ", node,
                 " (ZeRO stage 3) must be computed in the replica context that recorded it: call tape.gradient "
                 "inside the same strategy.run");
  return *ctx;
}

// Offload (distribute/optimizer_offload.h, "Staging"): starts the host copies of the summed shards
// of the variables whose update ran on the host last time, and hands them to the replica's staging.
void stage_shards(StrategyReplicaContext& ctx, const std::vector<const VariableBase*>& vars,
                  const std::vector<Tensor>& shards) {
  std::shared_ptr<DeviceContext> host;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].defined() || !ctx.staging().wanted(vars[i])) continue;
    if (host == nullptr) host = ctx.offload_host();
    if (host == nullptr) return;
    Tensor copy = Tensor::empty_on(host, shards[i].shape(), shards[i].dtype());
    internal::start_host_copy(shards[i], 0, copy);
    ctx.staging().add(vars[i], shards[i], std::move(copy));
  }
}

std::vector<const VariableBase*> identities(const std::vector<ZeroVariable*>& vars) {
  std::vector<const VariableBase*> out;
  for (const ZeroVariable* v : vars) out.push_back(v);
  return out;
}

// The GatherParameters node (parameter_gather.h) of `shards` (of `vars`) → `wholes`, when a tape
// records the shards.
void record_gather(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                   const std::vector<ShardLayout>& layouts, std::shared_ptr<std::vector<char>> keep,
                   std::vector<const VariableBase*> vars) {
  if (!ops::internal::should_record(shards)) return;
  ops::internal::record(
      "GatherParameters", shards, wholes,
      [wholes, layouts, keep, vars = std::move(vars)](const std::vector<Tensor>& dwholes) -> std::vector<Tensor> {
        // Every replica sends the same list: a whole gradient no op produced is zeros.
        std::vector<Tensor> grads(dwholes.size());
        for (std::size_t i = 0; i < dwholes.size(); ++i)
          grads[i] = dwholes[i].defined()
                         ? dwholes[i]
                         : Tensor::zeros(wholes[i].shape(), wholes[i].dtype(), wholes[i].device_name());
        StrategyReplicaContext& ctx = backward_collectives("GatherParameters");
        std::vector<Tensor> result = ctx.reduce_scatter_shards(ReduceOp::kSum, std::move(grads), layouts);
        stage_shards(ctx, vars, result);
        // Every use of them has run — unless an outer tape recorded this backward pass, whose own
        // backward will run those uses' gradients again.
        if (keep != nullptr && !ops::internal::should_record(dwholes))
          for (std::size_t i = 0; i < wholes.size(); ++i)
            if (!(*keep)[i]) wholes[i].buffer()->release();
        return result;
      });
}

class LayerGather final : public ParameterGather {
 public:
  LayerGather(StrategyReplicaContext& ctx, std::vector<Variable> vars, std::vector<ZeroVariable*> zero)
      : replica_(ctx.local_replica_id()), unit_(std::make_shared<internal::GatherUnit>()) {
    unit_->vars = std::move(vars);
    unit_->zero = std::move(zero);
    for (ZeroVariable* v : unit_->zero) {
      unit_->shards.push_back(v->local_shard());
      unit_->layouts.push_back(v->layout());
    }
    if (internal::GatherPrefetcher* prefetcher = ctx.prefetcher()) {
      prefetcher->forward(unit_);  // taken from a prefetch, or gathered now; then prefetches the next
    } else {
      const std::string device = ctx.owner().replica_devices()[static_cast<std::size_t>(replica_)];
      for (ZeroVariable* v : unit_->zero) unit_->wholes.push_back(Tensor::empty(v->shape(), v->dtype(), device));
      ctx.all_gather_shards(unit_->shards, unit_->wholes, unit_->layouts);
    }
    keep_ = std::make_shared<std::vector<char>>(unit_->zero.size(), 0);
    record_gather(unit_->shards, unit_->wholes, unit_->layouts, keep_, identities(unit_->zero));
    for (std::size_t i = 0; i < unit_->zero.size(); ++i) unit_->zero[i]->set_gathered(replica_, unit_->wholes[i]);
    zero_ = unit_->zero;
  }
  ~LayerGather() override { end_call(); }

  std::vector<Tensor> after_call(const std::vector<Tensor>& ys) override {
    end_call();
    std::vector<Tensor> recorded;  // the floating outputs a tape watches
    for (const Tensor& y : ys)
      if (y.defined() && is_floating(y.dtype()) && ops::internal::should_record({y})) recorded.push_back(y);
    if (recorded.empty()) return ys;  // wholes die
    // The backward pass reaches this node before the layer's ops: it brings the bytes back.
    std::vector<Tensor> out = ys, renamed;
    for (Tensor& y : out)
      if (std::find_if(recorded.begin(), recorded.end(), [&](const Tensor& r) { return r.id() == y.id(); }) !=
          recorded.end()) {
        y = y.reshape(y.shape());  // same storage, an id of its own for the node's output
        renamed.push_back(y);
      }
    ops::internal::record("RegatherParameters", recorded, renamed,
                          [unit = unit_](const std::vector<Tensor>& dy) -> std::vector<Tensor> {
                            StrategyReplicaContext& ctx = backward_collectives("RegatherParameters");
                            if (internal::GatherPrefetcher* prefetcher = ctx.prefetcher()) {
                              prefetcher->backward(unit);  // a prefetch, or gathered now; prefetches the next
                            } else {
                              for (const Tensor& w : unit->wholes) w.buffer()->restore();
                              ctx.all_gather_shards(unit->shards, unit->wholes, unit->layouts);
                            }
                            return dy;
                          });
    for (std::size_t i = 0; i < unit_->wholes.size(); ++i) {
      const Tensor& whole = unit_->wholes[i];
      const bool aliased = std::any_of(ys.begin(), ys.end(),
                                       [&](const Tensor& y) { return y.defined() && whole.buffer() == y.buffer(); });
      if (aliased) {
        (*keep_)[i] = 1;  // a layer returning (an alias of) its weight keeps it, in backward too
        continue;
      }
      whole.buffer()->release();
    }
    return out;
  }

 private:
  void end_call() {
    for (ZeroVariable* v : zero_) v->set_gathered(replica_, Tensor());
    zero_.clear();
  }

  int replica_;
  std::shared_ptr<internal::GatherUnit> unit_;  // shared with the RegatherParameters node and the prefetcher
  std::vector<ZeroVariable*> zero_;             // gathered for the call, until end_call
  std::shared_ptr<std::vector<char>> keep_;     // shared with the GatherParameters node
};

}  // namespace

std::vector<Tensor> gather_whole_values(StrategyReplicaContext& ctx, const std::vector<ZeroVariable*>& vars,
                                        std::shared_ptr<std::vector<char>> keep) {
  const std::string device = ctx.owner().replica_devices()[static_cast<std::size_t>(ctx.local_replica_id())];
  std::vector<Tensor> shards, wholes;
  std::vector<ShardLayout> layouts;
  for (ZeroVariable* v : vars) {
    shards.push_back(v->local_shard());
    wholes.push_back(Tensor::empty(v->shape(), v->dtype(), device));
    layouts.push_back(v->layout());
  }
  ctx.all_gather_shards(shards, wholes, layouts);
  record_gather(shards, wholes, layouts, std::move(keep), identities(vars));
  return wholes;
}

std::unique_ptr<ParameterGather> gather_layer_parameters(StrategyReplicaContext& ctx,
                                                         const std::vector<Variable>& weights) {
  std::vector<Variable> vars;
  std::vector<ZeroVariable*> zero;
  for (const Variable& w : weights) {
    auto* z = dynamic_cast<ZeroVariable*>(w.impl().get());
    if (z == nullptr || !z->gathers_parameters() || &z->strategy() != &ctx.owner()) continue;
    if (z->gathered(ctx.local_replica_id()).defined()) continue;  // an enclosing call has it
    vars.push_back(w);
    zero.push_back(z);
  }
  if (zero.empty()) return nullptr;
  return std::make_unique<LayerGather>(ctx, std::move(vars), std::move(zero));
}

}  // namespace chorus::distribute
