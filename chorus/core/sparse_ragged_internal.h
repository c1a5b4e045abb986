// Host-side assembly shared by SparseTensor::to_dense and RaggedTensor::to_tensor/row (not public).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>

namespace chorus::internal {

// A tensor of out_shape and values' dtype on values' device, filled with default_value (checked:
// undefined = zero, else a scalar of values' dtype; `op` names the caller in the error), where each
// (src, dst) in `moves` copies the row_elems elements at values[src * row_elems] to
// out[dst * row_elems]. Callers have checked every index against the sizes.
Tensor assemble_rows(const Tensor& values, std::int64_t row_elems, const Shape& out_shape,
                     const std::vector<std::pair<std::int64_t, std::int64_t>>& moves, const Tensor& default_value,
                     const char* op);

// t's elements as host int64 (t must be int64; `what` names it in the error).
std::vector<std::int64_t> host_int64s(const Tensor& t, const char* what);

}  // namespace chorus::internal
