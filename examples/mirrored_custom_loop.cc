// docs/distribute.md's program: a custom training loop under MirroredStrategy on two logical
// CPU devices (linear regression y = x·w toward 2). Built and run by CTest (label cpu).
#include <iostream>
#include <chorus/chorus.h>
namespace cx = chorus;
using cx::distribute::MirroredStrategy;

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "mirrored_custom_loop",
          "usage: mirrored_custom_loop\n  a custom loop with strategy.run and reduce on two logical CPUs (no flags)\n"))
    return *rc;
  if (argc > 1)
    return chorus::launch::usage_error(
        "mirrored_custom_loop", argv[1],
        "usage: mirrored_custom_loop\n  a custom loop with strategy.run and reduce on two logical CPUs (no flags)\n");
  auto cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 512}, {.memory_limit_mb = 512}});

  MirroredStrategy strategy;  // replicas on /cpu:0 and /cpu:1
  std::cout << "replicas: " << strategy.num_replicas_in_sync()
            << ", reduction: " << cx::distribute::cross_device_ops_name(strategy.cross_device_ops().ops) << " ("
            << strategy.cross_device_ops().reason << ")\n";

  cx::Variable w;
  {
    auto scope = strategy.scope();  // w gets one component per replica device
    w = cx::make_variable({.initial_value = cx::Tensor::zeros({4, 1}), .name = "w"});
  }
  // Global batches of 8 rows: each replica gets 4 rows on its own device.
  auto x = cx::Tensor::ones({32, 4});
  auto y = cx::Tensor::full({32, 1}, 2.0);
  auto ds = cx::data::Dataset::from_tensor_slices({x, y}).batch(8);
  auto it = strategy.experimental_distribute_dataset(ds).make_iterator();
  while (auto batch = it.next()) {
    auto losses = strategy.run(
        [&](const cx::data::Element& b) {
          cx::ops::GradientTape tape;
          auto err = cx::ops::sub(cx::ops::matmul(b[0], w.value()), b[1]);
          auto loss = cx::ops::div(cx::ops::reduce_sum(cx::ops::square(err)), cx::ops::scalar_like(err, 8.0));
          auto grad = tape.gradient(loss, std::vector<cx::Variable>{w})[0];
          grad = cx::get_replica_context()->all_reduce(cx::ReduceOp::kSum, grad);  // sum over replicas
          w.value().copy_from(cx::ops::sub(w.value(), cx::ops::mul(grad, cx::ops::scalar_like(grad, 0.05))));
          return loss;
        },
        *batch);
    std::cout << "loss " << strategy.reduce(cx::ReduceOp::kSum, losses).item<float>() << "\n";
  }
}
