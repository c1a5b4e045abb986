// ops/image.h on the CPU: every op against TensorFlow 2.21 on the same inputs (tf_image_values.py
// prints TF's values; the inputs are index formulas both sides compute), gradients by finite
// differences, the Generator ops resuming from a saved state, and the errors.
//
// Tolerances against TF: crops, flips (stateless: the same Philox draws as TF, so the same crops
// and flips bit for bit), nearest resize, convert_image_dtype and pad are exact. Bilinear resize
// and its gradient agree to 2e-6 relative (TF's kernels may order the lerp's float32 operations or
// the gradient's sums differently); per_image_standardization to 2e-6 (chorus's reduce_mean sums in
// float64, TF's in float32). convert_image_dtype elements TF leaves to the hardware (a float
// outside the integer range, or NaN, cast to an integer) are not compared: ops/image.h.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "tests/core/interop_python.h"

#include <chorus/ops/image.h>
#include <chorus/ops/image_geometry.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

namespace img = ops::image;
using testing::check_gradients;
using testing::random_tensor;
using i64 = std::int64_t;

std::vector<double> seq(i64 n, double (*f)(i64)) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = f(i);
  return v;
}
double x_at(i64 i) { return static_cast<double>((i * 37) % 101) / 10.0 - 5.0; }
double w_at(i64 i) { return static_cast<double>((i * 13) % 7 - 3) / 4.0; }

Tensor of(const std::vector<double>& v, const Shape& s, DType d) {
  const Tensor t = Tensor::from_vector<double>(v, s, "/CPU:0");
  return d == DType::kFloat64 ? t : ops::cast(t, d);
}
Tensor xs(const Shape& s, DType d = DType::kFloat32) { return of(seq(s.num_elements(), x_at), s, d); }
Tensor u8(const Shape& s) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(s.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37) % 256);
  return Tensor::from_vector<std::uint8_t>(v, s, "/CPU:0");
}
Tensor nonfinite(const Shape& s) {
  std::vector<double> v = seq(s.num_elements(), x_at);
  v[5] = std::nan("");
  v[17] = INFINITY;
  v[30] = -INFINITY;
  return of(v, s, DType::kFloat32);
}
std::vector<double> values(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

// d sum(w * f(x)) / dx under a GradientTape (w: ws of f(x)'s shape and dtype).
Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = f(x);
  const Tensor w = of(seq(y.num_elements(), w_at), y.shape(), y.dtype());
  return tape.gradient(ops::reduce_sum(ops::mul(w, y)), {x})[0];
}

const char* const kDtypeNames[] = {"uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "uint16"};

// The same cases as tf_image_values.py, by name.
std::map<std::string, Tensor> chorus_values() {
  std::map<std::string, Tensor> o;
  const Shape b{2, 5, 7, 3};
  const std::pair<const char*, std::array<i64, 2>> sizes[] = {
      {"up", {11, 13}}, {"down", {3, 4}}, {"mixed", {9, 4}}, {"same", {5, 7}}};
  for (const auto& [tag, size] : sizes) {
    for (auto method : {img::ResizeMethod::kBilinear, img::ResizeMethod::kNearestNeighbor}) {
      const std::string n =
          std::string("resize_") + (method == img::ResizeMethod::kBilinear ? "bilinear" : "nearest") + "_" + tag;
      auto f = [size = size, method](const Tensor& v) { return img::resize(v, size, {.method = method}); };
      o[n] = f(xs(b));
      o[n + "_grad"] = grad_of(f, xs(b));
      o[n + "_f64grad"] = grad_of(f, xs(b, DType::kFloat64));
      o[n + "_u8"] = f(u8(b));
      o[n + "_nonfinite"] = f(nonfinite(b));
    }
  }
  o["resize_bilinear_3d_f64"] = img::resize(xs({6, 4, 2}, DType::kFloat64), {8, 3});
  o["resize_bilinear_3d_bf16"] = img::resize(xs({6, 4, 2}, DType::kBFloat16), {8, 3});
  o["resize_nearest_3d_f16"] =
      img::resize(xs({6, 4, 2}, DType::kFloat16), {8, 3}, {.method = img::ResizeMethod::kNearestNeighbor});
  const Tensor aspect = img::resize(xs(b), {20, 9}, {.preserve_aspect_ratio = true});
  o["resize_aspect"] = Tensor::from_vector<i64>(aspect.shape().dims(), Shape{4}, "/CPU:0");
  o["resize_big_up"] = img::resize(xs({1, 17, 23, 2}), {40, 57});
  o["resize_big_down"] = img::resize(xs({1, 40, 57, 2}), {17, 23});

  o["standardize_f32"] = img::per_image_standardization(xs(b));
  o["standardize_u8"] = img::per_image_standardization(u8({5, 7, 3}));
  const Tensor constant = Tensor::full({2, 3, 4, 2}, 3.0, DType::kFloat32, "/CPU:0");
  o["standardize_const"] = img::per_image_standardization(constant);
  o["standardize_nonfinite"] = img::per_image_standardization(nonfinite(b));
  o["standardize_grad"] = grad_of(img::per_image_standardization, xs(b));
  o["standardize_const_grad"] = grad_of(img::per_image_standardization, constant);

  const std::vector<double> ints[] = {
      {0, 1, 7, 128, 200, 254, 255}, {0, 1, 5, 255, 65536, -1, -7, -2147483648.0, 2147483647.0, 123456789}, {}};
  const std::vector<i64> int64s = {0, 1, 5, 255, -1, -9, (i64{1} << 40) + 3, INT64_MIN, INT64_MAX, 1234567890123456789};
  const std::vector<double> uint16s = {0, 1, 7, 255, 256, 4660, 32768, 65534, 65535};
  const std::vector<double> floats = {0.0, 0.25, 0.5, 1.0, 0.999, 0.001, 0.7, 1.0 / 3.0};
  for (int s = 0; s < 8; ++s) {
    const DType src = parse_dtype(kDtypeNames[s]);
    const Tensor x = s == 2   ? Tensor::from_vector<i64>(int64s, Shape{10}, "/CPU:0")
                     : s < 2  ? of(ints[s], Shape{static_cast<i64>(ints[s].size())}, src)
                     : s == 7 ? of(uint16s, Shape{9}, src)
                              : of(floats, Shape{8}, src);
    for (int d = 0; d < 8; ++d)
      for (int sat = 0; sat < 2; ++sat)
        o[std::string("convert_") + kDtypeNames[s] + "_" + kDtypeNames[d] + "_" + std::to_string(sat)] =
            img::convert_image_dtype(x, parse_dtype(kDtypeNames[d]), sat == 1);
  }
  for (int s = 3; s < 7; ++s) {
    const std::vector<double> v = {-2.0, -0.5, 1.5, 3e4, -3e4, s == 3 ? 6e4 : 1e30, INFINITY, -INFINITY, std::nan("")};
    for (int d : {0, 1, 2, 7})
      o[std::string("convert_sat_") + kDtypeNames[s] + "_" + kDtypeNames[d]] =
          img::convert_image_dtype(of(v, Shape{9}, parse_dtype(kDtypeNames[s])), parse_dtype(kDtypeNames[d]), true);
  }

  for (std::array<i64, 2> seed : {std::array<i64, 2>{1, 2}, {7, 0}, {123456789, -5}}) {
    const std::string s = std::to_string(seed[0]) + "_" + std::to_string(seed[1]);
    o["crop3_" + s] = img::stateless_random_crop(xs({6, 7, 3}), {4, 5, 3}, seed);
    o["crop4_" + s] = img::stateless_random_crop(u8({3, 6, 7, 2}), {2, 3, 2, 2}, seed);
    o["flip_lr3_" + s] = img::stateless_random_flip_left_right(xs({4, 5, 2}), seed);
    o["flip_ud3_" + s] = img::stateless_random_flip_up_down(xs({4, 5, 2}), seed);
    o["flip_lr4_" + s] = img::stateless_random_flip_left_right(xs({6, 4, 5, 2}), seed);
    o["flip_ud4_" + s] = img::stateless_random_flip_up_down(u8({6, 4, 5, 2}), seed);
    o["flip_lr4_nonfinite_" + s] = img::stateless_random_flip_left_right(nonfinite({6, 4, 5, 2}), seed);
  }
  for (const char* frac : {"0.5", "0.33", "0.9", "0.05"})
    o[std::string("central_") + frac] = img::central_crop(xs({2, 7, 9, 2}), std::stod(frac));
  o["crop_box"] = img::crop_to_bounding_box(xs({7, 9, 2}), 2, 3, 4, 5);
  o["pad_box"] = img::pad_to_bounding_box(xs({2, 3, 4, 2}), 1, 2, 5, 7);
  return o;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

TEST(ImageOpsTest, TfInteropSameValuesAndGradientsAsTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  const std::string script = std::string(CHORUS_SOURCE_ROOT) + "/tests/ops/tf_image_values.py";
  const std::string cmd = "'" + python + "' '" + script + "' 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::map<std::string, std::vector<double>> tf;
  std::string line;
  char buf[1 << 16];
  while (std::fgets(buf, sizeof buf, p)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;  // a long line arrives in pieces
    std::istringstream in(line);
    std::string name, v;
    in >> name;
    while (in >> v) tf[name].push_back(std::strtod(v.c_str(), nullptr));
    line.clear();
  }
  ASSERT_EQ(::pclose(p), 0) << cmd;
  const auto got = chorus_values();
  ASSERT_EQ(tf.size(), got.size()) << "the script printed " << tf.size() << " cases";
  for (const auto& [name, want] : tf) {
    ASSERT_TRUE(got.count(name)) << name;
    const Tensor& t = got.at(name);
    const std::vector<double> have = values(t);
    ASSERT_EQ(have.size(), want.size()) << name << " shape " << t.shape().to_string();
    const bool approx = starts_with(name, "resize_bilinear") || starts_with(name, "standardize") ||
                        name.find("grad") != std::string::npos || starts_with(name, "resize_big");
    int bad = 0;
    for (std::size_t i = 0; i < want.size() && bad < 5; ++i) {
      const double w = want[i], h = have[i];
      if (std::isnan(w) && !is_floating(t.dtype())) continue;  // left to the hardware by TF
      const bool ok = std::isnan(w)   ? std::isnan(h)
                      : std::isinf(w) ? h == w
                      : approx        ? std::abs(h - w) <= 2e-6 * std::max(1.0, std::abs(w))
                                      : h == w;
      if (!ok) {
        ++bad;
        ADD_FAILURE() << name << "[" << i << "]: chorus " << h << ", TensorFlow " << w;
      }
    }
  }
}

// The CPU kernel's row cache and its 4-lane pixel path (C = 3, 4) against TF's formula written out
// per element (ResizeBilinear's compute_lerp), bit for bit, for every channel-count path, down and
// up, with NaN and Inf in the input.
TEST(ImageOpsTest, BilinearResizeIsTfsLerpPerElementForEveryChannelCount) {
  for (const i64 C : {1, 2, 3, 4, 5}) {
    for (const std::array<i64, 2> out : {std::array<i64, 2>{5, 6}, std::array<i64, 2>{13, 17}}) {
      const Shape in_shape{2, 9, 11, C};
      std::vector<float> v(static_cast<std::size_t>(in_shape.num_elements()));
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 100);
      v[7] = std::nanf("");
      v[40] = INFINITY;
      const Tensor y = img::resize(Tensor::from_vector(v, in_shape, "/CPU:0"), {out[0], out[1]});
      const std::vector<float> got = y.to_vector<float>();
      const float sh = ops::resize_scale(9, out[0]), sw = ops::resize_scale(11, out[1]);
      const auto at = [&](i64 b, i64 yy, i64 xx, i64 c) {
        return v[static_cast<std::size_t>(((b * 9 + yy) * 11 + xx) * C + c)];
      };
      for (i64 b = 0; b < 2; ++b)
        for (i64 oy = 0; oy < out[0]; ++oy)
          for (i64 ox = 0; ox < out[1]; ++ox)
            for (i64 c = 0; c < C; ++c) {
              const ops::BilinearTap ty = ops::bilinear_tap(oy, 9, sh), tx = ops::bilinear_tap(ox, 11, sw);
              const float tl = at(b, ty.lower, tx.lower, c), tr = at(b, ty.lower, tx.upper, c);
              const float bl = at(b, ty.upper, tx.lower, c), br = at(b, ty.upper, tx.upper, c);
              const float top = tl + (tr - tl) * tx.lerp, bot = bl + (br - bl) * tx.lerp;
              const float want = top + (bot - top) * ty.lerp;
              const float have = got[static_cast<std::size_t>(((b * out[0] + oy) * out[1] + ox) * C + c)];
              ASSERT_TRUE(std::isnan(want) ? std::isnan(have) : have == want)
                  << "C " << C << " out " << out[0] << "x" << out[1] << " at " << b << "," << oy << "," << ox << ","
                  << c << ": " << have << " vs " << want;
            }
    }
  }
}

// ---- gradients by finite differences (float64 inputs) ----

TEST(ImageOpsTest, ResizeGradientsMatchFiniteDifferences) {
  for (std::array<i64, 2> size : {std::array<i64, 2>{7, 9}, {2, 3}, {5, 2}}) {
    // Bilinear's output is float32: the function is linear, so a large step is exact but for the
    // float32 rounding of the outputs (~1e-7 / eps relative).
    EXPECT_TRUE(check_gradients(
        [size](const std::vector<Tensor>& in) { return ops::cast(img::resize(in[0], size), DType::kFloat64); },
        {random_tensor({2, 4, 5, 2}, 3)}, {.eps = 1e-2, .tol = 1e-4}))
        << size[0] << "x" << size[1];
    EXPECT_TRUE(check_gradients(
        [size](const std::vector<Tensor>& in) {
          return img::resize(in[0], size, {.method = img::ResizeMethod::kNearestNeighbor});
        },
        {random_tensor({4, 5, 3}, 4)}))
        << size[0] << "x" << size[1];
  }
}

TEST(ImageOpsTest, CropFlipPadStandardizeGradientsMatchFiniteDifferences) {
  auto gen_state = ops::Generator::from_seed(11).state();
  const std::vector<std::function<Tensor(const Tensor&)>> fs = {
      [](const Tensor& x) { return img::central_crop(x, 0.5); },
      [](const Tensor& x) { return img::crop_to_bounding_box(x, 1, 2, 3, 2); },
      [](const Tensor& x) { return img::pad_to_bounding_box(x, 1, 0, 6, 7); },
      [](const Tensor& x) { return img::flip_left_right(x); },
      [](const Tensor& x) { return img::flip_up_down(x); },
      [](const Tensor& x) {
        return img::stateless_random_flip_left_right(x, {3, 4});
      },
      [](const Tensor& x) {
        return img::stateless_random_crop(x, {2, 3, 3, 1}, {5, 6});
      },
      [gen_state](const Tensor& x) {
        ops::Generator g(gen_state);  // the same draw on every evaluation
        return img::random_flip_up_down(img::random_crop(x, {3, 3, 4, 2}, g), g);
      },
      [](const Tensor& x) { return img::convert_image_dtype(x, DType::kFloat64); },
  };
  for (std::size_t i = 0; i < fs.size(); ++i)
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return fs[i](in[0]); },
                                {random_tensor({3, 4, 5, 2}, 7 + static_cast<std::uint32_t>(i))}))
        << "case " << i;
  // per_image_standardization computes in float32, as TF.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return ops::cast(img::per_image_standardization(in[0]), DType::kFloat64); },
      {random_tensor({2, 3, 4, 2}, 9)}, {.eps = 1e-3, .tol = 2e-3}));
}

// ---- the Generator ops resume from a saved state ----

TEST(ImageOpsTest, GeneratorCropsAndFlipsResumeFromSavedState) {
  const Tensor image = xs({4, 9, 11, 3});
  auto draw = [&](ops::Generator& g) {
    std::vector<std::vector<double>> out;
    for (int k = 0; k < 4; ++k) {
      out.push_back(values(img::random_crop(image, {2, 5, 6, 3}, g)));
      out.push_back(values(img::random_flip_left_right(image, g)));
      out.push_back(values(img::random_flip_up_down(xs({9, 11, 3}), g)));
    }
    return out;
  };
  auto g = ops::Generator::from_seed(2026);
  draw(g);
  const ops::GeneratorState saved = g.state();  // what a checkpoint stores
  const auto first = draw(g);
  auto restored = ops::Generator::from_seed(1);
  restored.set_state(saved);
  EXPECT_EQ(draw(restored), first);
  g.set_state(saved);
  EXPECT_EQ(draw(g), first);
  // The draws do vary: 4 crops at random offsets are not all the same crop.
  EXPECT_FALSE(first[0] == first[3] && first[3] == first[6] && first[6] == first[9]);
}

TEST(ImageOpsTest, RandomFlipFlipsAboutHalfOfABatchAndKeepsTheOthers) {
  const Tensor image = xs({200, 2, 3, 1});
  auto g = ops::Generator::from_seed(3);
  const std::vector<double> y = values(img::random_flip_left_right(image, g));
  const std::vector<double> x = values(image), f = values(img::flip_left_right(image));
  int flipped = 0;
  for (int b = 0; b < 200; ++b) {
    const auto at = [b](const std::vector<double>& v) {
      return std::vector<double>(v.begin() + b * 6, v.begin() + b * 6 + 6);
    };
    const bool is_f = at(y) == at(f), is_x = at(y) == at(x);
    ASSERT_TRUE(is_f || is_x) << "image " << b << " is neither the image nor its mirror";
    flipped += is_f && !is_x;
  }
  EXPECT_GT(flipped, 70);
  EXPECT_LT(flipped, 130);
}

TEST(ImageOpsTest, ResizeSecondOrderIsTheForwardAgain) {
  // The gradient of the gradient: d/d(dy) of <resize_grad(dy), v> is resize(v).
  const Tensor x = xs({1, 4, 5, 2});
  const Tensor dy = xs({1, 7, 3, 2});
  const Tensor v = of(seq(40, w_at), Shape{1, 4, 5, 2}, DType::kFloat32);
  ops::GradientTape outer;
  outer.watch(dy);
  Tensor dx;
  {
    ops::GradientTape inner;
    inner.watch(x);
    const Tensor y = img::resize(x, {7, 3});
    dx = inner.gradient(ops::reduce_sum(ops::mul(dy, y)), {x})[0];
  }
  const Tensor ddy = outer.gradient(ops::reduce_sum(ops::mul(v, dx)), {dy})[0];
  const std::vector<double> want = values(img::resize(v, {7, 3})), have = values(ddy);
  ASSERT_EQ(have.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(have[i], want[i]) << i;
}

// ---- errors ----

TEST(ImageOpsTest, BadArgumentsRaiseInvalidArgumentNamingTheOp) {
  const Tensor im = xs({5, 6, 3});
  auto expect_error = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error([&] { img::resize(xs({5, 6}), {2, 2}); }, "3 or 4 dimensions");
  expect_error([&] { img::resize(im, {0, 2}); }, "output dimensions must be positive");
  expect_error([&] { img::resize(xs({0, 6, 3}), {2, 2}); }, "non-zero size");
  expect_error([&] { img::resize(Tensor::zeros({2, 2, 1}, DType::kBool, "/CPU:0"), {2, 2}); }, "bool");
  expect_error([&] { img::central_crop(im, 0.0); }, "within (0, 1]");
  expect_error([&] { img::central_crop(im, 1.5); }, "within (0, 1]");
  expect_error([&] { img::crop_to_bounding_box(im, 3, 0, 3, 2); }, "height must be >= target + offset");
  expect_error([&] { img::crop_to_bounding_box(im, 0, -1, 3, 2); }, "offset_width must be >= 0");
  expect_error([&] { img::crop_to_bounding_box(im, 0, 0, 3, 0); }, "target_width must be > 0");
  expect_error([&] { img::pad_to_bounding_box(im, 0, 2, 6, 7); }, "width must be <= target - offset");
  expect_error([&] { img::flip_left_right(xs({2, 2, 2, 2, 2})); }, "3 or 4 dimensions");
  expect_error([&] { img::stateless_random_crop(im, {6, 6, 3}, {1, 2}); }, "Need value.shape >= size");
  expect_error([&] { img::stateless_random_crop(im, {2, 2}, {1, 2}); }, "one per dimension");
  expect_error([&] { img::convert_image_dtype(im, DType::kBool); }, "bool");
  expect_error([&] { img::per_image_standardization(xs({4, 4})); }, "at least three-dimensional");
  // A failed Generator op consumes nothing.
  auto g = ops::Generator::from_seed(1);
  const auto before = g.state();
  expect_error([&] { img::random_crop(im, {9, 1, 1}, g); }, "Need value.shape >= size");
  expect_error([&] { img::random_flip_left_right(xs({3, 3}), g); }, "3 or 4 dimensions");
  EXPECT_EQ(g.state(), before);
}

TEST(ImageOpsTest, EmptyBatchesAndChannelsGiveEmptyResults) {
  EXPECT_EQ(img::resize(xs({0, 4, 4, 3}), {2, 3}).shape(), (Shape{0, 2, 3, 3}));
  EXPECT_EQ(img::resize(xs({4, 4, 0}), {2, 3}, {.method = img::ResizeMethod::kNearestNeighbor}).shape(),
            (Shape{2, 3, 0}));
  EXPECT_EQ(img::flip_left_right(xs({0, 4, 4, 3})).shape(), (Shape{0, 4, 4, 3}));
}

}  // namespace
}  // namespace chorus
