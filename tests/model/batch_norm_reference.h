// Float64 references for the batch-normalization tests (CPU and GPU): per-channel moments of
// [rows, c] row-major data and an element-wise closeness check that also refuses non-finite values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::testing {

struct Moments {
  std::vector<double> mean, var;  // biased variance, as batch normalization uses
};

// Two-pass, in float64, of the float32 values actually fed to the layer.
inline Moments moments(const std::vector<double>& x, std::int64_t c) {
  const auto rows = static_cast<std::int64_t>(x.size()) / c;
  Moments m{std::vector<double>(static_cast<std::size_t>(c), 0.0),
            std::vector<double>(static_cast<std::size_t>(c), 0.0)};
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) m.mean[static_cast<std::size_t>(j)] += x[static_cast<std::size_t>(i * c + j)];
  for (auto& v : m.mean) v /= static_cast<double>(rows);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      const double d = x[static_cast<std::size_t>(i * c + j)] - m.mean[static_cast<std::size_t>(j)];
      m.var[static_cast<std::size_t>(j)] += d * d;
    }
  for (auto& v : m.var) v /= static_cast<double>(rows);
  return m;
}

// |got - want| <= abs + rel * |want| element by element; NaN or inf fails, naming the element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel, double abs,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " at " << i << ": " << got[i];
    ASSERT_NEAR(got[i], want[i], abs + rel * std::abs(want[i])) << what << " at " << i;
  }
}

}  // namespace chorus::testing
