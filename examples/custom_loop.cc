// The custom training loop of docs/optimizers.md: MirroredStrategy on two logical CPU devices,
// strategy.run + GradientTape + Optimizer::apply_gradients + strategy.reduce (TF's "custom
// training loop with tf.distribute" guide, in C++). Built and run by CTest; exits non-zero unless
// the loss converged below 1e-3.
#include <chorus/chorus.h>

#include <cmath>
#include <iostream>
#include <memory>

namespace cx = chorus;
namespace ops = chorus::ops;

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "custom_loop",
          "usage: custom_loop\n  a custom training loop under MirroredStrategy on two logical CPUs (no flags)\n"))
    return *rc;
  if (argc > 1)
    return chorus::launch::usage_error(
        "custom_loop", argv[1],
        "usage: custom_loop\n  a custom training loop under MirroredStrategy on two logical CPUs (no flags)\n");
  auto cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  cx::distribute::MirroredStrategy strategy;  // replicas on /cpu:0 and /cpu:1

  // y = x·(1, −2, 0.5) + 0.25 on 64 rows.
  std::vector<float> xs, ys;
  for (int i = 0; i < 64; ++i) {
    const float a = std::sin(0.3f * i), b = std::cos(0.7f * i), c = std::sin(1.1f * i + 0.5f);
    xs.insert(xs.end(), {a, b, c});
    ys.push_back(a - 2 * b + 0.5f * c + 0.25f);
  }
  constexpr int kGlobalBatch = 16;
  auto ds = cx::data::Dataset::from_tensor_slices(
                {cx::Tensor::from_vector<float>(xs, {64, 3}), cx::Tensor::from_vector<float>(ys, {64, 1})})
                .batch(kGlobalBatch);

  cx::Variable w, b;
  std::unique_ptr<cx::optimizers::Adam> optimizer;
  {
    auto scope = strategy.scope();  // the variables, the optimizer's iterations and slots are mirrored
    w = cx::make_variable({.initial_value = cx::Tensor::zeros({3, 1}), .name = "dense/kernel"});
    b = cx::make_variable({.initial_value = cx::Tensor::zeros({1}), .name = "dense/bias"});
    optimizer = std::make_unique<cx::optimizers::Adam>(cx::optimizers::AdamOptions{
        .learning_rate = cx::optimizers::schedules::ExponentialDecay(0.1, /*decay_steps=*/100, /*decay_rate=*/0.5),
        .global_clipnorm = 1.0});
  }

  auto train_step = [&](const cx::data::Element& batch) {
    cx::ops::GradientTape tape;
    cx::Tensor pred = ops::matmul(batch[0], w.value()) + b.value();
    // compute_average_loss: the sum of per-example losses over the GLOBAL batch size, because
    // apply_gradients sums the replicas' gradients.
    cx::Tensor loss = ops::reduce_sum(ops::square(pred - batch[1])) / double(kGlobalBatch);
    auto grads = tape.gradient(loss, std::vector<cx::Variable>{w, b});
    optimizer->apply_gradients({{grads[0], w}, {grads[1], b}});  // all-reduce (SUM) + identical update
    return loss;
  };

  float epoch_loss = 0;
  for (int epoch = 0; epoch < 40; ++epoch) {
    epoch_loss = 0;
    auto it = strategy.experimental_distribute_dataset(ds).make_iterator();
    while (auto batch = it.next()) {
      auto per_replica_loss = strategy.run(train_step, *batch);
      epoch_loss += strategy.reduce(cx::ReduceOp::kSum, per_replica_loss).item<float>();
    }
    if (epoch % 10 == 9) std::cout << "epoch " << epoch + 1 << " loss " << epoch_loss / 4 << "\n";
  }
  std::cout << "steps " << optimizer->iterations().read_value().item<std::int64_t>() << ", learning rate "
            << optimizer->learning_rate() << ", w " << w.read_value() << "\n";
  // Exit status for CTest: the loop must have converged.
  return epoch_loss / 4 < 1e-3f ? 0 : 1;
}
