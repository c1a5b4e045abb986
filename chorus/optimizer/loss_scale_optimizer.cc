#include <chorus/optimizer/loss_scale_optimizer.h>

#include <cmath>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/finite.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

using chorus::internal::str_cat;

namespace {

// Keras's _DynamicLossScaleState: the node "loss_scale" with its two variables.
class LossScaleState final : public train::Trackable {
 public:
  LossScaleState(Variable scale, Variable good_steps) : scale_(std::move(scale)), good_steps_(std::move(good_steps)) {}
  std::vector<train::TrackableChild> trackable_children() const override {
    return {{"current_loss_scale", scale_}, {"good_steps", good_steps_}};
  }

 private:
  Variable scale_, good_steps_;
};

// The loss scale as a tensor of `like`'s dtype on its device, cut off from gradient tapes.
Tensor scale_for(const Variable& scale, const Tensor& like) {
  Tensor s = ops::stop_gradient(scale.value());
  if (s.device_name() != like.device_name()) s = s.to(like.device_name());
  return s.dtype() == like.dtype() ? s : ops::cast(s, like.dtype());
}

}  // namespace

LossScaleOptimizer::LossScaleOptimizer(std::shared_ptr<Optimizer> inner_optimizer, const LossScaleOptions& options)
    : Optimizer("LossScaleOptimizer", WrapperTag{}), inner_(std::move(inner_optimizer)), options_(options) {
  CHORUS_REQUIRE(inner_ != nullptr, InvalidArgumentError, "LossScaleOptimizer: the inner optimizer is null");
  CHORUS_REQUIRE(dynamic_cast<const LossScaleOptimizer*>(inner_.get()) == nullptr, InvalidArgumentError,
                 "LossScaleOptimizer cannot wrap another LossScaleOptimizer (inner optimizer '", inner_->name(),
                 "'): wrap the optimizer only once");
  CHORUS_REQUIRE(std::isfinite(options.initial_scale) && options.initial_scale > 0.0, InvalidArgumentError,
                 "LossScaleOptimizer: initial_scale must be a finite number > 0, got ", options.initial_scale);
  CHORUS_REQUIRE(options.dynamic_growth_steps >= 1, InvalidArgumentError,
                 "LossScaleOptimizer: dynamic_growth_steps must be a positive integer, got ",
                 options.dynamic_growth_steps);
  // Like `iterations`: every replica updates its own component with the same host values.
  current_loss_scale_ =
      make_variable({.initial_value = Tensor::scalar<float>(static_cast<float>(options.initial_scale), "/cpu:0"),
                     .name = "current_loss_scale",
                     .trainable = false,
                     .synchronization = VariableSynchronization::kOnWrite,
                     .aggregation = VariableAggregation::kOnlyFirstReplica});
  good_steps_ = make_variable({.initial_value = Tensor::zeros({}, DType::kInt64, "/cpu:0"),
                               .name = "good_steps",
                               .trainable = false,
                               .synchronization = VariableSynchronization::kOnWrite,
                               .aggregation = VariableAggregation::kOnlyFirstReplica});
  state_node_ = std::make_shared<LossScaleState>(current_loss_scale_, good_steps_);
  delegate_restores_to(*inner_);  // slots restored before they exist wait with the inner optimizer
}

double LossScaleOptimizer::loss_scale() const { return current_loss_scale_.value().to("/CPU:0").item<float>(); }

std::int64_t LossScaleOptimizer::dynamic_counter() const {
  return good_steps_.value().to("/CPU:0").item<std::int64_t>();
}

Tensor LossScaleOptimizer::get_scaled_loss(const Tensor& loss) const {
  CHORUS_REQUIRE(loss.defined(), InvalidArgumentError, "LossScaleOptimizer.get_scaled_loss: the loss is undefined");
  return ops::mul(loss, scale_for(current_loss_scale_, loss));
}

std::vector<Tensor> LossScaleOptimizer::get_unscaled_gradients(std::vector<Tensor> grads) const {
  for (Tensor& g : grads) {
    if (g.defined()) g = ops::mul(g, ops::reciprocal(scale_for(current_loss_scale_, g)));
  }
  return grads;
}

bool LossScaleOptimizer::update_loss_scale(const std::vector<Tensor>& summed_gradients) {
  // The same answer on every replica: the gradients are the summed ones — or, when some are this
  // replica's slices (ZeRO), followed by a scalar that is NaN when any replica's slice is not
  // finite (Optimizer::after_summing), which makes every replica's check fail alike.
  bool finite = true;
  for (const Tensor& g : summed_gradients) finite = finite && (!g.defined() || ops::all_finite(g));
  if (!options_.dynamic) return finite;
  Tensor scale = current_loss_scale_.value();  // this replica's components (see optimizer.h)
  Tensor good = good_steps_.value();
  const double s = scale.to("/CPU:0").item<float>();
  const std::int64_t n = good.to("/CPU:0").item<std::int64_t>();
  double new_s = s;
  std::int64_t new_n = 0;
  if (!finite) {
    new_s = std::max(s / 2.0, 1.0);
  } else if (n + 1 >= options_.dynamic_growth_steps) {
    if (std::isfinite(static_cast<float>(s * 2.0))) new_s = s * 2.0;
  } else {
    new_n = n + 1;
  }
  if (new_s != s) update_in_place(scale, Tensor::scalar<float>(static_cast<float>(new_s), scale.device_name()));
  if (new_n != n) update_in_place(good, Tensor::scalar<std::int64_t>(new_n, good.device_name()));
  return finite;
}

void LossScaleOptimizer::apply_gradients(const GradsAndVars& grads_and_vars) {
  inner_->apply_gradients_with(grads_and_vars, nullptr,
                               [this](std::vector<Tensor>& summed) { return update_loss_scale(summed); });
}

void LossScaleOptimizer::apply_gradients(GradsAndVars&& grads_and_vars) {
  inner_->apply_gradients_with(std::move(grads_and_vars), nullptr,
                               [this](std::vector<Tensor>& summed) { return update_loss_scale(summed); });
}

void LossScaleOptimizer::apply_gradients(Gradients&& gradients) {
  apply_gradients(std::move(gradients.grads_and_vars));
}

std::vector<Variable> LossScaleOptimizer::variables() const {
  std::vector<Variable> out = inner_->variables();
  out.push_back(current_loss_scale_);
  out.push_back(good_steps_);
  return out;
}

std::string LossScaleOptimizer::get_config() const {
  return detail::keras_json({{"inner_optimizer", chorus::internal::parse_json(inner_->get_config(), "get_config")},
                             {"dynamic", options_.dynamic},
                             {"initial_scale", options_.initial_scale},
                             {"dynamic_growth_steps", options_.dynamic_growth_steps}});
}

std::vector<train::TrackableChild> LossScaleOptimizer::trackable_children() const {
  std::vector<train::TrackableChild> out = inner_->trackable_children();
  out.push_back({"loss_scale", state_node_});
  return out;
}

void LossScaleOptimizer::update_step(const Tensor&, Tensor&, std::vector<Tensor>&, const Step&) {
  // apply_gradients runs the inner optimizer's update; nothing reaches this one.
  throw InternalError("LossScaleOptimizer::update_step: the update is the inner optimizer's");
}

}  // namespace chorus::optimizers
