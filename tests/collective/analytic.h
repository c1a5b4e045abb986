// Closed-form expectations for collective tests: rank r contributes x_r[i] = (r + 1) + (i % 7).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {

inline const DType kDtypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                DType::kBFloat16, DType::kInt32,   DType::kInt64};
inline const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};

inline double x(int r, std::int64_t i) { return (r + 1) + static_cast<double>(i % 7); }

inline double expected(ReduceOp op, int k, std::int64_t i, DType dt) {
  double sum = 0, prod = 1;
  for (int r = 0; r < k; ++r) {
    sum += x(r, i);
    prod *= x(r, i);
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kMean: return is_integer(dt) ? std::trunc(sum / k) : sum / k;
    case ReduceOp::kMin: return x(0, i);
    case ReduceOp::kMax: return x(k - 1, i);
    case ReduceOp::kProd: return prod;
  }
  return 0;
}

// x_r as a tensor of dtype `dt` on /cpu:r (converted on the host, exact for these small integers).
inline Tensor make_input(int r, std::int64_t n, DType dt, const std::string& type = "cpu") {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = x(r, i);
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(n) * dtype_size(dt));
  convert(v.data(), DType::kFloat64, raw.data(), dt, v.size());
  return Tensor::from_host(raw.data(), {n}, dt, "/" + type + ":" + std::to_string(r));
}

// Allowed error: 16-bit floats round the mean/prod once.
inline double tolerance(DType dt, double want) {
  if (dt == DType::kFloat16) return std::abs(want) * 1e-3;
  if (dt == DType::kBFloat16) return std::abs(want) * 8e-3;
  return std::abs(want) * 1e-12;
}

}  // namespace chorus::collective
