// When a wait of `timeout` that starts at `start` ends, for every wait with a timeout in
// collective/ (the in-process rendezvous, device Work, MPI and NCCL polling loops).
#pragma once

#include <chrono>

namespace chorus::collective {

// start + timeout, saturating: milliseconds::max() (or any timeout past the clock's range) means
// "no deadline", never an overflow into the past, which would time out at once.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point start,
                                                            std::chrono::milliseconds timeout) {
  const auto room =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::time_point::max() - start);
  return timeout >= room ? std::chrono::steady_clock::time_point::max() : start + timeout;
}

}  // namespace chorus::collective
