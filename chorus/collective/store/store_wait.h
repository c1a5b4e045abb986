// A wait on a Store that keeps an eye on something else while it waits: the store rendezvous
// watches for an error another worker published, NCCL's store side for an abort notice. Internal
// to collective/.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <chorus/collective/store/store.h>

namespace chorus::collective {

// Waits for `keys` until `deadline` in slices of at most `slice`, calling `watch()` before each
// (it throws to stop the wait). Returns the keys still missing at the deadline (empty: all there).
std::vector<std::string> wait_watching(Store& store, const std::vector<std::string>& keys,
                                       std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds slice,
                                       const std::function<void()>& watch);

}  // namespace chorus::collective
