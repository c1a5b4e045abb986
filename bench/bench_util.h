// What every benchmark under bench/ needs besides its own cases: the median of repeated timings;
// the JSON line that a benchmark prints last (docs/style.md, habit 11) — its "machine" field, its
// cases, the line itself (nlohmann-json); and a main() that turns an escaping exception into a
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
#include <chorus/core/json_internal.h>
#include <chorus/core/strings.h>

namespace chorus::bench {

// The median of `v` (the mean of the two middle values for an even count). `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

using Json = chorus::internal::Json;  // nlohmann-json, keys in insertion order

// `v` rounded to `digits` significant digits: what the JSON line shows of a measurement.
inline double significant(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return std::strtod(buf, nullptr);
}

// One case of the JSON line, its keys in habit 11's order:
//   {"case": "<name>", "value": <value>, "unit": "<unit>", "yardstick": "<yardstick>",
//    "yardstick_value": <yardstick_value>, "ratio": <ratio>}
// value and yardstick_value keep `value_digits` significant digits, the ratio `ratio_digits`; an
// absent yardstick value or ratio is null.
inline Json json_case(const std::string& name, double value, const std::string& unit, const std::string& yardstick,
                      std::optional<double> yardstick_value, std::optional<double> ratio, int value_digits = 4,
                      int ratio_digits = 4) {
  Json c;
  c["case"] = name;
  c["value"] = significant(value, value_digits);
  c["unit"] = unit;
  c["yardstick"] = yardstick;
  c["yardstick_value"] = yardstick_value ? Json(significant(*yardstick_value, value_digits)) : Json(nullptr);
  c["ratio"] = ratio ? Json(significant(*ratio, ratio_digits)) : Json(nullptr);
  return c;
}

// One JSON line, written by nlohmann-json (bytes that are not UTF-8 become U+FFFD).
inline std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Prints the JSON line of habit 11, which must be the benchmark's last line:
//   {"bench": "<bench>", "machine": "<machine>", "cases": [<case>, <case>, ...], <extra's fields>}
// `cases` come from json_case; `extra` is an object whose fields follow the case list
// ({"skipped": {...}}, or nothing).
inline void print_json_line(const std::string& bench, const std::string& machine, const std::vector<Json>& cases,
                            const Json& extra = Json::object()) {
  Json line;
  line["bench"] = bench;
  line["machine"] = machine;
  line["cases"] = cases;
  for (const auto& [key, value] : extra.items()) line[key] = value;
  std::printf("%s\n", json_text(line).c_str());
}

// The first line of `output` that is a result line of bench `bench` ({"bench": "<bench>", ...,
// "cases": [...]}), parsed; null when there is none (or it is not valid JSON).
inline Json result_line(const std::string& output, const std::string& bench) {
  for (std::size_t start = 0, end; start < output.size(); start = end + 1) {
    end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    Json line = Json::parse(output.substr(start, end - start), nullptr, /*allow_exceptions=*/false);
    if (line.is_object() && line.value("bench", "") == bench && line.contains("cases")) return line;
  }
  return nullptr;
}

// bench_mpi_allreduce's result line ({"bench": "mpi_allreduce", ..., "cases": [{"bytes": N,
// "median_us": T, ...}, ...]}), found anywhere in `output`: bytes -> median microseconds per call.
// Empty when there is no such line (or it is not valid JSON).
inline std::map<std::size_t, double> mpi_allreduce_medians_us(const std::string& output) {
  std::map<std::size_t, double> us;
  const Json line = result_line(output, "mpi_allreduce");
  if (line.is_null()) return us;
  for (const Json& c : line.at("cases"))
    if (c.contains("bytes") && c.contains("median_us"))
      us[c.at("bytes").get<std::size_t>()] = c.at("median_us").get<double>();
  return us;
}

// bench_gloo's result line ({"bench": "gloo", "cases": [{"bytes": N, "value": Gloo us,
// "yardstick_value": MPI backend us, ...}, ...]}): bytes -> {Gloo us, MPI us}. Empty without one.
inline std::map<std::size_t, std::pair<double, double>> gloo_medians_us(const std::string& output) {
  std::map<std::size_t, std::pair<double, double>> us;
  const Json line = result_line(output, "gloo");
  if (line.is_null()) return us;
  for (const Json& c : line.at("cases"))
    if (c.contains("bytes") && c.value("value", Json()).is_number() && c.value("yardstick_value", Json()).is_number())
      us[c.at("bytes").get<std::size_t>()] = {c.at("value").get<double>(), c.at("yardstick_value").get<double>()};
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

// The first Python that imports torch, for the PyTorch yardsticks: $CHORUS_TORCH_PYTHON, the
// torch venv (~/.cache/chorus/torch-venv), `python3` on PATH, then Debian's /usr/bin/python3 (where
// python3-torch installs); "" when none does, with what each said in `*why`.
inline std::string python_with_torch(std::string* why) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("CHORUS_TORCH_PYTHON"); env && *env) candidates.push_back(env);
  if (const char* home = std::getenv("HOME"); home && *home)
    candidates.push_back(std::string(home) + "/.cache/chorus/torch-venv/bin/python");
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  std::string tried;
  for (const std::string& py : candidates) {
    int status = 0;
    const std::string out = capture("'" + py + "' -c 'import torch' 2>&1", &status);
    if (status == 0) return py;
    std::string last = out;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
    tried += (tried.empty() ? "" : "; ") + py + ": " + (last.empty() ? "not found" : last.substr(0, 120));
  }
  *why = "no Python imports torch (" + tried +
         "); docs/benchmarks.md, \"GPT\", says how to make ~/.cache/chorus/torch-venv";
  return "";
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
