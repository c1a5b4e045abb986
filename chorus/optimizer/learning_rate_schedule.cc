#include <chorus/optimizer/learning_rate_schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <chorus/core/error.h>
#include <chorus/optimizer/detail.h>

namespace chorus::optimizers {

using detail::format_number;

namespace {

void require_step(std::int64_t step, const char* schedule) {
  CHORUS_REQUIRE(step >= 0, InvalidArgumentError, schedule, ": step must be >= 0, got ", step);
}

}  // namespace

namespace schedules {

ExponentialDecay::ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                                   bool staircase)
    : initial_(initial_learning_rate), decay_steps_(decay_steps), decay_rate_(decay_rate), staircase_(staircase) {
  CHORUS_REQUIRE(decay_steps > 0, InvalidArgumentError,
                 "ExponentialDecay: Argument `decay_steps` must be > 0. Received: decay_steps=", decay_steps);
}

double ExponentialDecay::operator()(std::int64_t step) const {
  require_step(step, "ExponentialDecay");
  double p = static_cast<double>(step) / static_cast<double>(decay_steps_);
  if (staircase_) p = std::floor(p);
  return initial_ * std::pow(decay_rate_, p);
}

std::string ExponentialDecay::get_config() const {
  return detail::keras_json({{"class_name", "ExponentialDecay"},
                             {"config",
                              {{"initial_learning_rate", initial_},
                               {"decay_steps", decay_steps_},
                               {"decay_rate", decay_rate_},
                               {"staircase", staircase_}}}});
}

CosineDecay::CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha,
                         std::optional<double> warmup_target, std::int64_t warmup_steps)
    : initial_(initial_learning_rate),
      decay_steps_(decay_steps),
      alpha_(alpha),
      warmup_target_(warmup_target),
      warmup_steps_(warmup_steps) {
  CHORUS_REQUIRE(decay_steps > 0, InvalidArgumentError,
                 "CosineDecay: Argument `decay_steps` must be > 0. Received: decay_steps=", decay_steps);
  CHORUS_REQUIRE(
      alpha >= 0.0 && alpha <= 1.0, InvalidArgumentError,
      "CosineDecay: `alpha` (the final rate as a fraction of the initial one) must be in [0, 1]. Received: ", alpha);
  CHORUS_REQUIRE(warmup_steps >= 0, InvalidArgumentError,
                 "CosineDecay: `warmup_steps` must be >= 0. Received: warmup_steps=", warmup_steps);
  CHORUS_REQUIRE(warmup_target.has_value() || warmup_steps == 0, InvalidArgumentError,
                 "CosineDecay: warmup_steps=", warmup_steps,
                 " has no effect without a warmup_target (the rate to reach at the end of the warmup); pass both");
}

double CosineDecay::operator()(std::int64_t step) const {
  require_step(step, "CosineDecay");
  const double decay_steps = static_cast<double>(decay_steps_);
  auto decay = [&](double s, double from) {
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * (s / decay_steps)));
    return from * ((1.0 - alpha_) * cosine + alpha_);
  };
  if (!warmup_target_) return decay(std::min(static_cast<double>(step), decay_steps), initial_);
  const double warmup_steps = static_cast<double>(warmup_steps_);
  const double s = std::min(static_cast<double>(step), decay_steps + warmup_steps);
  if (s < warmup_steps) return (*warmup_target_ - initial_) * (s / warmup_steps) + initial_;
  return decay(s - warmup_steps, *warmup_target_);
}

std::string CosineDecay::get_config() const {
  return detail::keras_json({{"class_name", "CosineDecay"},
                             {"config",
                              {{"initial_learning_rate", initial_},
                               {"decay_steps", decay_steps_},
                               {"alpha", alpha_},
                               {"warmup_target", detail::json_or_null(warmup_target_)},
                               {"warmup_steps", warmup_steps_}}}});
}

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  CHORUS_REQUIRE(values_.size() == boundaries_.size() + 1, InvalidArgumentError,
                 "PiecewiseConstantDecay: The length of boundaries should be 1 less than the length of values. "
                 "Received: boundaries=",
                 detail::format_int_list(boundaries_), " of length ", boundaries_.size(),
                 ", and values=", detail::format_list(values_), " of length ", values_.size());
  for (std::size_t i = 1; i < boundaries_.size(); ++i)
    CHORUS_REQUIRE(boundaries_[i - 1] < boundaries_[i], InvalidArgumentError,
                   "PiecewiseConstantDecay: boundaries must be strictly increasing. Received: boundaries=",
                   detail::format_int_list(boundaries_));
}

double PiecewiseConstantDecay::operator()(std::int64_t step) const {
  require_step(step, "PiecewiseConstantDecay");
  // The first boundary >= step: values[i] covers (boundaries[i-1], boundaries[i]].
  const auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), step);
  return values_[static_cast<std::size_t>(it - boundaries_.begin())];
}

std::string PiecewiseConstantDecay::get_config() const {
  return detail::keras_json(
      {{"class_name", "PiecewiseConstantDecay"}, {"config", {{"boundaries", boundaries_}, {"values", values_}}}});
}

}  // namespace schedules

LearningRate::LearningRate(double value) : value_(value) {
  CHORUS_REQUIRE(std::isfinite(value) && value >= 0.0, InvalidArgumentError,
                 "learning_rate must be a finite number >= 0, got ", value);
}

LearningRate::LearningRate(std::shared_ptr<const LearningRateSchedule> schedule) : schedule_(std::move(schedule)) {
  CHORUS_REQUIRE(schedule_ != nullptr, InvalidArgumentError, "learning_rate: null schedule");
}

double LearningRate::at(std::int64_t step) const { return schedule_ ? (*schedule_)(step) : value_; }

std::string LearningRate::get_config() const { return schedule_ ? schedule_->get_config() : format_number(value_); }

}  // namespace chorus::optimizers
