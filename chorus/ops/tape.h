// GradientTape: reverse-mode automatic differentiation, as tf.GradientTape.
//
//   chorus::Variable w = chorus::make_variable({.initial_value = ..., .name = "w"});
//   chorus::Tensor loss;
//   chorus::ops::GradientTape tape;                   // records from here on this thread
//   loss = ops::reduce_sum(ops::square(ops::matmul(x, w.value()) - y));
//   std::vector<chorus::Tensor> g = tape.gradient(loss, {w});   // d loss / d w
//
// Recording: while a tape is alive, every op run on the *same thread* whose inputs include a
// watched tensor is recorded (with what its gradient needs). Watched are: tensors passed to
// watch(), values of trainable Variables (when watch_accessed_variables, the default), and results
// of recorded ops. Each replica thread has its own tapes; tapes nest (an inner tape's ops are also
// recorded by outer ones, so gradients of gradients work with a persistent outer tape).
//
// gradient(target, sources): d sum(target) / d source for each source (target need not be a
// scalar: TF sums it; pass output_gradient to seed something else). A source the target does not
// depend on gets an undefined Tensor (TF's None) — or zeros with UnconnectedGradients::kZero.
// A non-persistent tape may compute gradients once (a second call → FailedPreconditionError);
// a persistent one any number of times, and it keeps the recorded tensors alive until it dies.
// Integer and bool tensors have no gradient.
//
// Variables: gradient(target, std::vector<Variable>) differentiates with respect to each
// variable's value() on this thread (for a MirroredVariable: this replica's component; for a ZeRO
// stage-3 parameter, whose value() is gathered for each use, its shard: the gradient is this
// replica's shard of the gradient summed over the replicas, core/sharded_variable.h).
// Variables that got no gradient can be named with unconnected_names().
//
// Memory: during gradient() each intermediate gradient is dropped once the op that produced its
// tensor has run, and a non-persistent tape drops each op's saved tensors once its gradient ran,
// so memory falls as the backward pass proceeds. To keep a block's inputs instead of its
// intermediates, and recompute them in the backward pass, wrap it in ops::recompute_grad
// (ops/recompute.h).
//
// Thread-safety: a tape belongs to the thread that created it; using it from another thread →
// FailedPreconditionError. Tapes must be destroyed in reverse order of creation (C++ scoping).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus::ops {

enum class UnconnectedGradients { kNone, kZero };

// What GradientTape::gradient_and_sum returns: this replica's gradients, and their sum over the
// replicas begun during the backward pass (nullptr when the strategy does not overlap).
struct GradientsAndSum {
  std::vector<Tensor> gradients;
  std::shared_ptr<GradientReduction> sum;
};

class GradientTape;
namespace internal {
std::vector<Tensor> gradient_of_targets(GradientTape& tape, const std::vector<Tensor>& targets,
                                        const std::vector<Tensor>& output_gradients,
                                        const std::vector<Tensor>& sources);
}  // namespace internal

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false, bool watch_accessed_variables = true);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);
  void watch(const Variable& v);

  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient = Tensor(),
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const Tensor& output_gradient = Tensor(),
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);

  // gradient(target, sources), and — in a replica context whose strategy overlaps the gradient
  // all-reduce with the backward pass (DDP's reducer), when no other tape records this backward
  // pass — the gradients' sum over the replicas, computed in buckets as each gradient becomes
  // final (the step policy's begin_gradient_sum, core/step_policy.h). Hand it to
  // Optimizer::apply_gradients with the unchanged gradients (Optimizer::compute_gradients does
  // this for you). Every replica must call it alike.
  GradientsAndSum gradient_and_sum(const Tensor& target, const std::vector<Variable>& sources,
                                   const Tensor& output_gradient = Tensor(),
                                   UnconnectedGradients unconnected = UnconnectedGradients::kNone);

  // Names of `vars` whose gradient in `grads` is undefined, for messages like Keras's
  // "Gradients do not exist for variables ['dense/bias'] when minimizing the loss".
  static std::vector<std::string> unconnected_names(const std::vector<Variable>& vars,
                                                    const std::vector<Tensor>& grads);

  // Pauses recording on this tape while alive (TF's `with tape.stop_recording():`).
  class StopRecording {
   public:
    explicit StopRecording(GradientTape& tape);
    ~StopRecording();
    StopRecording(const StopRecording&) = delete;
    StopRecording& operator=(const StopRecording&) = delete;

   private:
    GradientTape& tape_;
    bool was_;
  };

  struct Impl;

 private:
  friend std::vector<Tensor> internal::gradient_of_targets(GradientTape&, const std::vector<Tensor>&,
                                                           const std::vector<Tensor>&, const std::vector<Tensor>&);
  std::unique_ptr<Impl> impl_;
};

// The same values, cut off from the tapes: gradients do not flow through it (tf.stop_gradient).
Tensor stop_gradient(const Tensor& t);

namespace internal {

// Gradient function of a recorded op: given the gradients of its outputs (undefined where no
// gradient flows to that output), the gradients of its inputs (undefined for "none").
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& output_grads)>;

// Inside a gradient function: whether the tape needs the gradient of the op's input `i`, i.e. some
// source of the gradient() call depends on it. A gradient function may return an undefined
// Tensor for an input that is not wanted instead of computing it (a convolution's gradient with
// respect to the images); the tape ignores what it returns for such inputs. True outside a
// gradient function.
bool wants_input_gradient(std::size_t i);

// True when some active tape of this thread watches one of `inputs` (cheap when no tape is active).
bool should_record(std::initializer_list<std::reference_wrapper<const Tensor>> inputs);
bool should_record(const std::vector<Tensor>& inputs);
// Records an op on every active tape of this thread that watches one of its inputs.
void record(std::string_view op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward);

// ---- For recompute_grad (ops/recompute.h) ----

// True when some tape is active on this thread, or an ObservedForward is in progress: whether an
// op run now could be recorded at all.
bool any_tape_active();

// RAII: while alive, the context it began in — the tapes active on this thread then, and an
// enclosing ObservedForward — records nothing; instead the ops run meanwhile are observed. leaves()
// are the tensors they read that this context watches and that no op run meanwhile produced, in
// order of first use: the inputs a single op standing for them all needs (trainable variables'
// values, the function's watched arguments, watched tensors it captured, ZeRO stage-3 shards).
// produced(t): t is an output of an observed op (it would have been recorded). Tapes created while
// it is alive record as usual (and their ops are observed too). Nests: an inner one's context is
// the outer one. Must be destroyed on its thread, in reverse order of creation (C++ scoping).
class ObservedForward {
 public:
  ObservedForward();
  ~ObservedForward();
  ObservedForward(const ObservedForward&) = delete;
  ObservedForward& operator=(const ObservedForward&) = delete;

  const std::vector<Tensor>& leaves() const;
  bool produced(const Tensor& t) const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// tape.gradient with several targets: d sum_k <targets[k], output_gradients[k]> / d sources,
// the backward pass seeded with output_gradients[k] at targets[k] (TF's gradient(target=[...],
// output_gradients=[...])). Every output gradient must be defined and shaped like its target. No
// reduction is begun (no overlap). Errors as GradientTape::gradient.
std::vector<Tensor> gradient_of_targets(GradientTape& tape, const std::vector<Tensor>& targets,
                                        const std::vector<Tensor>& output_gradients,
                                        const std::vector<Tensor>& sources);

}  // namespace internal
}  // namespace chorus::ops
