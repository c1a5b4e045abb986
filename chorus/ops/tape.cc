#include <chorus/ops/tape.h>

#include <algorithm>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/elementwise.h>

namespace chorus::ops {

using chorus::internal::str_cat;

struct GradientTape::Impl {
  bool persistent = false;
  bool watch_accessed_variables = true;
  bool recording = true;
  bool used = false;
  std::thread::id owner = std::this_thread::get_id();
  std::unordered_set<std::uint64_t> watched;  // watched by the user, trainable values seen, op results

  struct Node {
    std::string op;
    std::vector<std::uint64_t> inputs;
    std::vector<Shape> input_shapes;
    std::vector<std::uint64_t> outputs;
    internal::BackwardFn backward;
    std::string scope;  // the layer path it was recorded under, when the timeline is on
  };
  std::vector<Node> nodes;

  bool watches(const Tensor& t) const {
    return t.defined() && (watched.count(t.id()) > 0 || (watch_accessed_variables && t.is_trainable_variable()));
  }
  void check_thread(const char* what) const {
    CHORUS_REQUIRE(owner == std::this_thread::get_id(), FailedPreconditionError, "GradientTape::", what,
                   ": a tape belongs to the thread that created it (each replica creates its own tape)");
  }
};

// An internal::ObservedForward in progress (recompute_grad's forward, ops/recompute.h).
struct internal::ObservedForward::State {
  State* parent = nullptr;        // the enclosing one, which is this one's context
  std::size_t first_tape = 0;     // tapes from this index of t_tapes were created inside it
  std::size_t context_begin = 0;  // the context's own tapes: [context_begin, first_tape)
  std::unordered_set<std::uint64_t> produced;
  std::unordered_set<std::uint64_t> leaf_ids;
  std::vector<Tensor> leaves;
};

namespace {
thread_local std::vector<GradientTape::Impl*> t_tapes;
// While a gradient function runs: which of its op's inputs lead to a source (null: all).
thread_local const std::vector<char>* t_wanted_inputs = nullptr;
// The innermost ObservedForward of this thread, or null.
thread_local internal::ObservedForward::State* t_observer = nullptr;

using Observer = internal::ObservedForward::State;

// The tapes that record as usual: those created inside the innermost ObservedForward (all
// without one); the ones before it are its context and record nothing while it lives.
std::size_t first_recording_tape() { return t_observer != nullptr ? t_observer->first_tape : 0; }

bool observer_watches(const Observer& o, const Tensor& t);

// Whether o's context would record an op reading t.
bool context_watches(const Observer& o, const Tensor& t) {
  for (std::size_t k = o.context_begin; k < o.first_tape && k < t_tapes.size(); ++k)
    if (t_tapes[k]->recording && t_tapes[k]->watches(t)) return true;
  return o.parent != nullptr && observer_watches(*o.parent, t);
}

bool observer_watches(const Observer& o, const Tensor& t) {
  return t.defined() && (o.produced.count(t.id()) != 0 || context_watches(o, t));
}

// record() under an ObservedForward: notes the leaves among the inputs, and the outputs.
void observe(Observer& o, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  bool watched = false;
  for (const Tensor& t : inputs) watched = watched || observer_watches(o, t);
  if (!watched) return;
  for (const Tensor& t : inputs) {
    if (!t.defined() || o.produced.count(t.id()) != 0 || o.leaf_ids.count(t.id()) != 0) continue;
    if (!context_watches(o, t)) continue;
    o.leaf_ids.insert(t.id());
    o.leaves.push_back(t);
  }
  for (const Tensor& t : outputs)
    if (t.defined() && is_floating(t.dtype())) o.produced.insert(t.id());
}

// The tensor a tape differentiates for `v`: its value() on this thread, or — for a ZeRO stage-3
// parameter, whose value() is a gathered copy — its shard (core/sharded_variable.h).
Tensor gradient_source(const Variable& v) {
  if (const ShardedVariable* s = as_sharded_parameter(v)) return s->local_shard();
  return v.value();
}
}  // namespace

GradientTape::GradientTape(bool persistent, bool watch_accessed_variables) : impl_(std::make_unique<Impl>()) {
  impl_->persistent = persistent;
  impl_->watch_accessed_variables = watch_accessed_variables;
  t_tapes.push_back(impl_.get());
}

GradientTape::~GradientTape() {
  auto it = std::find(t_tapes.begin(), t_tapes.end(), impl_.get());
  if (it != t_tapes.end()) t_tapes.erase(it);
}

void GradientTape::watch(const Tensor& t) {
  impl_->check_thread("watch");
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "GradientTape::watch: undefined tensor");
  impl_->watched.insert(t.id());
}

void GradientTape::watch(const Variable& v) {
  CHORUS_REQUIRE(v.defined(), InvalidArgumentError, "GradientTape::watch: undefined variable");
  watch(gradient_source(v));
}

GradientTape::StopRecording::StopRecording(GradientTape& tape) : tape_(tape), was_(tape.impl_->recording) {
  tape_.impl_->recording = false;
}
GradientTape::StopRecording::~StopRecording() { tape_.impl_->recording = was_; }

namespace {
// The tensors a tape differentiates for `sources`.
std::vector<Tensor> variable_sources(const std::vector<Variable>& sources) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  for (const Variable& v : sources) {
    CHORUS_REQUIRE(v.defined(), InvalidArgumentError, "GradientTape::gradient: a source variable is undefined");
    // A non-trainable variable the user watched is watched through its value's id.
    values.push_back(gradient_source(v));
  }
  return values;
}

// The tape's gradient (GradientTape::gradient). With a step policy in `overlap` that begins a
// sum (StepPolicy::begin_gradient_sum, core/step_policy.h), each source's gradient is handed to it
// as soon as it is final, and the sum is stored in *sum.
std::vector<Tensor> compute_gradient(GradientTape::Impl& im, const Tensor& target, const std::vector<Tensor>& sources,
                                     const Tensor& output_gradient, UnconnectedGradients unconnected,
                                     StepPolicy* overlap, std::shared_ptr<GradientReduction>* sum);
// The backward pass from `seeds` (tensor id, its gradient); `target` (the first seed's tensor) is
// what a reduction plans from. Throws as gradient() (the seeds are checked by the caller).
std::vector<Tensor> run_backward(GradientTape::Impl& im, const Tensor& target,
                                 const std::vector<std::pair<std::uint64_t, Tensor>>& seeds,
                                 const std::vector<Tensor>& sources, UnconnectedGradients unconnected,
                                 StepPolicy* overlap, std::shared_ptr<GradientReduction>* sum);
Tensor checked_seed(const GradientTape::Impl& im, const Tensor& target, const Tensor& output_gradient);
}  // namespace

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient, UnconnectedGradients unconnected) {
  return compute_gradient(*impl_, target, sources, output_gradient, unconnected, nullptr, nullptr);
}

namespace {
using Node = GradientTape::Impl::Node;

// Checks gradient()'s target and output_gradient; returns the gradient the backward pass starts
// from (output_gradient, or ones shaped like the target).
Tensor checked_seed(const GradientTape::Impl& im, const Tensor& target, const Tensor& output_gradient) {
  im.check_thread("gradient");
  CHORUS_REQUIRE(!im.used || im.persistent, FailedPreconditionError,
                 "GradientTape::gradient can only be called once on a non-persistent tape "
                 "(create it with persistent = true to compute several gradients)");
  CHORUS_REQUIRE(target.defined(), InvalidArgumentError, "GradientTape::gradient: the target is undefined");
  CHORUS_REQUIRE(is_floating(target.dtype()), InvalidArgumentError, "GradientTape::gradient: the target has dtype ",
                 dtype_name(target.dtype()), "; only floating tensors have gradients");
  if (!output_gradient.defined()) return Tensor::ones(target.shape(), target.dtype(), target.device_name());
  CHORUS_REQUIRE(output_gradient.shape() == target.shape() && output_gradient.dtype() == target.dtype(),
                 InvalidArgumentError, "GradientTape::gradient: output_gradient is ",
                 dtype_name(output_gradient.dtype()), output_gradient.shape().to_string(), " but the target is ",
                 dtype_name(target.dtype()), target.shape().to_string());
  return output_gradient;
}

// The backward plan: what a backward pass from a target to its sources computes, and when each
// source's gradient is final. It is derived from the recorded nodes alone, before any gradient
// function runs; the nodes then run in reverse recording order (BackwardPass below).
struct BackwardPlan {
  std::unordered_set<std::uint64_t> source_ids;
  // Tensors whose gradient can reach a source: the sources, then (in recording order) the outputs
  // of every node with such an input. A node's gradient function is told which of its inputs these
  // are (internal::wants_input_gradient), so that it can skip the rest — the first convolution's
  // gradient with respect to the input images, as TensorFlow's graph pruning does.
  std::unordered_set<std::uint64_t> leads_to_source;

  // Planned only for a reduction (plan_backward's `for_reduction`). Source i's gradient is final
  // once the earliest-recorded node consuming it has run (every other consumer was recorded later,
  // so ran before): final_after[k] lists the sources whose earliest consumer is node k. A source no
  // node consumes is final at once (final_at_once). The target itself, when a source, is final
  // only at the end. The reduction is told which gradients to expect (`expected`; undefined: none):
  // those of sources the target depends on, or all with kZero.
  std::vector<Tensor> expected;
  std::vector<std::vector<std::size_t>> final_after;
  std::vector<std::size_t> final_at_once;
};

// Tensors the target depends on: a sweep back from the target over the recorded nodes.
std::unordered_set<std::uint64_t> reaching_target(const GradientTape::Impl& im, const Tensor& target) {
  std::unordered_set<std::uint64_t> reaches{target.id()};
  for (std::size_t k = im.nodes.size(); k-- > 0;) {
    const Node& node = im.nodes[k];
    bool live = false;
    for (const std::uint64_t id : node.outputs) live = live || reaches.count(id) != 0;
    if (live)
      for (const std::uint64_t id : node.inputs) reaches.insert(id);
  }
  return reaches;
}

// BackwardPlan's reduction part: expected, final_after, final_at_once.
void plan_reduction(const GradientTape::Impl& im, const Tensor& target, const std::vector<Tensor>& sources,
                    UnconnectedGradients unconnected, BackwardPlan& plan) {
  const std::unordered_set<std::uint64_t> reaches = reaching_target(im, target);
  std::unordered_map<std::uint64_t, std::size_t> first_use;
  for (std::size_t k = 0; k < im.nodes.size(); ++k)
    for (const std::uint64_t id : im.nodes[k].inputs)
      if (plan.source_ids.count(id) != 0) first_use.try_emplace(id, k);
  plan.expected.resize(sources.size());
  plan.final_after.resize(im.nodes.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const Tensor& s = sources[i];
    if (unconnected == UnconnectedGradients::kZero ||
        (reaches.count(s.id()) != 0 && im.watches(s) && is_floating(s.dtype())))
      plan.expected[i] = s;
    if (s.id() == target.id()) continue;
    auto it = first_use.find(s.id());
    if (it != first_use.end())
      plan.final_after[it->second].push_back(i);
    else
      plan.final_at_once.push_back(i);
  }
}

// Throws when a source is undefined.
BackwardPlan plan_backward(const GradientTape::Impl& im, const Tensor& target, const std::vector<Tensor>& sources,
                           UnconnectedGradients unconnected, bool for_reduction) {
  BackwardPlan plan;
  for (const Tensor& s : sources) {
    CHORUS_REQUIRE(s.defined(), InvalidArgumentError, "GradientTape::gradient: a source is undefined");
    plan.source_ids.insert(s.id());
  }
  if (for_reduction) plan_reduction(im, target, sources, unconnected, plan);
  plan.leads_to_source = plan.source_ids;
  for (const Node& node : im.nodes) {
    bool leads = false;
    for (const std::uint64_t id : node.inputs) leads = leads || plan.leads_to_source.count(id) != 0;
    if (leads) plan.leads_to_source.insert(node.outputs.begin(), node.outputs.end());
  }
  return plan;
}

// The execution of a BackwardPlan: runs the gradient functions in reverse recording order,
// accumulates the gradients, and hands each source's final gradient to the reduction (if any).
class BackwardPass {
 public:
  BackwardPass(GradientTape::Impl& im, const BackwardPlan& plan, const std::vector<Tensor>& sources,
               UnconnectedGradients unconnected, std::shared_ptr<GradientReduction> reduction)
      : im_(im),
        plan_(plan),
        sources_(sources),
        unconnected_(unconnected),
        reduction_(std::move(reduction)),
        out_(sources.size()),
        done_(sources.size(), 0) {}

  // Seeds: (tensor id, the gradient the pass starts from there); seeds of one id add up.
  std::vector<Tensor> run(const std::vector<std::pair<std::uint64_t, Tensor>>& seeds) {
    for (const auto& [id, seed] : seeds) {
      auto [it, inserted] = grads_.try_emplace(id, seed);
      if (!inserted) it->second = add(it->second, seed);
    }
    if (reduction_ != nullptr)
      for (const std::size_t i : plan_.final_at_once) finish(i);
    // Timeline (core/timeline.h): the whole call, and each run of consecutive ops of one layer.
    timeline::Span span("backward", "gradient");
    timing_ = timeline::enabled();
    for (std::size_t k = im_.nodes.size(); k-- > 0;) {
      run_node(im_.nodes[k]);
      if (reduction_ != nullptr)
        for (const std::size_t i : plan_.final_after[k]) finish(i);
    }
    if (timing_) end_group(timeline::now_us());
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      if (done_[i]) continue;
      if (reduction_ != nullptr)
        finish(i);
      else
        out_[i] = result(i);
    }
    if (!im_.persistent) im_.nodes.clear();  // release what the backward pass needed
    return std::move(out_);
  }

 private:
  // What gradient() returns for source i, given the gradient map as it stands.
  Tensor result(std::size_t i) const {
    const Tensor& s = sources_[i];
    auto it = grads_.find(s.id());
    if (it != grads_.end() && im_.watches(s) && is_floating(s.dtype())) return it->second;
    if (unconnected_ == UnconnectedGradients::kZero) return Tensor::zeros(s.shape(), s.dtype(), s.device_name());
    return Tensor();
  }

  void finish(std::size_t i) {
    out_[i] = result(i);
    done_[i] = 1;
    reduction_->ready(i, out_[i]);
  }

  void end_group(std::int64_t now) {
    if (!group_.empty()) timeline::record("backward", group_, group_start_, now);
  }

  // Drops the gradients of node's outputs (unless requested).
  void drop_output_gradients(const Node& node) {
    for (const std::uint64_t id : node.outputs)
      if (plan_.source_ids.count(id) == 0) grads_.erase(id);
  }

  // Runs node's gradient function, when any of its outputs has a gradient.
  void run_node(Node& node) {
    std::vector<Tensor> out_grads(node.outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      auto it = grads_.find(node.outputs[i]);
      if (it != grads_.end()) {
        out_grads[i] = it->second;
        any = true;
      }
    }
    std::vector<char> wanted(node.inputs.size());
    bool wants_any = false;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      wanted[i] = plan_.leads_to_source.count(node.inputs[i]) != 0;
      wants_any = wants_any || wanted[i];
    }
    if (!any) return;
    if (!wants_any) {  // no input leads to a source: nothing to compute; free what it held now
      drop_output_gradients(node);
      if (!im_.persistent) node.backward = nullptr;
      return;
    }
    if (timing_ && node.scope != group_) {
      const std::int64_t now = timeline::now_us();
      end_group(now);
      group_ = node.scope;
      group_start_ = now;
    }
    // The outputs' gradients are complete (every consumer was recorded later, so ran before):
    // drop them from the map now, unless requested, so that each intermediate gradient lives
    // only until its producer consumed it — and, on a non-persistent tape, the node's closure
    // (the tensors its gradient needed) dies with its run. Memory then falls as the backward
    // pass proceeds instead of peaking at its end.
    drop_output_gradients(node);
    std::vector<Tensor> in_grads = call_backward(node, std::move(out_grads), wanted);
    accumulate(node, in_grads, wanted);
  }

  // Node's gradient function applied to its outputs' gradients, with internal::wants_input_gradient
  // answering from `wanted`. On a non-persistent tape the function is released as it runs.
  std::vector<Tensor> call_backward(Node& node, std::vector<Tensor> out_grads, const std::vector<char>& wanted) {
    struct Wanted {  // restored also when the gradient function throws
      const std::vector<char>* was = t_wanted_inputs;
      ~Wanted() { t_wanted_inputs = was; }
    } scoped;
    t_wanted_inputs = &wanted;
    if (im_.persistent) return node.backward(out_grads);
    internal::BackwardFn backward = std::move(node.backward);
    node.backward = nullptr;
    return backward(out_grads);
  }

  // Adds the wanted inputs' gradients to the map.
  void accumulate(const Node& node, const std::vector<Tensor>& in_grads, const std::vector<char>& wanted) {
    CHORUS_REQUIRE(in_grads.size() == node.inputs.size(), InternalError, "gradient of ", node.op, " returned ",
                   in_grads.size(), " gradients for ", node.inputs.size(), " inputs");
    for (std::size_t i = 0; i < in_grads.size(); ++i) {
      if (!in_grads[i].defined() || !wanted[i]) continue;
      CHORUS_REQUIRE(in_grads[i].shape() == node.input_shapes[i], InternalError, "gradient of ", node.op, " for input ",
                     i, " has shape ", in_grads[i].shape().to_string(), ", expected ",
                     node.input_shapes[i].to_string());
      auto [it, inserted] = grads_.try_emplace(node.inputs[i], in_grads[i]);
      if (!inserted) it->second = add(it->second, in_grads[i]);
    }
  }

  GradientTape::Impl& im_;
  const BackwardPlan& plan_;
  const std::vector<Tensor>& sources_;
  const UnconnectedGradients unconnected_;
  const std::shared_ptr<GradientReduction> reduction_;
  std::unordered_map<std::uint64_t, Tensor> grads_;
  std::vector<Tensor> out_;
  std::vector<char> done_;
  bool timing_ = false;
  std::string group_;  // the layer whose consecutive ops are being timed
  std::int64_t group_start_ = 0;
};

std::vector<Tensor> compute_gradient(GradientTape::Impl& im, const Tensor& target, const std::vector<Tensor>& sources,
                                     const Tensor& output_gradient, UnconnectedGradients unconnected,
                                     StepPolicy* overlap, std::shared_ptr<GradientReduction>* sum) {
  const Tensor seed = checked_seed(im, target, output_gradient);
  return run_backward(im, target, {{target.id(), seed}}, sources, unconnected, overlap, sum);
}

std::vector<Tensor> run_backward(GradientTape::Impl& im, const Tensor& target,
                                 const std::vector<std::pair<std::uint64_t, Tensor>>& seeds,
                                 const std::vector<Tensor>& sources, UnconnectedGradients unconnected,
                                 StepPolicy* overlap, std::shared_ptr<GradientReduction>* sum) {
  // Work with this tape paused: the gradient computation itself is not recorded here (outer
  // tapes still record it, which is what makes higher-order gradients possible).
  const bool was_recording = im.recording;
  im.recording = false;
  struct Restore {
    GradientTape::Impl& im;
    bool was;
    ~Restore() { im.recording = was; }
  } restore{im, was_recording};

  // A non-persistent tape is spent from here on, even if a backward function throws.
  im.used = true;
  const BackwardPlan plan = plan_backward(im, target, sources, unconnected, overlap != nullptr);
  // Asked only now, with the arguments valid: a reduction, once begun, expects every gradient.
  std::shared_ptr<GradientReduction> reduction;
  if (overlap != nullptr) {
    reduction = overlap->begin_gradient_sum(plan.expected);
    *sum = reduction;
  }
  return BackwardPass(im, plan, sources, unconnected, std::move(reduction)).run(seeds);
}
}  // namespace

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& sources,
                                           const Tensor& output_gradient, UnconnectedGradients unconnected) {
  return compute_gradient(*impl_, target, variable_sources(sources), output_gradient, unconnected, nullptr, nullptr);
}

GradientsAndSum GradientTape::gradient_and_sum(const Tensor& target, const std::vector<Variable>& sources,
                                               const Tensor& output_gradient, UnconnectedGradients unconnected) {
  const std::vector<Tensor> values = variable_sources(sources);
  // Overlap, in a replica context, when no other tape records this backward pass (a gradient of a
  // gradient is not what apply_gradients sums). A spent non-persistent tape cannot differentiate
  // anything more, so it does not count: of a GAN step's two tapes, the one asked second sums.
  StepPolicy* policy = get_replica_context() != nullptr ? &step_policy() : nullptr;
  if (policy != nullptr)
    for (const Impl* tape : t_tapes)
      if (tape != impl_.get() && tape->recording && (tape->persistent || !tape->used)) policy = nullptr;
  GradientsAndSum out;
  out.gradients = compute_gradient(*impl_, target, values, output_gradient, unconnected, policy, &out.sum);
  return out;
}

std::vector<std::string> GradientTape::unconnected_names(const std::vector<Variable>& vars,
                                                         const std::vector<Tensor>& grads) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < vars.size() && i < grads.size(); ++i)
    if (!grads[i].defined()) names.push_back(vars[i].name());
  return names;
}

Tensor stop_gradient(const Tensor& t) {
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "stop_gradient: undefined tensor");
  return t.reshape(t.shape());  // same storage, a fresh id no tape knows
}

namespace internal {

bool wants_input_gradient(std::size_t i) {
  return t_wanted_inputs == nullptr || i >= t_wanted_inputs->size() || (*t_wanted_inputs)[i] != 0;
}

namespace {
template <typename Inputs>
bool should_record_any(const Inputs& inputs) {
  if (t_tapes.empty() && t_observer == nullptr) return false;
  for (std::size_t k = first_recording_tape(); k < t_tapes.size(); ++k) {
    if (!t_tapes[k]->recording) continue;
    for (const Tensor& t : inputs)
      if (t_tapes[k]->watches(t)) return true;
  }
  if (t_observer != nullptr)
    for (const Tensor& t : inputs)
      if (observer_watches(*t_observer, t)) return true;
  return false;
}
}  // namespace

bool should_record(std::initializer_list<std::reference_wrapper<const Tensor>> inputs) {
  return should_record_any(inputs);
}

bool should_record(const std::vector<Tensor>& inputs) { return should_record_any(inputs); }

bool any_tape_active() { return !t_tapes.empty() || t_observer != nullptr; }

void record(std::string_view op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  // The last tape that records takes `backward` by move (usually the only one): copying it would
  // copy every tensor its closure captured.
  // Under an ObservedForward, its context's tapes record nothing: it notes what they would need.
  if (t_observer != nullptr) observe(*t_observer, inputs, outputs);
  const std::size_t first = first_recording_tape();
  GradientTape::Impl* last = nullptr;
  for (std::size_t k = first; k < t_tapes.size(); ++k) {
    if (!t_tapes[k]->recording) continue;
    for (const Tensor& t : inputs)
      if (t_tapes[k]->watches(t)) last = t_tapes[k];
  }
  for (std::size_t k = first; k < t_tapes.size(); ++k) {
    GradientTape::Impl* tape = t_tapes[k];
    if (!tape->recording) continue;
    bool watched = false;
    for (const Tensor& t : inputs) {
      if (tape->watches(t)) {
        watched = true;
        tape->watched.insert(t.id());  // a trainable value seen once stays watched
      }
    }
    if (!watched) continue;
    GradientTape::Impl::Node node;
    node.op = std::string(op);
    node.inputs.reserve(inputs.size());
    node.input_shapes.reserve(inputs.size());
    node.outputs.reserve(outputs.size());
    for (const Tensor& t : inputs) {
      node.inputs.push_back(t.defined() ? t.id() : 0);
      node.input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    }
    for (const Tensor& t : outputs) {
      node.outputs.push_back(t.id());
      if (is_floating(t.dtype())) tape->watched.insert(t.id());
    }
    if (timeline::enabled()) node.scope = timeline::current_scope();
    if (tape == last)
      node.backward = std::move(backward);
    else
      node.backward = backward;
    tape->nodes.push_back(std::move(node));
  }
}

ObservedForward::ObservedForward() : state_(std::make_unique<State>()) {
  state_->parent = t_observer;
  state_->context_begin = t_observer != nullptr ? t_observer->first_tape : 0;
  state_->first_tape = t_tapes.size();
  t_observer = state_.get();
}

ObservedForward::~ObservedForward() { t_observer = state_->parent; }

const std::vector<Tensor>& ObservedForward::leaves() const { return state_->leaves; }

bool ObservedForward::produced(const Tensor& t) const { return t.defined() && state_->produced.count(t.id()) != 0; }

std::vector<Tensor> gradient_of_targets(GradientTape& tape, const std::vector<Tensor>& targets,
                                        const std::vector<Tensor>& output_gradients,
                                        const std::vector<Tensor>& sources) {
  CHORUS_REQUIRE(targets.size() == output_gradients.size() && !targets.empty(), InvalidArgumentError,
                 "GradientTape::gradient: ", targets.size(), " targets and ", output_gradients.size(),
                 " output gradients (one each, at least one)");
  std::vector<std::pair<std::uint64_t, Tensor>> seeds;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    CHORUS_REQUIRE(output_gradients[k].defined(), InvalidArgumentError, "GradientTape::gradient: output gradient ", k,
                   " is undefined");
    seeds.emplace_back(targets[k].id(), checked_seed(*tape.impl_, targets[k], output_gradients[k]));
  }
  return run_backward(*tape.impl_, targets[0], seeds, sources, UnconnectedGradients::kNone, nullptr, nullptr);
}

}  // namespace internal
}  // namespace chorus::ops
