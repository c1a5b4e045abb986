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

namespace {
thread_local std::vector<GradientTape::Impl*> t_tapes;
// While a gradient function runs: which of its op's inputs lead to a source (null: all).
thread_local const std::vector<char>* t_wanted_inputs = nullptr;

// The tensor a tape differentiates for `v`: its value() on this thread, or — for a ZeRO stage-3
// parameter, whose value() is a gathered copy — its shard (core/sharded_variable.h).
Tensor gradient_source(const Variable& v) {
  if (const ShardedVariable* s = as_sharded(v); s != nullptr && s->gathers_parameters()) return s->local_shard();
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
}  // namespace

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient, UnconnectedGradients unconnected) {
  return compute_gradient(*impl_, target, sources, output_gradient, unconnected, nullptr, nullptr);
}

namespace {
std::vector<Tensor> compute_gradient(GradientTape::Impl& im, const Tensor& target, const std::vector<Tensor>& sources,
                                     const Tensor& output_gradient, UnconnectedGradients unconnected,
                                     StepPolicy* overlap, std::shared_ptr<GradientReduction>* sum) {
  im.check_thread("gradient");
  CHORUS_REQUIRE(!im.used || im.persistent, FailedPreconditionError,
                 "GradientTape::gradient can only be called once on a non-persistent tape "
                 "(create it with persistent = true to compute several gradients)");
  CHORUS_REQUIRE(target.defined(), InvalidArgumentError, "GradientTape::gradient: the target is undefined");
  CHORUS_REQUIRE(is_floating(target.dtype()), InvalidArgumentError, "GradientTape::gradient: the target has dtype ",
                 dtype_name(target.dtype()), "; only floating tensors have gradients");
  Tensor seed = output_gradient;
  if (seed.defined()) {
    CHORUS_REQUIRE(seed.shape() == target.shape() && seed.dtype() == target.dtype(), InvalidArgumentError,
                   "GradientTape::gradient: output_gradient is ", dtype_name(seed.dtype()), seed.shape().to_string(),
                   " but the target is ", dtype_name(target.dtype()), target.shape().to_string());
  } else {
    seed = Tensor::ones(target.shape(), target.dtype(), target.device_name());
  }

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
  std::unordered_set<std::uint64_t> source_ids;
  for (const Tensor& s : sources) {
    CHORUS_REQUIRE(s.defined(), InvalidArgumentError, "GradientTape::gradient: a source is undefined");
    source_ids.insert(s.id());
  }
  // With a reduction: source i's gradient is final once the earliest-recorded node consuming it
  // has run (every other consumer was recorded later, so ran before); final_after[k] lists the
  // sources whose earliest consumer is node k. A source no node consumes is final at once. The
  // reduction is told which gradients to expect: those of sources the target depends on (a sweep
  // back from the target over the recorded nodes), or all with kZero.
  std::unordered_map<std::uint64_t, std::size_t> first_use;
  std::shared_ptr<GradientReduction> reduction;
  if (overlap != nullptr) {
    std::unordered_set<std::uint64_t> reaches{target.id()};  // tensors the target depends on
    for (std::size_t k = im.nodes.size(); k-- > 0;) {
      const GradientTape::Impl::Node& node = im.nodes[k];
      bool live = false;
      for (const std::uint64_t id : node.outputs) live = live || reaches.count(id) != 0;
      if (live)
        for (const std::uint64_t id : node.inputs) reaches.insert(id);
    }
    for (std::size_t k = 0; k < im.nodes.size(); ++k)
      for (const std::uint64_t id : im.nodes[k].inputs)
        if (source_ids.count(id) != 0) first_use.try_emplace(id, k);
    std::vector<Tensor> expected(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const Tensor& s = sources[i];
      if (unconnected == UnconnectedGradients::kZero ||
          (reaches.count(s.id()) != 0 && im.watches(s) && is_floating(s.dtype())))
        expected[i] = s;
    }
    // Asked only now, with the arguments valid: a reduction, once begun, expects every gradient.
    reduction = overlap->begin_gradient_sum(expected);
    *sum = reduction;
  }
  // Tensors whose gradient can reach a source: the sources, then (in recording order) the
  // outputs of every node with such an input. A node's gradient function is told which of its
  // inputs these are (internal::wants_input_gradient), so that it can skip the rest — the first
  // convolution's gradient with respect to the input images, as TensorFlow's graph pruning does.
  std::unordered_set<std::uint64_t> leads_to_source = source_ids;
  for (const GradientTape::Impl::Node& node : im.nodes) {
    bool leads = false;
    for (const std::uint64_t id : node.inputs) leads = leads || leads_to_source.count(id) != 0;
    if (leads) leads_to_source.insert(node.outputs.begin(), node.outputs.end());
  }
  std::unordered_map<std::uint64_t, Tensor> grads;
  grads[target.id()] = seed;
  // What gradient() returns for source i, given the gradient map as it stands.
  auto result = [&](std::size_t i) {
    const Tensor& s = sources[i];
    auto it = grads.find(s.id());
    if (it != grads.end() && im.watches(s) && is_floating(s.dtype())) return it->second;
    if (unconnected == UnconnectedGradients::kZero) return Tensor::zeros(s.shape(), s.dtype(), s.device_name());
    return Tensor();
  };
  std::vector<Tensor> out(sources.size());
  std::vector<char> done(sources.size(), 0);
  std::vector<std::vector<std::size_t>> final_after;
  auto finish = [&](std::size_t i) {
    out[i] = result(i);
    done[i] = 1;
    reduction->ready(i, out[i]);
  };
  if (reduction != nullptr) {
    final_after.resize(im.nodes.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      auto it = first_use.find(sources[i].id());
      if (it != first_use.end() && sources[i].id() != target.id())
        final_after[it->second].push_back(i);
      else if (sources[i].id() != target.id())
        finish(i);
    }
  }
  // Timeline (core/timeline.h): the whole call, and each run of consecutive ops of one layer.
  timeline::Span span("backward", "gradient");
  const bool timing = timeline::enabled();
  std::string group;
  std::int64_t group_start = 0;
  auto end_group = [&](std::int64_t now) {
    if (!group.empty()) timeline::record("backward", group, group_start, now);
  };
  // Runs node k's gradient function, when any of its outputs has a gradient.
  auto run_node = [&](GradientTape::Impl::Node& node) {
    std::vector<Tensor> out_grads(node.outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      auto it = grads.find(node.outputs[i]);
      if (it != grads.end()) {
        out_grads[i] = it->second;
        any = true;
      }
    }
    std::vector<char> wanted(node.inputs.size());
    bool wants_any = false;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      wanted[i] = leads_to_source.count(node.inputs[i]) != 0;
      wants_any = wants_any || wanted[i];
    }
    if (!any) return;
    if (!wants_any) {  // no input leads to a source: nothing to compute; free what it held now
      for (const std::uint64_t id : node.outputs)
        if (source_ids.count(id) == 0) grads.erase(id);
      if (!im.persistent) node.backward = nullptr;
      return;
    }
    if (timing && node.scope != group) {
      const std::int64_t now = timeline::now_us();
      end_group(now);
      group = node.scope;
      group_start = now;
    }
    // The outputs' gradients are complete (every consumer was recorded later, so ran before):
    // drop them from the map now, unless requested, so that each intermediate gradient lives
    // only until its producer consumed it — and, on a non-persistent tape, the node's closure
    // (the tensors its gradient needed) dies with its run. Memory then falls as the backward
    // pass proceeds instead of peaking at its end.
    for (const std::uint64_t id : node.outputs)
      if (source_ids.count(id) == 0) grads.erase(id);
    std::vector<Tensor> in_grads;
    {
      struct Wanted {  // restored also when the gradient function throws
        const std::vector<char>* was = t_wanted_inputs;
        ~Wanted() { t_wanted_inputs = was; }
      } scoped;
      t_wanted_inputs = &wanted;
      if (im.persistent) {
        in_grads = node.backward(out_grads);
      } else {
        internal::BackwardFn backward = std::move(node.backward);
        node.backward = nullptr;
        in_grads = backward(out_grads);
      }
    }
    out_grads.clear();
    CHORUS_REQUIRE(in_grads.size() == node.inputs.size(), InternalError, "gradient of ", node.op, " returned ",
                   in_grads.size(), " gradients for ", node.inputs.size(), " inputs");
    for (std::size_t i = 0; i < in_grads.size(); ++i) {
      if (!in_grads[i].defined() || !wanted[i]) continue;
      CHORUS_REQUIRE(in_grads[i].shape() == node.input_shapes[i], InternalError, "gradient of ", node.op, " for input ",
                     i, " has shape ", in_grads[i].shape().to_string(), ", expected ",
                     node.input_shapes[i].to_string());
      auto [it, inserted] = grads.try_emplace(node.inputs[i], in_grads[i]);
      if (!inserted) it->second = add(it->second, in_grads[i]);
    }
  };
  for (std::size_t k = im.nodes.size(); k-- > 0;) {
    run_node(im.nodes[k]);
    if (reduction != nullptr)
      for (const std::size_t i : final_after[k]) finish(i);
  }

  if (timing) end_group(timeline::now_us());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (done[i]) continue;
    if (reduction != nullptr)
      finish(i);
    else
      out[i] = result(i);
  }
  if (!im.persistent) im.nodes.clear();  // release what the backward pass needed
  return out;
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
  // anything more, so it does not count.
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

bool should_record(std::initializer_list<std::reference_wrapper<const Tensor>> inputs) {
  if (t_tapes.empty()) return false;
  for (GradientTape::Impl* tape : t_tapes) {
    if (!tape->recording) continue;
    for (const Tensor& t : inputs)
      if (tape->watches(t)) return true;
  }
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (t_tapes.empty()) return false;
  for (GradientTape::Impl* tape : t_tapes) {
    if (!tape->recording) continue;
    for (const Tensor& t : inputs)
      if (tape->watches(t)) return true;
  }
  return false;
}

void record(std::string_view op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  // The last tape that records takes `backward` by move (usually the only one): copying it would
  // copy every tensor its closure captured.
  GradientTape::Impl* last = nullptr;
  for (GradientTape::Impl* tape : t_tapes) {
    if (!tape->recording) continue;
    for (const Tensor& t : inputs)
      if (tape->watches(t)) last = tape;
  }
  for (GradientTape::Impl* tape : t_tapes) {
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

}  // namespace internal
}  // namespace chorus::ops
