#include <chorus/optimizer/adam.h>

#include <cmath>

#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/training.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

namespace {

void check_adam(const char* who, double beta_1, double beta_2, double epsilon) {
  CHORUS_REQUIRE(beta_1 >= 0.0 && beta_1 < 1.0, InvalidArgumentError, who, ": `beta_1` must be in [0, 1), got ",
                 beta_1);
  CHORUS_REQUIRE(beta_2 >= 0.0 && beta_2 < 1.0, InvalidArgumentError, who, ": `beta_2` must be in [0, 1), got ",
                 beta_2);
  CHORUS_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0, InvalidArgumentError, who,
                 ": `epsilon` must be a number >= 0, got ", epsilon);
}

AdamOptions from_adamw(const AdamWOptions& o) {
  CHORUS_REQUIRE(std::isfinite(o.weight_decay), InvalidArgumentError,
                 "AdamW: Argument `weight_decay` must be a float. Received: weight_decay=", o.weight_decay);
  return {.learning_rate = o.learning_rate,
          .beta_1 = o.beta_1,
          .beta_2 = o.beta_2,
          .epsilon = o.epsilon,
          .amsgrad = o.amsgrad,
          .weight_decay = o.weight_decay,
          .clipnorm = o.clipnorm,
          .clipvalue = o.clipvalue,
          .global_clipnorm = o.global_clipnorm,
          .gradient_accumulation_steps = o.gradient_accumulation_steps,
          .name = o.name};
}

}  // namespace

Adam::Adam(const AdamOptions& o)
    : Optimizer(o.name, o.learning_rate,
                {.weight_decay = o.weight_decay,
                 .clipnorm = o.clipnorm,
                 .clipvalue = o.clipvalue,
                 .global_clipnorm = o.global_clipnorm,
                 .gradient_accumulation_steps = o.gradient_accumulation_steps}),
      beta_1_(o.beta_1),
      beta_2_(o.beta_2),
      epsilon_(o.epsilon),
      amsgrad_(o.amsgrad) {
  check_adam(o.name.c_str(), o.beta_1, o.beta_2, o.epsilon);
}

AdamW::AdamW(const AdamWOptions& o) : Adam(from_adamw(o)) {}

std::vector<std::string> Adam::slot_names_impl() const {
  if (amsgrad_) return {"m", "v", "vhat"};
  return {"m", "v"};
}

double Adam::alpha(const Step& step) const {
  const double t = static_cast<double>(step.iterations + 1);
  return step.learning_rate * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
}

bool Adam::fused_update(const Step& step, ops::FusedUpdate& out) const {
  if (amsgrad_) return false;
  out.rule = ops::FusedRule::kAdam;
  out.scalars.alpha = alpha(step);
  out.scalars.one_minus_beta_1 = 1.0 - beta_1_;
  out.scalars.one_minus_beta_2 = 1.0 - beta_2_;
  out.scalars.epsilon = epsilon_;
  return true;
}

// The op sequence (12 ops, 4 scalars and 3 copies per variable) that fused_update's rule equals
// bitwise; run where the group could not be fused, and with AMSGrad.
void Adam::update_step(const Tensor& g, Tensor& w, std::vector<Tensor>& slots, const Step& step) {
  const double alpha = this->alpha(step);
  Tensor& m = slots[0];
  Tensor& v = slots[1];
  update_in_place(m, ops::add(m, ops::mul(ops::sub(g, m), ops::scalar_like(g, 1.0 - beta_1_))));
  update_in_place(v, ops::add(v, ops::mul(ops::sub(ops::square(g), v), ops::scalar_like(g, 1.0 - beta_2_))));
  Tensor denom_v = v;
  if (amsgrad_) {
    Tensor& v_hat = slots[2];
    update_in_place(v_hat, ops::maximum(v_hat, v));
    denom_v = v_hat;
  }
  const Tensor delta =
      ops::div(ops::mul(m, ops::scalar_like(m, alpha)), ops::add(ops::sqrt(denom_v), ops::scalar_like(m, epsilon_)));
  update_in_place(w, ops::sub(w, delta));
}

std::string Adam::config_fields() const {
  return detail::keras_fields({{"beta_1", beta_1_}, {"beta_2", beta_2_}, {"epsilon", epsilon_}, {"amsgrad", amsgrad_}});
}

}  // namespace chorus::optimizers
