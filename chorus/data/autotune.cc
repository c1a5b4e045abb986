// kAutotune's tuners: see autotune_internal.h.
#include <algorithm>
#include <cmath>

#include <chorus/data/autotune_internal.h>

namespace chorus::data::internal {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ParallelismTuner::ParallelismTuner(std::size_t max, AutotuneClock clock)
    : max_(std::max<std::size_t>(max, 1)), clock_(std::move(clock)) {}

namespace {
void update(double& ema, double x, double alpha) { ema = ema < 0 ? x : (1 - alpha) * ema + alpha * x; }
}  // namespace

void ParallelismTuner::consumer_enter() {
  const double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  if (left_at_ >= 0) update(consumer_, std::max(0.0, now - left_at_), kAlpha);
}

void ParallelismTuner::consumer_leave() {
  const double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  left_at_ = now;
}

void ParallelismTuner::record_call(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  update(call_, std::max(0.0, seconds), kAlpha);
}

std::size_t ParallelismTuner::parallelism() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (call_ < 0 || consumer_ < 0) return 1;
  // A consumer that does (almost) nothing between requests needs as many calls as allowed.
  const double consumer = std::max(consumer_, 1e-7);
  const double want = std::ceil(call_ / consumer - 1e-6);  // 5.0000000001 (rounding) is 5
  if (!(want < static_cast<double>(max_))) return max_;
  return std::max<std::size_t>(1, static_cast<std::size_t>(want));
}

void PrefetchTuner::on_request(std::size_t buffered, bool producer_running) {
  // TF's PrefetchAutotuner: upswing until the buffer is seen full, then downswing until it is
  // seen empty, which doubles the limit and starts the next upswing.
  std::lock_guard<std::mutex> lock(mu_);
  if (upswing_) {
    if (buffered >= limit_) upswing_ = false;
  } else if (buffered == 0 && producer_running) {
    limit_ = std::min(max_, limit_ * 2);
    upswing_ = true;
  }
}

std::size_t PrefetchTuner::buffer_limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

}  // namespace chorus::data::internal
