#include <chorus/summary/summary_writer.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>
#include <chorus/core/tensor.h>
#include <chorus/summary/record.h>

namespace chorus::summary {

namespace {

std::atomic<std::int64_t> g_writer_count{0};

// The writer's count times 10^12 plus 12 random decimal digits: numerically (and, for the first
// nine writers of a process, lexicographically) in creation order, as TF's counter is, but not
// predictable.
std::int64_t unpredictable_number() {
  constexpr std::uint64_t kRandomRange = 1000000000000ULL;
  std::random_device rd;
  const std::uint64_t r = ((static_cast<std::uint64_t>(rd()) << 32) ^ rd()) % kRandomRange;
  return ++g_writer_count * static_cast<std::int64_t>(kRandomRange) + static_cast<std::int64_t>(r);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string event_file_name(std::int64_t unix_seconds, std::string_view hostname, std::int64_t pid, std::int64_t n,
                            std::string_view suffix) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(unix_seconds));
  return chorus::internal::str_cat("events.out.tfevents.", seconds, ".", hostname, ".", pid, ".", n, suffix);
}

struct SummaryWriter::State {
  std::string logdir;
  SummaryWriterOptions options;
  bool chief = true;
  std::string path;

  mutable std::mutex mu;
  std::condition_variable cv;
  io::File file;
  std::string pending;  // framed records not yet written
  int pending_events = 0;
  bool closed = false;
  bool stop = false;
  std::exception_ptr error;  // sticky: the first I/O failure, rethrown by every later call
  std::thread flusher;

  // Writes and fsyncs `pending`. Caller holds mu.
  void flush_locked() {
    if (error) std::rethrow_exception(error);
    if (pending.empty() || !file.is_open()) return;
    try {
      file.write_all(pending);
      file.sync();
    } catch (...) {
      error = std::current_exception();
      pending.clear();
      pending_events = 0;
      throw;
    }
    pending.clear();
    pending_events = 0;
  }

  void check_open_locked() const {
    if (error) std::rethrow_exception(error);
    CHORUS_REQUIRE(!closed, FailedPreconditionError, "SummaryWriter for '", path.empty() ? logdir : path,
                   "' is closed; create a new writer to write more events");
  }

  void flusher_loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, options.flush_millis);
      if (stop) break;
      try {
        flush_locked();
      } catch (const std::exception&) {
        // Kept in `error`; rethrown to the next caller. Nothing more to do on this thread.
        return;
      }
    }
  }

  void stop_flusher() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (flusher.joinable()) flusher.join();
  }
};

SummaryWriter::SummaryWriter(const std::string& logdir, const SummaryWriterOptions& options)
    : state_(std::make_unique<State>()) {
  CHORUS_REQUIRE(!logdir.empty(), InvalidArgumentError, "SummaryWriter: logdir is empty");
  CHORUS_REQUIRE(options.max_queue >= 1, InvalidArgumentError, "SummaryWriter: max_queue must be >= 1, got ",
                 options.max_queue);
  CHORUS_REQUIRE(options.flush_millis.count() > 0, InvalidArgumentError,
                 "SummaryWriter: flush_millis must be > 0, got ", options.flush_millis.count());
  CHORUS_REQUIRE(options.filename_suffix.find('/') == std::string::npos, InvalidArgumentError,
                 "SummaryWriter: filename_suffix must not contain '/', got '", options.filename_suffix, "'");
  State& s = *state_;
  s.logdir = logdir;
  s.options = options;
  if (options.chief.has_value()) {
    s.chief = *options.chief;
  } else {
    const std::optional<int> rank = env::process_rank();  // TF_CONFIG workers: the strategy's index
    s.chief = !rank.has_value() || *rank == 0;
  }
  if (!s.chief) {
    CHORUS_LOG(DEBUG) << "SummaryWriter(" << logdir << "): not the chief, writes nothing";
    return;
  }

  io::create_directories(logdir);
  const std::int64_t seconds = static_cast<std::int64_t>(std::time(nullptr));
  // "localhost" when the machine has no name, so that the file name keeps its five fields.
  const std::string host = host_name_or("localhost");
  // The last field is random (TF puts a process-wide counter there, which anyone able to create
  // files in the log directory can predict and plant first, denying the logs). Created O_EXCL, so
  // a name that exists is never reused: another draw.
  for (int attempt = 0;; ++attempt) {
    s.path = (std::filesystem::path(logdir) /
              event_file_name(seconds, host, ::getpid(), unpredictable_number(), options.filename_suffix))
                 .string();
    try {
      s.file = io::File::create_new(s.path);
      break;
    } catch (const AlreadyExistsError&) {
      if (attempt == 7) throw;
    }
  }

  // The header, flushed at once (as TF's EventsWriter::Init), with integer-second wall_time.
  Event header;
  header.wall_time = static_cast<double>(seconds);
  header.file_version = std::string(kFileVersion);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    append_record(s.pending, encode_event(header));
    ++s.pending_events;
    s.flush_locked();
  }
  s.flusher = std::thread([state = state_.get()] { state->flusher_loop(); });
}

SummaryWriter::~SummaryWriter() {
  if (!state_) return;
  try {
    close();
  } catch (const std::exception& e) {
    CHORUS_LOG(ERROR) << "SummaryWriter(" << state_->path << "): events lost on close: " << e.what();
  }
}

SummaryWriter::SummaryWriter(SummaryWriter&&) noexcept = default;

SummaryWriter& SummaryWriter::operator=(SummaryWriter&& other) noexcept {
  if (this != &other) {
    SummaryWriter old(std::move(*this));  // closes (and logs) the current file
    state_ = std::move(other.state_);
  }
  return *this;
}

namespace {

[[noreturn]] void throw_moved_from() {
  throw FailedPreconditionError("SummaryWriter was moved from; use the writer it was moved into");
}

void require_tag(std::string_view name) {
  CHORUS_REQUIRE(!name.empty(), InvalidArgumentError, "summary name (tag) must not be empty");
}

}  // namespace

bool SummaryWriter::should_record() const {
  if (!state_) throw_moved_from();
  if (!state_->chief) return false;
  const ReplicaContext* replica = get_replica_context();
  return replica == nullptr || replica->replica_id_in_sync_group() == 0;
}

bool SummaryWriter::write_event(Event event) {
  if (!should_record()) return false;
  if (event.wall_time == 0) event.wall_time = now_seconds();
  std::string record = encode_event(event);  // validates before taking the lock
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.check_open_locked();
  append_record(s.pending, record);
  ++s.pending_events;
  if (s.pending_events >= s.options.max_queue) s.flush_locked();
  return true;
}

bool SummaryWriter::write(const SummaryValue& value, std::int64_t step) {
  require_tag(value.tag);
  Event e;
  e.step = step;
  e.summary = Summary{{value}};
  return write_event(std::move(e));
}

bool SummaryWriter::scalar(std::string_view name, double value, std::int64_t step) {
  require_tag(name);
  if (!should_record()) return false;
  return write(scalar_value(name, static_cast<float>(value)), step);
}

bool SummaryWriter::histogram(std::string_view name, const std::vector<double>& values, std::int64_t step,
                              int buckets) {
  require_tag(name);
  CHORUS_REQUIRE(buckets >= 0, InvalidArgumentError, "histogram '", name, "': buckets must be >= 0, got ", buckets);
  if (!should_record()) return false;
  return write(histogram_value(name, histogram_buckets(values, buckets)), step);
}

bool SummaryWriter::histogram(std::string_view name, const Tensor& values, std::int64_t step, int buckets) {
  require_tag(name);
  CHORUS_REQUIRE(values.defined(), InvalidArgumentError, "histogram '", name, "': the tensor is undefined");
  CHORUS_REQUIRE(values.dtype() != DType::kBool, InvalidArgumentError, "histogram '", name,
                 "': dtype bool has no histogram (valid: floating and integer dtypes)");
  CHORUS_REQUIRE(buckets >= 0, InvalidArgumentError, "histogram '", name, "': buckets must be >= 0, got ", buckets);
  if (!should_record()) return false;
  return histogram(name, values.to_vector<double>(), step, buckets);
}

bool SummaryWriter::image(std::string_view name, const Tensor& images, std::int64_t step, int max_outputs) {
  require_tag(name);
  validate_images(images, max_outputs);
  if (!should_record()) return false;
  return write(image_value(name, encode_images(images, max_outputs)), step);
}

bool SummaryWriter::text(std::string_view name, std::string_view text, std::int64_t step) {
  require_tag(name);
  if (!should_record()) return false;
  return write(text_value(name, text), step);
}

void SummaryWriter::flush() {
  if (!state_) throw_moved_from();
  State& s = *state_;
  if (!s.chief) return;
  std::lock_guard<std::mutex> lock(s.mu);
  s.check_open_locked();
  s.flush_locked();
}

void SummaryWriter::close() {
  if (!state_) throw_moved_from();
  State& s = *state_;
  s.stop_flusher();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;
  s.closed = true;
  if (!s.chief) return;
  s.flush_locked();  // rethrows a stored or new error; the File's destructor still closes the fd
  s.file.close();
}

bool SummaryWriter::is_chief() const {
  if (!state_) throw_moved_from();
  return state_->chief;
}

const std::string& SummaryWriter::logdir() const {
  if (!state_) throw_moved_from();
  return state_->logdir;
}

const std::string& SummaryWriter::path() const {
  if (!state_) throw_moved_from();
  return state_->path;
}

}  // namespace chorus::summary
