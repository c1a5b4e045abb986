#include <chorus/optimizer/rmsprop.h>

#include <cmath>

#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

RMSprop::RMSprop(const RMSpropOptions& o)
    : Optimizer(o.name, o.learning_rate,
                {.weight_decay = o.weight_decay,
                 .clipnorm = o.clipnorm,
                 .clipvalue = o.clipvalue,
                 .global_clipnorm = o.global_clipnorm,
                 .gradient_accumulation_steps = o.gradient_accumulation_steps}),
      rho_(o.rho),
      momentum_(o.momentum),
      epsilon_(o.epsilon),
      centered_(o.centered) {
  CHORUS_REQUIRE(o.rho >= 0.0 && o.rho < 1.0, InvalidArgumentError, o.name, ": `rho` must be in [0, 1), got ", o.rho);
  CHORUS_REQUIRE(o.momentum >= 0.0 && o.momentum <= 1.0, InvalidArgumentError, o.name,
                 ": `momentum` must be in [0, 1], got ", o.momentum);
  CHORUS_REQUIRE(std::isfinite(o.epsilon) && o.epsilon >= 0.0, InvalidArgumentError, o.name,
                 ": `epsilon` must be a number >= 0, got ", o.epsilon);
}

std::vector<std::string> RMSprop::slot_names_impl() const {
  std::vector<std::string> names{"velocity"};
  if (momentum_ > 0.0) names.push_back("momentum");
  if (centered_) names.push_back("average_gradient");
  return names;
}

bool RMSprop::fused_update(const Step& step, ops::FusedUpdate& out) const {
  out.rule = ops::FusedRule::kRMSprop;
  out.scalars.learning_rate = step.learning_rate;
  out.scalars.rho = rho_;
  out.scalars.one_minus_rho = 1.0 - rho_;
  out.scalars.epsilon = epsilon_;
  out.scalars.momentum = momentum_;
  out.momentum_slot = momentum_ > 0.0;
  out.centered = centered_;
  return true;
}

void RMSprop::update_step(const Tensor& g, Tensor& w, std::vector<Tensor>& slots, const Step& step) {
  Tensor& velocity = slots[0];
  const Tensor rho = ops::scalar_like(g, rho_);
  const Tensor one_minus_rho = ops::scalar_like(g, 1.0 - rho_);
  const Tensor eps = ops::scalar_like(g, epsilon_);
  update_in_place(velocity, ops::add(ops::mul(rho, velocity), ops::mul(one_minus_rho, ops::square(g))));
  Tensor denominator;
  if (centered_) {
    Tensor& average = slots[momentum_ > 0.0 ? 2 : 1];
    update_in_place(average, ops::add(ops::mul(rho, average), ops::mul(one_minus_rho, g)));
    denominator = ops::add(ops::sub(velocity, ops::square(average)), eps);
  } else {
    denominator = ops::add(velocity, eps);
  }
  const Tensor increment = ops::div(ops::mul(ops::scalar_like(g, step.learning_rate), g), ops::sqrt(denominator));
  if (momentum_ > 0.0) {
    Tensor& momentum = slots[1];
    update_in_place(momentum, ops::add(ops::mul(ops::scalar_like(g, momentum_), momentum), increment));
    update_in_place(w, ops::sub(w, momentum));
  } else {
    update_in_place(w, ops::sub(w, increment));
  }
}

std::string RMSprop::config_fields() const {
  return detail::keras_fields({{"rho", rho_}, {"momentum", momentum_}, {"epsilon", epsilon_}, {"centered", centered_}});
}

}  // namespace chorus::optimizers
