#include <chorus/optimizer/optimizer.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/strings.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/finite.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/training.h>
#include <chorus/optimizer/clipping.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

using chorus::internal::join;
using chorus::internal::str_cat;

struct Optimizer::State {
  struct Entry {
    Variable variable;            // keeps the key alive
    std::vector<Variable> slots;  // in slot_names() order
    Variable accumulator;         // gradient_accumulation_steps only (undefined otherwise)
  };
  // Guards entries/index: replicas look slots up concurrently while a merge_call creates them.
  mutable std::mutex mu;
  std::deque<Entry> entries;  // creation order (variables()); a deque so Entry pointers stay valid
  std::unordered_map<const VariableBase*, std::size_t> index;
  std::atomic<bool> warned_missing{false};
  bool built = false;
  std::unordered_set<const VariableBase*> no_decay;
  std::vector<std::string> no_decay_names;
  // The scalar blocks of captured steps (prepare_step), per replica device.
  mutable std::mutex blocks_mu;
  std::map<const DeviceContext*, Tensor> blocks;
  // The host's copy of replica components of `iterations` (Optimizer::read_iterations): the
  // component's storage, its write count when the copy was made, the value.
  struct CounterCopy {
    std::weak_ptr<Buffer> storage;
    std::uint64_t writes = 0;
    std::int64_t value = 0;
  };
  mutable std::mutex counter_mu;
  std::vector<CounterCopy> counter_copies;

  const Entry* find(const Variable& v) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = index.find(v.impl().get());
    return it == index.end() ? nullptr : &entries[it->second];
  }
};

namespace {

constexpr chorus::internal::JoinOptions kQuoted{.quote = "'"};  // names in messages: ['a', 'b']
// The checkpoint name of a variable's gradient accumulator (Keras 3's variable name).
constexpr const char* kAccumulatorSlot = "gradient_accumulator";

// This replica's part of an accumulator: its component (ON_READ) or its shard (stage 3); the only
// component in cross-replica context of one replica.
Tensor accumulator_part(const Variable& acc, ReplicaContext* ctx) {
  if (const ShardedVariable* s = as_sharded(acc)) return s->local_shard();
  if (const DistributedVariable* d = as_distributed(acc); d != nullptr && ctx == nullptr)
    return d->components()[0].value();
  return acc.value();
}

void require_positive(const std::optional<double>& v, const char* what) {
  if (v)
    CHORUS_REQUIRE(std::isfinite(*v) && *v > 0.0, InvalidArgumentError, "`", what, "` must be a number > 0, got ", *v);
}

std::string describe(const Tensor& t) {
  return str_cat("shape ", t.shape().to_string(), " and dtype ", dtype_name(t.dtype()));
}

// Under a strategy with more than one replica, each replica updates its own component: that only
// makes sense for ON_WRITE distributed (mirrored) variables of the strategy this replica belongs
// to. A plain variable would be updated by every replica (a race, and the update applied n times);
// a mirrored one of n > 1 replicas outside its run would have only its primary updated.
void check_replicated(const Variable& v, ReplicaContext* ctx, const char* what) {
  const DistributedVariable* dv = as_distributed(v);
  const int replicas = ctx != nullptr ? ctx->num_replicas_in_sync() : 1;
  if (dv == nullptr) {
    CHORUS_REQUIRE(replicas == 1, InvalidArgumentError, "apply_gradients: ", what, " '", v.name(),
                   "' is not mirrored, but the update runs in replica ", ctx->replica_id_in_sync_group(), " of ",
                   replicas, " of ", ctx->strategy().name(),
                   ": create the variables and the optimizer inside strategy.scope() so that every replica has "
                   "its own copy");
    return;
  }
  if (dv->components().size() == 1 && replicas == 1) return;
  const bool same = ctx != nullptr && &dv->strategy() == &ctx->strategy();
  CHORUS_REQUIRE(same, InvalidArgumentError, "apply_gradients: ", what, " '", v.name(), "' is mirrored over ",
                 dv->components().size(), " replicas of ", dv->strategy().name(),
                 ", but the update does not run in a replica of that strategy: call apply_gradients inside its "
                 "strategy.run");
  CHORUS_REQUIRE(dv->synchronization() == VariableSynchronization::kOnWrite, InvalidArgumentError,
                 "apply_gradients: ", what, " '", v.name(),
                 "' is an ON_READ variable; optimizers update ON_WRITE (mirrored) variables only");
}

// The finite check shared by the replicas when some gradients are this replica's slices:
// Σ (g − g) over the slices in float64, summed over the replicas (the policy's sum_partials) — 0
// when every element of every replica's slices is finite, NaN otherwise (inf − inf and NaN − NaN
// are NaN), the same bits on every replica. No collective when this replica holds no slice (then
// no replica does).
Tensor shared_finite_probe(StepPolicy& policy, const std::vector<Tensor>& slices) {
  Tensor total;
  for (const Tensor& g : slices) {
    Tensor s = ops::reduce_sum(ops::cast(ops::sub(g, g), DType::kFloat64));
    total =
        total.defined() ? ops::add(total, s.device_name() == total.device_name() ? s : s.to(total.device_name())) : s;
  }
  if (!total.defined()) return Tensor::scalar<double>(0.0);
  return policy.sum_partials(total);
}

// check_numerics (optimizer.h): throws, on every replica alike, when a summed gradient holds NaN
// or Inf. `slice` (when some gradient is sliced) marks this replica's slices: their check is
// shared through shared_finite_probe; whole gradients are the same bits everywhere. The variable
// named is the first, in the list's order, whose gradient (or this replica's slice of it) is bad.
void check_gradients_finite(const std::string& who, const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                            const std::vector<char>* slice, StepPolicy& policy, const Variable& iterations) {
  bool finite;
  if (slice != nullptr) {
    std::vector<Tensor> slices, whole;
    for (std::size_t i = 0; i < grads.size(); ++i) ((*slice)[i] ? slices : whole).push_back(grads[i]);
    const double probe = shared_finite_probe(policy, slices).to("/CPU:0").item<double>();
    finite = std::isfinite(probe) && ops::all_finite(whole);
  } else {
    finite = ops::all_finite(grads);
  }
  if (finite) return;
  const std::int64_t step = iterations.value().to("/CPU:0").item<std::int64_t>() + 1;
  std::string culprit = "a slice of a gradient that another replica holds (ZeRO)";
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!ops::all_finite(grads[i])) {
      culprit = chorus::internal::str_cat("the gradient of variable '", vars[i].name(), "'");
      break;
    }
  }
  throw InvalidArgumentError(chorus::internal::str_cat(
      who, ".apply_gradients: ", culprit, " holds NaN or Inf at step ", step,
      " (after the all-reduce, before the update: no weight was changed); training stopped "
      "(tf.debugging.check_numerics). Check the input data for NaN/Inf, lower the learning rate, or clip the "
      "gradients (clipnorm)"));
}

// Clipping when some gradients are this replica's slices of their sums (`slice[i]`), the others
// whole sums (identical on every replica). clipvalue is elementwise; clipnorm and global_clipnorm
// need whole norms: each replica's float64 sums of squares of its slices, ONE sum over the
// replicas of them ([V]: one per sliced gradient), plus the whole gradients' own sums.
std::vector<Tensor> clip_slices(const CommonOptions& common, std::vector<Tensor> grads, const std::vector<char>& slice,
                                StepPolicy& policy) {
  if (common.clipvalue) {
    for (Tensor& g : grads) g = clip_by_value(g, -*common.clipvalue, *common.clipvalue);
    return grads;
  }
  if (!common.clipnorm && !common.global_clipnorm) return grads;
  std::vector<std::size_t> sliced;
  std::vector<Tensor> partial;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!slice[i]) continue;
    sliced.push_back(i);
    Tensor p = ops::reshape(sum_of_squares(grads[i]), {1});
    if (!partial.empty() && p.device_name() != partial[0].device_name()) p = p.to(partial[0].device_name());
    partial.push_back(p);
  }
  Tensor sums;  // [V] float64: the whole sums of squares of the sliced gradients
  if (!partial.empty()) sums = policy.sum_partials(partial.size() == 1 ? partial[0] : ops::concat(partial, 0));
  if (common.clipnorm) {
    for (std::size_t k = 0; k < sliced.size(); ++k) {
      const std::size_t i = sliced[k];
      const Tensor norm = ops::sqrt(ops::reshape(ops::slice(sums, {static_cast<std::int64_t>(k)}, {1}), {}));
      grads[i] = clip_by_norm(grads[i], *common.clipnorm, norm);
    }
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (!slice[i]) grads[i] = clip_by_norm(grads[i], *common.clipnorm);
    return grads;
  }
  Tensor total = sums.defined() ? ops::reduce_sum(sums) : Tensor();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (slice[i] || !grads[i].defined()) continue;
    Tensor s = sum_of_squares(grads[i]);
    if (!total.defined()) {
      total = s;
    } else {
      if (s.device_name() != total.device_name()) s = s.to(total.device_name());
      total = ops::add(total, s);
    }
  }
  const Tensor norm = total.defined() ? ops::sqrt(total) : Tensor::scalar<double>(0.0);
  return clip_by_global_norm(grads, *common.global_clipnorm, norm);
}

}  // namespace

Optimizer::Optimizer(std::string name, LearningRate learning_rate, const CommonOptions& common)
    : name_(std::move(name)),
      learning_rate_(std::move(learning_rate)),
      common_(common),
      state_(std::make_unique<State>()) {
  const int set =
      int(common.clipnorm.has_value()) + int(common.clipvalue.has_value()) + int(common.global_clipnorm.has_value());
  CHORUS_REQUIRE(set <= 1, InvalidArgumentError,
                 "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: clipnorm=",
                 detail::format_number(common.clipnorm), ", clipvalue=", detail::format_number(common.clipvalue),
                 ", global_clipnorm=", detail::format_number(common.global_clipnorm));
  require_positive(common.clipnorm, "clipnorm");
  require_positive(common.clipvalue, "clipvalue");
  require_positive(common.global_clipnorm, "global_clipnorm");
  if (common.weight_decay)
    CHORUS_REQUIRE(std::isfinite(*common.weight_decay) && *common.weight_decay >= 0.0, InvalidArgumentError,
                   "`weight_decay` must be a number >= 0, got ", *common.weight_decay);
  if (common.gradient_accumulation_steps)
    CHORUS_REQUIRE(*common.gradient_accumulation_steps >= 2, InvalidArgumentError,
                   "`gradient_accumulation_steps` must be an integer >= 2. Received: gradient_accumulation_steps=",
                   *common.gradient_accumulation_steps);
  // Keras 3 creates `iterations` in the constructor, through the strategy's creator when one is
  // active (ONLY_FIRST_REPLICA: a replica-context assign would broadcast replica 0's value; we
  // never do that, every replica increments its own component).
  iterations_ = make_variable({.initial_value = Tensor::zeros({}, DType::kInt64, "/cpu:0"),
                               .name = name_ + "/iterations",
                               .trainable = false,
                               .synchronization = VariableSynchronization::kOnWrite,
                               .aggregation = VariableAggregation::kOnlyFirstReplica});
}

Optimizer::Optimizer(std::string name, WrapperTag)
    : name_(std::move(name)), learning_rate_(0.0), state_(std::make_unique<State>()) {}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

void Optimizer::update_in_place(Tensor& component, const Tensor& value) { component.copy_from(value); }

double Optimizer::learning_rate() const {
  if (!learning_rate_.is_schedule()) return learning_rate_.at(0);
  return learning_rate_.at(iterations_.value().item<std::int64_t>() / accumulation_steps());
}

int Optimizer::accumulation_steps() const { return common_.gradient_accumulation_steps.value_or(1); }

const LearningRate& Optimizer::learning_rate_spec() const { return learning_rate_; }
void Optimizer::set_learning_rate(LearningRate learning_rate) { learning_rate_ = std::move(learning_rate); }
const Variable& Optimizer::iterations() const { return iterations_; }

std::vector<Variable> Optimizer::variables() const {
  std::vector<Variable> out{iterations_};
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& e : state_->entries) {
    out.insert(out.end(), e.slots.begin(), e.slots.end());
    if (e.accumulator.defined()) out.push_back(e.accumulator);
  }
  return out;
}

Variable Optimizer::get_slot(const Variable& var, std::string_view slot_name) const {
  CHORUS_REQUIRE(var.defined(), InvalidArgumentError, "get_slot: undefined variable");
  const std::vector<std::string> names = slot_names_impl();
  const auto pos = std::find(names.begin(), names.end(), slot_name);
  CHORUS_REQUIRE(pos != names.end(), NotFoundError, name_, " has no slot '", slot_name, "'; its slots are [",
                 join(names, kQuoted), "]");
  const State::Entry* e = state_->find(var);
  CHORUS_REQUIRE(e != nullptr, NotFoundError, name_, " has no slots for variable '", var.name(),
                 "' yet: they are created by build() or the first apply_gradients");
  return e->slots[static_cast<std::size_t>(pos - names.begin())];
}

void Optimizer::exclude_from_weight_decay(const std::vector<Variable>& vars,
                                          const std::vector<std::string>& var_names) {
  std::lock_guard<std::mutex> lock(state_->mu);
  CHORUS_REQUIRE(!state_->built, FailedPreconditionError,
                 "`exclude_from_weight_decay()` can only be configured before the optimizer is built (", name_,
                 " already has slots)");
  for (const Variable& v : vars) {
    CHORUS_REQUIRE(v.defined(), InvalidArgumentError, "exclude_from_weight_decay: undefined variable");
    state_->no_decay.insert(v.impl().get());
  }
  state_->no_decay_names.insert(state_->no_decay_names.end(), var_names.begin(), var_names.end());
}

bool Optimizer::uses_weight_decay(const Variable& var) const {
  if (!common_.weight_decay || *common_.weight_decay == 0.0) return false;
  // Read-only after build (exclude_from_weight_decay refuses once built), so no lock.
  if (state_->no_decay.count(var.impl().get()) != 0) return false;
  for (const std::string& n : state_->no_decay_names)
    if (var.name().find(n) != std::string::npos) return false;
  return true;
}

void Optimizer::build(const std::vector<Variable>& vars) {
  std::vector<Variable> todo;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    std::unordered_set<const VariableBase*> seen;
    for (const Variable& v : vars) {
      CHORUS_REQUIRE(v.defined(), InvalidArgumentError, name_, ".build: undefined variable");
      CHORUS_REQUIRE(is_floating(v.dtype()), InvalidArgumentError, name_, ": variable '", v.name(), "' has dtype ",
                     dtype_name(v.dtype()),
                     "; optimizers update floating-point variables only (float32, float64, float16, bfloat16)");
      if (state_->index.count(v.impl().get()) == 0 && seen.insert(v.impl().get()).second) todo.push_back(v);
    }
  }
  if (todo.empty()) return;
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr) {
    create_slots(todo);
    return;
  }
  // Every replica found the same variables missing (none of them can have added any: additions
  // happen only inside this merge_call, which starts after all replicas arrived). fn runs once, in
  // cross-replica context, so make_variable creates one MirroredVariable per slot for all replicas.
  ctx->merge_call<void, int>([this, &todo](const std::vector<int>&) { create_slots(todo); }, 0);
}

void Optimizer::create_slots(const std::vector<Variable>& vars) {
  const std::vector<std::string> names = slot_names_impl();
  for (const Variable& v : vars) {
    if (state_->find(v) != nullptr) continue;
    State::Entry entry{v, {}};
    for (const std::string& slot : names) {
      entry.slots.push_back(make_variable({.initial_value = Tensor::zeros(v.shape(), v.dtype(), v.device()),
                                           .name = str_cat(v.name(), "/", slot),
                                           .trainable = false,
                                           .synchronization = VariableSynchronization::kOnWrite,
                                           .device = v.device(),
                                           .shard_over_replicas = true}));
    }
    // Gradient accumulation: each replica's own running sum (ON_READ, SUM) — or, for a ZeRO
    // stage-3 parameter whose gradients arrive as summed shards, a sharded sum like its slots.
    const ShardedVariable* parameter = as_sharded(v);
    const bool sharded_sum = parameter != nullptr && parameter->gathers_parameters();
    if (accumulation_steps() > 1)
      entry.accumulator = make_variable(
          {.initial_value = Tensor::zeros(v.shape(), v.dtype(), v.device()),
           .name = str_cat(v.name(), "/", kAccumulatorSlot),
           .trainable = false,
           .synchronization = sharded_sum ? VariableSynchronization::kOnWrite : VariableSynchronization::kOnRead,
           .aggregation = VariableAggregation::kSum,
           .device = v.device(),
           .shard_over_replicas = sharded_sum});
    const std::vector<Variable> slots = entry.slots;
    const Variable accumulator = entry.accumulator;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->index.emplace(v.impl().get(), state_->entries.size());
      state_->entries.push_back(std::move(entry));
      state_->built = true;
    }
    for (std::size_t i = 0; i < names.size(); ++i) slot_created(v, names[i], slots[i]);  // restore-on-create
    if (accumulator.defined()) slot_created(v, kAccumulatorSlot, accumulator);
  }
}

std::vector<train::TrackableChild> Optimizer::trackable_children() const { return {{"iter", iterations_}}; }

std::vector<train::SlotVariableRef> Optimizer::slot_variables() const {
  const std::vector<std::string> names = slot_names_impl();
  std::vector<train::SlotVariableRef> out;
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& e : state_->entries) {
    for (std::size_t i = 0; i < e.slots.size(); ++i) out.push_back({e.variable, names[i], e.slots[i]});
    if (e.accumulator.defined()) out.push_back({e.variable, kAccumulatorSlot, e.accumulator});
  }
  return out;
}

std::vector<Tensor> Optimizer::clip(std::vector<Tensor> grads) const {
  if (common_.clipnorm) {
    for (Tensor& g : grads) g = clip_by_norm(g, *common_.clipnorm);
  } else if (common_.global_clipnorm) {
    grads = clip_by_global_norm(grads, *common_.global_clipnorm);
  } else if (common_.clipvalue) {
    for (Tensor& g : grads) g = clip_by_value(g, -*common_.clipvalue, *common_.clipvalue);
  }
  return grads;
}

Tensor Optimizer::get_scaled_loss(const Tensor& loss) const { return loss; }

bool Optimizer::sums_during_backward() const {
  // With gradient accumulation no apply sums the tape's gradients as they are (a micro-step adds
  // them up; the N-th sums the mean of the sum).
  return accumulation_steps() == 1;
}

Gradients Optimizer::compute_gradients(const Tensor& loss, const std::vector<Variable>& vars, ops::GradientTape& tape,
                                       ops::UnconnectedGradients unconnected) {
  const Tensor target = get_scaled_loss(loss);
  Gradients out;
  std::vector<Tensor> grads;
  if (sums_during_backward()) {
    ops::GradientsAndSum gs = tape.gradient_and_sum(target, vars, Tensor(), unconnected);
    grads = std::move(gs.gradients);
    out.sum = std::move(gs.sum);
  } else {
    grads = get_unscaled_gradients(tape.gradient(target, vars, Tensor(), unconnected));
  }
  out.grads_and_vars.reserve(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) out.grads_and_vars.emplace_back(std::move(grads[i]), vars[i]);
  return out;
}

void Optimizer::apply_gradients(const GradsAndVars& grads_and_vars) {
  apply_gradients_with(grads_and_vars, nullptr, {});
}

void Optimizer::apply_gradients(GradsAndVars&& grads_and_vars) {
  apply_gradients_with(std::move(grads_and_vars), nullptr, {});
}

void Optimizer::apply_gradients(Gradients&& gradients) {
  apply_gradients_with(std::move(gradients.grads_and_vars), std::move(gradients.sum), {});
}

void Optimizer::validate(GradsAndVars& grads_and_vars, ReplicaContext* ctx, std::vector<Tensor>& grads,
                         std::vector<Variable>& vars) const {
  std::vector<std::string> missing;
  std::unordered_set<const VariableBase*> seen;
  for (std::size_t i = 0; i < grads_and_vars.size(); ++i) {
    const auto& [g, v] = grads_and_vars[i];  // `g` is released below, once every pair is valid
    CHORUS_REQUIRE(v.defined(), InvalidArgumentError, name_, ".apply_gradients: entry ", i,
                   " of grads_and_vars has an undefined variable");
    CHORUS_REQUIRE(is_floating(v.dtype()), InvalidArgumentError, name_, ".apply_gradients: variable '", v.name(),
                   "' has dtype ", dtype_name(v.dtype()),
                   "; optimizers update floating-point variables only (float32, float64, float16, bfloat16)");
    CHORUS_REQUIRE(seen.insert(v.impl().get()).second, InvalidArgumentError, name_, ".apply_gradients: variable '",
                   v.name(), "' appears more than once in grads_and_vars; sum its gradients first");
    check_replicated(v, ctx, "variable");
    if (!g.defined()) {
      missing.push_back(v.name());
      continue;
    }
    if (const ShardedVariable* p = as_sharded_parameter(v)) {
      const std::int64_t length = p->layout().length(ctx != nullptr ? ctx->replica_id_in_sync_group() : 0);
      CHORUS_REQUIRE(g.shape() == Shape{length} && g.dtype() == v.dtype(), InvalidArgumentError, name_,
                     ".apply_gradients: variable '", v.name(), "' (shape ", v.shape().to_string(),
                     ") is sharded over the replicas (ZeRO stage 3): its gradient must be this replica's shard, "
                     "shape [",
                     length, "] and dtype ", dtype_name(v.dtype()),
                     ", the summed gradient GradientTape::gradient returns for it; got ", describe(g));
    } else {
      CHORUS_REQUIRE(g.shape() == v.shape() && g.dtype() == v.dtype(), InvalidArgumentError, name_,
                     ".apply_gradients: the gradient of variable '", v.name(), "' has ", describe(g),
                     ", but the variable has shape ", v.shape().to_string(), " and dtype ", dtype_name(v.dtype()),
                     "; a gradient must have its variable's shape and dtype");
    }
  }
  if (missing.size() == grads_and_vars.size()) {
    throw InvalidArgumentError(str_cat("No gradients provided for any variable: [", join(missing, kQuoted), "] (",
                                       name_, ".apply_gradients got ", grads_and_vars.size(), " pairs)"));
  }
  // `grads` holds the only references this call keeps (the caller's, when it moved them in, go
  // here): each is released when the step policy's collectives are done with it.
  grads.reserve(grads_and_vars.size());
  vars.reserve(grads_and_vars.size());
  for (auto& [g, v] : grads_and_vars) {
    grads.push_back(g.defined() ? ops::stop_gradient(g) : Tensor());
    vars.push_back(v);
    g = Tensor();
  }
  check_replicated(iterations_, ctx, "the optimizer's iterations variable");
  if (!missing.empty() && !state_->warned_missing.exchange(true)) {
    CHORUS_LOG(WARNING) << "Gradients do not exist for variables [" << join(missing, kQuoted) << "]"
                        << " when minimizing the loss. If using `model.compile()`, did you forget to provide a "
                           "`loss` argument?";
  }
}

std::vector<Tensor> Optimizer::counter_components() const {
  std::vector<Tensor> out;
  if (const auto* d = dynamic_cast<const DistributedVariable*>(iterations_.impl().get())) {
    for (const Variable& c : d->components()) out.push_back(c.value());
  } else {
    out.push_back(iterations_.value());
  }
  return out;
}

std::string Optimizer::why_not_capturable(const std::vector<Variable>& vars) const {
  if (accumulation_steps() > 1)
    return "gradient_accumulation_steps > 1 decides on the host which calls update the variables";
  if (check_numerics_) return "check_numerics reads the gradients' finiteness on the host every step";
  if (!env::fused_optimizer_enabled()) return "CHORUS_FUSED_OPTIMIZER=0 turns off the fused update it needs";
  ops::FusedUpdate probe;
  if (!fused_update(Step{learning_rate_.at(0), 0}, probe))
    return str_cat(name_, " has no fused update with these options (AMSGrad, or an optimizer of your own)");
  for (const Variable& v : vars)
    if (v.dtype() != DType::kFloat32 && v.dtype() != DType::kFloat64)
      return str_cat("variable '", v.name(), "' is ", dtype_name(v.dtype()),
                     ", and the fused update takes float32 and float64 variables");
  return "";
}

void Optimizer::prepare_step() {
  CHORUS_REQUIRE(scalars_on_device_, FailedPreconditionError, name_,
                 ".prepare_step(): call set_scalars_on_device(true) first");
  for (const Tensor& counter : counter_components()) {
    const std::int64_t count = read_iterations(counter);  // the host's copy: no wait in steady steps
    Step step{0.0, count / accumulation_steps()};
    step.learning_rate = learning_rate_.at(step.iterations);
    ops::FusedUpdate fused;
    CHORUS_REQUIRE(fused_update(step, fused), FailedPreconditionError, name_,
                   ": scalars on the device need the fused update, which this optimizer has not");
    const double decay = common_.weight_decay ? *common_.weight_decay * step.learning_rate : 0.0;
    const DeviceContext* dev = &counter.device_context();
    Tensor block;
    {
      std::lock_guard<std::mutex> lock(state_->blocks_mu);
      Tensor& slot = state_->blocks[dev];
      if (!slot.defined()) slot = Tensor::zeros(Shape{ops::kFusedScalarSlots}, DType::kFloat64, counter.device_name());
      block = slot;
    }
    ops::write_fused_scalars(block, fused.scalars, decay);
  }
}

void Optimizer::count_replayed_step() {
  for (const Tensor& counter : counter_components()) remember_iterations(counter, read_iterations(counter) + 1);
}

void Optimizer::forget_step_counter_copies() {
  std::lock_guard<std::mutex> lock(state_->counter_mu);
  state_->counter_copies.clear();
}

std::int64_t Optimizer::read_iterations(const Tensor& component) const {
  {
    std::lock_guard<std::mutex> lock(state_->counter_mu);
    for (const State::CounterCopy& c : state_->counter_copies)
      if (c.storage.lock() == component.buffer() && c.writes == component.buffer()->writes()) return c.value;
  }
  const std::int64_t value = component.item<std::int64_t>();  // waits for the device
  remember_iterations(component, value);
  return value;
}

void Optimizer::remember_iterations(const Tensor& component, std::int64_t value) const {
  std::lock_guard<std::mutex> lock(state_->counter_mu);
  auto& copies = state_->counter_copies;
  copies.erase(
      std::remove_if(copies.begin(), copies.end(), [](const State::CounterCopy& c) { return c.storage.expired(); }),
      copies.end());
  for (State::CounterCopy& c : copies) {
    if (c.storage.lock() != component.buffer()) continue;
    c.writes = component.buffer()->writes();
    c.value = value;
    return;
  }
  copies.push_back({component.buffer(), component.buffer()->writes(), value});
}

void Optimizer::advance_iterations(Tensor& component, std::optional<std::int64_t> before) const {
  component.add_inplace(Tensor::scalar<std::int64_t>(1, component.device_name()));
  if (before) remember_iterations(component, *before + 1);
}

bool Optimizer::accumulate(std::vector<Tensor>& grads, const std::vector<Variable>& vars, ReplicaContext* ctx) {
  const int n = accumulation_steps();
  Tensor counter = iterations_.value();
  const std::int64_t before = read_iterations(counter);
  const bool update = (before + 1) % n == 0;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    const State::Entry* e = state_->find(vars[i]);
    CHORUS_ENFORCE(e != nullptr && e->accumulator.defined(), "no accumulator for ", vars[i].name());
    Tensor acc = accumulator_part(e->accumulator, ctx);
    Tensor g = std::move(grads[i]);
    if (g.device_name() != acc.device_name()) g = g.to(acc.device_name());
    if (!update) {
      acc.add_inplace(g);
      continue;
    }
    grads[i] = ops::div(ops::add(g, acc), ops::scalar_like(g, static_cast<double>(n)));
    update_in_place(acc, Tensor::zeros(acc.shape(), acc.dtype(), acc.device_name()));
  }
  if (!update) advance_iterations(counter, before);
  return update;
}

void Optimizer::apply_gradients_with(GradsAndVars grads_and_vars, std::shared_ptr<GradientReduction> sum,
                                     const AfterAggregation& after_aggregation) {
  timeline::Span span("optimizer", name_);  // core/timeline.h
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr) {
    const DistributionStrategy& s = get_strategy();
    CHORUS_REQUIRE(s.num_replicas_in_sync() == 1, InvalidArgumentError, name_,
                   ".apply_gradients() cannot be called in cross-replica context of ", s.name(), " (",
                   s.num_replicas_in_sync(),
                   " replicas). Use `strategy.run(fn)` to enter replica context and call it there: each replica "
                   "passes its own gradients, which are summed across replicas before the update");
  }
  // 1–2. Validate everything before any collective (undefined gradients stay in their places).
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  validate(grads_and_vars, ctx, grads, vars);
  // 4 (first: the policy reads the slots' layout). Slots of new variables, a merge_call in replica
  // context; then 2b, gradient accumulation: no collective before the N-th call.
  std::vector<Variable> with_gradient;
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (grads[i].defined()) with_gradient.push_back(vars[i]);
  build(with_gradient);
  if (accumulation_steps() > 1) {
    sum.reset();  // a sum of one micro-batch's gradients is not what the N-th call reduces
    if (!accumulate(grads, vars, ctx)) return;
  }
  std::vector<std::vector<Variable>> slots(vars.size());
  std::vector<Variable> state(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    const State::Entry* e = state_->find(vars[i]);
    CHORUS_ENFORCE(e != nullptr, "no slots for ", vars[i].name());
    for (const Variable& s : e->slots) check_replicated(s, ctx, "slot");
    slots[i] = e->slots;
    if (!e->slots.empty()) state[i] = e->slots.front();
  }
  // 3. The sums over the replicas, as the step policy hands them over (core/step_policy.h).
  StepPolicy& policy = step_policy();
  std::vector<StepPolicy::Summed> summed = policy.sum_gradients(std::move(grads), vars, state, std::move(sum));
  std::vector<Variable> kept;
  std::vector<std::vector<Variable>> kept_slots;
  std::vector<char> slice;
  grads.clear();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!summed[i].gradient.defined()) continue;
    grads.push_back(std::move(summed[i].gradient));
    slice.push_back(summed[i].slice ? 1 : 0);
    kept.push_back(vars[i]);
    kept_slots.push_back(std::move(slots[i]));
  }
  const bool sliced = std::find(slice.begin(), slice.end(), 1) != slice.end();
  Tensor counter = iterations_.value();
  std::optional<std::int64_t> count;  // the counter's value, when read
  if (!after_summing(grads, kept, sliced ? &slice : nullptr, policy, after_aggregation)) {  // a skipped step counts
    advance_iterations(counter, count);
    return;
  }
  // 5. Host scalars: the same on every replica (each reads its own, equal, counter component; from
  // the host's copy unless something else wrote the counter since).
  Step step{0.0, 0};
  // (Scalars on the device: read too, so that the host's copy stays valid for prepare_step.)
  if (learning_rate_.is_schedule() || needs_iterations() || scalars_on_device_) {
    count = read_iterations(counter);
    step.iterations = *count / accumulation_steps();  // updates before this one
  }
  step.learning_rate = learning_rate_.at(step.iterations);
  // 6. Clipping, on the summed gradients (slices: with whole norms).
  grads = sliced ? clip_slices(common_, std::move(grads), slice, policy) : clip(std::move(grads));
  // 7–8. Weight decay and the update, on what this replica updates (the policy's choice: the
  // variable's component, its shard, or its slice, gathered afterwards).
  std::vector<StepPolicy::Summed> clipped(grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) clipped[i] = {std::move(grads[i]), slice[i] != 0};
  policy.update(kept, std::move(clipped), kept_slots,
                [&](std::vector<StepPolicy::UpdateItem>& items) { update_group(items, kept, step); });
  // 9. This replica's component of the counter.
  advance_iterations(counter, count);
}

void Optimizer::update_group(std::vector<StepPolicy::UpdateItem>& items, const std::vector<Variable>& vars,
                             const Step& step) {
  std::vector<char> done(items.size(), 0);
  ops::FusedUpdate fused;
  const bool fuses = !items.empty() && env::fused_optimizer_enabled() && fused_update(step, fused);
  CHORUS_REQUIRE(fuses || items.empty() || !scalars_on_device_, FailedPreconditionError, name_,
                 ": scalars on the device (a captured step) need the fused update, which this step has not: ",
                 why_not_capturable(vars));
  if (fuses) {
    // One fused update per device and dtype, in the items' order.
    std::vector<std::pair<std::pair<const DeviceContext*, DType>, std::vector<std::size_t>>> groups;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const std::pair<const DeviceContext*, DType> key{&items[k].weight.device_context(), items[k].weight.dtype()};
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
      it->second.push_back(k);
    }
    for (const auto& [key, members] : groups) {
      std::vector<ops::FusedVariable> group;
      for (const std::size_t k : members) {
        const StepPolicy::UpdateItem& item = items[k];
        const bool decays = uses_weight_decay(vars[item.index]);
        group.push_back({item.weight, item.gradient, item.slots, decays,
                         decays ? *common_.weight_decay * step.learning_rate : 0.0});
      }
      const bool timed = timeline::enabled();
      const std::int64_t start = timed ? timeline::now_us() : 0;
      if (scalars_on_device_) {
        std::lock_guard<std::mutex> lock(state_->blocks_mu);
        auto block = state_->blocks.find(key.first);
        CHORUS_REQUIRE(block != state_->blocks.end(), FailedPreconditionError, name_,
                       ": scalars on the device, but prepare_step() has not written a block on ", key.first->name());
        fused.scalars_on_device = block->second;
      }
      if (!ops::apply_fused_update(fused, group)) {
        CHORUS_REQUIRE(!scalars_on_device_, FailedPreconditionError, name_, ": the update of ", members.size(),
                       " variable(s) on ", key.first->name(), " (", dtype_name(key.second),
                       ") cannot be fused, and a captured step needs every update fused");
        continue;
      }
      for (const std::size_t k : members) done[k] = 1;
      if (timed)
        timeline::record(
            "update", "fused", start, timeline::now_us(),
            str_cat("\"variables\": ", members.size(), ", \"device\": ", timeline::quoted(key.first->name()),
                    ", \"dtype\": ", timeline::quoted(dtype_name(key.second))));
    }
  }
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (done[k]) continue;
    StepPolicy::UpdateItem& item = items[k];
    if (uses_weight_decay(vars[item.index]))
      update_in_place(
          item.weight,
          ops::sub(item.weight,
                   ops::mul(item.weight, ops::scalar_like(item.weight, *common_.weight_decay * step.learning_rate))));
    update_step(item.gradient, item.weight, item.slots, step);
  }
}

bool Optimizer::after_summing(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                              const std::vector<char>* slice, StepPolicy& policy,
                              const AfterAggregation& after_aggregation) const {
  if (after_aggregation && slice != nullptr) {
    // Each replica holds only its slices: the callback also gets one float64 scalar, NaN when any
    // replica's slice is not finite (shared_finite_probe), so that every replica decides alike.
    std::vector<Tensor> slices;
    for (std::size_t i = 0; i < grads.size(); ++i)
      if ((*slice)[i]) slices.push_back(grads[i]);
    grads.push_back(shared_finite_probe(policy, slices));
    const bool proceed = after_aggregation(grads);
    grads.pop_back();
    return proceed;
  }
  if (after_aggregation) return after_aggregation(grads);
  if (check_numerics_) check_gradients_finite(name_, grads, vars, slice, policy, iterations_);
  return true;
}

Tensor Optimizer::minimize(const std::function<Tensor()>& loss_fn, const std::vector<Variable>& vars) {
  Tensor loss;
  Gradients gradients;
  {
    ops::GradientTape tape;
    loss = loss_fn();
    gradients = compute_gradients(loss, vars, tape);
  }
  apply_gradients(std::move(gradients));
  return loss;
}

void Optimizer::minimize(const Tensor& loss, const std::vector<Variable>& vars, ops::GradientTape& tape) {
  apply_gradients(compute_gradients(loss, vars, tape));
}

std::string Optimizer::get_config() const {
  using detail::Json;
  using detail::json_or_null;
  Json config;
  config["name"] = name_;
  config["learning_rate"] = chorus::internal::parse_json(learning_rate_.get_config(), "the learning rate's get_config");
  config["weight_decay"] = json_or_null(common_.weight_decay);
  config["clipnorm"] = json_or_null(common_.clipnorm);
  config["global_clipnorm"] = json_or_null(common_.global_clipnorm);
  config["clipvalue"] = json_or_null(common_.clipvalue);
  config["gradient_accumulation_steps"] =
      common_.gradient_accumulation_steps ? Json(*common_.gradient_accumulation_steps) : Json(nullptr);
  // The subclass's own fields (an optimizer written outside chorus may hand-write them: a fragment
  // that is not JSON is InvalidArgumentError naming config_fields).
  const Json fields = chorus::internal::parse_json("{" + config_fields() + "}", name_ + "'s config_fields()");
  for (const auto& [key, value] : fields.items()) config[key] = value;
  return detail::keras_json(config);
}

}  // namespace chorus::optimizers
