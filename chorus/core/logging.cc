#include <chorus/core/logging.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>

#include <chorus/core/env.h>
#include <chorus/core/error.h>

namespace chorus {
namespace {

std::atomic<int> g_level{-1};  // -1: not read from the environment yet
std::mutex g_sink_mutex;
LogSink g_sink = nullptr;
void* g_sink_user = nullptr;
thread_local LogContext t_context;

char level_letter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kNone: break;  // never printed
  }
  return '?';
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (t == "DEBUG" || t == "0") return LogLevel::kDebug;
  if (t == "INFO" || t == "1") return LogLevel::kInfo;
  if (t == "WARNING" || t == "WARN" || t == "2") return LogLevel::kWarning;
  if (t == "ERROR" || t == "3") return LogLevel::kError;
  throw InvalidArgumentError("log level '" + text + "' is not valid: use DEBUG, INFO, WARNING, ERROR or 0-3");
}

namespace {
// TF_CPP_MIN_LOG_LEVEL / TF_CPP_MAX_VLOG_LEVEL as a whole number in [low, high], or nullopt
// (unset, or bad: reported on stderr).
std::optional<int> tf_level(const char* name, int low, int high) {
  const std::optional<std::string> text = env::get(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno != 0 || v < low || v > high) {
    std::fprintf(stderr, "chorus: ignoring %s='%s': use a whole number from %d to %d\n", name, text->c_str(), low,
                 high);
    return std::nullopt;
  }
  return static_cast<int>(v);
}
}  // namespace

LogLevel log_level_from_environment() {
  if (auto text = env::get("CHORUS_LOG_LEVEL")) {
    try {
      return parse_log_level(*text);
    } catch (const InvalidArgumentError& e) {
      std::fprintf(stderr, "chorus: ignoring CHORUS_LOG_LEVEL: %s\n", e.what());
    }
  }
  int level = static_cast<int>(LogLevel::kInfo);
  if (tf_level("TF_CPP_MAX_VLOG_LEVEL", 0, 1 << 30).value_or(0) >= 1) level = static_cast<int>(LogLevel::kDebug);
  // TF: 0 shows INFO and up (VLOG included), n >= 1 hides the n lowest severities (3: all).
  if (const int min = tf_level("TF_CPP_MIN_LOG_LEVEL", 0, 3).value_or(0); min >= 1) level = min + 1;
  return static_cast<LogLevel>(level);
}

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    const LogLevel parsed = log_level_from_environment();
    int expected = -1;
    g_level.compare_exchange_strong(expected, static_cast<int>(parsed));
    level = g_level.load();
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

const LogContext& log_context() { return t_context; }

std::string log_context_prefix() {
  LogContext c = t_context;
  if (c.rank < 0) c.rank = env::process_rank().value_or(-1);  // every line of a multi-worker job names its rank
  if (c.rank < 0 && c.replica < 0) return "";
  std::string s = "[";
  if (c.rank >= 0) s += "rank " + std::to_string(c.rank);
  if (c.replica >= 0) s += std::string(c.rank >= 0 ? " " : "") + "replica " + std::to_string(c.replica);
  return s + "] ";
}

ScopedLogContext::ScopedLogContext(int rank, int replica) : saved_(t_context) {
  if (rank >= 0) t_context.rank = rank;
  if (replica >= 0) t_context.replica = replica;
}
ScopedLogContext::~ScopedLogContext() { t_context = saved_; }

void set_log_sink(LogSink sink, void* user) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  g_sink = sink;
  g_sink_user = user;
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[40];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(micros));
  const char* base = std::strrchr(file, '/');
  stream_ << stamp << frac << ' ' << level_letter(level) << ' ' << log_context_prefix() << (base ? base + 1 : file)
          << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  std::string line = stream_.str();
  LogSink sink;
  void* user;
  {
    std::lock_guard<std::mutex> lock(g_sink_mutex);
    sink = g_sink;
    user = g_sink_user;
  }
  if (sink) {  // called without our lock: a sink may log or take its own locks
    sink(level_, line, user);
    return;
  }
  line += '\n';
  // One write so concurrent lines never interleave; a short write to stderr is not retried.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace internal
}  // namespace chorus
