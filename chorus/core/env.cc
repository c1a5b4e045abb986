#include <chorus/core/env.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <chorus/core/error.h>

namespace chorus::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<bool> get_bool(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  std::string t;
  for (char c : *v) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw InvalidArgumentError(internal::str_cat("environment variable ", name, "='", *v,
                                               "' is not a boolean: use true/false, 1/0, yes/no, on/off"));
}

namespace {
std::optional<int> parse_int(const std::optional<std::string>& v) {
  if (!v || v->empty()) return std::nullopt;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 30) return std::nullopt;
  return static_cast<int>(n);
}
std::optional<int> rank_from(const char* rank_var, const char* size_var) {
  auto size = parse_int(get(size_var));
  if (!size || *size <= 1) return std::nullopt;
  return parse_int(get(rank_var));
}
}  // namespace

std::optional<int> launcher_rank() {
  static const std::optional<int> rank = [] {
    auto r = rank_from("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    if (!r) r = rank_from("PMI_RANK", "PMI_SIZE");
    return r ? r : rank_from("RANK", "WORLD_SIZE");  // torchrun, chorus-run --nproc-per-node
  }();
  return rank;
}

namespace {
std::atomic<int> g_process_rank{-1};  // set_process_rank's; -1: none
}  // namespace

std::optional<int> process_rank() {
  if (const int r = g_process_rank.load(std::memory_order_relaxed); r >= 0) return r;
  return launcher_rank();
}

void set_process_rank(std::optional<int> rank) {
  g_process_rank.store(rank && *rank >= 0 ? *rank : -1, std::memory_order_relaxed);
}

std::chrono::milliseconds parse_timeout_seconds(std::string_view text, std::string_view source) {
  const std::string t(text);
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError(internal::str_cat(source, "='", t, "' is not a valid timeout: ", why,
                                                  "; give seconds as a number from ", kMinTimeoutSeconds, " to ",
                                                  kMaxTimeoutSeconds, " (e.g. 60 or 2.5)"));
  };
  // strtod alone would accept leading spaces, "inf", "nan" and hexadecimal: allow digits, one
  // point and an exponent only.
  const bool plain = !t.empty() && t.find_first_not_of("0123456789.eE+-") == std::string::npos &&
                     (std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.' || t[0] == '-');
  if (!plain) throw bad("not a number of seconds");
  char* end = nullptr;
  const double seconds = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(seconds)) throw bad("not a number of seconds");
  if (seconds <= 0) throw bad("it must be more than 0");
  if (seconds < kMinTimeoutSeconds)
    throw bad(internal::str_cat("it is below the floor of ", kMinTimeoutSeconds,
                                " s (10 ms): no collective between processes can be counted on to complete sooner"));
  if (seconds > kMaxTimeoutSeconds) throw bad("it is too long");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

std::optional<std::chrono::milliseconds> collective_timeout() {
  const auto v = get(kCollectiveTimeoutVariable);
  if (!v) return std::nullopt;
  return parse_timeout_seconds(*v, kCollectiveTimeoutVariable);
}

bool peer_monitor_enabled() { return get_bool("CHORUS_PEER_MONITOR").value_or(true); }

bool busy_poll_enabled() { return get_bool("CHORUS_BUSY_POLL").value_or(true); }
bool fused_optimizer_enabled() { return get_bool("CHORUS_FUSED_OPTIMIZER").value_or(true); }

std::string flight_record_dir() { return get("CHORUS_FLIGHT_RECORD_DIR").value_or(""); }

}  // namespace chorus::env
