// bench_allreduce's measurements: the timing loop (persistent teams of threads, interleaved
// repetitions), the MPI yardstick run under mpirun, and the contenders (allreduce_bench.h).
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

#include "bench/bench_util.h"
#include "bench/collective/allreduce_bench.h"
#include <chorus/launch/mpirun_command.h>

namespace chorus::allreduce_bench {
namespace {

using Clock = std::chrono::steady_clock;
using bench::median;

// Keeps the compiler from treating a buffer as dead and dropping the copies into it.
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// k persistent threads running `op(rank)` B times back to back per batch, started together.
class Team {
 public:
  Team(int k, std::function<void(int)> op)
      : op_(std::move(op)), start_(k + 1), done_(k + 1), t0_(k), t1_(k), errors_(k) {
    for (int r = 0; r < k; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~Team() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  // One batch of `batch` calls per thread; seconds from the earliest start to the latest end.
  double run(int batch) {
    batch_ = batch;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    return std::chrono::duration<double>(*std::max_element(t1_.begin(), t1_.end()) -
                                         *std::min_element(t0_.begin(), t0_.end()))
        .count();
  }

 private:
  void loop(int r) {
    for (;;) {
      start_.arrive_and_wait();  // batch_ and stop_ were written before the main thread arrived
      if (stop_) return;
      t0_[r] = Clock::now();
      try {
        for (int i = 0; i < batch_; ++i) op_(r);
      } catch (...) {
        errors_[r] = std::current_exception();
      }
      t1_[r] = Clock::now();
      done_.arrive_and_wait();
    }
  }

  std::function<void(int)> op_;
  std::barrier<> start_;
  std::barrier<> done_;
  int batch_ = 0;
  bool stop_ = false;
  std::vector<Clock::time_point> t0_, t1_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

// Every rank's buffer holds k(k+1)/2 after an all-reduce of (r+1)s; throws otherwise.
void check_all_reduce(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<Tensor>& bufs) {
  const int k = static_cast<int>(comms.size());
  for (int r = 0; r < k; ++r) {
    bufs[r].device_context().stream().synchronize();  // the fill that created it may still be queued
    float* p = static_cast<float*>(bufs[r].data());
    std::fill(p, p + bufs[r].num_elements(), static_cast<float>(r + 1));
  }
  Team team(k, [&](int r) { comms[r]->all_reduce(bufs[r], bufs[r], {.timeout = kCollectiveTimeout})->wait(); });
  team.run(1);
  const float want = static_cast<float>(k * (k + 1) / 2);
  for (int r = 0; r < k; ++r) {
    const float* p = static_cast<const float*>(bufs[r].data());
    for (std::int64_t i = 0; i < bufs[r].num_elements(); ++i)
      if (p[i] != want)
        throw std::runtime_error(std::string(comms[r]->backend()) + " all_reduce with k=" + std::to_string(k) +
                                 ": rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
                                 std::to_string(p[i]) + ", expected " + std::to_string(want));
  }
}

}  // namespace

std::vector<Timing> measure(const std::vector<Contender>& contenders, const Policy& p) {
  std::vector<std::unique_ptr<Team>> teams;
  std::vector<double> per_call;
  int reps = p.reps;
  for (const Contender& c : contenders) {
    teams.push_back(std::make_unique<Team>(c.threads, c.op));
    Team& team = *teams.back();
    team.run(1);  // warm-up: first touch, caches, lazily created state
    int batch = 1;
    double t = team.run(batch);
    while (t < p.calibrate_s && batch < kMaxBatch) {
      batch *= 2;
      t = team.run(batch);
    }
    per_call.push_back(t / batch);
    if (per_call.back() > kSlowCallSeconds) reps = std::min(reps, 3);
  }
  std::vector<int> batches;
  for (double c : per_call)
    batches.push_back(
        static_cast<int>(std::clamp(std::llround(p.target_s / (reps * c)), 1LL, static_cast<long long>(kMaxBatch))));
  std::vector<std::vector<double>> times(contenders.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < teams.size(); ++i) times[i].push_back(teams[i]->run(batches[i]) / batches[i]);
  std::vector<Timing> out;
  for (std::size_t i = 0; i < teams.size(); ++i) {
    const double m = median(times[i]);
    const auto [lo, hi] = std::minmax_element(times[i].begin(), times[i].end());
    out.push_back({m, (*hi - *lo) / m, batches[i], reps});
  }
  return out;
}

#if defined(CHORUS_MPI_BENCH_PATH) && defined(CHORUS_MPIEXEC)
using chorus::launch::shell_quote;
#endif

MpiRun run_mpi(int k, const std::vector<std::size_t>& sizes, const Policy& p, bool disabled) {
  MpiRun run;
#if defined(CHORUS_MPI_BENCH_PATH) && defined(CHORUS_MPIEXEC)
  if (disabled) {
    run.skipped = "disabled by --no-mpi";
    return run;
  }
  const std::string exe = CHORUS_MPI_BENCH_PATH;
  if (access(exe.c_str(), X_OK) != 0) {
    run.skipped = exe + " is not built (build target bench_mpi_allreduce)";
    return run;
  }
  std::string list;
  for (std::size_t s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  char policy[96];
  std::snprintf(policy, sizeof policy, " --target-s %g --reps %d", p.target_s, p.reps);
  // `timeout` so a wedged mpirun (no network, a stuck launcher) cannot hang the benchmark.
  const int limit_s = 60 + static_cast<int>(sizes.size() * 60);
  const std::string cmd = "timeout -k 10 " + std::to_string(limit_s) + " " + shell_quote(CHORUS_MPIEXEC) +
                          " --oversubscribe" + (geteuid() == 0 ? " --allow-run-as-root" : "") + " -np " +
                          std::to_string(k) + " " + shell_quote(exe) + " --sizes " + list + policy + " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    run.skipped = std::string("popen(") + cmd + ") failed: " + std::strerror(errno);
    return run;
  }
  std::string output;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) output += line;
  const int status = pclose(pipe);
  // The result is bench_mpi_allreduce's JSON line ({"bench":"mpi_allreduce",...}), found by
  // parsing each line, not by its spelling (a prefix match broke when the writer went compact).
  const auto medians_us = bench::mpi_allreduce_medians_us(output);
  if (status != 0 || medians_us.empty()) {
    // The tail of mpirun's output says what went wrong.
    std::string tail = output;
    if (tail.size() > 600) tail = std::string("...").append(output, output.size() - 600, std::string::npos);
    run.skipped = "`" + cmd + "` exited with status " + std::to_string(status) +
                  (medians_us.empty() ? " and printed no result line" : "") + "; output: " + tail;
    for (char& c : run.skipped)
      if (c == '\n') c = ' ';
    return run;
  }
  for (const auto& [bytes, us] : medians_us) run.seconds[bytes] = us * 1e-6;
  if (run.seconds.size() != sizes.size())
    run.skipped = "bench_mpi_allreduce's line lacks some of the sizes asked for; output: " + output;
#else
  (void)k, (void)sizes, (void)p, (void)disabled;
  run.skipped = "built without MPI (CHORUS_WITH_MPI was off at configure time)";
#endif
  return run;
}

Contender all_reduce_contender(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<Tensor>& bufs) {
  check_all_reduce(comms, bufs);
  return {static_cast<int>(comms.size()), [&comms, &bufs](int r) {
            try {
              comms[r]->all_reduce(bufs[r], bufs[r], {.timeout = kCollectiveTimeout})->wait();
            } catch (const std::exception& e) {
              comms[r]->abort(e.what());  // wake the other ranks instead of leaving them to time out
              throw;
            }
          }};
}

Contender memcpy_contender(const std::vector<Tensor>& bufs, std::size_t bytes, std::vector<HostBuffer>* dst) {
  const int k = static_cast<int>(bufs.size());
  for (int j = 0; j < k; ++j) {
    void* d = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (d == nullptr) throw std::runtime_error("aligned_alloc of " + std::to_string(bytes) + " bytes failed");
    std::memset(d, 0, bytes);  // first touch outside the timed runs
    dst->emplace_back(d);
  }
  return {1, [&bufs, bytes, dst, k](int) {
            for (int j = 0; j < k; ++j) std::memcpy((*dst)[j].get(), bufs[j].data(), bytes);
            escape((*dst)[0].get());
          }};
}

// The contents are not used after the result check, so overwriting them is harmless.
Contender memcpy_ring_contender(const std::vector<Tensor>& bufs, std::size_t bytes) {
  const int k = static_cast<int>(bufs.size());
  return {1, [&bufs, bytes, k](int) {
            for (int j = 0; j < k; ++j) std::memcpy(bufs[(j + 1) % k].data(), bufs[j].data(), bytes);
            escape(bufs[0].data());
          }};
}

}  // namespace chorus::allreduce_bench
