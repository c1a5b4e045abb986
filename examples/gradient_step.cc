// docs/ops.md's example: one gradient step with GradientTape (built and run by CTest).
#include <iostream>
#include <chorus/chorus.h>
namespace cx = chorus;
namespace ops = chorus::ops;

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "gradient_step", "usage: gradient_step\n  one gradient step with GradientTape (no flags)\n"))
    return *rc;
  if (argc > 1)
    return chorus::launch::usage_error("gradient_step", argv[1],
                                       "usage: gradient_step\n  one gradient step with GradientTape (no flags)\n");
  auto x = cx::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto labels = cx::Tensor::from_vector<std::int32_t>({0, 2});
  cx::Variable w = cx::make_variable({.initial_value = cx::Tensor::full({3, 3}, 0.1), .name = "w"});
  ops::GradientTape tape;  // watches trainable variables itself
  auto logits = ops::matmul(x, w.value());
  auto loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(labels, logits));
  auto grad = tape.gradient(loss, std::vector<cx::Variable>{w})[0];
  w.assign_add(grad * -0.5);  // plain SGD
  std::cout << loss << "\n" << grad << "\n";
}
