#include <chorus/optimizer/sgd.h>

#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

SGD::SGD(const SGDOptions& o)
    : Optimizer(o.name, o.learning_rate,
                {.weight_decay = o.weight_decay,
                 .clipnorm = o.clipnorm,
                 .clipvalue = o.clipvalue,
                 .global_clipnorm = o.global_clipnorm,
                 .gradient_accumulation_steps = o.gradient_accumulation_steps}),
      momentum_(o.momentum),
      nesterov_(o.nesterov) {
  CHORUS_REQUIRE(o.momentum >= 0.0 && o.momentum <= 1.0, InvalidArgumentError,
                 "SGD: `momentum` must be a float between [0, 1]. Received: momentum=", o.momentum);
}

std::vector<std::string> SGD::slot_names_impl() const {
  if (momentum_ == 0.0) return {};
  return {"momentum"};
}

bool SGD::fused_update(const Step& step, ops::FusedUpdate& out) const {
  out.rule = ops::FusedRule::kSgd;
  out.scalars.learning_rate = step.learning_rate;
  out.scalars.momentum = momentum_;
  out.momentum_slot = momentum_ != 0.0;
  out.nesterov = nesterov_;
  return true;
}

void SGD::update_step(const Tensor& g, Tensor& w, std::vector<Tensor>& slots, const Step& step) {
  const Tensor lr_g = ops::mul(g, ops::scalar_like(g, step.learning_rate));
  if (momentum_ == 0.0) {
    update_in_place(w, ops::sub(w, lr_g));
    return;
  }
  Tensor& m = slots[0];
  const Tensor mu = ops::scalar_like(m, momentum_);
  update_in_place(m, ops::sub(ops::mul(m, mu), lr_g));
  if (nesterov_)
    update_in_place(w, ops::add(w, ops::sub(ops::mul(m, mu), lr_g)));
  else
    update_in_place(w, ops::add(w, m));
}

std::string SGD::config_fields() const {
  return detail::keras_fields({{"momentum", momentum_}, {"nesterov", nesterov_}});
}

}  // namespace chorus::optimizers
