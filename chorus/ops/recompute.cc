#include <chorus/ops/recompute.h>

#include <memory>
#include <unordered_set>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/ops/random.h>
#include <chorus/ops/tape.h>

namespace chorus::ops {
namespace {

constexpr const char* kWho = "recompute_grad";

// What the recorded op's gradient needs: fn, its arguments, the op's inputs, which of fn's results
// are the op's outputs, their shapes, and the random draws of the forward.
struct Recorded {
  std::shared_ptr<const RecomputeFn> fn;
  std::vector<Tensor> args;
  std::vector<Tensor> leaves;        // the op's inputs
  std::vector<std::size_t> outputs;  // the op's output k is fn's result outputs[k]
  std::vector<Shape> result_shapes;  // of all of fn's results
  std::shared_ptr<const internal::RandomLog> draws;
};

// Runs fn again as in the forward (same random draws) and checks its results against the forward's.
std::vector<Tensor> rerun(const Recorded& r) {
  std::vector<Tensor> ys;
  {
    internal::ReplayRandomDraws replay(r.draws.get(), kWho);
    ys = (*r.fn)(r.args);
    replay.finish();
  }
  CHORUS_REQUIRE(ys.size() == r.result_shapes.size(), InternalError, kWho, ": the recomputation of fn returned ",
                 ys.size(), " tensors, the forward ", r.result_shapes.size(), "; fn must return the same every run");
  for (const std::size_t i : r.outputs)
    CHORUS_REQUIRE(ys[i].defined() && ys[i].shape() == r.result_shapes[i], InternalError, kWho,
                   ": the recomputation of fn returned result ", i, " shaped ",
                   ys[i].defined() ? ys[i].shape().to_string() : std::string("<undefined>"), ", the forward ",
                   r.result_shapes[i].to_string(), "; fn must return the same every run");
  return ys;
}

// The recorded op's gradient: fn recomputed under a fresh tape that watches the wanted inputs,
// differentiated from the outputs' gradients.
std::vector<Tensor> backward(const Recorded& r, const std::vector<Tensor>& dys) {
  std::vector<std::size_t> wanted;
  for (std::size_t i = 0; i < r.leaves.size(); ++i)
    if (internal::wants_input_gradient(i)) wanted.push_back(i);
  std::vector<Tensor> grads(r.leaves.size());
  if (wanted.empty()) return grads;

  GradientTape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
  std::vector<Tensor> sources;
  for (const std::size_t i : wanted) {
    tape.watch(r.leaves[i]);
    sources.push_back(r.leaves[i]);
  }
  const std::vector<Tensor> ys = rerun(r);
  std::vector<Tensor> targets, seeds;
  for (std::size_t k = 0; k < r.outputs.size(); ++k) {
    if (!dys[k].defined()) continue;
    targets.push_back(ys[r.outputs[k]]);
    seeds.push_back(dys[k]);
  }
  if (targets.empty()) return grads;
  const std::vector<Tensor> g = internal::gradient_of_targets(tape, targets, seeds, sources);
  for (std::size_t j = 0; j < wanted.size(); ++j) grads[wanted[j]] = g[j];
  return grads;
}

std::vector<Tensor> call(const std::shared_ptr<const RecomputeFn>& fn, const std::vector<Tensor>& args) {
  for (std::size_t i = 0; i < args.size(); ++i)
    CHORUS_REQUIRE(args[i].defined(), InvalidArgumentError, kWho, ": argument ", i, " of ", args.size(),
                   " is undefined");
  if (!internal::any_tape_active()) return (*fn)(args);

  Recorded r;
  auto draws = std::make_shared<internal::RandomLog>();
  std::vector<Tensor> ys;
  {
    internal::ObservedForward observed;  // the tapes record none of fn's ops
    internal::RecordRandomDraws record(draws.get());
    ys = (*fn)(args);
    r.leaves = observed.leaves();
    std::unordered_set<std::uint64_t> seen;
    for (std::size_t i = 0; i < ys.size(); ++i)
      if (observed.produced(ys[i]) && seen.insert(ys[i].id()).second) r.outputs.push_back(i);
  }
  if (r.leaves.empty() || r.outputs.empty()) return ys;  // nothing to differentiate
  std::vector<Tensor> outputs;
  for (const std::size_t i : r.outputs) outputs.push_back(ys[i]);
  for (const Tensor& y : ys) r.result_shapes.push_back(y.defined() ? y.shape() : Shape{});
  r.fn = fn;
  r.args = args;
  r.draws = std::move(draws);
  const std::vector<Tensor> inputs = r.leaves;
  internal::record("RecomputeGrad", inputs, outputs,
                   [r = std::move(r)](const std::vector<Tensor>& dys) { return backward(r, dys); });
  return ys;
}

}  // namespace

RecomputeFn recompute_grad(RecomputeFn fn) {
  CHORUS_REQUIRE(static_cast<bool>(fn), InvalidArgumentError, kWho, ": fn is empty");
  auto shared = std::make_shared<const RecomputeFn>(std::move(fn));
  return [shared](const std::vector<Tensor>& args) { return call(shared, args); };
}

RecomputeFn1 recompute_grad(RecomputeFn1 fn) {
  CHORUS_REQUIRE(static_cast<bool>(fn), InvalidArgumentError, kWho, ": fn is empty");
  RecomputeFn many = recompute_grad(
      RecomputeFn([fn = std::move(fn)](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0])}; }));
  return [many = std::move(many)](const Tensor& x) { return many({x})[0]; };
}

}  // namespace chorus::ops
