// kAutotune's tuners (tf.data.AUTOTUNE): measured, not constants. Internal to the data module
// (not installed); the tests drive them with a fake clock.
//
// ParallelismTuner (map and interleave with num_parallel_calls = kAutotune): how many producer
// calls to keep in flight. It measures two times, as moving averages: how long one producer call
// takes (call_seconds) and how long the consumer spends *between* its requests, outside next()
// (consumer_seconds: its own work, not its waiting, which would feed the answer back into the
// measurement). To keep up, the producers must finish one element per consumer_seconds, so
//   parallelism = ceil(call_seconds / consumer_seconds), clamped to [1, max].
// Until both times have been measured it answers 1; it then follows the measurements (TF's model
// likewise starts small and climbs).
//
// PrefetchTuner (prefetch(kAutotune)): TF's PrefetchAutotuner. The buffer limit starts at 1.
// Once the consumer has seen the buffer full (upswing → downswing), a request that finds it empty
// while the producer still runs doubles the limit (up to max) and starts a new upswing: the
// consumer had to wait, so a deeper buffer is needed to absorb the producer's variance. A
// consumer that never finds the buffer empty keeps it at 1.
//
// Thread-safety: every method may be called from any thread (atomics / a mutex inside).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace chorus::data::internal {

using AutotuneClock = std::function<double()>;  // seconds, monotonic
double steady_seconds();

class ParallelismTuner {
 public:
  explicit ParallelismTuner(std::size_t max, AutotuneClock clock = steady_seconds);
  // The consumer calls these at the start and the end of each next().
  void consumer_enter();
  void consumer_leave();
  // A producer call took `seconds`.
  void record_call(double seconds);
  // The number of calls to keep in flight now, in [1, max].
  std::size_t parallelism() const;
  std::size_t max() const { return max_; }

 private:
  static constexpr double kAlpha = 0.2;  // weight of a new measurement in the moving averages
  std::size_t max_;
  AutotuneClock clock_;
  mutable std::mutex mu_;
  double call_ = -1;      // EMA of a producer call, seconds (-1: none yet)
  double consumer_ = -1;  // EMA of the consumer's time between requests (-1: none yet)
  double left_at_ = -1;   // when the consumer last left next()
};

// One next() of a tuned stage, for its tuner (none: nothing): consumer_enter() now,
// consumer_leave() when the scope ends, however next() leaves.
class ConsumerScope {
 public:
  explicit ConsumerScope(ParallelismTuner* tuner) : tuner_(tuner) {
    if (tuner_) tuner_->consumer_enter();
  }
  ~ConsumerScope() {
    if (tuner_) tuner_->consumer_leave();
  }
  ConsumerScope(const ConsumerScope&) = delete;
  ConsumerScope& operator=(const ConsumerScope&) = delete;

 private:
  ParallelismTuner* tuner_;
};

class PrefetchTuner {
 public:
  explicit PrefetchTuner(std::size_t max) : max_(max) {}
  // The consumer asked for an element; `buffered` were ready and the producer had not ended.
  void on_request(std::size_t buffered, bool producer_running);
  std::size_t buffer_limit() const;
  std::size_t max() const { return max_; }

 private:
  std::size_t max_;
  mutable std::mutex mu_;
  std::size_t limit_ = 1;
  bool upswing_ = true;
};

}  // namespace chorus::data::internal
