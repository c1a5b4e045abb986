#include <chorus/ops/random.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string_view>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/placement.h>
#include <chorus/ops/cuda/random.h>
#include <chorus/ops/internal.h>

namespace chorus::ops {

using chorus::internal::str_cat;

namespace {

bool is_float_dtype(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 || d == DType::kBFloat16;
}
bool is_int_dtype(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

// A float value as the dtype holds it (round to nearest even), back in double.
double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<float>(x);
    case DType::kFloat16: return float16_to_float(float_to_float16(static_cast<float>(x)));
    case DType::kBFloat16: return bfloat16_to_float(float_to_bfloat16(static_cast<float>(x)));
    default: return x;
  }
}

// The largest 16-bit float (float16 or bfloat16 bits: both sign-magnitude) below the finite value
// with bits h.
std::uint16_t below_16(std::uint16_t h) {
  if (h == 0x0000 || h == 0x8000) return 0x8001;  // ±0 → the smallest negative subnormal
  return (h & 0x8000) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h - 1);
}

// A number for messages: integers exactly (3000000000, not 3e+09), others with 17 digits.
std::string num(double v) {
  if (std::isfinite(v) && std::trunc(v) == v && std::fabs(v) < 9.2e18) return std::to_string(static_cast<long long>(v));
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

// The validated arguments of one draw.
struct Draw {
  Distribution dist;
  DType dtype;
  double a;  // minval or mean
  double b;  // maxval or stddev
};

Draw check_uniform(std::string_view op, const UniformOptions& o) {
  const DType dt = o.dtype;
  CHORUS_REQUIRE(is_float_dtype(dt) || is_int_dtype(dt), InvalidArgumentError, op, ": dtype ", dtype_name(dt),
                 " is not supported; allowed: float32, float64, float16, bfloat16, int32, int64");
  if (is_int_dtype(dt)) {
    CHORUS_REQUIRE(o.maxval.has_value(), InvalidArgumentError, op, ": must specify maxval for integer dtype ",
                   dtype_name(dt));
    const double lo = o.minval, hi = *o.maxval;
    // 2^31 and 2^63 are exact doubles; the bounds must lie in [-2^k, 2^k).
    const bool i32 = dt == DType::kInt32;
    const double limit = i32 ? 2147483648.0 : 9223372036854775808.0;
    for (const auto& [name, v] : {std::pair<const char*, double>{"minval", lo}, {"maxval", hi}}) {
      CHORUS_REQUIRE(std::isfinite(v) && std::trunc(v) == v, InvalidArgumentError, op, ": ", name,
                     " must be an integer for dtype ", dtype_name(dt), ", got ", num(v));
      CHORUS_REQUIRE(v >= -limit && v < limit, InvalidArgumentError, op, ": ", name, " = ", num(v),
                     " is outside the range of ", dtype_name(dt), (i32 ? " [-2^31, 2^31)" : " [-2^63, 2^63)"));
    }
    CHORUS_REQUIRE(lo < hi, InvalidArgumentError, op, ": need minval < maxval, got minval = ", num(lo),
                   ", maxval = ", num(hi));
    return {Distribution::kUniform, dt, lo, hi};
  }
  const double lo = o.minval, hi = o.maxval.value_or(1.0);
  CHORUS_REQUIRE(std::isfinite(lo) && std::isfinite(hi), InvalidArgumentError, op,
                 ": minval and maxval must be finite, got minval = ", num(lo), ", maxval = ", num(hi));
  const double lo_t = round_to(dt, lo), hi_t = round_to(dt, hi);
  CHORUS_REQUIRE(std::isfinite(lo_t) && std::isfinite(hi_t), InvalidArgumentError, op, ": minval = ", num(lo),
                 " or maxval = ", num(hi), " overflows ", dtype_name(dt));
  CHORUS_REQUIRE(lo_t < hi_t, InvalidArgumentError, op, ": need minval < maxval in ", dtype_name(dt),
                 ", got minval = ", num(lo), ", maxval = ", num(hi),
                 (lo < hi ? str_cat(" (both round to ", num(lo_t), ")") : std::string()));
  // The range is computed in the compute type: float32 for all but float64.
  const double range =
      dt == DType::kFloat64 ? hi_t - lo_t : static_cast<double>(static_cast<float>(hi_t) - static_cast<float>(lo_t));
  CHORUS_REQUIRE(std::isfinite(range), InvalidArgumentError, op, ": maxval - minval = ", num(hi), " - ", num(lo),
                 " overflows ", dt == DType::kFloat64 ? "float64" : "float32");
  return {Distribution::kUniform, dt, lo, hi};
}

Draw check_normal(std::string_view op, Distribution dist, const NormalOptions& o) {
  const DType dt = o.dtype;
  CHORUS_REQUIRE(is_float_dtype(dt), InvalidArgumentError, op, ": dtype ", dtype_name(dt),
                 " is not supported; allowed: float32, float64, float16, bfloat16");
  CHORUS_REQUIRE(std::isfinite(o.mean), InvalidArgumentError, op, ": mean must be finite, got ", num(o.mean));
  CHORUS_REQUIRE(std::isfinite(o.stddev) && o.stddev >= 0, InvalidArgumentError, op,
                 ": stddev must be finite and >= 0, got ", num(o.stddev));
  return {dist, dt, o.mean, o.stddev};
}

// Places the op and allocates its output (before any generator state changes).
Tensor allocate(std::string_view op_name, const Shape& shape, DType dtype, const std::string& device) {
  auto dev = place_op(op_name, device, /*has_gpu_kernel=*/true);
  return internal::output(dev, shape, dtype);
}

thread_local std::int64_t t_random_fills = 0;

// Enqueues the fill of `out` on its device's stream.
void enqueue_fill(const Tensor& out, const Draw& d, PhiloxKey key, PhiloxCounter counter) {
  const std::int64_t n = out.num_elements();
  if (n == 0) return;
  ++t_random_fills;
  DeviceContext& dev = out.device_context();
  if (dev.is_gpu()) {
    CHORUS_IF_CUDA(cuda::fill_random(dev.gpu_ordinal(), dev.stream().native_handle(), d.dist, d.dtype, key, counter,
                                     d.a, d.b, out.data(), n));
  } else {
    // The lambda holds `out`, so its storage lives until the fill ran.
    internal::run_cpu(dev, [&] { cpu::fill_random(d.dist, d.dtype, key, counter, d.a, d.b, out.data(), n); });
  }
}

Tensor stateless(std::string_view op, std::string_view op_name, const Shape& shape, std::array<std::int64_t, 2> seed,
                 const Draw& d, const std::string& device) {
  Tensor out = allocate(op_name, shape, d.dtype, device);
  PhiloxKey key;
  PhiloxCounter counter;
  philox_from_stateless_seed(static_cast<std::uint64_t>(seed[0]), static_cast<std::uint64_t>(seed[1]), &key, &counter);
  enqueue_fill(out, d, key, counter);
  return out;
}

// Generator::from_seed's scrambling key: differs from the stateless one (0x3ec8f720, 0x02461e29)
// so that no generator seed reproduces a stateless seed's numbers.
constexpr std::uint32_t kGeneratorSeedKey0 = 0x8a0f3b51u;
constexpr std::uint32_t kGeneratorSeedKey1 = 0x5c7d2e93u;

GeneratorState state_from_seed(std::uint64_t seed) {
  PhiloxKey key;
  PhiloxCounter counter;
  philox_scramble(seed, 0, kGeneratorSeedKey0, kGeneratorSeedKey1, &key, &counter);
  return GeneratorState::from_philox(key, counter);
}

}  // namespace

// ---- shared with ops/cuda/random.cu ----

SampleParams make_sample_params(Distribution dist, DType dtype, double a, double b) {
  SampleParams p;
  if (dtype == DType::kInt32 || dtype == DType::kInt64) {
    const auto lo = static_cast<std::int64_t>(a), hi = static_cast<std::int64_t>(b);
    p.lo_i = lo;
    p.range_u = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    return p;
  }
  if (dist != Distribution::kUniform) {  // value = z * stddev + mean
    p.scale_f = static_cast<float>(b);
    p.shift_f = static_cast<float>(a);
    p.scale_d = b;
    p.shift_d = a;
    return p;
  }
  switch (dtype) {
    case DType::kFloat64:
      p.scale_d = b - a;
      p.shift_d = a;
      p.max_d = std::nextafter(b, -std::numeric_limits<double>::infinity());
      break;
    case DType::kFloat32: {
      const float lo = static_cast<float>(a), hi = static_cast<float>(b);
      p.scale_f = hi - lo;
      p.shift_f = lo;
      p.max_f = std::nextafter(hi, -std::numeric_limits<float>::infinity());
      break;
    }
    case DType::kFloat16: {
      const std::uint16_t hi = float_to_float16(static_cast<float>(b));
      const float lo_f = float16_to_float(float_to_float16(static_cast<float>(a)));
      const float hi_f = float16_to_float(hi);
      p.scale_f = hi_f - lo_f;
      p.shift_f = lo_f;
      p.max_f = float16_to_float(below_16(hi));
      break;
    }
    case DType::kBFloat16: {
      const std::uint16_t hi = float_to_bfloat16(static_cast<float>(b));
      const float lo_f = bfloat16_to_float(float_to_bfloat16(static_cast<float>(a)));
      const float hi_f = bfloat16_to_float(hi);
      p.scale_f = hi_f - lo_f;
      p.shift_f = lo_f;
      p.max_f = bfloat16_to_float(below_16(hi));
      break;
    }
    default: break;
  }
  return p;
}

// ---- CPU kernel ----

namespace cpu {
namespace {

// Calls sample(g, values) for every block g of the draw and stores its E values.
template <int E, typename V, typename Sample, typename Store>
void for_each_block(std::int64_t n, Sample sample, Store store) {
  const auto blocks = static_cast<std::int64_t>((static_cast<std::uint64_t>(n) + E - 1) / E);
#pragma omp parallel for schedule(static) if (blocks >= 8192)
  for (std::int64_t g = 0; g < blocks; ++g) {
    V v[E];
    sample(static_cast<std::uint64_t>(g), v);
    const std::int64_t first = g * E;
    for (int j = 0; j < E && first + j < n; ++j) store(first + j, v[j]);
  }
}

}  // namespace

void fill_random(Distribution dist, DType dtype, PhiloxKey key, PhiloxCounter counter, double a, double b, void* out,
                 std::int64_t n) {
  CHORUS_REQUIRE(is_float_dtype(dtype) || (is_int_dtype(dtype) && dist == Distribution::kUniform), InvalidArgumentError,
                 "fill_random: dtype ", dtype_name(dtype),
                 " is not supported for this distribution: use float32, float64, float16 or bfloat16 (and "
                 "int32/int64 for uniform)");
  if (n <= 0) return;
  const SampleParams p = make_sample_params(dist, dtype, a, b);
  const auto f32 = [&](std::uint64_t g, float* v) { sample_block_f32(dist, key, counter, g, p, v); };
  switch (dtype) {
    case DType::kFloat32: {
      auto* y = static_cast<float*>(out);
      for_each_block<4, float>(n, f32, [y](std::int64_t i, float v) { y[i] = v; });
      break;
    }
    case DType::kFloat16: {
      auto* y = static_cast<std::uint16_t*>(out);
      for_each_block<4, float>(n, f32, [y](std::int64_t i, float v) { y[i] = float_to_float16(v); });
      break;
    }
    case DType::kBFloat16: {
      auto* y = static_cast<std::uint16_t*>(out);
      for_each_block<4, float>(n, f32, [y](std::int64_t i, float v) { y[i] = float_to_bfloat16(v); });
      break;
    }
    case DType::kFloat64: {
      auto* y = static_cast<double*>(out);
      for_each_block<2, double>(
          n, [&](std::uint64_t g, double* v) { sample_block_f64(dist, key, counter, g, p, v); },
          [y](std::int64_t i, double v) { y[i] = v; });
      break;
    }
    case DType::kInt32: {
      auto* y = static_cast<std::int32_t*>(out);
      for_each_block<4, std::int32_t>(
          n, [&](std::uint64_t g, std::int32_t* v) { sample_block_i32(key, counter, g, p, v); },
          [y](std::int64_t i, std::int32_t v) { y[i] = v; });
      break;
    }
    case DType::kInt64: {
      auto* y = static_cast<std::int64_t*>(out);
      for_each_block<2, std::int64_t>(
          n, [&](std::uint64_t g, std::int64_t* v) { sample_block_i64(key, counter, g, p, v); },
          [y](std::int64_t i, std::int64_t v) { y[i] = v; });
      break;
    }
    default: break;  // rejected above
  }
}

}  // namespace cpu

// ---- stateless ops ----

Tensor stateless_random_uniform(const Shape& shape, std::array<std::int64_t, 2> seed, const UniformOptions& options) {
  const Draw d = check_uniform("stateless_random_uniform", options);
  return stateless("stateless_random_uniform",
                   is_int_dtype(d.dtype) ? "StatelessRandomUniformIntV2" : "StatelessRandomUniformV2", shape, seed, d,
                   options.device);
}

Tensor stateless_random_normal(const Shape& shape, std::array<std::int64_t, 2> seed, const NormalOptions& options) {
  const Draw d = check_normal("stateless_random_normal", Distribution::kNormal, options);
  return stateless("stateless_random_normal", "StatelessRandomNormalV2", shape, seed, d, options.device);
}

Tensor stateless_truncated_normal(const Shape& shape, std::array<std::int64_t, 2> seed, const NormalOptions& options) {
  const Draw d = check_normal("stateless_truncated_normal", Distribution::kTruncatedNormal, options);
  return stateless("stateless_truncated_normal", "StatelessTruncatedNormalV2", shape, seed, d, options.device);
}

// ---- GeneratorState ----

PhiloxKey GeneratorState::philox_key() const {
  return PhiloxKey{{static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)}};
}

PhiloxCounter GeneratorState::philox_counter() const {
  return PhiloxCounter{{static_cast<std::uint32_t>(counter_low), static_cast<std::uint32_t>(counter_low >> 32),
                        static_cast<std::uint32_t>(counter_high), static_cast<std::uint32_t>(counter_high >> 32)}};
}

GeneratorState GeneratorState::from_philox(PhiloxKey k, PhiloxCounter c) {
  GeneratorState s;
  s.key = static_cast<std::uint64_t>(k.v[0]) | static_cast<std::uint64_t>(k.v[1]) << 32;
  s.counter_low = static_cast<std::uint64_t>(c.v[0]) | static_cast<std::uint64_t>(c.v[1]) << 32;
  s.counter_high = static_cast<std::uint64_t>(c.v[2]) | static_cast<std::uint64_t>(c.v[3]) << 32;
  return s;
}

// ---- Generator ----

Generator Generator::from_seed(std::uint64_t seed) { return Generator(state_from_seed(seed)); }

Generator Generator::from_non_deterministic_state() {
  std::uint64_t words[2] = {0, 0};
  try {
    std::random_device rd;
    for (auto& w : words) w = static_cast<std::uint64_t>(rd()) << 32 | rd();
  } catch (const std::exception&) {
    // No entropy source: the clock and an address, scrambled by Philox below, still differ
    // between runs.
    words[0] = static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    words[1] = reinterpret_cast<std::uintptr_t>(&words);
  }
  PhiloxKey key;
  PhiloxCounter counter;
  philox_scramble(words[0], words[1], kGeneratorSeedKey0, kGeneratorSeedKey1, &key, &counter);
  return Generator(GeneratorState::from_philox(key, counter));
}

Generator::Generator(const GeneratorState& state) : state_(state) {}

Generator::Generator(Generator&& other) noexcept : state_(other.state()) {}

Generator& Generator::operator=(Generator&& other) noexcept {
  if (this != &other) {
    const GeneratorState s = other.state();
    std::lock_guard<std::mutex> lock(mu_);
    state_ = s;
  }
  return *this;
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = state;
}

void Generator::reset_from_seed(std::uint64_t seed) { set_state(state_from_seed(seed)); }

PhiloxCounter Generator::reserve(std::uint64_t blocks, PhiloxKey* key) {
  // Replayable (recompute_grad, ops/recompute.h): a recomputation draws what the forward drew.
  const GeneratorState before = internal::replayable_draw(this, "Generator", blocks, [&] {
    std::lock_guard<std::mutex> lock(mu_);
    const GeneratorState was = state_;
    state_ = GeneratorState::from_philox(was.philox_key(), philox_skip(was.philox_counter(), blocks));
    return was;
  });
  *key = before.philox_key();
  return before.philox_counter();
}

Tensor Generator::uniform(const Shape& shape, const UniformOptions& options) {
  const Draw d = check_uniform("Generator::uniform", options);
  Tensor out =
      allocate(is_int_dtype(d.dtype) ? "StatefulUniformInt" : "StatefulUniform", shape, d.dtype, options.device);
  if (out.num_elements() == 0) return out;
  PhiloxKey key;
  const PhiloxCounter counter = reserve(philox_blocks(d.dtype, out.num_elements()), &key);
  enqueue_fill(out, d, key, counter);
  return out;
}

Tensor Generator::normal(const Shape& shape, const NormalOptions& options) {
  const Draw d = check_normal("Generator::normal", Distribution::kNormal, options);
  Tensor out = allocate("StatefulStandardNormalV2", shape, d.dtype, options.device);
  if (out.num_elements() == 0) return out;
  PhiloxKey key;
  const PhiloxCounter counter = reserve(philox_blocks(d.dtype, out.num_elements()), &key);
  enqueue_fill(out, d, key, counter);
  return out;
}

Tensor Generator::truncated_normal(const Shape& shape, const NormalOptions& options) {
  const Draw d = check_normal("Generator::truncated_normal", Distribution::kTruncatedNormal, options);
  Tensor out = allocate("StatefulTruncatedNormal", shape, d.dtype, options.device);
  if (out.num_elements() == 0) return out;
  PhiloxKey key;
  const PhiloxCounter counter = reserve(philox_blocks(d.dtype, out.num_elements()), &key);
  enqueue_fill(out, d, key, counter);
  return out;
}

std::vector<Generator> Generator::split(int count) {
  CHORUS_REQUIRE(count >= 0, InvalidArgumentError, "Generator::split: count must be >= 0, got ", count);
  PhiloxKey key;
  const PhiloxCounter at = reserve(static_cast<std::uint64_t>(count), &key);
  std::vector<Generator> children;
  children.reserve(static_cast<std::size_t>(count));
  for (int j = 0; j < count; ++j) {
    const PhiloxCounter w = philox4x32_10(philox_skip(at, static_cast<std::uint64_t>(j)), key);
    children.emplace_back(
        GeneratorState::from_philox(PhiloxKey{{w.v[0], w.v[1]}}, PhiloxCounter{{0, 0, w.v[2], w.v[3]}}));
  }
  return children;
}

// ---- replay of random draws ----

namespace internal {
namespace {
// This thread's recordings and replays, innermost last: each entry is one or the other.
struct RandomScope {
  RandomLog* record = nullptr;
  ReplayRandomDraws* replay = nullptr;
};
thread_local std::vector<RandomScope> t_random_scopes;

// Destructors: removes the scope `which` (the innermost, under C++ scoping).
void pop_scope(const void* which) {
  for (std::size_t k = t_random_scopes.size(); k-- > 0;) {
    if (t_random_scopes[k].record == which || t_random_scopes[k].replay == which) {
      t_random_scopes.erase(t_random_scopes.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
  }
}
}  // namespace

GeneratorState replayable_draw(const void* owner, const char* kind, std::uint64_t size,
                               const std::function<GeneratorState()>& advance) {
  std::size_t first_recording = 0;  // recordings begun after the innermost replay log what it serves
  GeneratorState state;
  bool served = false;
  for (std::size_t k = t_random_scopes.size(); k-- > 0;) {
    ReplayRandomDraws* r = t_random_scopes[k].replay;
    if (r == nullptr) continue;
    CHORUS_REQUIRE(r->next_ < r->log_->size(), InternalError, r->who_,
                   ": the recomputation draws more random numbers "
                   "than the forward did (",
                   r->log_->size(), " draws logged; now a draw of ", size, " from a ", kind,
                   "); the function must draw the same random numbers in the same order every time it runs");
    const RandomDraw& d = (*r->log_)[r->next_];
    CHORUS_REQUIRE(d.owner == owner && d.size == size, InternalError, r->who_, ": random draw ", r->next_,
                   " of the recomputation differs from the forward's (forward: ", d.size, " from a ", d.kind, " at ",
                   d.owner, "; now: ", size, " from a ", kind, " at ", owner,
                   "); the function must draw the same random numbers in the same order every time it runs");
    ++r->next_;
    state = d.state;
    served = true;
    first_recording = k + 1;
    break;
  }
  if (!served) state = advance();
  for (std::size_t k = first_recording; k < t_random_scopes.size(); ++k)
    if (t_random_scopes[k].record != nullptr) t_random_scopes[k].record->push_back({owner, kind, size, state});
  return state;
}

RecordRandomDraws::RecordRandomDraws(RandomLog* log) : log_(log) { t_random_scopes.push_back({log, nullptr}); }
RecordRandomDraws::~RecordRandomDraws() { pop_scope(log_); }

ReplayRandomDraws::ReplayRandomDraws(const RandomLog* log, const char* who) : log_(log), who_(who) {
  t_random_scopes.push_back({nullptr, this});
}
ReplayRandomDraws::~ReplayRandomDraws() { pop_scope(this); }

void ReplayRandomDraws::finish() const {
  CHORUS_REQUIRE(next_ == log_->size(), InternalError, who_, ": the recomputation drew ", next_,
                 " random draws but the forward drew ", log_->size(),
                 "; the function must draw the same random numbers in the same order every time it runs (a layer "
                 "built inside it draws its initial weights in the first run only: build it before)");
}

}  // namespace internal

// ---- global generator ----

Generator& global_generator() {
  static Generator global = Generator::from_non_deterministic_state();
  return global;
}

void set_seed(std::uint64_t seed) { global_generator().reset_from_seed(seed); }

std::int64_t random_fills_on_this_thread() { return t_random_fills; }

Tensor random_uniform(const Shape& shape, const UniformOptions& options) {
  return global_generator().uniform(shape, options);
}
Tensor random_normal(const Shape& shape, const NormalOptions& options) {
  return global_generator().normal(shape, options);
}
Tensor truncated_normal(const Shape& shape, const NormalOptions& options) {
  return global_generator().truncated_normal(shape, options);
}

}  // namespace chorus::ops
