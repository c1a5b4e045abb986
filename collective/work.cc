#include "collective/work.h"

#include <thread>

#include "core/error.h"

namespace chorus::collective {

void EventWork::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done_->query()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw DeadlineExceededError(internal::str_cat(description_, ": the device did not finish within ",
                                                    timeout.count(), " ms (a kernel is stuck or the device is "
                                                    "overloaded)"));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace chorus::collective
