#include <chorus/distribute/step_policy.h>

#include <unordered_set>

#include <chorus/core/error.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/gather_prefetch.h>
#include <chorus/distribute/optimizer_offload.h>
#include <chorus/distribute/overlapped_reduction.h>
#include <chorus/distribute/parameter_gather.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/strategy.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

namespace {

// Whether `state` (a variable's first slot) is sharded: the variable is then updated in slices.
const ShardedVariable* sharded_state(const Variable& state) { return state.defined() ? as_sharded(state) : nullptr; }

// One variable updated slice-wise (ZeRO stages 1-2): `whole` is this replica's component of the
// variable, `slice` the updated copy of this replica's part of it.
struct SlicedUpdate {
  Tensor whole;
  Tensor slice;
  ShardLayout layout;
};

}  // namespace

ReplicaStepPolicy::ReplicaStepPolicy(Strategy& strategy, StrategyReplicaContext* ctx)
    : strategy_(strategy), ctx_(ctx) {}

int ReplicaStepPolicy::replica() const { return ctx_ != nullptr ? ctx_->replica_id_in_sync_group() : 0; }

std::shared_ptr<GradientReduction> ReplicaStepPolicy::begin_gradient_sum(const std::vector<Tensor>& sources) {
  if (ctx_ == nullptr) return nullptr;
  if (strategy_.sharding_stage() < 2) return ctx_->begin_overlapped_sum(sources);
  // Stages 2-3: what becomes of each gradient depends on the optimizer's slots, which the policy
  // saw at the last sum of a list like this one (the first step of an optimizer learns it, and
  // does not overlap). sum_gradients checks the plan against the slots before taking the sums.
  if (planned_.size() != sources.size()) return nullptr;
  std::vector<char> kinds(sources.size(), 0);
  std::vector<const void*> to_host(sources.size(), nullptr);
  std::vector<ShardLayout> layouts(sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const Planned& p = planned_[i];
    if (sources[i].defined() != p.defined) return nullptr;
    if (!p.defined) continue;
    if (sources[i].shape() != p.shape || sources[i].dtype() != p.dtype) return nullptr;
    kinds[i] = p.kind;
    layouts[i] = p.layout;
    if (ctx_->staging().wanted(p.variable)) to_host[i] = p.variable;  // offload: see optimizer_offload.h
  }
  std::shared_ptr<GradientReduction> sum = ctx_->begin_overlapped_sharded_sum(sources, kinds, layouts, to_host);
  begun_ = sum;
  begun_kinds_ = std::move(kinds);
  return sum;
}

std::unique_ptr<ParameterGather> ReplicaStepPolicy::gather_parameters(const std::vector<Variable>& weights) {
  if (ctx_ == nullptr || strategy_.sharding_stage() < 3) return nullptr;
  return gather_layer_parameters(*ctx_, weights);
}

std::vector<StepPolicy::Summed> ReplicaStepPolicy::sum_gradients(std::vector<Tensor>&& grads,
                                                                 const std::vector<Variable>& vars,
                                                                 const std::vector<Variable>& state,
                                                                 std::shared_ptr<GradientReduction> begun) {
  CHORUS_ENFORCE(grads.size() == vars.size() && state.size() == vars.size(), "sum_gradients: ", grads.size(),
                 " gradients, ", vars.size(), " variables, ", state.size(), " states");
  std::vector<Summed> out(grads.size());
  auto* overlapped = dynamic_cast<internal::OverlappedReduction*>(begun.get());
  CHORUS_REQUIRE(begun == nullptr || (ctx_ != nullptr && overlapped != nullptr && overlapped->fits(grads)),
                 InvalidArgumentError,
                 "apply_gradients: the gradient sum passed with the gradients was begun for other gradients (another "
                 "list, another strategy, or outside this replica's run); pass the one GradientTape::gradient_and_sum "
                 "returned with them");
  // Stage 3's parameters: the backward pass summed them already, into this replica's shard.
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (grads[i].defined() && as_sharded_parameter(vars[i]) != nullptr) out[i] = {std::move(grads[i]), true};
  if (ctx_ == nullptr) {  // one replica in cross-replica context: the sums are the gradients
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (grads[i].defined()) out[i].gradient = std::move(grads[i]);
    return out;
  }
  if (strategy_.sharding_stage() >= 2) {
    std::vector<Summed> scattered = sharded_sums(std::move(grads), vars, state, overlapped);
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (scattered[i].gradient.defined()) out[i] = std::move(scattered[i]);
    return out;
  }
  std::vector<Tensor> sums;
  if (overlapped != nullptr && overlapped->complete()) {
    grads.clear();  // the sums were reduced during the backward pass: the local gradients can go
    sums = overlapped->take();
  } else {
    // One packed all-reduce of the whole list, undefined entries in their places (the packs are
    // then the ones an overlapped sum of the same list uses).
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (out[i].gradient.defined()) grads[i] = Tensor();
    sums = ctx_->all_reduce(ReduceOp::kSum, grads);
    grads.clear();
  }
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (!out[i].gradient.defined()) out[i].gradient = std::move(sums[i]);
  return out;
}

std::vector<StepPolicy::Summed> ReplicaStepPolicy::sharded_sums(std::vector<Tensor>&& grads,
                                                                const std::vector<Variable>& vars,
                                                                const std::vector<Variable>& state,
                                                                internal::OverlappedReduction* overlapped) {
  // Whose gradients are reduce-scattered depends on the slots' layout (the optimizer built them
  // before): kind 2 for those, 1 (all-reduced whole) for the rest, 0 for none or a stage-3 parameter.
  std::vector<char> kinds(grads.size(), 0);
  std::vector<ShardLayout> layouts(grads.size());
  std::vector<Planned> planned(grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    planned[i].variable = vars[i].impl().get();
    planned[i].defined = grads[i].defined();
    if (!grads[i].defined()) continue;
    planned[i].shape = grads[i].shape();
    planned[i].dtype = grads[i].dtype();
    if (as_sharded_parameter(vars[i]) != nullptr) continue;
    const ShardedVariable* sv = sharded_state(state[i]);
    kinds[i] = sv != nullptr ? 2 : 1;
    if (sv != nullptr) layouts[i] = sv->layout();
    planned[i].kind = kinds[i];
    planned[i].layout = layouts[i];
  }
  planned_ = std::move(planned);  // the next begin_gradient_sum plans from it
  std::vector<Summed> out(grads.size());
  // Overlapped: the backward pass reduced exactly these buckets (the same on every replica, whose
  // optimizers built the same slots) — unless the slots changed since it was planned.
  const bool take =
      overlapped != nullptr && overlapped == begun_.lock().get() && begun_kinds_ == kinds && overlapped->complete();
  if (take) {
    grads.clear();
    std::vector<Tensor> sums = overlapped->take();
    const std::string device = strategy_.replica_devices()[static_cast<std::size_t>(ctx_->local_replica_id())];
    for (std::size_t i = 0; i < sums.size(); ++i) {
      if (kinds[i] == 2 && !sums[i].defined())  // a value without elements is in no bucket
        sums[i] = Tensor::zeros({0}, planned_[i].dtype, device);
      if (kinds[i] != 0) out[i] = {std::move(sums[i]), kinds[i] == 2};
    }
    return out;
  }
  if (overlapped != nullptr) overlapped->abandon();  // its buckets ran for nothing
  // One packed all-reduce of the whole ones in their places (the packs an overlapped sum of the
  // same list moves), then one packed reduce-scatter of the others, in order.
  std::vector<Tensor> whole(grads.size()), to_scatter;
  std::vector<ShardLayout> scatter_layouts;
  bool any_whole = false;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (kinds[i] == 1) {
      whole[i] = std::move(grads[i]);
      any_whole = true;
    } else if (kinds[i] == 2) {
      to_scatter.push_back(std::move(grads[i]));
      scatter_layouts.push_back(layouts[i]);
    }
  }
  if (any_whole) whole = ctx_->all_reduce(ReduceOp::kSum, whole);
  std::vector<Tensor> shards;
  if (!to_scatter.empty())  // releases each local gradient once packed (or sent as it is)
    shards = ctx_->reduce_scatter_shards(ReduceOp::kSum, std::move(to_scatter), scatter_layouts);
  for (std::size_t i = 0, b = 0; i < grads.size(); ++i) {
    if (kinds[i] == 1) out[i] = {std::move(whole[i]), false};
    if (kinds[i] == 2) out[i] = {std::move(shards[b++]), true};
  }
  return out;
}

Tensor ReplicaStepPolicy::sum_partials(const Tensor& partial) {
  return ctx_ != nullptr ? ctx_->all_reduce(ReduceOp::kSum, partial) : partial;
}

void ReplicaStepPolicy::update(const std::vector<Variable>& vars, std::vector<Summed>&& summed,
                               const std::vector<std::vector<Variable>>& slots, const UpdateFn& fn) {
  // Stage 3: no prefetched gather may still read a shard the update writes in place.
  if (internal::GatherPrefetcher* prefetcher = ctx_ != nullptr ? ctx_->prefetcher() : nullptr) prefetcher->settle();
  std::vector<SlicedUpdate> sliced;
  std::vector<internal::UpdateJob> jobs;
  const int r = replica();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const ShardedVariable* parameter = as_sharded_parameter(vars[i]);
    Tensor w = parameter != nullptr ? parameter->local_shard() : vars[i].value();
    w = w.reshape(w.shape());                  // same storage, a fresh id no tape knows (ops::stop_gradient)
    Tensor g = std::move(summed[i].gradient);  // released with `g` (stage 1: the whole sum, once sliced)
    // Offload: the copy of this very gradient started during the backward pass, if any.
    Tensor staged = ctx_ != nullptr ? ctx_->staging().take(g) : Tensor();
    const std::uint64_t summed_id = g.id();
    if (g.device_name() != w.device_name()) g = g.to(w.device_name());
    const ShardedVariable* layout_of =
        parameter != nullptr ? parameter : sharded_state(slots[i].empty() ? Variable() : slots[i].front());
    Tensor target = w;  // what the update writes: the weight, its shard, or a copy of this replica's slice
    if (parameter == nullptr && layout_of != nullptr) {
      const ShardLayout& layout = layout_of->layout();
      CHORUS_ENFORCE(layout.num_elements == w.num_elements(), "slot of '", vars[i].name(), "' has ",
                     layout.num_elements, " elements, the variable ", w.num_elements());
      const std::vector<std::int64_t> begin{layout.begin(r)}, length{layout.length(r)};
      if (summed[i].slice)
        CHORUS_ENFORCE(g.num_elements() == layout.length(r), "reduced slice of '", vars[i].name(), "' has ",
                       g.num_elements(), " elements, the layout ", layout.length(r));
      else
        g = ops::slice(ops::reshape(g, {-1}), begin, length);
      target = ops::slice(ops::reshape(w, {-1}), begin, length);  // a copy: tensors have no offset views
      sliced.push_back({w, target, layout});
    }
    std::vector<Tensor> parts;
    parts.reserve(slots[i].size());
    for (const Variable& s : slots[i]) {
      const ShardedVariable* sv = as_sharded(s);
      CHORUS_ENFORCE((sv != nullptr) == (layout_of != nullptr), "slots of '", vars[i].name(), "' are partly sharded");
      parts.push_back(sv != nullptr ? sv->local_shard() : s.value());
    }
    if (g.id() != summed_id) staged = Tensor();  // moved or sliced here: not the tensor staged
    jobs.push_back({i, std::move(g), target, std::move(parts), std::move(staged)});
  }
  // In place, or on the host where the slots were offloaded (distribute/optimizer_offload.h).
  const OffloadCounters counted = internal::run_updates(jobs, fn);
  if (ctx_ != nullptr) {
    // The next backward pass stages the gradients of the variables updated on the host now, less
    // those whose staged copy this update could not take (the optimizer changed the gradient).
    const std::unordered_set<const void*> untaken = ctx_->staging().untaken();
    std::unordered_set<const void*> on_host;
    for (const internal::UpdateJob& job : jobs)
      if (job.on_host && untaken.count(vars[job.index].impl().get()) == 0) on_host.insert(vars[job.index].impl().get());
    ctx_->staging().plan(std::move(on_host));
    ctx_->staging().clear();
    strategy_.counters_.offload_staged.fetch_add(counted.staged, std::memory_order_relaxed);
    strategy_.counters_.offload_copied.fetch_add(counted.copied, std::memory_order_relaxed);
  }
  jobs.clear();
  if (sliced.empty()) return;
  // Every replica's updated slices into each replica's whole weight, in place: one all-gather
  // (large weights are its output directly, small ones share padded packs).
  if (ctx_ != nullptr) {
    std::vector<Tensor> slices, wholes;
    std::vector<ShardLayout> layouts;
    for (const SlicedUpdate& u : sliced) {
      slices.push_back(u.slice);
      wholes.push_back(u.whole);
      layouts.push_back(u.layout);
    }
    ctx_->all_gather_shards(slices, wholes, layouts);
    return;
  }
  for (const SlicedUpdate& u : sliced) {  // one replica in cross-replica context: its slice is the whole
    CHORUS_ENFORCE(u.layout.num_shards == 1, "a sliced update over ", u.layout.num_shards,
                   " replicas outside their strategy.run");
    Tensor whole = u.whole;
    if (u.layout.num_elements > 0) whole.copy_from(ops::reshape(u.slice, whole.shape().dims()));
  }
}

}  // namespace chorus::distribute
