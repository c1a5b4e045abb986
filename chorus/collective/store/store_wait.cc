#include <chorus/collective/store/store_wait.h>

#include <algorithm>

#include <chorus/core/error.h>

namespace chorus::collective {

std::vector<std::string> wait_watching(Store& store, const std::vector<std::string>& keys,
                                       std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds slice,
                                       const std::function<void()>& watch) {
  using Clock = std::chrono::steady_clock;
  while (true) {
    watch();
    const auto left = std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero());
    try {
      store.wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(std::min<Clock::duration>(left, slice)));
      return {};
    } catch (const DeadlineExceededError&) {
    }
    if (Clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!store.check({k})) missing.push_back(k);
      if (!missing.empty()) return missing;
    }
  }
}

}  // namespace chorus::collective
