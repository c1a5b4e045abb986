// Dtype policies (tf.keras.mixed_precision.Policy, set_global_policy, global_policy).
//
//   mixed_precision::set_global_policy("mixed_bfloat16");   // before the layers are created
//   model::Sequential model({layers::Dense(4096, "relu"), layers::Dense(10)});
//   // kernels and biases are float32 variables; Dense computes in bfloat16
//
// A policy names two dtypes: the compute dtype a layer runs in, and the variable dtype its
// weights are stored in. The names are Keras's:
//
//   name             compute    variables
//   "float32"        float32    float32     (the default)
//   "float64"        float64    float64
//   "mixed_bfloat16" bfloat16   float32
//   "mixed_float16"  float16    float32
//
// Keras's pure "bfloat16"/"float16" policies (16-bit variables) are refused with
// InvalidArgumentError: the optimizers update float32 state, and 16-bit weights lose small
// updates; use the mixed policy of the same compute dtype. Any other name is refused the same way.
//
// What a layer does with its policy (model/layer.h): it casts floating-point inputs to the
// compute dtype (Keras's autocast; integer inputs such as Embedding ids are untouched), reads each
// floating weight cast to the compute dtype (Keras's AutoCastVariable: the variable itself stays
// float32, and the gradient flows back through the cast as float32), and computes in that dtype.
// Where Keras keeps float32 for numerical safety, chorus does too: a softmax activation runs in
// float32 and returns float32, BatchNormalization normalizes in float32 and returns the compute
// dtype, and a model's loss and metrics see float32 predictions (model/model.h).
//
// A layer takes the global policy when it is constructed; Layer::set_dtype_policy (or
// layers::with_dtype_policy) overrides it before the layer is built — the spelling of Keras's
// `Dense(10, dtype="float32")`, the usual choice for a model's output layer.
//
// float16 needs a GPU (cuBLAS/cuDNN) or a CPU whose oneDNN has float16 kernels; elsewhere the
// first float16 matmul or convolution raises an error that names mixed_bfloat16. A mixed_float16
// model should be trained with optimizers::LossScaleOptimizer (optimizer/loss_scale_optimizer.h),
// as in Keras; bfloat16 has float32's range and needs no loss scaling.
//
// Thread-safety: the global policy is read and written under a mutex; set it before creating the layers (a
// layer already constructed keeps the policy it took).
#pragma once

#include <string>
#include <string_view>

#include <chorus/core/dtype.h>

namespace chorus::mixed_precision {

class Policy {
 public:
  // "float32" (also the default), "float64", "mixed_bfloat16", "mixed_float16"; anything else
  // → InvalidArgumentError listing these.
  explicit Policy(std::string_view name = "float32");

  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return variable_; }
  // True for the mixed policies (compute dtype narrower than the variable dtype).
  bool is_mixed() const { return compute_ != variable_; }

  friend bool operator==(const Policy& a, const Policy& b) { return a.name_ == b.name_; }
  friend bool operator!=(const Policy& a, const Policy& b) { return !(a == b); }

 private:
  std::string name_;
  DType compute_ = DType::kFloat32;
  DType variable_ = DType::kFloat32;
};

// The policy layers constructed from now on take (Keras's global policy). Starts as "float32".
void set_global_policy(const Policy& policy);
void set_global_policy(std::string_view name);
Policy global_policy();

}  // namespace chorus::mixed_precision
