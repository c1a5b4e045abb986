// Elementwise reductions over host memory, the arithmetic of the in-process backends.
//
// reduce_range computes, for elements [begin, end):
//     r[i] = op(inputs[0][i], ..., inputs[k-1][i])      (MEAN: sum / divisor)
// and stores r[i] into every one of `outputs` (any of which may alias an input: each element is
// read from all inputs before it is written). The k inputs are read once and the outputs written
// once: float32/64 and int32/64 a cache line at a time in registers, 16-bit floats in cache-sized
// tiles of float32 accumulators. 16-bit floats accumulate in float32 and round once;
// integers use their own type (MEAN truncates toward zero). Thread-safe (no shared state).
// Unsupported dtypes (uint8, bool) → InvalidArgumentError.
#pragma once

#include <cstddef>

#include <chorus/collective/communicator.h>
#include <chorus/core/dtype.h>

namespace chorus::collective {

// The dtypes collectives accept; others → InvalidArgumentError naming `what` and the valid ones.
void check_collective_dtype(DType dtype, const char* what);

void reduce_range(DType dtype, ReduceOp op, const void* const* inputs, int num_inputs, void* const* outputs,
                  int num_outputs, std::size_t begin, std::size_t end, int divisor);

}  // namespace chorus::collective
