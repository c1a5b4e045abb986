// SummaryWriter: TensorBoard event files, as tf.summary.create_file_writer(logdir) and
// tf.summary.scalar / histogram / image / text write them.
//
//   chorus::summary::SummaryWriter writer("./logs/train");
//   for (int step = 0; step < 100; ++step) {
//     writer.scalar("loss", loss, step);
//     writer.histogram("dense/kernel", kernel.value(), step);
//   }
//   // `tensorboard --logdir ./logs` shows run "train" with the scalar and histogram.
//
// Files: on construction the writer creates `logdir` (and its parents) and one file
// `<logdir>/events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>.v2` (n counts the
// writers of this process from 1, as TF2's uid; the suffix is options.filename_suffix), writes
// the header Event{wall_time, file_version "brain.Event:2"} and flushes it. Each write appends
// one Event{wall_time = now, step, summary{value}} framed as a TFRecord (summary/record.h).
// Formats: docs/formats.md A1–A8 and summary/summary_values.h.
//
// Buffering and flushing (TF2's max_queue = 10 and flush_millis = 120000 are the defaults):
// events are buffered in memory; the buffer is written and fsync'ed when it holds
// `max_queue` events, every `flush_millis` (by a background thread the writer owns), on
// flush(), on close() and on destruction. A process killed between flushes loses the buffered
// events; a half-written last record is read as "truncated" and ignored by TensorBoard.
//
// Who writes — the chief-only rule (docs/formats.md A9):
//   - Within a process, a write called from a replica thread of a strategy (inside
//     strategy.run) writes only when replica_id_in_sync_group() == 0; on other replicas it is a
//     no-op returning false, as TF records summaries only on replica 0. Writes from the program's
//     thread (no strategy, or cross-replica context inside strategy.scope()) always write.
//   - Across processes, only the chief writes. By default the chief is the process whose rank
//     (core/env.h process_rank: the launcher's OMPI_COMM_WORLD_RANK / PMI_RANK / RANK, or the worker
//     index a MultiWorkerMirroredStrategy registered, TF_CONFIG's) is 0 or absent; options.chief
//     overrides it. A non-chief writer creates no directory and no file; every write returns false.
//   Non-recording calls still validate their arguments, so every replica fails alike.
//
// Errors (never an abort): a logdir that cannot be created or written → PermissionDeniedError /
// NotFoundError / FailedPreconditionError (a path component is a file) naming the path and the OS
// message (core/file_io.h). Bad arguments → InvalidArgumentError. A write or flush that fails
// in the background thread is kept and rethrown by the next call on the writer (write, flush or
// close); the destructor logs it instead (CHORUS_LOG(ERROR)). Writing after close() →
// FailedPreconditionError.
//
// Thread-safety: every member function may be called from any thread concurrently (one mutex
// orders the events); the event order in the file is the order the calls took the mutex.
// Writes block only for the in-memory append, except the one that reaches max_queue, which writes
// and fsyncs the buffer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/summary/event.h>
#include <chorus/summary/summary_values.h>

namespace chorus {
class Tensor;
}

namespace chorus::summary {

struct SummaryWriterOptions {
  // Flush when this many events are buffered (TF2's max_queue). >= 1.
  int max_queue = 10;
  // Flush at least this often while events are buffered (TF2's flush_millis). > 0.
  std::chrono::milliseconds flush_millis{120000};
  // Appended to the file name (TF2's filename_suffix).
  std::string filename_suffix = ".v2";
  // Whether this process writes. nullopt: yes unless the launcher rank is set and not 0.
  std::optional<bool> chief;
};

class SummaryWriter {
 public:
  // tf.summary.create_file_writer(logdir). See above for what is created and the errors.
  explicit SummaryWriter(const std::string& logdir, const SummaryWriterOptions& options = {});
  // Flushes and closes (errors are logged, not thrown).
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;
  SummaryWriter(SummaryWriter&&) noexcept;
  SummaryWriter& operator=(SummaryWriter&&) noexcept;

  // Each returns true when the event was recorded, false when this caller does not record
  // (non-chief process, replica other than 0) — like tf.summary.*. `name` is the tag: non-empty.

  // tf.summary.scalar: stored as float32 (TensorBoard's scalar type).
  bool scalar(std::string_view name, double value, std::int64_t step);
  // tf.summary.histogram: `buckets` equal-width buckets over [min, max] of all elements
  // (summary_values.h histogram_buckets; non-finite values → InvalidArgumentError).
  bool histogram(std::string_view name, const Tensor& values, std::int64_t step,
                 int buckets = kDefaultHistogramBuckets);
  bool histogram(std::string_view name, const std::vector<double>& values, std::int64_t step,
                 int buckets = kDefaultHistogramBuckets);
  // tf.summary.image: images [k, h, w, c] uint8, or floating in [0, 1]; c ∈ {1, 3, 4}; the first
  // max_outputs are PNG-encoded.
  bool image(std::string_view name, const Tensor& images, std::int64_t step, int max_outputs = 3);
  // tf.summary.text: a rank-0 string tensor; TensorBoard's text plugin renders it as Markdown.
  bool text(std::string_view name, std::string_view text, std::int64_t step);
  // Any prepared value (summary_values.h), same gating.
  bool write(const SummaryValue& value, std::int64_t step);
  // A whole Event (wall_time 0 → now), e.g. Event{step, session_log{kStart}} after a restart
  // (docs/formats.md A8.5). Same gating.
  bool write_event(Event event);

  // tf.summary.should_record_summaries(): true when a write from this thread would record.
  bool should_record() const;
  // Writes and fsyncs the buffered events (no-op for a non-chief writer).
  void flush();
  // Flushes, stops the background thread and closes the file; later writes throw
  // FailedPreconditionError. Idempotent.
  void close();

  bool is_chief() const;
  const std::string& logdir() const;
  // The event file's path; "" for a non-chief writer.
  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The file name a writer created now would use, without the directory (for docs and tests):
// "events.out.tfevents.<seconds>.<hostname>.<pid>.<n><suffix>". A writer's `n` is its count in the
// process times 10^12 plus 12 random digits: in creation order like TF's counter, but a name that
// cannot be planted in advance to deny the logs (the file is created O_EXCL; a name taken is drawn
// again).
std::string event_file_name(std::int64_t unix_seconds, std::string_view hostname, std::int64_t pid, std::int64_t n,
                            std::string_view suffix = ".v2");

}  // namespace chorus::summary
