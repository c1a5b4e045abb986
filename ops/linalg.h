// Matrix products (tf.linalg.matmul).
//
//   Tensor c = ops::matmul(a, b);                      // [m, k] x [k, n] → [m, n]
//   Tensor d = ops::matmul(q, k, false, true);         // [..., m, d] x [..., n, d]^T → [..., m, n]
//
// Rank >= 2; leading (batch) dims broadcast as in NumPy. Inner dims must agree (after the
// transposes) → else InvalidArgumentError "Matrix size-incompatible: In[0]: [2,3], In[1]: [4,5]"
// (TF's message). dtypes: float32 (oneDNN on CPU, cuBLAS on GPU), float64 (plain loops on CPU,
// cuBLAS on GPU), float16/bfloat16 on GPU (cuBLAS, float32 accumulation).
#pragma once

#include "core/tensor.h"

namespace chorus::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

}  // namespace chorus::ops
