// The NaN and Inf cases of tests/ops/nan_test.cc (CPU, and against the real TensorFlow) and
// tests/ops/nan_gpu_test.cc (the same ops on a GPU): the inputs, the ops run on them, and TF's rules
// written out for them (docs/ops.md, "NaN and Inf"). Test-only; one definition per test binary.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <chorus/ops/ops.h>

namespace chorus::nan_cases {

using ops::Padding;

inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const double kLowest = static_cast<double>(std::numeric_limits<float>::lowest());

// `v` as `dtype` on `device` (cast on the CPU, then copied).
inline Tensor make(const std::vector<double>& v, const Shape& s, DType dtype = DType::kFloat32,
                   const std::string& device = "/CPU:0") {
  const Tensor t = ops::cast(Tensor::from_vector<double>(v, s, "/CPU:0"), dtype);
  return device == "/CPU:0" ? t : t.to(device);
}

// NaN where `want` is NaN, equal infinities, else within 16 float32 roundings (2^-24 each) of the
// largest magnitude the computation holds: |want| plus 3 (the inputs are at most 2 and a log-sum of
// three terms at most 2 + log 3; oneDNN's log_softmax is 2-3 roundings of it off, measured).
inline void expect_same(const Tensor& got_t, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> got = ops::cast(got_t, DType::kFloat64).to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], 16 * std::ldexp(1.0, -24) * (std::abs(want[i]) + 3)) << what << "[" << i << "]";
    }
  }
}

// ---- the ops, as the interop script computes them --------------------------------------------------

inline const std::vector<double> kReluX = {1, kNan, -1, kInf, -kInf, 0};
inline const std::vector<double> kA = {kNan, 0, kNan, 1, -kInf, kInf}, kB = {0, kNan, kNan, kInf, kNan, 2};
inline const std::vector<double> kR = {1,    kNan, 3, 1,    2, 3, -kInf, kInf,  0,     kNan, kNan, kNan,
                                       kInf, kInf, 1, kNan, 5, 3, -kInf, -kInf, -kInf, 2,    kNan, 2};  // [8, 3]
inline const std::vector<double> kAr = {-kInf, -kInf, kNan, -kInf, -kInf, kNan, 2,    kNan,
                                        kNan,  kNan,  kNan, 5,     kInf,  kNan, kNan, kInf};  // [8, 2]
inline const std::vector<double> kPool = {1, kNan, -kInf, -kInf, 3, 4, -kInf, -kInf, 2, 1, 5, 6, kInf, 0, 7, kNan};
inline const std::vector<double> kPoolSame = {kNan, kNan, 1, kNan, kNan, -kInf, 2, -kInf, kNan};
inline const std::vector<double> kSoftmax = {1,    kNan, 0, kInf,  0,     1,     -kInf, 0, 1,
                                             kInf, kInf, 0, -kInf, -kInf, -kInf, 0,     1, 2};
inline const std::vector<std::int32_t> kLabels = {0, 1, 1, 2, 0, 2};

// The ops on `device` (inputs made there), by name.
inline std::map<std::string, Tensor> chorus_outputs(DType dtype, const std::string& device = "/CPU:0") {
  std::map<std::string, Tensor> o;
  {
    const Tensor x = make(kReluX, {6}, dtype, device);
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor y = ops::relu(x);
    o["relu"] = y;
    o["relu_grad"] = tape.gradient(y, std::vector<Tensor>{x})[0];
  }
  const std::pair<const char*, Tensor (*)(const Tensor&)> activations[] = {
      {"silu", ops::silu},
      {"leaky_relu", [](const Tensor& t) { return ops::leaky_relu(t); }},
      {"elu", ops::elu},
      {"softplus", ops::softplus}};
  for (const auto& [name, f] : activations) {
    const Tensor x = make(kReluX, {6}, dtype, device);
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor y = f(x);
    o[name] = y;
    o[std::string(name) + "_grad"] = tape.gradient(y, std::vector<Tensor>{x})[0];
  }
  {
    const Tensor a = make(kA, {6}, dtype, device), b = make(kB, {6}, dtype, device);
    ops::GradientTape tape(/*persistent=*/true);
    tape.watch(a);
    tape.watch(b);
    const Tensor mx = ops::maximum(a, b), mn = ops::minimum(a, b);
    o["maximum"] = mx;
    o["minimum"] = mn;
    const auto gmx = tape.gradient(mx, std::vector<Tensor>{a, b}), gmn = tape.gradient(mn, std::vector<Tensor>{a, b});
    o["maximum_grad_a"] = gmx[0];
    o["maximum_grad_b"] = gmx[1];
    o["minimum_grad_a"] = gmn[0];
    o["minimum_grad_b"] = gmn[1];
  }
  const Tensor r = make(kR, {8, 3}, dtype, device);
  {
    ops::GradientTape tape(/*persistent=*/true);
    tape.watch(r);
    const Tensor mx = ops::reduce_max(r, {1}), mn = ops::reduce_min(r, {1});
    o["reduce_max"] = mx;
    o["reduce_min"] = mn;
    o["reduce_max_grad"] = tape.gradient(mx, std::vector<Tensor>{r})[0];
    o["reduce_min_grad"] = tape.gradient(mn, std::vector<Tensor>{r})[0];
  }
  o["reduce_sum"] = ops::reduce_sum(r, {1});
  o["reduce_mean"] = ops::reduce_mean(r, {1});
  const Tensor ar = make(kAr, {8, 2}, dtype, device);
  o["argmax"] = ops::argmax(ar, 1);
  o["argmin"] = ops::argmin(ar, 1);
  o["argmax_r"] = ops::argmax(r, 1);
  o["argmin_r"] = ops::argmin(r, 1);
  {
    const Tensor p = make(kPool, {1, 4, 4, 1}, dtype, device);
    ops::GradientTape tape;
    tape.watch(p);
    const Tensor y = ops::max_pool2d(p, {2, 2}, {2, 2}, Padding::kValid);
    o["max_pool"] = y;
    o["max_pool_grad"] = tape.gradient(y, std::vector<Tensor>{p})[0];
    o["max_pool_same"] = ops::max_pool2d(make(kPoolSame, {1, 3, 3, 1}, dtype, device), {2, 2}, {1, 1}, Padding::kSame);
  }
  {
    const Tensor s = make(kSoftmax, {6, 3}, dtype, device);
    o["softmax"] = ops::softmax(s);
    o["log_softmax"] = ops::log_softmax(s);
    const Tensor labels = Tensor::from_vector<std::int32_t>(kLabels, {6}, "/CPU:0").to(device);
    ops::GradientTape tape;
    tape.watch(s);
    const Tensor loss = ops::sparse_softmax_cross_entropy_with_logits(labels, s);
    o["xent"] = loss;
    o["xent_grad"] = tape.gradient(loss, std::vector<Tensor>{s})[0];
  }
  return o;
}

// ---- analytic --------------------------------------------------------------------------------------

// The rules, written out for the inputs above (docs/ops.md's table).
inline std::map<std::string, std::vector<double>> analytic() {
  const double e1 = 1 / (1 + std::exp(-1.0)), l1 = std::log(1 + std::exp(-1.0));
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  return {
      {"relu", {1, kNan, 0, kInf, 0, 0}},  // NaN stays NaN
      {"relu_grad", {1, 0, 0, 1, 0, 0}},   // x > 0: false for NaN
      // x·sigmoid(x): -inf·0 is NaN; the gradient s·(1 + x·(1 − s)) is NaN at ±inf (inf·0).
      {"silu", {e1, kNan, -(1 - e1), kInf, kNan, 0}},
      {"silu_grad", {e1 * (2 - e1), kNan, (1 - e1) * (1 - e1), kNan, kNan, 0.5}},
      // x > 0 ? x : 0.2·x, alpha in float32 (TF's attr); NaN and 0 take the alpha branch.
      {"leaky_relu", {1, kNan, -0.2, kInf, -kInf, 0}},
      {"leaky_relu_grad", {1, 0.2, 0.2, 1, 0.2, 0.2}},
      // EluGrad tests the output y < 0: NaN is not, so a NaN input gets the gradient dy.
      {"elu", {1, kNan, std::exp(-1.0) - 1, kInf, -1, 0}},
      {"elu_grad", {1, 1, std::exp(-1.0), 1, 0, 1}},
      {"softplus", {1 + l1, kNan, l1, kInf, 0, std::log(2.0)}},
      {"softplus_grad", {e1, kNan, 1 - e1, 1, 0, 0.5}},
      {"maximum", {kNan, kNan, kNan, kInf, kNan, kInf}},
      {"minimum", {kNan, kNan, kNan, 1, kNan, 2}},
      {"maximum_grad_a", {0, 0, 0, 0, 0, 1}},  // to a where a >= b, else to b
      {"maximum_grad_b", {1, 1, 1, 1, 1, 0}},
      {"minimum_grad_a", {0, 0, 0, 1, 0, 0}},
      {"minimum_grad_b", {1, 1, 1, 0, 1, 1}},
      {"reduce_max", {kNan, 3, kInf, kNan, kInf, kNan, -kInf, kNan}},  // any NaN → NaN
      {"reduce_min", {kNan, 1, -kInf, kNan, 1, kNan, -kInf, kNan}},
      // TF's _MinOrMaxGrad: dy split over the elements equal to the result; a row holding NaN has
      // none (NaN == NaN is false), so 0/0: the whole row's gradient is NaN.
      {"reduce_max_grad", {kNan, kNan, kNan, 0,    0,    1,    0,       1,       0,       kNan, kNan, kNan,
                           0.5,  0.5,  0,    kNan, kNan, kNan, 1.0 / 3, 1.0 / 3, 1.0 / 3, kNan, kNan, kNan}},
      {"reduce_min_grad", {kNan, kNan, kNan, 1,    0,    0,    1,       0,       0,       kNan, kNan, kNan,
                           0,    0,    1,    kNan, kNan, kNan, 1.0 / 3, 1.0 / 3, 1.0 / 3, kNan, kNan, kNan}},
      {"reduce_sum", {kNan, 6, kNan, kNan, kInf, kNan, -kInf, kNan}},
      {"reduce_mean", {kNan, 2, kNan, kNan, kInf, kNan, -kInf, kNan}},
      // From index 0 and the lowest (highest) float, strictly greater (less) wins: NaN never does.
      {"argmax", {0, 0, 0, 0, 0, 1, 0, 1}},
      {"argmin", {0, 1, 0, 0, 0, 1, 0, 0}},
      {"argmax_r", {2, 2, 1, 0, 0, 1, 0, 0}},
      {"argmin_r", {0, 0, 0, 0, 2, 2, 0, 0}},
      // NaN skipped; a window of NaN and -inf gives the lowest float, its gradient on the first tap.
      {"max_pool", {4, kLowest, kInf, 7}},
      {"max_pool_grad", {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0}},
      {"max_pool_same", {kLowest, 1, 1, 2, kLowest, kLowest, 2, kLowest, kLowest}},
      // A row with NaN or +inf, or only -inf: all NaN. -inf alone: probability 0.
      {"softmax",
       {kNan, kNan, kNan, kNan, kNan, kNan, 0, 1 - e1, e1, kNan, kNan, kNan, kNan, kNan, kNan, 1 / z, std::exp(1.0) / z,
        std::exp(2.0) / z}},
      {"log_softmax",
       {kNan, kNan, kNan, kNan, kNan, kNan, -kInf, -1 - l1, -l1, kNan, kNan, kNan, kNan, kNan, kNan, -std::log(z),
        1 - std::log(z), 2 - std::log(z)}},
      {"xent", {kNan, kNan, 1 + l1, kNan, kNan, std::log(z) - 2}},
      {"xent_grad",
       {kNan, kNan, kNan, kNan, kNan, kNan, 0, -e1, e1, kNan, kNan, kNan, kNan, kNan, kNan, 1 / z, std::exp(1.0) / z,
        std::exp(2.0) / z - 1}},
  };
}

}  // namespace chorus::nan_cases
