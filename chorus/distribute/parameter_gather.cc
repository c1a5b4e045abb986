#include <chorus/distribute/parameter_gather.h>

#include <algorithm>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
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

struct Gathered {
  std::vector<Tensor> shards;  // this replica's shards, as the tape saw them
  std::vector<Tensor> wholes;  // the whole values (one Buffer each)
  std::vector<ShardLayout> layouts;
};

Gathered gather(StrategyReplicaContext& ctx, const std::vector<ZeroVariable*>& vars) {
  Gathered g;
  const std::string device = ctx.owner().replica_devices()[static_cast<std::size_t>(ctx.local_replica_id())];
  for (ZeroVariable* v : vars) {
    g.shards.push_back(v->local_shard());
    g.wholes.push_back(Tensor::empty(v->shape(), v->dtype(), device));
    g.layouts.push_back(v->layout());
  }
  ctx.all_gather_shards(g.shards, g.wholes, g.layouts);
  return g;
}

class LayerGather final : public ParameterGather {
 public:
  LayerGather(StrategyReplicaContext& ctx, std::vector<Variable> vars, std::vector<ZeroVariable*> zero)
      : replica_(ctx.local_replica_id()), vars_(std::move(vars)), zero_(std::move(zero)) {
    keep_ = std::make_shared<std::vector<char>>(zero_.size(), 0);
    const std::vector<Tensor> wholes = gather_whole_values(ctx, zero_, keep_);
    for (ZeroVariable* v : zero_) shards_.push_back(v->local_shard());
    for (std::size_t i = 0; i < zero_.size(); ++i) {
      zero_[i]->set_gathered(replica_, wholes[i]);
      layouts_.push_back(zero_[i]->layout());
    }
    wholes_ = wholes;
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
    ops::internal::record(
        "RegatherParameters", recorded, renamed,
        [shards = shards_, wholes = wholes_, layouts = layouts_](const std::vector<Tensor>& dy) -> std::vector<Tensor> {
          for (const Tensor& w : wholes) w.buffer()->restore();
          backward_collectives("RegatherParameters").all_gather_shards(shards, wholes, layouts);
          return dy;
        });
    for (std::size_t i = 0; i < wholes_.size(); ++i) {
      const bool aliased = std::any_of(
          ys.begin(), ys.end(), [&](const Tensor& y) { return y.defined() && wholes_[i].buffer() == y.buffer(); });
      if (aliased) {
        (*keep_)[i] = 1;  // a layer returning (an alias of) its weight keeps it, in backward too
        continue;
      }
      wholes_[i].buffer()->release();
    }
    return out;
  }

 private:
  void end_call() {
    for (ZeroVariable* v : zero_) v->set_gathered(replica_, Tensor());
    zero_.clear();
  }

  int replica_;
  std::vector<Variable> vars_;  // keeps the variables alive for the call
  std::vector<ZeroVariable*> zero_;
  std::vector<Tensor> shards_, wholes_;
  std::vector<ShardLayout> layouts_;
  std::shared_ptr<std::vector<char>> keep_;  // shared with the GatherParameters node
};

}  // namespace

std::vector<Tensor> gather_whole_values(StrategyReplicaContext& ctx, const std::vector<ZeroVariable*>& vars,
                                        std::shared_ptr<std::vector<char>> keep) {
  Gathered g = gather(ctx, vars);
  if (ops::internal::should_record(g.shards)) {
    ops::internal::record(
        "GatherParameters", g.shards, g.wholes,
        [wholes = g.wholes, layouts = g.layouts, keep](const std::vector<Tensor>& dwholes) -> std::vector<Tensor> {
          // Every replica sends the same list: a whole gradient no op produced is zeros.
          std::vector<Tensor> grads(dwholes.size());
          for (std::size_t i = 0; i < dwholes.size(); ++i)
            grads[i] = dwholes[i].defined()
                           ? dwholes[i]
                           : Tensor::zeros(wholes[i].shape(), wholes[i].dtype(), wholes[i].device_name());
          std::vector<Tensor> shards =
              backward_collectives("GatherParameters").reduce_scatter_shards(ReduceOp::kSum, std::move(grads), layouts);
          // Every use of them has run — unless an outer tape recorded this backward pass, whose own
          // backward will run those uses' gradients again.
          if (keep != nullptr && !ops::internal::should_record(dwholes))
            for (std::size_t i = 0; i < wholes.size(); ++i)
              if (!(*keep)[i]) wholes[i].buffer()->release();
          return shards;
        });
  }
  return g.wholes;
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
