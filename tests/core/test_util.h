// Shared test helpers for core/ tests.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <chorus/core/config.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>

namespace chorus::testing {

// Every test starts with a fresh, unfrozen device configuration (CTest also runs each TEST in
// its own process; this keeps running the binary directly correct too).
class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override { internal::reset_runtime_for_testing(); }
  void TearDown() override { internal::reset_runtime_for_testing(); }
};

// A fresh runtime with GPUs hidden and `n` logical CPU devices of `memory_limit_mb` each (the
// replicas of a MirroredStrategy on one machine); cpus(n) names them, "/cpu:0" … "/cpu:<n-1>".
inline void make_cpus(int n, std::int64_t memory_limit_mb = 128) {
  internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(n),
                                               LogicalDeviceConfiguration{.memory_limit_mb = memory_limit_mb});
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
}

inline std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

// Captures log lines while alive.
class LogCapture {
 public:
  LogCapture() { set_log_sink(&LogCapture::sink, this); }
  ~LogCapture() { set_log_sink(nullptr, nullptr); }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  bool contains(const std::string& needle) {
    for (const auto& l : lines())
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }

 private:
  static void sink(LogLevel, const std::string& line, void* user) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->lines_.push_back(line);
  }
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it by the destructor.
//   TempDir dir;  dir.path()  dir / "ckpt"  dir.str("run")  dir.file("x.idx")  dir.list()
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/chorus_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);  // a test may have locked it
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // The path of `name` inside the directory (the directory itself for "").
  std::string str(const std::string& name = "") const { return name.empty() ? path_ : path_ + "/" + name; }
  std::string file(const std::string& name) const { return str(name); }
  std::string operator/(const std::string& name) const { return str(name); }
  // File names in the directory, sorted.
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

// The what() of the E that fn() throws; a test failure (and "") when it throws nothing or
// another type.
template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// Expects `stmt` to throw `Exc` whose what() contains every string in `needles`.
#define EXPECT_THROW_WITH(stmt, Exc, ...)                                                                           \
  do {                                                                                                              \
    bool chorus_thrown_ = false;                                                                                    \
    try {                                                                                                           \
      stmt;                                                                                                         \
    } catch (const Exc& e) {                                                                                        \
      chorus_thrown_ = true;                                                                                        \
      for (const std::string& n : std::vector<std::string>{__VA_ARGS__})                                            \
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message lacks '" << n << "': " << e.what(); \
    }                                                                                                               \
    EXPECT_TRUE(chorus_thrown_) << #stmt " did not throw " #Exc;                                                    \
  } while (0)

}  // namespace chorus::testing
