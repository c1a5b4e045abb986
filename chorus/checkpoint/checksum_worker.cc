#include <chorus/checkpoint/checksum_worker.h>

#include <utility>

#include <chorus/core/crc32c.h>

namespace chorus::train::internal {

ChecksumWorker::ChecksumWorker() : thread_([this] { run(); }) {}

ChecksumWorker::~ChecksumWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ChecksumWorker::add(const void* data, std::size_t n) {
  if (n == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return data_ == nullptr; });
  data_ = data;
  n_ = n;
  lock.unlock();
  cv_.notify_all();
}

std::uint32_t ChecksumWorker::take() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return data_ == nullptr; });
  return std::exchange(crc_, 0);
}

void ChecksumWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || data_ != nullptr; });
    if (data_ == nullptr) return;  // stop_, nothing in flight
    const void* data = data_;
    const std::size_t n = n_;
    const std::uint32_t seed = crc_;
    lock.unlock();
    const std::uint32_t crc = crc32c(data, n, seed);
    lock.lock();
    crc_ = crc;
    data_ = nullptr;
    cv_.notify_all();
  }
}

}  // namespace chorus::train::internal
