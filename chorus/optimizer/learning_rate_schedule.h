// Learning-rate schedules (tf.keras.optimizers.schedules), evaluated at the optimizer's
// `iterations` — the number of apply_gradients calls completed before the current one, so the
// first update uses schedule(0), as in Keras.
//
//   using namespace chorus::optimizers;
//   SGD sgd({.learning_rate = schedules::ExponentialDecay(0.1, /*decay_steps=*/100, /*decay_rate=*/0.96)});
//   Adam adam({.learning_rate = schedules::CosineDecay(1e-3, 1000, /*alpha=*/0.0, /*warmup_target=*/1e-2, 100)});
//   SGD piecewise({.learning_rate = schedules::PiecewiseConstantDecay({100, 200}, {1.0, 0.5, 0.1})});
//
// Formulas (Keras 3's keras/src/optimizers/schedules/learning_rate_schedule.py), with s the step:
//   ExponentialDecay:  lr = initial · rate^(s / decay_steps)   (staircase: floor(s / decay_steps))
//   CosineDecay:       without warmup: s' = min(s, decay_steps),
//                      lr = initial · ((1 − alpha) · ½(1 + cos(π s' / decay_steps)) + alpha);
//                      with warmup_target: s' = min(s, warmup_steps + decay_steps); while
//                      s' < warmup_steps, lr = initial + (target − initial) · s' / warmup_steps
//                      (linear warmup), afterwards the cosine above from `target` at s' − warmup_steps.
//   PiecewiseConstantDecay: values[0] for s <= boundaries[0], values[i] for
//                      boundaries[i−1] < s <= boundaries[i], values.back() for s > boundaries.back().
// Values are computed in float64 on the host (Keras computes them in float32) and rounded to each
// variable's dtype where they are used, so every replica sees the same bits.
//
// Errors (at construction, InvalidArgumentError naming the value): decay_steps <= 0, warmup_steps
// < 0, alpha outside [0, 1], boundaries not strictly increasing, values.size() != boundaries.size()
// + 1 (Keras's message), a negative step at evaluation.
// Thread-safety: schedules are immutable after construction; evaluate from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus::optimizers {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // The learning rate at `step` (>= 0).
  virtual double operator()(std::int64_t step) const = 0;
  // Keras's serialized form: {"class_name": "ExponentialDecay", "config": {...}}.
  virtual std::string get_config() const = 0;
};

namespace schedules {

class ExponentialDecay final : public LearningRateSchedule {
 public:
  ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate, bool staircase = false);
  double operator()(std::int64_t step) const override;
  std::string get_config() const override;

 private:
  double initial_;
  std::int64_t decay_steps_;
  double decay_rate_;
  bool staircase_;
};

class CosineDecay final : public LearningRateSchedule {
 public:
  // warmup_target unset: no warmup (warmup_steps must then be 0, as it has no effect).
  CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha = 0.0,
              std::optional<double> warmup_target = std::nullopt, std::int64_t warmup_steps = 0);
  double operator()(std::int64_t step) const override;
  std::string get_config() const override;

 private:
  double initial_;
  std::int64_t decay_steps_;
  double alpha_;
  std::optional<double> warmup_target_;
  std::int64_t warmup_steps_;
};

class PiecewiseConstantDecay final : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values);
  double operator()(std::int64_t step) const override;
  std::string get_config() const override;

 private:
  std::vector<std::int64_t> boundaries_;
  std::vector<double> values_;
};

}  // namespace schedules

// What an optimizer's `learning_rate` option holds: a constant or a schedule (Keras accepts a
// float or a LearningRateSchedule in the same argument). Converts implicitly from both.
class LearningRate {
 public:
  LearningRate(double value);  // NOLINT: implicit, as `learning_rate=1e-3` in Keras
  LearningRate(std::shared_ptr<const LearningRateSchedule> schedule);  // NOLINT
  template <typename S>
  requires std::is_base_of_v<LearningRateSchedule, std::remove_cvref_t<S>> LearningRate(
      S&& schedule)  // NOLINT: `.learning_rate = schedules::CosineDecay(...)`
      : LearningRate(std::shared_ptr<const LearningRateSchedule>(
            std::make_shared<std::remove_cvref_t<S>>(std::forward<S>(schedule)))) {}

  // The rate at `step` (the constant for a constant).
  double at(std::int64_t step) const;
  bool is_schedule() const { return schedule_ != nullptr; }
  const std::shared_ptr<const LearningRateSchedule>& schedule() const { return schedule_; }
  // "0.001" or the schedule's get_config().
  std::string get_config() const;

 private:
  double value_ = 0.0;
  std::shared_ptr<const LearningRateSchedule> schedule_;
};

}  // namespace chorus::optimizers
