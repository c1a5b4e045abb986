// The training run of the overlap tests across backends (overlap_mpi_test.cc,
// overlap_gpu_test.cc): three steps of a three-layer net, a custom loop (GradientTape, then
// Optimizer::compute_gradients and apply_gradients: the sum travels as a value) on each replica's own rows, and what it
// left.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/distribute/strategy.h>
#include <chorus/ops/ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/adam.h>

namespace chorus::overlap_testing {

struct Outcome {
  std::vector<std::vector<float>> weights;  // each variable's, after the steps
  distribute::AllReduceCounters counters;   // over the steps
};

// widths: input, two hidden layers, output; `rows` per replica and step; weights drawn in
// [-init, init] from a fixed seed (the same on every replica and in every run).
inline Outcome train_three_layers(distribute::Strategy& s, std::array<std::int64_t, 4> widths, std::int64_t rows,
                                  double init) {
  std::vector<Variable> vars;
  std::shared_ptr<optimizers::Adam> opt;
  {
    auto scope = s.scope();
    const auto [in, h1, h2, out] = widths;
    const std::vector<std::vector<std::int64_t>> shapes{{in, h1}, {h1}, {h1, h2}, {h2}, {h2, out}, {out}};
    for (std::size_t i = 0; i < shapes.size(); ++i)
      vars.push_back(
          make_variable({.initial_value = ops::stateless_random_uniform(
                             Shape(shapes[i]), {7, static_cast<std::int64_t>(i)}, {.minval = -init, .maxval = init}),
                         .name = "v" + std::to_string(i)}));
    opt = std::make_shared<optimizers::Adam>(1e-2);
  }
  s.read_and_reset_all_reduce_counters();
  for (int step = 0; step < 3; ++step) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const Tensor x = ops::stateless_random_uniform({rows, widths[0]}, {100 + step, r});
      const Tensor y = ops::stateless_random_uniform({rows, widths[3]}, {200 + step, r});
      ops::GradientTape tape;
      Tensor h = ops::relu(ops::matmul(x, vars[0].value()) + vars[1].value());
      h = ops::relu(ops::matmul(h, vars[2].value()) + vars[3].value());
      const Tensor loss = ops::reduce_mean(ops::square(ops::matmul(h, vars[4].value()) + vars[5].value() - y));
      opt->apply_gradients(opt->compute_gradients(loss, vars, tape));  // the sum begun during backward
    });
  }
  Outcome result;
  result.counters = s.read_and_reset_all_reduce_counters();
  for (const Variable& v : vars) result.weights.push_back(v.read_value().to_vector<float>());
  return result;
}

}  // namespace chorus::overlap_testing
