// A key-value store that the processes of a job meet through when there is no MPI (c10d's Store,
// Gloo's rendezvous::Store): the chief serves one over TCP (tcp_store.h), or the workers share a
// directory (file_store.h). Rendezvous (who is here, each rank's address), NCCL's unique id and
// the GPU claims travel through it; collectives never do.
//
//   std::unique_ptr<Store> s = ...;
//   s->set("rank/1/addr", "10.0.0.2:40123");
//   std::string a = s->get("rank/0/addr", std::chrono::seconds(30));
//   std::int64_t arrived = s->add("arrived", 1);
//
// Contract, for every implementation:
//   set(key, value)       stores value (any bytes) under key, replacing what was there; visible to
//                         every client once set() returns.
//   get(key, timeout)     the value of key, waiting up to `timeout` for it to be set.
//   add(key, delta)       atomically adds delta to the decimal integer stored at key (absent = 0),
//                         stores the result and returns it; a value that is not a decimal integer
//                         → InvalidArgumentError naming the key.
//   wait(keys, timeout)   returns when every key is set.
//   check(keys)           whether every key is set now (never waits).
//   describe()            what the store is, for messages: "tcp store 10.0.0.1:29500",
//                         "file store /shared/job42".
// Keys are non-empty, at most kMaxKeyBytes bytes; values at most kMaxValueBytes (both checked:
// InvalidArgumentError naming the key). Errors: DeadlineExceededError when get/wait time out,
// naming the keys still missing and describe(); UnavailableError when the store cannot be reached
// or drops the connection; DataLossError when it answers something that is not the protocol. No
// call waits past its timeout, but for the time a networked store's answer takes to travel back
// (tcp_store.h: at most 100 ms more), so that get(key, 0ms) can look once; a call without a
// timeout uses the store's default timeout.
//
// Thread-safety: every method may be called from any thread at the same time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::collective {

class Store {
 public:
  static constexpr std::size_t kMaxKeyBytes = 4096;
  static constexpr std::size_t kMaxValueBytes = std::size_t{64} << 20;

  virtual ~Store() = default;

  virtual void set(const std::string& key, std::string_view value) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  std::string get(const std::string& key) { return get(key, default_timeout()); }
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, default_timeout()); }
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual std::string describe() const = 0;

  // The timeout of calls that name none (300 s unless set: Gloo's and c10d's default).
  std::chrono::milliseconds default_timeout() const { return default_timeout_; }
  void set_default_timeout(std::chrono::milliseconds t) { default_timeout_ = t; }

 private:
  std::chrono::milliseconds default_timeout_{std::chrono::seconds(300)};
};

}  // namespace chorus::collective
