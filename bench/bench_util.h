// What every benchmark under bench/ needs besides its own cases: the median of repeated timings;
// the JSON line that a benchmark prints last (docs/style.md, habit 11) — its "machine" field, its
// cases, the line itself, string escaping; and a main() that turns an escaping exception into a
// message and exit status 1.
//
// Header-only, for the bench programs (not installed, not part of the library). All functions are
// pure or read only the OS; thread-safe.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <chorus/core/host.h>
#include <chorus/core/strings.h>

namespace chorus::bench {

// The median of `v` (the mean of the two middle values for an even count). `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `s` made safe inside a JSON string: '"' and '\' escaped, control characters dropped.
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

// The JSON line's "machine": "<host>, <online cpus> cpus", and with `cpu_model` also
// ", <the first model name of /proc/cpuinfo>" where it has one. Not escaped.
inline std::string machine(bool cpu_model = false) {
  std::string s = host_name_or("unknown") + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cpus";
  if (!cpu_model) return s;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const std::size_t colon = line.find(':');
    if (line.rfind("model name", 0) == 0 && colon != std::string::npos && colon + 2 <= line.size())
      return s + ", " + line.substr(colon + 2);
  }
  return s;
}

// One case of the JSON line, its keys in habit 11's order:
//   {"case": "<name>", "value": <value>, "unit": "<unit>", "yardstick": "<yardstick>",
//    "yardstick_value": <yardstick_value>, "ratio": <ratio>}
// The numbers are printed with `value_format` (value and yardstick_value) and `ratio_format`,
// printf conversions of one double; the strings are escaped.
inline std::string json_case(const std::string& name, double value, const std::string& unit,
                             const std::string& yardstick, double yardstick_value, double ratio,
                             const char* value_format = "%.4g", const char* ratio_format = "%.3f") {
  auto number = [](const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  return "{\"case\": \"" + json_escape(name) + "\", \"value\": " + number(value_format, value) + ", \"unit\": \"" +
         json_escape(unit) + "\", \"yardstick\": \"" + json_escape(yardstick) +
         "\", \"yardstick_value\": " + number(value_format, yardstick_value) +
         ", \"ratio\": " + number(ratio_format, ratio) + "}";
}

// Prints the JSON line of habit 11, which must be the benchmark's last line:
//   {"bench": "<bench>", "machine": "<machine>", "cases": [<case>, <case>, ...]<extra>}
// `cases` come from json_case; `machine` is escaped here; `extra` follows the case list as it is
// (", \"skipped\": {...}", or nothing).
inline void print_json_line(const std::string& bench, const std::string& machine, const std::vector<std::string>& cases,
                            const std::string& extra = "") {
  const std::string line = "{\"bench\": \"" + json_escape(bench) + "\", \"machine\": \"" + json_escape(machine) +
                           "\", \"cases\": [" + internal::join(cases) + "]" + extra + "}";
  std::printf("%s\n", line.c_str());
}

// bench_mpi_allreduce's result line ({"bench": "mpi_allreduce", ..., "cases": [{"bytes": N,
// "median_us": T, ...}, ...]}), found anywhere in `output`: bytes -> median microseconds per call.
// Empty when there is no such line.
inline std::map<std::size_t, double> mpi_allreduce_medians_us(const std::string& output) {
  std::map<std::size_t, double> us;
  const std::size_t start = output.find("{\"bench\": \"mpi_allreduce\"");
  if (start == std::string::npos) return us;
  const std::string json = output.substr(start, output.find('\n', start) - start);
  for (std::size_t pos = json.find("\"bytes\": "); pos != std::string::npos; pos = json.find("\"bytes\": ", pos)) {
    const std::size_t bytes = std::strtoull(json.c_str() + pos + 9, nullptr, 10);
    const std::size_t at = json.find("\"median_us\": ", pos);
    if (at == std::string::npos) break;
    us[bytes] = std::strtod(json.c_str() + at + 13, nullptr);
    pos = at;
  }
  return us;
}

// Benchmarks that measure in child processes (a device configuration is frozen per process):
// capture() runs `command` through the shell and returns its stdout, setting `*status` to its exit
// code (-1 when it could not start or did not exit); result_field() reads `key=<number>` from the
// last "RESULT ..." line of a child's output; self_path() is this executable (/proc/self/exe), or
// `fallback`.
inline std::string capture(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

inline std::optional<double> result_field(const std::string& out, const std::string& key) {
  const std::size_t line = out.rfind("RESULT ");
  if (line == std::string::npos) return std::nullopt;
  const std::size_t k = out.find(" " + key + "=", line);
  if (k == std::string::npos) return std::nullopt;
  return std::strtod(out.c_str() + k + key.size() + 2, nullptr);
}

inline std::string self_path(const std::string& fallback) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : fallback;
}

// The Python that runs a TensorFlow yardstick: $CHORUS_TF_PYTHON, else the test venv's
// (scripts/test-python-env.sh: $CHORUS_TEST_VENV or ~/.cache/chorus/test-venv); "" when none.
inline std::string tf_python() {
  if (const char* env = std::getenv("CHORUS_TF_PYTHON"); env && *env) return env;
  std::string venv;
  if (const char* v = std::getenv("CHORUS_TEST_VENV"); v && *v) {
    venv = v;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    venv = std::string(home) + "/.cache/chorus/test-venv";
  }
  const std::string py = venv + "/bin/python";
  return !venv.empty() && ::access(py.c_str(), X_OK) == 0 ? py : "";
}

// Runs `body` (returning main's exit status) and returns its status; an exception that escapes it
// is printed to stderr as "<what_failed>: <what()>", after stdout is flushed, and gives 1.
template <typename Body>
int run_main(const char* what_failed, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", what_failed, e.what());
    return 1;
  }
}

}  // namespace chorus::bench
