// Argument errors of the op layer: each is an InvalidArgumentError thrown by the op call (not at a
// later read) whose message names the op's problem with the numbers. Also: results of transpose
// and slice (always dense copies in chorus) feed other ops correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class ErrorsTest : public testing::CoreTest {};

Tensor F(const std::vector<float>& v, const Shape& s, std::string_view dev = "/CPU:0") {
  return Tensor::from_vector<float>(v, s, dev);
}
Tensor zeros(const Shape& s, DType dt = DType::kFloat32) { return Tensor::zeros(s, dt, "/CPU:0"); }

TEST_F(ErrorsTest, IncompatibleShapes) {
  const Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_THROW_WITH(ops::add(a, b), InvalidArgumentError, "Incompatible shapes", "(2, 3)", "(4,)");
  EXPECT_THROW_WITH(ops::less(a, zeros({3, 3})), InvalidArgumentError, "Incompatible shapes");
  EXPECT_THROW_WITH(a * zeros({2, 2}), InvalidArgumentError, "Incompatible shapes");
  EXPECT_THROW_WITH(ops::where(Tensor::zeros({2}, DType::kBool, "/CPU:0"), a, a), InvalidArgumentError,
                    "Incompatible shapes");
  EXPECT_THROW_WITH(ops::broadcast_to(a, Shape{3, 3}), InvalidArgumentError, "(2, 3)", "(3, 3)");
  EXPECT_THROW_WITH(ops::broadcast_to(a, Shape{1, 3}), InvalidArgumentError, "cannot broadcast");
}

TEST_F(ErrorsTest, MismatchedDtypes) {
  const Tensor f = zeros({2}), d = zeros({2}, DType::kFloat64), i = zeros({2}, DType::kInt32);
  EXPECT_THROW_WITH(ops::add(f, d), InvalidArgumentError, "same dtype", "float32", "float64", "cast");
  EXPECT_THROW_WITH(ops::maximum(i, f), InvalidArgumentError, "int32", "float32");
  EXPECT_THROW_WITH(ops::where(Tensor::zeros({2}, DType::kBool, "/CPU:0"), f, d), InvalidArgumentError, "same dtype");
  EXPECT_THROW_WITH(ops::where(f, f, f), InvalidArgumentError, "cond", "bool");
  EXPECT_THROW_WITH(ops::concat({f, d}, 0), InvalidArgumentError, "same dtype");
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 2}), zeros({2, 2}, DType::kFloat64)), InvalidArgumentError, "same dtype");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 3, 3, 1}), zeros({1, 1, 1, 1}, DType::kFloat64)), InvalidArgumentError,
                    "same dtype");
  // Ops that need floats name the allowed dtypes.
  EXPECT_THROW_WITH(ops::exp(i), InvalidArgumentError, "Exp", "int32", "allowed", "float32");
  EXPECT_THROW_WITH(ops::sigmoid(Tensor::zeros({2}, DType::kBool, "/CPU:0")), InvalidArgumentError, "bool");
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 2}, DType::kInt32), zeros({2, 2}, DType::kInt32)), InvalidArgumentError,
                    "int32");
  EXPECT_THROW_WITH(ops::softmax(zeros({2, 2}, DType::kInt64)), InvalidArgumentError, "int64");
  EXPECT_THROW_WITH(ops::add(Tensor::zeros({2}, DType::kBool, "/CPU:0"), Tensor::zeros({2}, DType::kBool, "/CPU:0")),
                    InvalidArgumentError, "bool");
  EXPECT_THROW_WITH(ops::gather(f, f), InvalidArgumentError, "indices", "float32");
  EXPECT_THROW_WITH(ops::sparse_softmax_cross_entropy_with_logits(f, zeros({2, 3})), InvalidArgumentError, "labels");
  EXPECT_THROW_WITH(ops::softmax_cross_entropy_with_logits(zeros({2, 3}, DType::kFloat64), zeros({2, 3})),
                    InvalidArgumentError, "labels must match");
}

TEST_F(ErrorsTest, InputsOnTwoDevices) {
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  const Tensor a = F({1, 2}, {2}, "/CPU:0"), b = F({3, 4}, {2}, "/CPU:1");
  EXPECT_THROW_WITH(ops::add(a, b), InvalidArgumentError, "one device", "device:CPU:0", "device:CPU:1", ".to(");
  EXPECT_THROW_WITH(ops::matmul(ops::reshape(a, {1, 2}), ops::reshape(b, {2, 1})), InvalidArgumentError, "device:CPU:0",
                    "device:CPU:1");
  EXPECT_THROW_WITH(ops::concat({a, b}, 0), InvalidArgumentError, "device:CPU:0", "device:CPU:1");
  EXPECT_THROW_WITH(ops::gather(a, Tensor::from_vector<std::int32_t>({0}, "/CPU:1")), InvalidArgumentError,
                    "device:CPU:0", "device:CPU:1");
  EXPECT_THROW_WITH(ops::where(Tensor::zeros({2}, DType::kBool, "/CPU:1"), a, a), InvalidArgumentError, "device:CPU:0",
                    "device:CPU:1");
  // Moving one operand fixes it; the result lives on the inputs' device.
  const Tensor c = ops::add(a, b.to("/CPU:0"));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{4, 6}));
  EXPECT_EQ(c.device_name(), a.device_name());
  const Tensor d = ops::mul(b, b);
  EXPECT_EQ(d.device_name(), b.device_name());
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{9, 16}));
}

// A tensor made before the device runtime was reset meets one made after it: the same device name
// twice, so the message names the reset instead of "CPU:0 and CPU:0".
TEST_F(ErrorsTest, ATensorOfAResetRuntimeIsNamed) {
  const Tensor before = F({1, 2}, {2}, "/CPU:0");
  chorus::internal::reset_runtime_for_testing();
  const Tensor after = F({3, 4}, {2}, "/CPU:0");
  EXPECT_THROW_WITH(ops::add(after, before), InvalidArgumentError, "input 1 lives on", "has been reset",
                    "make input 1 again");
  EXPECT_EQ(ops::add(after, after).to_vector<float>(), (std::vector<float>{6, 8}));
}

TEST_F(ErrorsTest, UndefinedInputs) {
  const Tensor u, x = zeros({2, 2});
  EXPECT_THROW_WITH(ops::add(u, x), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::add(x, u), InvalidArgumentError, "input 1", "undefined");
  EXPECT_THROW_WITH(ops::exp(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::cast(u, DType::kFloat64), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::reduce_sum(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::argmax(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::reshape(u, {4}), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::transpose(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::matmul(x, u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::concat({x, u}, 0), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::stack({x, u}), InvalidArgumentError, "Pack");
  EXPECT_THROW_WITH(ops::gather(u, Tensor::from_vector<std::int32_t>({0}, "/CPU:0")), InvalidArgumentError,
                    "undefined");
  EXPECT_THROW_WITH(ops::where(u, x, x), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::conv2d(u, x), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::softmax(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::max_pool2d(u, {2, 2}, {2, 2}), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::batch_norm(zeros({2, 2}), zeros({2}), zeros({2}), u, u, 1e-3, false), InvalidArgumentError,
                    "undefined");
  EXPECT_THROW_WITH(ops::one_hot(u, 3), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::zeros_like(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::stop_gradient(u), InvalidArgumentError, "undefined");
  EXPECT_THROW_WITH(ops::concat({}, 0), InvalidArgumentError, "no tensors");
}

TEST_F(ErrorsTest, BadAxes) {
  const Tensor x = zeros({2, 3});
  EXPECT_THROW_WITH(ops::reduce_sum(x, 2), InvalidArgumentError, "axis 2", "rank 2", "[-2, 2)");
  EXPECT_THROW_WITH(ops::reduce_mean(x, {-3}), InvalidArgumentError, "axis -3");
  EXPECT_THROW_WITH(ops::reduce_max(x, {0, 0}), InvalidArgumentError, "twice");
  EXPECT_THROW_WITH(ops::argmax(x, 2), InvalidArgumentError, "axis 2");
  EXPECT_THROW_WITH(ops::concat({x, x}, 2), InvalidArgumentError, "axis 2");
  EXPECT_THROW_WITH(ops::concat({x, zeros({3, 3})}, 1), InvalidArgumentError, "(2, 3)", "(3, 3)");
  EXPECT_THROW_WITH(ops::concat({zeros({}), zeros({})}, 0), InvalidArgumentError, "scalars");
  EXPECT_THROW_WITH(ops::split(x, 2, 1), InvalidArgumentError, "not divisible");
  EXPECT_THROW_WITH(ops::split(x, 3, -3), InvalidArgumentError, "axis -3");
  EXPECT_THROW_WITH(ops::split(x, {1, 1}, 1), InvalidArgumentError, "do not add up");
  EXPECT_THROW_WITH(ops::split(x, {4, -1}, 1), InvalidArgumentError, "do not add up");
  EXPECT_THROW_WITH(ops::split(x, 0, 0), InvalidArgumentError, "num must be > 0");
  EXPECT_THROW_WITH(ops::softmax(x, 2), InvalidArgumentError, "axis 2");
  EXPECT_THROW_WITH(ops::expand_dims(x, 3), InvalidArgumentError, "axis 3");
  EXPECT_THROW_WITH(ops::squeeze(x, {0}), InvalidArgumentError, "is not 1");
  EXPECT_THROW_WITH(ops::gather(x, Tensor::from_vector<std::int32_t>({0}, "/CPU:0"), 2), InvalidArgumentError,
                    "axis 2");
  EXPECT_THROW_WITH(ops::gather(zeros({}), Tensor::from_vector<std::int32_t>({0}, "/CPU:0")), InvalidArgumentError,
                    "rank >= 1");
  EXPECT_THROW_WITH(ops::stack({x, zeros({3, 2})}), InvalidArgumentError, "(2, 3)");
  EXPECT_THROW_WITH(ops::stack({x}, 3), InvalidArgumentError, "axis 3");
}

TEST_F(ErrorsTest, BadPermAndShapes) {
  const Tensor x = zeros({2, 3, 4});
  EXPECT_THROW_WITH(ops::transpose(x, {0, 1}), InvalidArgumentError, "perm");
  EXPECT_THROW_WITH(ops::transpose(x, {0, 0, 1}), InvalidArgumentError, "perm");
  EXPECT_THROW_WITH(ops::transpose(x, {0, 1, 3}), InvalidArgumentError, "perm");
  EXPECT_THROW_WITH(ops::transpose(x, {0, 1, -1}), InvalidArgumentError, "perm");
  EXPECT_THROW_WITH(ops::reshape(x, {5, 5}), InvalidArgumentError, "(5, 5)");
  EXPECT_THROW_WITH(ops::reshape(x, {-1, -1}), InvalidArgumentError, "only one");
  EXPECT_THROW_WITH(ops::reshape(x, {5, -1}), InvalidArgumentError, "cannot reshape");
  EXPECT_THROW_WITH(ops::reshape(x, {-2, 12}), InvalidArgumentError, "invalid dimension -2");
  EXPECT_THROW_WITH(ops::slice(x, {0, 0, 0}, {3, 1, 1}), InvalidArgumentError, "out of bounds", "dimension 0");
  EXPECT_THROW_WITH(ops::slice(x, {0, -1, 0}, {1, 1, 1}), InvalidArgumentError, "out of bounds");
  EXPECT_THROW_WITH(ops::slice(x, {0, 0}, {1, 1}), InvalidArgumentError, "entries");
  EXPECT_THROW_WITH(ops::pad(x, {{0, 0}, {0, 0}}), InvalidArgumentError, "padding pairs");
  EXPECT_THROW_WITH(ops::pad(x, {{0, 0}, {-1, 0}, {0, 0}}), InvalidArgumentError, ">= 0");
  EXPECT_THROW_WITH(ops::one_hot(Tensor::from_vector<std::int32_t>({0}, "/CPU:0"), -1), InvalidArgumentError, "depth");
}

TEST_F(ErrorsTest, MatMulShapes) {
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 3}), zeros({4, 5})), InvalidArgumentError,
                    "Matrix size-incompatible: In[0]: (2, 3), In[1]: (4, 5)");
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 3}), zeros({2, 3}), false, false), InvalidArgumentError,
                    "Matrix size-incompatible");
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 3}), zeros({2, 3}), true, true), InvalidArgumentError,
                    "Matrix size-incompatible", "transpose_a", "transpose_b");
  EXPECT_THROW_WITH(ops::matmul(zeros({3}), zeros({3, 2})), InvalidArgumentError, "rank >= 2");
  EXPECT_THROW_WITH(ops::matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), InvalidArgumentError, "Incompatible shapes");
}

TEST_F(ErrorsTest, ConvAndPoolShapes) {
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 3}), zeros({3, 3, 2, 4})), InvalidArgumentError, "Conv2D",
                    "input depth 3", "filters' input depth 2");
  EXPECT_THROW_WITH(ops::conv2d(zeros({4, 4, 3}), zeros({3, 3, 3, 4})), InvalidArgumentError, "NHWC");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 3}), zeros({3, 3, 3})), InvalidArgumentError, "HWIO");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 2, 2, 1}), zeros({3, 3, 1, 1})), InvalidArgumentError, "does not fit",
                    "VALID");
  EXPECT_THROW_WITH(
      ops::conv2d(zeros({1, 4, 4, 1}), zeros({2, 2, 1, 1}), ops::Conv2dOptions{{1, 1}, ops::Padding::kValid, {4, 4}}),
      InvalidArgumentError, "does not fit");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 1}), zeros({1, 1, 1, 1}), {0, 1}, ops::Padding::kSame),
                    InvalidArgumentError, "strides");
  EXPECT_THROW_WITH(ops::max_pool2d(zeros({1, 2, 2, 1}), {3, 3}, {1, 1}), InvalidArgumentError, "does not fit");
  EXPECT_THROW_WITH(ops::avg_pool2d(zeros({2, 2, 1}), {1, 1}, {1, 1}), InvalidArgumentError, "NHWC");
  EXPECT_THROW_WITH(ops::avg_pool2d(zeros({1, 2, 2, 1}), {0, 1}, {1, 1}), InvalidArgumentError, "> 0");
  EXPECT_THROW_WITH(ops::conv2d_backprop_input(Shape{1, 4, 4, 1}, zeros({3, 3, 1, 1}), zeros({1, 4, 4, 1}), {}),
                    InvalidArgumentError, "dy has shape");
}

TEST_F(ErrorsTest, LossAndBatchNormShapes) {
  EXPECT_THROW_WITH(ops::sparse_softmax_cross_entropy_with_logits(
                        Tensor::from_vector<std::int32_t>({0, 1, 2}, "/CPU:0"), zeros({2, 3})),
                    InvalidArgumentError, "labels must have shape (2,)");
  EXPECT_THROW_WITH(
      ops::sparse_softmax_cross_entropy_with_logits(Tensor::from_vector<std::int32_t>({0}, "/CPU:0"), zeros({3})),
      InvalidArgumentError, "[batch, classes]");
  EXPECT_THROW_WITH(ops::softmax_cross_entropy_with_logits(zeros({2, 4}), zeros({2, 3})), InvalidArgumentError,
                    "labels must match");
  EXPECT_THROW_WITH(
      ops::sparse_softmax_cross_entropy_with_logits(Tensor::from_vector<std::int32_t>({0, 0}, "/CPU:0"), zeros({2, 0})),
      InvalidArgumentError, "0 classes");
  const Tensor x = zeros({4, 3}), c = zeros({3});
  EXPECT_THROW_WITH(ops::batch_norm(x, zeros({2}), c, Tensor(), Tensor(), 1e-3, true), InvalidArgumentError, "(2,)",
                    "(3,)");
  EXPECT_THROW_WITH(ops::batch_norm(x, c, c, c, zeros({3}, DType::kFloat64), 1e-3, false), InvalidArgumentError,
                    "float64");
  EXPECT_THROW_WITH(ops::batch_norm(x, c, c, Tensor(), Tensor(), 0.0, true), InvalidArgumentError, "epsilon");
  EXPECT_THROW_WITH(ops::batch_norm(zeros({3}), c, c, Tensor(), Tensor(), 1e-3, true), InvalidArgumentError,
                    "[..., channels]");
  EXPECT_THROW_WITH(ops::batch_norm(zeros({0, 3}), c, c, Tensor(), Tensor(), 1e-3, true), InvalidArgumentError,
                    "non-empty batch");
}

// chorus tensors are always dense: transpose and slice copy. Their results must feed every op
// family as any other tensor (our "non-contiguous input" cases in TF/PyTorch terms).
TEST_F(ErrorsTest, TransposedAndSlicedResultsFeedOtherOps) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  const Tensor a = F(v, {3, 4});        // [[1..4],[5..8],[9..12]]
  const Tensor at = ops::transpose(a);  // [4,3]
  const Tensor b = F({1, 0, -1, 2, 1, 0, 0, 1, 1, -1, 0, 2}, {3, 4});
  // matmul(a^T materialized, b) == matmul(a, b, transpose_a).
  EXPECT_EQ(ops::matmul(at, b).to_vector<float>(), ops::matmul(a, b, true, false).to_vector<float>());
  EXPECT_EQ(ops::matmul(b, at).to_vector<float>(), ops::matmul(b, a, false, true).to_vector<float>());
  // Elementwise on a slice of a transpose: at[1:3, 0:2] = [[2,6],[3,7]].
  const Tensor s = ops::slice(at, {1, 0}, {2, 2});
  EXPECT_EQ(ops::add(s, F({10, 20}, {2})).to_vector<float>(), (std::vector<float>{12, 26, 13, 27}));
  EXPECT_EQ(ops::reduce_sum(s, 0).to_vector<float>(), (std::vector<float>{5, 13}));
  EXPECT_EQ(ops::reduce_max(at, 1).to_vector<float>(), (std::vector<float>{9, 10, 11, 12}));
  EXPECT_EQ(ops::gather(at, Tensor::from_vector<std::int32_t>({3, 0}, "/CPU:0")).to_vector<float>(),
            (std::vector<float>{4, 8, 12, 1, 5, 9}));
  EXPECT_EQ(ops::transpose(at).to_vector<float>(), v);
  EXPECT_EQ(ops::reshape(at, {-1}).to_vector<float>(), (std::vector<float>{1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12}));
  // A column slice (strided in the source) into softmax and a loss.
  const Tensor col = ops::slice(a, {0, 1}, {3, 2});  // [[2,3],[6,7],[10,11]]
  const auto sm = ops::softmax(col).to_vector<float>();
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(sm[static_cast<std::size_t>(2 * r + 1)], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  const auto loss =
      ops::sparse_softmax_cross_entropy_with_logits(Tensor::from_vector<std::int32_t>({1, 1, 1}, "/CPU:0"), col)
          .to_vector<float>();
  for (float l : loss) EXPECT_NEAR(l, std::log(1.0 + std::exp(-1.0)), 1e-6);
  // NHWC conv on a transposed NCHW tensor: [1,1,3,4] → [1,3,4,1].
  const Tensor nhwc = ops::transpose(ops::reshape(a, {1, 1, 3, 4}), {0, 2, 3, 1});
  EXPECT_EQ(ops::conv2d(nhwc, F({1, 1}, {1, 2, 1, 1}), {1, 1}, ops::Padding::kValid).to_vector<float>(),
            (std::vector<float>{3, 5, 7, 11, 13, 15, 19, 21, 23}));
}

}  // namespace
}  // namespace chorus
