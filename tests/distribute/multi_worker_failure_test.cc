// Failure drills for MultiWorkerMirroredStrategy, run under mpirun by run_multi_worker_failure.cmake,
// which checks the job's exit status and output:
//
//   multi_worker_failure_test kill DIR     rank 1 is SIGKILLed at step 3; the survivors must throw
//                                          an error naming rank 1 within the strategy's timeout
//                                          (5 s), print it and exit non-zero (never hang)
//   multi_worker_failure_test resume DIR   the same command run again: restore_or_initialize must
//                                          find the checkpoint of the last completed step (3) and
//                                          the run finishes its 6 steps, exit 0
//   multi_worker_failure_test sigterm DIR  rank 1 gets SIGTERM from one of its own threads while the
//                                          loop runs; every rank must stop after the same step,
//                                          save a checkpoint of it and exit 0
//   multi_worker_failure_test steps DIR [N]  N steps (default 2000) 10 ms apart, for drills done
//                                          from outside (tests/hosts/host_drills.sh): rank 0
//                                          creates DIR/ready after step 3 and prints every step's
//                                          time; an error is reported as in kill (exit 3); a
//                                          SIGTERM on any rank stops every rank after the same
//                                          step with a checkpoint of it, as in sigterm (exit 0);
//                                          all N steps done: exit 0
//
// Each step is a strategy.run with an all-reduce across all workers (like a gradient sum), then
// the step counter (a mirrored int64 variable) is incremented and, in kill/resume, a checkpoint
// of it is saved through a CheckpointManager in DIR (every worker saves, the chief writes).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/preemption.h>

namespace cx = chorus;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kTimeout{5000};

// One training-like step: each replica all-reduces its id; returns the sum on replica 0.
float step(cx::distribute::MultiWorkerMirroredStrategy& s) {
  auto out = s.run([] {
    auto* ctx = cx::get_replica_context();
    return ctx->all_reduce(cx::ReduceOp::kSum, cx::Tensor::full({4}, ctx->replica_id_in_sync_group() + 1));
  });
  return out[0].to_vector<float>()[0];
}

// The step counter and the manager that checkpoints it (in the strategy's scope: mirrored).
struct Progress {
  cx::Variable step;
  std::unique_ptr<cx::train::Checkpoint> ckpt;
  std::unique_ptr<cx::train::CheckpointManager> manager;
  Progress(cx::distribute::MultiWorkerMirroredStrategy& s, const std::string& dir) {
    {
      auto scope = s.scope();
      step = cx::make_variable({.initial_value = cx::Tensor::scalar<std::int64_t>(0, "/cpu:0"),
                                .name = "step",
                                .trainable = false,
                                .aggregation = cx::VariableAggregation::kOnlyFirstReplica});
    }
    ckpt = std::make_unique<cx::train::Checkpoint>(std::vector<cx::train::TrackableChild>{{"step", step}});
    manager = std::make_unique<cx::train::CheckpointManager>(*ckpt, dir, 3);
  }
  std::int64_t done() const { return step.value().item<std::int64_t>(); }
  std::string complete_step() {  // after a step: count it and save (every worker; the chief writes)
    step.assign(cx::Tensor::scalar<std::int64_t>(done() + 1, "/cpu:0"));
    return *manager->save(done());
  }
};

// Prints what an error of a step says and how long after the step's start it came, then leaves.
[[noreturn]] void report_and_exit(int rank, const cx::Error& e, Clock::time_point since) {
  const double waited = std::chrono::duration<double>(Clock::now() - since).count();
  std::printf("[rank %d] caught %s after %.1f s: %s\n", rank,
              dynamic_cast<const cx::DeadlineExceededError*>(&e) ? "DeadlineExceededError"
              : dynamic_cast<const cx::UnavailableError*>(&e)    ? "UnavailableError"
              : dynamic_cast<const cx::AbortedError*>(&e)        ? "AbortedError"
                                                                 : "another error",
              waited, e.what());
  std::fflush(nullptr);
  // A peer is gone: MPI_Finalize would wait for it. Leave at once, non-zero (the docs' advice).
  std::_Exit(3);
}

int kill_drill(cx::distribute::MultiWorkerMirroredStrategy& s, const std::string& dir) {
  const int rank = s.worker_index();
  const int n = s.num_workers();
  Progress progress(s, dir);
  auto died = Clock::now();
  try {
    for (int i = 0; i < 20; ++i) {
      if (rank == 1 && i == 3) {
        std::printf("[rank 1] killing myself (SIGKILL) before step %d\n", i);
        std::fflush(nullptr);
        raise(SIGKILL);
      }
      died = Clock::now();
      const float sum = step(s);
      if (sum != n * (n + 1) / 2.0f) {
        std::printf("[rank %d] wrong sum %g at step %d\n", rank, sum, i);
        return 2;
      }
      progress.complete_step();
      std::printf("[rank %d] step %d done\n", rank, i);
      std::fflush(nullptr);
    }
  } catch (const cx::Error& e) {
    report_and_exit(rank, e, died);
  }
  std::printf("[rank %d] finished all steps although rank 1 died\n", rank);
  return 1;
}

// The rerun of the kill drill's command: resumes from the latest checkpoint.
int resume_drill(cx::distribute::MultiWorkerMirroredStrategy& s, const std::string& dir) {
  const int rank = s.worker_index();
  const int n = s.num_workers();
  Progress progress(s, dir);
  const auto restored = progress.manager->restore_or_initialize();
  const std::int64_t first = progress.done();
  std::printf("[rank %d] resumed from %s at step %lld\n", rank, restored ? restored->c_str() : "(nothing)",
              static_cast<long long>(first));
  for (std::int64_t i = first; i < 6; ++i) {
    if (step(s) != n * (n + 1) / 2.0f) return 2;
    progress.complete_step();
  }
  std::printf("[rank %d] finished at step %lld\n", rank, static_cast<long long>(progress.done()));
  std::fflush(nullptr);
  return restored ? 0 : 6;
}

int sigterm_drill(cx::distribute::MultiWorkerMirroredStrategy& s, const std::string& dir) {
  const int rank = s.worker_index();
  Progress progress(s, dir);
  cx::distribute::PreemptionWatcher watcher(s);
  std::thread killer;
  int rc = 5;
  for (std::int64_t i = 0; i < 400; ++i) {
    step(s);
    progress.step.assign(cx::Tensor::scalar<std::int64_t>(i + 1, "/cpu:0"));
    if (rank == 1 && i == 3)  // asynchronous: lands at some later step, in whatever the loop is doing
      killer = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        kill(getpid(), SIGTERM);
      });
    if (watcher.should_stop(i)) {
      // A checkpoint would be saved here. Check that every worker stopped after the same step.
      auto* comm = s.worker_communicator();
      cx::Tensor all = cx::Tensor::empty({comm->size()}, cx::DType::kInt64, "/cpu:0");
      comm->all_gather(cx::Tensor::from_vector<std::int64_t>({i}, {1}, "/cpu:0"), all, {.timeout = kTimeout})
          ->wait(kTimeout);
      bool same = true;
      for (std::int64_t v : all.to_vector<std::int64_t>()) same = same && v == i;
      // Preemption: every worker saves the agreed step, then all exit cleanly.
      const std::string saved = *progress.manager->save(i + 1);
      std::printf("[rank %d] stopping after step %lld (signal seen by rank %d), all ranks agree: %s; checkpoint %s\n",
                  rank, static_cast<long long>(i),
                  watcher.signalled_ranks().empty() ? -1 : watcher.signalled_ranks()[0], same ? "yes" : "no",
                  saved.c_str());
      rc = same && i > 3 && watcher.signalled_ranks() == std::vector<int>{1} ? 0 : 4;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (killer.joinable()) killer.join();
  if (rc == 5) std::printf("[rank %d] no stop within 400 steps\n", rank);
  std::fflush(nullptr);
  return rc;
}

int steps_drill(cx::distribute::MultiWorkerMirroredStrategy& s, const std::string& dir, std::int64_t n_steps) {
  const int rank = s.worker_index();
  const int n = s.num_workers();
  Progress progress(s, dir);
  cx::distribute::PreemptionWatcher watcher(s);
  auto started = Clock::now();
  try {
    for (std::int64_t i = 0; i < n_steps; ++i) {
      started = Clock::now();
      if (step(s) != n * (n + 1) / 2.0f) {
        std::printf("[rank %d] wrong sum at step %lld\n", rank, static_cast<long long>(i));
        return 2;
      }
      progress.step.assign(cx::Tensor::scalar<std::int64_t>(i + 1, "/cpu:0"));
      std::printf("[rank %d] step %lld took %.1f ms\n", rank, static_cast<long long>(i),
                  std::chrono::duration<double, std::milli>(Clock::now() - started).count());
      std::fflush(nullptr);
      if (rank == 0 && i == 3) std::fclose(std::fopen((dir + "/ready").c_str(), "w"));
      if (watcher.should_stop(i)) {
        const std::string saved = *progress.manager->save(i + 1);
        std::printf("[rank %d] stopping after step %lld (signal seen by %zu rank(s)); checkpoint %s\n", rank,
                    static_cast<long long>(i), watcher.signalled_ranks().size(), saved.c_str());
        std::fflush(nullptr);
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const cx::Error& e) {
    report_and_exit(rank, e, started);
  }
  std::printf("[rank %d] finished %lld steps\n", rank, static_cast<long long>(n_steps));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((mode != "kill" && mode != "resume" && mode != "sigterm" && mode != "steps") || argc < 3) {
    std::fprintf(stderr, "usage: %s kill|resume|sigterm|steps CHECKPOINT_DIR [STEPS] (under mpirun -np 2 or more)\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  int rc = 1;
  {
    cx::collective::MpiEnvironment mpi;
    try {
      cx::distribute::MultiWorkerMirroredStrategy s({.timeout = kTimeout});
      rc = mode == "kill"     ? kill_drill(s, dir)
           : mode == "resume" ? resume_drill(s, dir)
           : mode == "steps"  ? steps_drill(s, dir, argc > 3 ? std::atoll(argv[3]) : 2000)
                              : sigterm_drill(s, dir);
    } catch (const std::exception& e) {
      std::printf("[rank %d] unexpected error: %s\n", mpi.world_rank(), e.what());
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  return rc;
}
