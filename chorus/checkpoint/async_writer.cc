#include <chorus/checkpoint/async_writer.h>

#include <sched.h>
#include <sys/resource.h>

#include <optional>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/profile.h>
#include <chorus/core/timeline.h>

namespace chorus::train::internal {
namespace {
constexpr int kWriterTrack = 3000;  // clear of the replicas' 1000 + id and their comm threads' 2000 + id
// The calling thread's minor page faults so far.
std::int64_t minor_faults() {
  rusage u{};
  return ::getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_minflt : 0;
}
}  // namespace

AsyncWriter::~AsyncWriter() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      CHORUS_LOG(ERROR) << "async checkpoint write failed and nobody called sync(): " << e.what();
    }
  }
}

void AsyncWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncWriter::start(std::function<void()> job) {
  CHORUS_ENFORCE(!thread_.joinable(), "AsyncWriter::start with a write in flight");
  thread_ = std::thread([this, job = std::move(job)] {
    // The writer runs at SCHED_BATCH: a fair share of a core, but no preemption of a training
    // thread when its I/O completes (the wake-up preemption SCHED_IDLE was chosen for, below).
    // Until 2026-11-28 it ran at SCHED_IDLE, which gets a core only when nothing else in the
    // machine wants one: on a 2-core VM shared with other work (builds, other jobs) a save then
    // waited 0.2-0.5 s on the run queue for ~3 ms of CPU (seed CNN, 1.1 MB), a 64 MiB save's
    // snapshot copy took 45-76 ms instead of 17-21, and with one busy thread per core 20 ms of
    // the writer's CPU took 6.1 s — while training waited for it: a write into a variable
    // not yet copied waits (HeldSnapshot), and so does the next save. Work that training may wait
    // for cannot run at a priority that other processes starve (docs/benchmarks.md, 2026-11-28).
    // The measurement that chose SCHED_IDLE (EPYC VM, idle, 2026-11-27): steps 7.4% slower at
    // normal priority, 4.8% at SCHED_IDLE (9 paired rounds; that VM's spread is ±2.5 points).
    sched_param batch{};
    (void)::sched_setscheduler(0, SCHED_BATCH, &batch);  // best effort: the write runs either way
    // On the timeline: its own track, and the write's CPU time and run-queue wait (what it costs
    // the cores the replicas use, and how long it waited for one).
    std::optional<timeline::Span> span;
    std::int64_t cpu0 = 0, queued0 = 0, faults0 = 0;
    if (timeline::enabled()) {
      faults0 = minor_faults();
      timeline::set_thread_track(kWriterTrack, "checkpoint writer");
      span.emplace("checkpoint", "async write");
      cpu0 = profile::internal::thread_cpu_ns();
      queued0 = profile::internal::thread_run_delay_ns();
    }
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();  // read by wait() after join (happens-before)
    }
    if (span)
      span->set_args(::chorus::internal::str_cat(
          "\"cpu_us\": ", (profile::internal::thread_cpu_ns() - cpu0) / 1000,
          ", \"run_queue_us\": ", (profile::internal::thread_run_delay_ns() - queued0) / 1000,
          ", \"minor_faults\": ", minor_faults() - faults0));
  });
}

}  // namespace chorus::train::internal
