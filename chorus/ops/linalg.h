// Matrix products (tf.linalg.matmul).
//
//   Tensor c = ops::matmul(a, b);                      // [m, k] x [k, n] → [m, n]
//   Tensor d = ops::matmul(q, k, false, true);         // [..., m, d] x [..., n, d]^T → [..., m, n]
//
// Rank >= 2; leading (batch) dims broadcast as in NumPy. Inner dims must agree (after the
// transposes) → else InvalidArgumentError "Matrix size-incompatible: In[0]: [2,3], In[1]: [4,5]"
// (TF's message). Both operands of one dtype (else InvalidArgumentError; use ops::cast):
//   float32   oneDNN on CPU, cuBLAS on GPU.
//   float64   plain loops on CPU, cuBLAS on GPU.
//   bfloat16  CPU: oneDNN's bf16 kernels (float32 accumulation, output rounded once) on AVX-512
//             CPUs, else float32 compute on bfloat16-rounded inputs, rounded once — same values to
//             within one bfloat16 rounding, see ops::cpu::bf16_path() (ops/cpu/dnn.h) for which runs.
//             GPU: cuBLAS, float32 accumulation.
//   float16   GPU: cuBLAS, float32 accumulation. CPU: only where oneDNN has float16 kernels
//             (ops::cpu::float16_supported(); not with oneDNN 2.6), else UnimplementedError naming
//             the op and dtype and recommending mixed_bfloat16 on the CPU.
// Other dtypes → InvalidArgumentError. The gradient (matmuls of the same dtype) follows the same rules.
#pragma once

#include <chorus/core/tensor.h>

namespace chorus::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

}  // namespace chorus::ops
