// Strided index spaces shared by the CPU loops and the CUDA kernels (C++17: used by .cu files).
//
// An op on broadcast or permuted operands walks the output's dims in row-major order; operand i
// element of output index (i0, ..., i_{r-1}) sits at sum_d i_d * strides[i][d] (in elements).
// A broadcast dimension has stride 0. Rank is at most kMaxRank (the op layer first merges
// adjacent dimensions that are contiguous in every operand, so only truly strided ranks remain).
#pragma once

#include <cstdint>

namespace chorus::ops {

inline constexpr int kMaxRank = 8;

struct StridedLayout {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};        // output dims
  std::int64_t strides[3][kMaxRank] = {};  // operands 0..2 (binary: 0 = a, 1 = b; where: 0 = cond, 1 = x, 2 = y)
  std::int64_t offsets[3] = {};            // element offset of each operand's first element
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= dims[d];
    return n;
  }
};

// A copy from a strided source into a strided destination of the same dims (transpose, slice,
// pad, concat are all this): operand 0 = source, operand 1 = destination.
using CopyLayout = StridedLayout;

}  // namespace chorus::ops
