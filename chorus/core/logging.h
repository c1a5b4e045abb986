// Logging: levels, timestamps, and the replica/rank of the calling thread.
//
//   CHORUS_LOG(INFO) << "placed " << n << " tensors";
//   2026-11-21 16:40:01.123456 I [rank 1 replica 0] tensor.cc:42] placed 3 tensors
//
// The level comes from CHORUS_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR, or 0-3; default INFO);
// without it, from TensorFlow's variables, so a TF user's setting works unchanged:
//   TF_CPP_MIN_LOG_LEVEL   0 all (INFO and up), 1 no INFO, 2 no WARNING either, 3 nothing
//   TF_CPP_MAX_VLOG_LEVEL  >= 1: DEBUG lines too (TF's VLOG; they are INFO-severity there, so
//                          TF_CPP_MIN_LOG_LEVEL >= 1 hides them)
// read once at first use (a bad value is reported on stderr and ignored); set_log_level()
// overrides it. Lines go to stderr, one write(2) per line so lines from several threads never
// interleave. Thread-safe.
#pragma once

#include <sstream>
#include <string>

namespace chorus {

// kNone: nothing is printed (TF_CPP_MIN_LOG_LEVEL=3).
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kNone = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
// The level the environment asks for (the rules above), without caching it.
LogLevel log_level_from_environment();
// Parses "DEBUG"/"INFO"/"WARNING"/"WARN"/"ERROR" (any case) or "0".."3".
// Throws InvalidArgumentError naming the valid values.
LogLevel parse_log_level(const std::string& text);

// Who the calling thread is working for; printed in every log line and error that names a
// replica. -1 means "not inside one". Strategies set it on their replica threads.
struct LogContext {
  int rank = -1;     // process rank under mpirun
  int replica = -1;  // replica id in sync group
};
const LogContext& log_context();
// "[rank 1 replica 0] " or "" when outside any replica/rank.
std::string log_context_prefix();

// RAII: sets fields of the calling thread's LogContext, restores the previous on destruction.
class ScopedLogContext {
 public:
  ScopedLogContext(int rank, int replica);
  ~ScopedLogContext();
  ScopedLogContext(const ScopedLogContext&) = delete;
  ScopedLogContext& operator=(const ScopedLogContext&) = delete;

 private:
  LogContext saved_;
};

// Where log lines go. The default writes to stderr; tests capture lines with their own sink.
// The sink is called with a complete line (no trailing newline), possibly from several threads at
// once: it must be thread-safe. It must not call chorus device APIs (the line may come from
// inside device initialization).
using LogSink = void (*)(LogLevel, const std::string& line, void* user);
void set_log_sink(LogSink sink, void* user);  // nullptr restores stderr

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace chorus

#define CHORUS_LOG_LEVEL_DEBUG ::chorus::LogLevel::kDebug
#define CHORUS_LOG_LEVEL_INFO ::chorus::LogLevel::kInfo
#define CHORUS_LOG_LEVEL_WARNING ::chorus::LogLevel::kWarning
#define CHORUS_LOG_LEVEL_ERROR ::chorus::LogLevel::kError

// The message is only formatted when its level is enabled.
#define CHORUS_LOG(severity)                            \
  (CHORUS_LOG_LEVEL_##severity < ::chorus::log_level()) \
      ? (void)0                                         \
      : ::chorus::internal::LogVoidify() &              \
            ::chorus::internal::LogMessage(CHORUS_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()
