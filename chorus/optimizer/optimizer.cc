#include <chorus/optimizer/optimizer.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/strings.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/finite.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
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

// One variable updated shard-wise (sharded slots, ZeRO stage 1): `whole` is this replica's
// component of the variable, `shard` the updated copy of this replica's slice of it.
struct ShardedUpdate {
  Tensor whole;
  Tensor shard;
  ShardLayout layout;
};

// Brings every replica's updated shards into each replica's whole weight: the strategy's
// ShardingCollectives::all_gather_shards, in place (a collective: every replica calls it with the
// same variables, in the same order). Sharded slots exist only under a strategy whose replica
// context implements it; without one there is a single replica (a one-replica strategy in
// cross-replica context), whose shard is the whole.
void gather_shards(ReplicaContext* ctx, const std::vector<ShardedUpdate>& updates) {
  if (updates.empty()) return;
  if (ShardingCollectives* sc = sharding_collectives(ctx)) {
    std::vector<Tensor> shards, wholes;
    std::vector<ShardLayout> layouts;
    for (const ShardedUpdate& u : updates) {
      shards.push_back(u.shard);
      wholes.push_back(u.whole);
      layouts.push_back(u.layout);
    }
    sc->all_gather_shards(shards, wholes, layouts);
    return;
  }
  for (const ShardedUpdate& u : updates) {
    CHORUS_ENFORCE(u.layout.num_shards == 1, "sharded update over ", u.layout.num_shards,
                   " replicas without the strategy's sharding collectives");
    Tensor whole = u.whole;
    if (u.layout.num_elements > 0) whole.copy_from(ops::reshape(u.shard, whole.shape().dims()));  // update_in_place
  }
}

// ZeRO stage 3: `v`'s sharded view when it is a parameter stored as shards (its value() is
// gathered; the optimizer updates local_shard()), else nullptr.
const ShardedVariable* sharded_parameter(const Variable& v) {
  const ShardedVariable* s = as_sharded(v);
  return s != nullptr && s->gathers_parameters() ? s : nullptr;
}

// ZeRO stage 2: whether `ctx` belongs to a strategy whose gradients are reduce-scattered.
bool reduces_to_shards(ReplicaContext* ctx) {
  const ShardingCollectives* sc = sharding_collectives(ctx);
  return sc != nullptr && sc->sharding_stage() >= 2;
}

// Stage 2's finite check for a LossScaleOptimizer: Σ (g − g) over this replica's shards in
// float64, summed over the replicas — 0 when every element of every replica's shards is finite,
// NaN otherwise (inf − inf and NaN − NaN are NaN), the same bits on every replica.
Tensor shared_finite_probe(ReplicaContext* ctx, const std::vector<Tensor>& shards) {
  Tensor total;
  for (const Tensor& g : shards) {
    Tensor s = ops::reduce_sum(ops::cast(ops::sub(g, g), DType::kFloat64));
    total =
        total.defined() ? ops::add(total, s.device_name() == total.device_name() ? s : s.to(total.device_name())) : s;
  }
  if (!total.defined()) return Tensor::scalar<double>(0.0);
  return ctx->all_reduce(ReduceOp::kSum, total);
}

// check_numerics (optimizer.h): throws, on every replica alike, when a summed gradient holds NaN
// or Inf. `is_shard` (stage 2) marks the gradients that are this replica's shards: their check is
// shared through shared_finite_probe; whole gradients are the same bits everywhere. The variable
// named is the first, in the list's order, whose gradient (or this replica's shard of it) is bad.
void check_gradients_finite(const std::string& who, const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                            const std::vector<char>* is_shard, ReplicaContext* ctx, const Variable& iterations) {
  bool finite;
  if (is_shard != nullptr) {
    std::vector<Tensor> shards, whole;
    for (std::size_t i = 0; i < grads.size(); ++i) ((*is_shard)[i] ? shards : whole).push_back(grads[i]);
    const double probe = shared_finite_probe(ctx, shards).to("/CPU:0").item<double>();
    finite = std::isfinite(probe) && ops::all_finite(whole);
  } else {
    finite = ops::all_finite(grads);
  }
  if (finite) return;
  const std::int64_t step = iterations.value().to("/CPU:0").item<std::int64_t>() + 1;
  std::string culprit = "a shard of a gradient that another replica holds (ZeRO stage 2)";
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

// Stage 2's clipping: `grads[i]` is this replica's shard of variable i's summed gradient when
// `is_shard[i]`, else the whole summed gradient (identical on every replica). clipvalue is
// elementwise; clipnorm and global_clipnorm need whole norms: each replica's float64 sums of
// squares of its shards, ONE all-reduce of them ([V]: one per sharded gradient, then their
// total), plus the whole gradients' own sums. A collective: every replica calls it alike.
std::vector<Tensor> clip_shards(const CommonOptions& common, std::vector<Tensor> grads,
                                const std::vector<char>& is_shard, ReplicaContext* ctx) {
  if (common.clipvalue) {
    for (Tensor& g : grads) g = clip_by_value(g, -*common.clipvalue, *common.clipvalue);
    return grads;
  }
  if (!common.clipnorm && !common.global_clipnorm) return grads;
  std::vector<std::size_t> sharded;
  std::vector<Tensor> partial;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!is_shard[i]) continue;
    sharded.push_back(i);
    Tensor p = ops::reshape(sum_of_squares(grads[i]), {1});
    if (!partial.empty() && p.device_name() != partial[0].device_name()) p = p.to(partial[0].device_name());
    partial.push_back(p);
  }
  Tensor sums;  // [V] float64: the whole sums of squares of the sharded gradients
  if (!partial.empty()) {
    Tensor local = partial.size() == 1 ? partial[0] : ops::concat(partial, 0);
    sums = ctx->all_reduce(ReduceOp::kSum, local);
  }
  if (common.clipnorm) {
    for (std::size_t k = 0; k < sharded.size(); ++k) {
      const std::size_t i = sharded[k];
      const Tensor norm = ops::sqrt(ops::reshape(ops::slice(sums, {static_cast<std::int64_t>(k)}, {1}), {}));
      grads[i] = clip_by_norm(grads[i], *common.clipnorm, norm);
    }
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (!is_shard[i]) grads[i] = clip_by_norm(grads[i], *common.clipnorm);
    return grads;
  }
  Tensor total = sums.defined() ? ops::reduce_sum(sums) : Tensor();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (is_shard[i] || !grads[i].defined()) continue;
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

Tensor Optimizer::get_scaled_loss(const Tensor& loss) const {
  // Called before the tape's gradient. With gradient accumulation no apply all-reduces the tape's
  // gradients as they are (a micro-step adds them up; the N-th reduces the mean of the sum), so
  // the tape need not start the overlapped all-reduce (core/distribution.h's GradientReduction).
  if (accumulation_steps() > 1)
    if (ReplicaContext* ctx = get_replica_context()) ctx->skip_next_gradient_reduction();
  return loss;
}

void Optimizer::apply_gradients(const GradsAndVars& grads_and_vars) { apply_gradients_with(grads_and_vars, {}); }

void Optimizer::apply_gradients(GradsAndVars&& grads_and_vars) { apply_gradients_with(std::move(grads_and_vars), {}); }

void Optimizer::apply_gradients_with(GradsAndVars grads_and_vars, const AfterAggregation& after_aggregation) {
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

  // 1–2. Validate everything before any collective; drop undefined gradients.
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  std::vector<std::string> missing;
  std::vector<std::size_t> positions;  // of each kept gradient in grads_and_vars
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
    if (const ShardedVariable* p = sharded_parameter(v)) {
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
    grads.push_back(ops::stop_gradient(g));
    vars.push_back(v);
    positions.push_back(i);
  }
  if (vars.empty()) {
    throw InvalidArgumentError(str_cat("No gradients provided for any variable: [", join(missing, kQuoted), "] (",
                                       name_, ".apply_gradients got ", grads_and_vars.size(), " pairs)"));
  }
  // `grads` holds the only references this call keeps (the caller's, when it moved them in, go
  // here): each is released when the collectives of step 3 are done with it.
  for (auto& pair : grads_and_vars) pair.first = Tensor();
  check_replicated(iterations_, ctx, "the optimizer's iterations variable");
  if (!missing.empty() && !state_->warned_missing.exchange(true)) {
    CHORUS_LOG(WARNING) << "Gradients do not exist for variables [" << join(missing, kQuoted) << "]"
                        << " when minimizing the loss. If using `model.compile()`, did you forget to provide a "
                           "`loss` argument?";
  }

  // 2b. Gradient accumulation (optimizer.h, "Gradient accumulation"): add to the accumulators and
  // stop, except on every N-th call, which goes on with the mean. No collective before that.
  if (const int n = accumulation_steps(); n > 1) {
    // A loop that did not call get_scaled_loss may have begun an overlapped all-reduce: none of
    // these gradients is reduced as it is (above), so drop it and begin none for the next call.
    if (ctx != nullptr) {
      ctx->drop_gradient_reduction();
      ctx->skip_next_gradient_reduction();
    }
    build(vars);
    Tensor counter = iterations_.value();
    const bool update = (counter.item<std::int64_t>() + 1) % n == 0;
    for (std::size_t i = 0; i < vars.size(); ++i) {
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
    if (!update) {
      counter.add_inplace(Tensor::scalar<std::int64_t>(1, counter.device_name()));
      return;
    }
  }

  // 3. One packed all-reduce of every gradient (the default replica context returns its input).
  // ZeRO stage 2: the slots come first (a merge_call), since whose gradients are reduce-scattered
  // depends on them: the gradients of variables with sharded slots go through ONE packed
  // reduce-scatter (each replica receives its shard [length(r)] of the sum), the others through
  // the all-reduce as before.
  // ZeRO stage 3: a sharded parameter's gradient arrives reduced (the tape reduce-scattered it).
  const bool stage2 = reduces_to_shards(ctx);
  // Non-zero: the gradient is this replica's shard of the sum (clip_shards), reduce-scattered here
  // (kScattered) or already by the tape (kReducedByTape, stage-3 parameters).
  constexpr char kScattered = 1, kReducedByTape = 2;
  std::vector<char> is_shard(vars.size(), 0);
  if (stage2) {
    build(vars);
    std::vector<Tensor> whole, to_scatter;
    std::vector<ShardLayout> layouts;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const State::Entry* e = state_->find(vars[i]);
      CHORUS_ENFORCE(e != nullptr, "no slots for ", vars[i].name());
      const ShardedVariable* sv = e->slots.empty() ? nullptr : as_sharded(e->slots.front());
      if (sharded_parameter(vars[i]) != nullptr) {
        is_shard[i] = kReducedByTape;
      } else if (sv != nullptr) {
        is_shard[i] = kScattered;
        to_scatter.push_back(std::move(grads[i]));
        layouts.push_back(sv->layout());
      } else {
        whole.push_back(std::move(grads[i]));
      }
    }
    if (!whole.empty()) whole = ctx->all_reduce(ReduceOp::kSum, whole);
    std::vector<Tensor> shards;
    if (!to_scatter.empty())  // releases each local gradient once packed (or sent as it is)
      shards = sharding_collectives(ctx)->reduce_scatter_shards(ReduceOp::kSum, std::move(to_scatter), layouts);
    for (std::size_t i = 0, a = 0, b = 0; i < vars.size(); ++i)
      if (is_shard[i] != kReducedByTape) grads[i] = is_shard[i] == kScattered ? shards[b++] : whole[a++];
  } else if (ctx != nullptr && missing.empty()) {
    grads = ctx->all_reduce(ReduceOp::kSum, grads);
  } else if (ctx != nullptr) {
    // The list as the tape returned it, undefined gradients in their places: its packs are then
    // the ones the overlapped all-reduce used (core/distribution.h's GradientReduction).
    std::vector<Tensor> list(grads_and_vars.size());
    for (std::size_t k = 0; k < grads.size(); ++k) list[positions[k]] = std::move(grads[k]);
    list = ctx->all_reduce(ReduceOp::kSum, list);
    for (std::size_t k = 0; k < grads.size(); ++k) grads[k] = std::move(list[positions[k]]);
  }
  bool proceed = true;
  if (after_aggregation && stage2) {
    // Each replica holds only its shards: the callback also gets one float64 scalar, NaN when any
    // replica's shard is not finite (shared_finite_probe), so that every replica decides alike.
    std::vector<Tensor> shards;
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (is_shard[i]) shards.push_back(grads[i]);
    grads.push_back(shared_finite_probe(ctx, shards));
    proceed = after_aggregation(grads);
    grads.pop_back();
  } else if (after_aggregation) {
    proceed = after_aggregation(grads);
  } else if (check_numerics_) {
    check_gradients_finite(name_, grads, vars, stage2 ? &is_shard : nullptr, ctx, iterations_);
  }
  if (!proceed) {  // a skipped step still counts
    Tensor counter = iterations_.value();
    counter.add_inplace(Tensor::scalar<std::int64_t>(1, counter.device_name()));
    return;
  }

  // 4. Slots of new variables (a merge_call in replica context).
  if (!stage2) build(vars);
  std::vector<const State::Entry*> entries;
  entries.reserve(vars.size());
  for (const Variable& v : vars) {
    const State::Entry* e = state_->find(v);
    CHORUS_ENFORCE(e != nullptr, "no slots for ", v.name());
    for (const Variable& s : e->slots) check_replicated(s, ctx, "slot");
    entries.push_back(e);
  }

  // 5. Host scalars: the same on every replica (each reads its own, equal, counter component).
  Tensor counter = iterations_.value();
  Step step{0.0, 0};
  if (learning_rate_.is_schedule() || needs_iterations())
    step.iterations = counter.item<std::int64_t>() / accumulation_steps();  // updates before this one
  step.learning_rate = learning_rate_.at(step.iterations);

  // 6. Clipping, on the summed gradients (stage 2: on the shards, with whole norms).
  grads = stage2 ? clip_shards(common_, std::move(grads), is_shard, ctx) : clip(std::move(grads));

  // 7–8. Weight decay and the update, on this replica's components. Sharded slots (ZeRO stage 1,
  // core/sharded_variable.h): this replica updates only its shard of the variable — the same
  // elementwise arithmetic on the same inputs as the whole update, so the same bits — and the
  // shards are all-gathered into every replica's whole weight afterwards. At stage 2 the gradient
  // already is this replica's shard (step 3).
  // Stage 3: the variable is its shards; the update writes this replica's in place.
  std::vector<ShardedUpdate> sharded;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const ShardedVariable* parameter = sharded_parameter(vars[i]);
    Tensor w = ops::stop_gradient(parameter != nullptr ? parameter->local_shard() : vars[i].value());
    Tensor g = std::move(grads[i]);  // released with `g` (stage 1: the whole sum, once sliced)
    if (g.device_name() != w.device_name()) g = g.to(w.device_name());
    const ShardedVariable* shard_view = entries[i]->slots.empty() ? nullptr : as_sharded(entries[i]->slots.front());
    if (parameter != nullptr) shard_view = parameter;
    Tensor target = w;  // what the update writes: the weight, or a copy of this replica's slice of it
    if (parameter != nullptr) {
      // the gradient is the reduced shard (validated above) and `w` aliases the shard
    } else if (shard_view != nullptr) {
      const ShardLayout& layout = shard_view->layout();
      CHORUS_ENFORCE(layout.num_elements == w.num_elements(), "slot of '", vars[i].name(), "' has ",
                     layout.num_elements, " elements, the variable ", w.num_elements());
      const int r = ctx != nullptr ? ctx->replica_id_in_sync_group() : 0;
      const std::vector<std::int64_t> begin{layout.begin(r)}, length{layout.length(r)};
      if (is_shard[i])
        CHORUS_ENFORCE(g.num_elements() == layout.length(r), "reduced shard of '", vars[i].name(), "' has ",
                       g.num_elements(), " elements, the layout ", layout.length(r));
      else
        g = ops::slice(ops::reshape(g, {-1}), begin, length);
      target = ops::slice(ops::reshape(w, {-1}), begin, length);  // a copy: tensors have no offset views
      sharded.push_back({w, target, layout});
    }
    if (uses_weight_decay(vars[i]))
      update_in_place(
          target,
          ops::sub(target, ops::mul(target, ops::scalar_like(target, *common_.weight_decay * step.learning_rate))));
    std::vector<Tensor> slots;
    slots.reserve(entries[i]->slots.size());
    for (const Variable& s : entries[i]->slots) {
      const ShardedVariable* sv = as_sharded(s);
      CHORUS_ENFORCE((sv != nullptr) == (shard_view != nullptr), "slots of '", vars[i].name(), "' are partly sharded");
      slots.push_back(sv != nullptr ? sv->local_shard() : s.value());
    }
    update_step(g, target, slots, step);
  }
  gather_shards(ctx, sharded);

  // 9. This replica's component of the counter.
  counter.add_inplace(Tensor::scalar<std::int64_t>(1, counter.device_name()));
}

Tensor Optimizer::minimize(const std::function<Tensor()>& loss_fn, const std::vector<Variable>& vars) {
  Tensor loss;
  std::vector<Tensor> grads;
  {
    ops::GradientTape tape;
    loss = loss_fn();
    grads = get_unscaled_gradients(tape.gradient(get_scaled_loss(loss), vars));
  }
  GradsAndVars gv;
  for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(std::move(grads[i]), vars[i]);
  apply_gradients(std::move(gv));
  return loss;
}

void Optimizer::minimize(const Tensor& loss, const std::vector<Variable>& vars, ops::GradientTape& tape) {
  std::vector<Tensor> grads = get_unscaled_gradients(tape.gradient(get_scaled_loss(loss), vars));
  GradsAndVars gv;
  for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(std::move(grads[i]), vars[i]);
  apply_gradients(std::move(gv));
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
