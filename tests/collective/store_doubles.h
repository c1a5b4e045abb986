// Test doubles of chorus::collective::Store (collective/store/store.h) for backends that meet
// through a store (the Gloo backend): one in memory, shared by the threads of one process, and one
// in a directory, shared by forked processes. Both keep store.h's contract (timeouts name the
// missing keys; add() refuses a value that is not a decimal integer) but are for tests only: the
// real ones are collective/store/'s TCP and file stores.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <chorus/collective/store/store.h>
#include <chorus/core/error.h>

namespace chorus::testing {

namespace store_doubles_detail {
inline std::string missing_of(const std::vector<std::string>& keys,
                              const std::function<bool(const std::string&)>& has) {
  std::string s;
  for (const auto& k : keys)
    if (!has(k)) s += (s.empty() ? "" : ", ") + k;
  return s;
}
inline std::int64_t parse_counter(const std::string& key, const std::string& v) {
  std::int64_t n = 0;
  if (v.empty()) return 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size())
    throw InvalidArgumentError("store: the value at '" + key + "' is not a decimal integer");
  return n;
}
}  // namespace store_doubles_detail

class InMemoryStore final : public collective::Store {
 public:
  void set(const std::string& key, std::string_view value) override {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = std::string(value);
    cv_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::lock_guard<std::mutex> lock(mu_);
    return map_.at(key);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::int64_t n = store_doubles_detail::parse_counter(key, map_[key]) + delta;
    map_[key] = std::to_string(n);
    cv_.notify_all();
    return n;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto has = [&](const std::string& k) { return map_.count(k) > 0; };
    if (!cv_.wait_for(lock, timeout, [&] { return std::all_of(keys.begin(), keys.end(), has); }))
      throw DeadlineExceededError("in-memory store: keys still missing after " + std::to_string(timeout.count()) +
                                  " ms: " + store_doubles_detail::missing_of(keys, has));
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return map_.count(k) > 0; });
  }
  std::string describe() const override { return "in-memory test store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
};

// One file per key (named by a hash of the key), written to a temporary name and renamed into
// place; add() holds an flock on <dir>/.lock. Polls every millisecond.
class DirStore final : public collective::Store {
 public:
  explicit DirStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, std::string_view value) override {
    const std::string tmp = path(key) + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(value.data(), static_cast<std::streamsize>(value.size()));
    }
    std::filesystem::rename(tmp, path(key));
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    return read(key);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const int fd = ::open((dir_ + "/.lock").c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) throw UnavailableError("dir store: cannot open the lock in " + dir_);
    ::flock(fd, LOCK_EX);
    std::int64_t n = 0;
    try {
      n = store_doubles_detail::parse_counter(key, check({key}) ? read(key) : "") + delta;
      set(key, std::to_string(n));
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);  // releases the lock
    return n;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto end = std::chrono::steady_clock::now() + timeout;
    auto has = [&](const std::string& k) { return std::filesystem::exists(path(k)); };
    while (!std::all_of(keys.begin(), keys.end(), has)) {
      if (std::chrono::steady_clock::now() >= end)
        throw DeadlineExceededError("dir store " + dir_ + ": keys still missing after " +
                                    std::to_string(timeout.count()) +
                                    " ms: " + store_doubles_detail::missing_of(keys, has));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool check(const std::vector<std::string>& keys) override {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return std::filesystem::exists(path(k)); });
  }
  std::string describe() const override { return "dir test store " + dir_; }

 private:
  std::string path(const std::string& key) const { return dir_ + "/" + std::to_string(std::hash<std::string>{}(key)); }
  std::string read(const std::string& key) const {
    std::ifstream f(path(key), std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string dir_;
};

}  // namespace chorus::testing
