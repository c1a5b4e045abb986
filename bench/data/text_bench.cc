// bench_data_text: lines/s of text_line_dataset and records/s of csv_dataset, plain and GZIP,
// against tf.data.TextLineDataset / experimental.CsvDataset on the same files in the same run
// (TensorFlow's elements are counted through ds.batch(1024), so that Python touches one batch per
// 1,024 elements and the per-element work — reading, splitting, parsing, one tensor per
// component — stays in TF's C++ runtime; chorus's are counted one next() at a time).
//
//   bench_data_text [--quick]     the yardstick needs $CHORUS_TF_PYTHON or the test venv's python
//
// Prints a table, then the JSON line of habit 11 (ratio = chorus / TF, > 1: chorus is faster).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/data/io/csv.h>
#include <chorus/data/io/text_line.h>
#include <chorus/launch/cli.h>

namespace {

namespace data = chorus::data;
using chorus::bench::Json;

std::string tf_python() {
  if (const char* p = std::getenv("CHORUS_TF_PYTHON"); p && *p) return p;
#ifdef CHORUS_TEST_PYTHON
  return CHORUS_TEST_PYTHON;
#else
  return "";
#endif
}

void write_gzip(const std::string& path, const std::string& bytes, const std::string& python) {
  std::ofstream(path + ".src", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  int st = 0;
  chorus::bench::capture(
      "'" + python +
          "' -c 'import gzip,sys; open(sys.argv[2],\"wb\").write(gzip.compress(open(sys.argv[1],\"rb\").read(), 6))' '" +
          path + ".src' '" + path + "'",
      &st);
  if (st != 0) throw std::runtime_error("could not gzip " + path);
}

template <typename F>
double best_seconds(int reps, F f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return chorus::bench::median(t);
}

std::int64_t count(const data::Dataset& ds) {
  std::int64_t n = 0;
  for (auto it = ds.make_iterator(); it.next();) ++n;
  return n;
}

int run(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int lines = quick ? 20000 : 200000, reps = quick ? 1 : 3;
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/chorus_bench_text_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string text, csv;
  for (int i = 0; i < lines; ++i) {
    text += "line " + std::to_string(i) + " of a text corpus, some words to make it about sixty bytes\n";
    csv += std::to_string(i) + "," + std::to_string(i * 0.25) + ",\"name " + std::to_string(i % 977) + "\"," +
           std::to_string(i * 1000003LL) + ",-1.5e-3\n";
  }
  std::ofstream(dir + "/t.txt", std::ios::binary) << text;
  std::ofstream(dir + "/c.csv", std::ios::binary) << csv;
  const std::string python = tf_python();
  const bool have_tf = !python.empty() && !quick;
  if (have_tf) {
    write_gzip(dir + "/t.txt.gz", text, python);
    write_gzip(dir + "/c.csv.gz", csv, python);
  }
  using data::CsvColumn;
  const std::vector<CsvColumn> cols = {CsvColumn::required(chorus::DType::kInt32), CsvColumn::optional(0.0f),
                                       CsvColumn::optional(std::string()), CsvColumn::required(chorus::DType::kInt64),
                                       CsvColumn::required(chorus::DType::kFloat64)};
  struct Case {
    std::string name, file, comp;
    bool is_csv;
  };
  std::vector<Case> cases = {{"text_line", "t.txt", "", false}, {"csv", "c.csv", "", true}};
  if (have_tf) {
    cases.push_back({"text_line_gzip", "t.txt.gz", "GZIP", false});
    cases.push_back({"csv_gzip", "c.csv.gz", "GZIP", true});
  }
  std::string script =
      "import os, sys, time\nos.environ['TF_CPP_MIN_LOG_LEVEL']='3'\nimport tensorflow as tf\n"
      "d, reps = sys.argv[1], int(sys.argv[2])\n"
      "cols = [tf.int32, tf.constant([0.0]), tf.constant([''], tf.string), tf.int64, tf.float64]\n";
  std::printf("%-16s %14s %14s %8s\n", "case", "chorus /s", "tf.data /s", "ratio");
  std::vector<Json> jcases;
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.file;
    const auto ds = c.is_csv ? data::csv_dataset({path}, cols, {.compression_type = c.comp})
                             : data::text_line_dataset({path}, {.compression_type = c.comp});
    std::int64_t n = 0;
    const double s = best_seconds(reps, [&] { n = count(ds); });
    if (n != lines) throw std::runtime_error(c.name + ": read " + std::to_string(n) + " elements");
    std::optional<double> tf_rate;
    if (have_tf) {
      const std::string ds_expr = c.is_csv ? "tf.data.experimental.CsvDataset(p, cols, compression_type=comp)"
                                           : "tf.data.TextLineDataset(p, compression_type=comp)";
      std::ofstream(dir + "/tf.py")
          << script << "p, comp = os.path.join(d, '" << c.file << "'), '" << c.comp << "'\n"
          << "ds = " << ds_expr << "\n"
          << "ts = []\nfor _ in range(reps):\n  a = time.perf_counter()\n"
          << "  n = sum(int(b[0].shape[0] if isinstance(b, tuple) else b.shape[0]) for b in ds.batch(1024))\n"
          << "  ts.append(time.perf_counter() - a)\n"
          << "ts.sort()\nprint('RESULT n=%d seconds=%g' % (n, ts[len(ts) // 2]))\n";
      int st = 0;
      const std::string out = chorus::bench::capture(
          "'" + python + "' '" + dir + "/tf.py' '" + dir + "' " + std::to_string(reps) + " 2>/dev/null", &st);
      const auto secs = chorus::bench::result_field(out, "seconds");
      const auto tn = chorus::bench::result_field(out, "n");
      if (st == 0 && secs && tn && *tn == lines) tf_rate = lines / *secs;
    }
    const double rate = lines / s;
    std::printf("%-16s %14.0f %14s %8s\n", c.name.c_str(), rate,
                tf_rate ? std::to_string(static_cast<long long>(*tf_rate)).c_str() : "-",
                tf_rate ? std::to_string(rate / *tf_rate).substr(0, 5).c_str() : "-");
    jcases.push_back(chorus::bench::json_case(c.name, rate, c.is_csv ? "records/s" : "lines/s",
                                              c.is_csv ? "tf.data.experimental.CsvDataset" : "tf.data.TextLineDataset",
                                              tf_rate,
                                              tf_rate ? std::optional<double>(rate / *tf_rate) : std::nullopt));
  }
  std::filesystem::remove_all(dir);
  chorus::bench::print_json_line("data_text", chorus::bench::machine(true), jcases);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  static constexpr const char* kUsage = "usage: bench_data_text [--quick]\n";
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_data_text", kUsage)) return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--quick") return chorus::launch::usage_error("bench_data_text", argv[i], kUsage);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_text: %s\n", e.what());
    return 1;
  }
}
