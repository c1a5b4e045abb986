// Forked worker processes for the tests of jobs without a launcher (the Gloo backend over stores,
// the store rendezvous, MultiWorkerMirroredStrategy from torchrun's or TF_CONFIG's variables): each
// worker is a child of the test process, with its own environment, and reports through its exit
// status, which the parent checks.
//
// A child's exit status: 0 when its body added no failed assertion, 1 when it did (the parent's
// failures before the fork are not counted), 2 when it threw (the message goes to stderr).
// A child forked from a process with threads may only call async-signal-safe functions: start
// threads (a store's server) in the parent after the forks (`after_fork`), or before and join them.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/collective/store/tcp_store.h>

namespace chorus::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

// Failed assertions of the running test so far (a child inherits its parent's).
inline int failed_assertions() {
  const ::testing::TestResult* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
  return n;
}

// The whole environment of this process replaced by `env` (in a child).
inline void replace_environment(const Env& env) {
  ::clearenv();
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
}

// Forks k children, child r running body(r) and exiting with the status above; then runs
// `after_fork` (if any) in the parent and waits for every child. Returns the wait statuses by rank.
inline std::vector<int> fork_workers(int k, const std::function<void(int rank)>& body,
                                     const std::function<void()>& after_fork = {}) {
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int r = 0; r < k; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int inherited = failed_assertions();
      int code = 0;
      try {
        body(r);
        code = failed_assertions() > inherited ? 1 : 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d threw: %s\n", r, e.what());
        code = 2;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  if (after_fork) after_fork();
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  return statuses;
}

inline void expect_all_exited_zero(const std::vector<int>& statuses, const std::string& what = "") {
  for (std::size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << what << (what.empty() ? "" : ": ") << "rank " << r << " status " << statuses[r];
}

// A port free now on 127.0.0.1 (its server's thread is joined before this returns, so before any fork).
inline int free_port() { return collective::TcpStoreServer(0, "127.0.0.1").port(); }

// torchrun's four variables for k workers meeting at 127.0.0.1:port.
inline std::vector<Env> torchrun_envs(int k, int port) {
  std::vector<Env> envs;
  for (int r = 0; r < k; ++r)
    envs.push_back({{"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)},
                    {"RANK", std::to_string(r)},
                    {"WORLD_SIZE", std::to_string(k)}});
  return envs;
}

// TF_CONFIG for k workers. With `chief`: {"chief": [127.0.0.1:port], "worker": [the others]}, TF's
// numbering (the chief is worker 0, task worker:i is worker i + 1); without: {"worker": [all k]},
// worker 0 serving the store on `port`. The other addresses (port + r) are labels only (Gloo binds
// ports of its own).
inline std::vector<Env> tf_config_envs(int k, int port, bool chief) {
  std::vector<std::string> addresses;
  for (int r = 0; r < k; ++r) addresses.push_back("\"127.0.0.1:" + std::to_string(port + r) + "\"");
  auto list = [&](int from, int to) {
    std::string s;
    for (int r = from; r < to; ++r) s += (s.empty() ? "" : ",") + addresses[static_cast<std::size_t>(r)];
    return "[" + s + "]";
  };
  const std::string cluster =
      chief ? "{\"chief\":" + list(0, 1) + ",\"worker\":" + list(1, k) + "}" : "{\"worker\":" + list(0, k) + "}";
  std::vector<Env> envs;
  for (int r = 0; r < k; ++r) {
    const bool is_chief = chief && r == 0;
    const std::string task = is_chief ? R"({"type":"chief","index":0})"
                                      : R"({"type":"worker","index":)" + std::to_string(chief ? r - 1 : r) + "}";
    envs.push_back({{"TF_CONFIG", "{\"cluster\":" + cluster + ",\"task\":" + task + "}"}});
  }
  return envs;
}

}  // namespace chorus::testing
