// Random numbers: TensorFlow's tf.random, from one counter-based generator (Philox4x32-10) so
// that a seed gives the same numbers on every device and every replica.
//
//   // tf.random.stateless_uniform([2, 3], seed=[1, 2], minval=-1, maxval=1)
//   auto a = chorus::ops::stateless_random_uniform({2, 3}, {1, 2}, {.minval = -1, .maxval = 1});
//   // tf.random.Generator.from_seed(42).normal([4], stddev=0.1)
//   auto g = chorus::ops::Generator::from_seed(42);
//   auto w = g.normal({4}, {.stddev = 0.1});
//   // tf.random.set_seed(7); tf.random.uniform([8], maxval=10, dtype=tf.int32)
//   chorus::ops::set_seed(7);
//   auto i = chorus::ops::random_uniform({8}, {.maxval = 10, .dtype = chorus::DType::kInt32});
//
// Determinism contract: the numbers are a pure function of (seed or generator state, shape, dtype,
// distribution, options). They do not depend on the device, the replica, the thread count or the
// order in which elements are computed. Uniform draws are bitwise identical on CPU and GPU; normal
// and truncated normal agree up to the last bits of log/sin/cos (see ops/philox.h, which specifies
// exactly which Philox words each element takes).
//
// Execution: each op places itself (core/placement.h; an explicit `device` in the options wins, as
// in tf.device), allocates the output there and enqueues the fill on that device's stream: the
// call returns before the numbers exist, and reading them (to_vector, ...) waits, as for every op.
// A shape with zero elements launches nothing and, for a Generator, consumes nothing.
//
// Errors (thrown by the call, nothing is enqueued and no generator state changes):
//   - dtype not float32/float64/float16/bfloat16 (or int32/int64 for uniform) → InvalidArgumentError;
//   - uniform: minval/maxval not finite, or minval >= maxval after conversion to the dtype, or a
//     float range (maxval - minval) that overflows the dtype → InvalidArgumentError;
//   - integer uniform: maxval not given, bounds not integral or outside the dtype → InvalidArgumentError;
//   - normal, truncated normal: mean or stddev not finite, stddev < 0 → InvalidArgumentError;
//   - a negative dimension or an element count past int64 → InvalidArgumentError (core/shape.h);
//   - placement errors (core/placement.h), ResourceExhaustedError when the output does not fit.
//
// Thread-safety: every function may be called from any thread; a Generator serializes its draws
// with a mutex (each draw takes a disjoint range of its counter, so replicas sharing one generator
// get different numbers, in the order they reached the lock).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>
#include <chorus/ops/philox.h>

namespace chorus::ops {

// Options of the uniform ops. Values lie in [minval, maxval). Floats: maxval defaults to 1.
// int32/int64: maxval is required (TF: "Must specify maxval for integer dtype"), and the bounds
// are integers held in a double, so int64 bounds are exact up to ±2^53. Integer values are
// minval + bits mod (maxval - minval), TF's rule, with its bias of at most range / 2^32 (int32)
// or range / 2^64 (int64).
struct UniformOptions {
  double minval = 0;
  std::optional<double> maxval;  // unset: 1 for floats, an error for integers
  DType dtype = DType::kFloat32;
  std::string device = "";  // "" → placement rules (DeviceScope, GPU if any, CPU)
};

// Options of the normal and truncated normal ops: value = mean + stddev * z. Truncated normal
// resamples every z with |z| >= 2, so its values lie within two standard deviations of the mean
// and its variance is ≈ 0.7737 * stddev^2 (as tf.random.truncated_normal).
struct NormalOptions {
  double mean = 0;
  double stddev = 1;
  DType dtype = DType::kFloat32;
  std::string device = "";
};

// ---- stateless ops: tf.random.stateless_* ----
// The seed is TF's shape-[2] seed; it is scrambled into a Philox key and counter as TF does.
// The same seed and arguments give the same tensor, every time, everywhere.
Tensor stateless_random_uniform(const Shape& shape, std::array<std::int64_t, 2> seed,
                                const UniformOptions& options = {});
Tensor stateless_random_normal(const Shape& shape, std::array<std::int64_t, 2> seed, const NormalOptions& options = {});
Tensor stateless_truncated_normal(const Shape& shape, std::array<std::int64_t, 2> seed,
                                  const NormalOptions& options = {});

// ---- tf.random.Generator ----

// A generator's whole state (TF's Philox state tensor [counter_low, counter_high, key]): 24 bytes
// to checkpoint. Philox words: key = {key low 32 bits, key high 32 bits}, counter =
// {counter_low low, counter_low high, counter_high low, counter_high high}.
struct GeneratorState {
  std::uint64_t counter_low = 0;
  std::uint64_t counter_high = 0;
  std::uint64_t key = 0;
  bool operator==(const GeneratorState&) const = default;
  PhiloxKey philox_key() const;
  PhiloxCounter philox_counter() const;
  static GeneratorState from_philox(PhiloxKey key, PhiloxCounter counter);
};

// A stream of random numbers. Each draw takes the next philox_blocks(dtype, n) blocks of the
// counter (4 elements per block, 2 for float64/int64) and advances the counter past them, so:
//   - draws continue one stream: from equal states, draws of n and m elements give the same
//     numbers as one draw of n + m whenever n is a multiple of the elements per block (otherwise
//     the rest of the last block is skipped: never reused, never overlapping);
//   - a draw of n is always a prefix of a draw of n + m from the same state.
// Thread-safe (mutex). Movable, not copyable: a copy would repeat the numbers — to fork a stream
// on purpose, use split() or state()/set_state().
class Generator {
 public:
  // The seed is scrambled into a key and counter (one Philox call with a generator-specific key,
  // so from_seed(s) is unrelated to stateless ops with any seed).
  static Generator from_seed(std::uint64_t seed);
  // Seeded from std::random_device (tf.random.Generator.from_non_deterministic_state).
  static Generator from_non_deterministic_state();
  explicit Generator(const GeneratorState& state);
  Generator(Generator&& other) noexcept;
  Generator& operator=(Generator&& other) noexcept;
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  Tensor uniform(const Shape& shape, const UniformOptions& options = {});
  Tensor normal(const Shape& shape, const NormalOptions& options = {});
  Tensor truncated_normal(const Shape& shape, const NormalOptions& options = {});

  // The state to checkpoint, and restoring it: after set_state(s) the generator draws exactly
  // what it drew after the state was s.
  GeneratorState state() const;
  void set_state(const GeneratorState& state);
  // Same as set_state(from_seed(seed).state()) (tf.random.Generator.reset_from_seed).
  void reset_from_seed(std::uint64_t seed);

  // `count` new generators (count >= 0, else InvalidArgumentError), independent of this one and
  // of each other (TF's split): child j's key and counter are the words of the next block of this
  // generator, which advances by `count` blocks. Deterministic given this generator's state.
  std::vector<Generator> split(int count);

 private:
  // Validates, then reserves `blocks` blocks: returns the counter to draw from.
  PhiloxCounter reserve(std::uint64_t blocks, PhiloxKey* key);

  mutable std::mutex mu_;
  GeneratorState state_;
};

// ---- the global generator and TF1-style free functions ----

// tf.random.set_seed: reseeds the process-wide generator (from_seed(seed)); later global draws
// are reproducible from here on. Thread-safe.
void set_seed(std::uint64_t seed);
// The process-wide generator: from_non_deterministic_state() at first use unless set_seed was
// called. Lives for the whole process.
Generator& global_generator();
// Draws from global_generator() (tf.random.uniform / normal / truncated_normal).
Tensor random_uniform(const Shape& shape, const UniformOptions& options = {});
Tensor random_normal(const Shape& shape, const NormalOptions& options = {});
Tensor truncated_normal(const Shape& shape, const NormalOptions& options = {});

// The random fills this thread has enqueued so far: every op above and dropout draw through one
// place. A captured step (Model::fit's FitOptions::capture_steps) checks it around a warm-up
// step: a draw whose key and counter the host picks would repeat on every replay of a graph.
std::int64_t random_fills_on_this_thread();

// ---- replay of random draws, for recompute_grad (ops/recompute.h) ----
namespace internal {

// One stateful random draw: its owner (a Generator, or other random state a seed is derived from,
// such as a Dropout layer's call count), its size (a Generator's blocks) and the owner's state the
// draw used.
struct RandomDraw {
  const void* owner = nullptr;
  const char* kind = "";  // what the owner is, for messages ("Generator")
  std::uint64_t size = 0;
  GeneratorState state;
};
using RandomLog = std::vector<RandomDraw>;

// The state a draw of `size` from `owner` uses. Under a ReplayRandomDraws of this thread: the
// next logged draw's state (`advance` is not called: the owner's state does not move); a logged
// draw of another owner or size, or none left → InternalError. Otherwise advance() — which moves
// the owner's state past the draw and returns the state before it — and every RecordRandomDraws
// of this thread (those begun after the innermost replay, when one is active) logs the draw.
// Generator's draws (uniform, normal, truncated_normal, split) go through here.
GeneratorState replayable_draw(const void* owner, const char* kind, std::uint64_t size,
                               const std::function<GeneratorState()>& advance);

// RAII: logs this thread's replayable draws into *log while alive. Not copyable; destroy in
// reverse order of creation, on its thread.
class RecordRandomDraws {
 public:
  explicit RecordRandomDraws(RandomLog* log);
  ~RecordRandomDraws();
  RecordRandomDraws(const RecordRandomDraws&) = delete;
  RecordRandomDraws& operator=(const RecordRandomDraws&) = delete;

 private:
  RandomLog* log_;
};

// RAII: serves this thread's replayable draws from `log`, in order, while alive (the log is not
// consumed: it can be replayed again). finish() checks that every logged draw was served
// (InternalError otherwise); `who` names the caller in messages.
class ReplayRandomDraws {
 public:
  ReplayRandomDraws(const RandomLog* log, const char* who);
  ~ReplayRandomDraws();
  ReplayRandomDraws(const ReplayRandomDraws&) = delete;
  ReplayRandomDraws& operator=(const ReplayRandomDraws&) = delete;
  void finish() const;

 private:
  const RandomLog* log_;
  const char* who_;
  std::size_t next_ = 0;
  friend GeneratorState replayable_draw(const void*, const char*, std::uint64_t,
                                        const std::function<GeneratorState()>&);
};

}  // namespace internal
}  // namespace chorus::ops

namespace chorus::ops::cpu {

// The CPU kernel: fills n elements of `dtype` at host pointer `out` with draw `dist` from
// (key, counter), as ops/philox.h specifies (a/b = minval/maxval or mean/stddev, already
// validated). Runs on the calling thread (OpenMP-parallel over blocks for large n; the result does
// not depend on the thread count). Unsupported dtype → InvalidArgumentError. The GPU twin is
// ops/cuda/random.h's cuda::fill_random.
void fill_random(Distribution dist, DType dtype, PhiloxKey key, PhiloxCounter counter, double a, double b, void* out,
                 std::int64_t n);

}  // namespace chorus::ops::cpu
