// Input pipeline throughput (issue 44, item 9): decode + resize + batch of a folder of images,
// images/s, chorus's image_dataset_from_directory against TensorFlow's in the same run.
//
//   bench_data [--images=2000] [--size=256] [--out=224] [--batch=32] [--threads=N] [--rounds=5]
//              [--intra-op-threads=N] [--dir=/tmp] [--quick] [--no-tf]
//
// The folder: --images RGB images of --size² pixels in 10 class folders, smooth gradients with
// noise (so PNG and JPEG compress as photos do, not as noise or flat colour), written as PNG by
// chorus's encode_png and converted to JPEG (quality 90) by TensorFlow (no JPEG case without it).
// Each case decodes every image (3 channels), resizes it to --out² (bilinear, float32) and batches
// by --batch, shuffle off:
//   chorus      data::image_dataset_from_directory(..., num_parallel_calls = --threads), iterated to
//               the end in this process;
//   tensorflow  yardstick: tf.keras.utils.image_dataset_from_directory with the same arguments on a
//               private tf.data thread pool of --threads threads (intra/inter-op parallelism the
//               same), in a Python process per round (bench/data/tf_image_folder.py).
// Each side first runs a warm-up pass over 4 batches (TF traces its functions, the page cache and
// the allocators fill), then times one full pass; the dataset is built before the clock starts
// (both list the folder then). Rounds alternate chorus and TF; reported: median (min–max) images/s,
// and the ratio chorus / TF (> 1: chorus faster). Goal (issue 44): ratio >= 1.0. Beside it, each
// side's CPU time per image (every thread of the process over the timed pass: chorus from
// CLOCK_PROCESS_CPUTIME_ID, TF from time.process_time()) and the ratio TF / chorus (> 1: chorus
// spends less), which a loaded machine disturbs much less than images/s.
// Before the rounds, one thread times chorus's stages per image (read, decode, resize into its place
// in the batch: the pipeline fuses map and batch) on the first 200 files of each folder: where the
// time goes. --intra-op-threads sets chorus's
// config::set_intra_op_parallelism_threads (the OpenMP threads of batch's stack; the map's resize
// runs on one thread per call, as tf.data's max_intra_op_parallelism = 1).
// The exit status is 0 unless something broke (a pass that yields the wrong number of images, a
// failing TF child), so a noisy machine never fails CI.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/data/io/image_decode.h>
#include <chorus/data/io/image_folder.h>
#include <chorus/data/io/png.h>
#include <chorus/launch/cli.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/image.h>
#include <chorus/ops/image_geometry.h>

namespace chorus {
namespace {

namespace fs = std::filesystem;
using internal::str_cat;

struct Options {
  std::int64_t images = 2000, size = 256, out = 224, batch = 32, rounds = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int intra_op_threads = 0;  // config::set_intra_op_parallelism_threads; 0: chorus's default (the cores)
  std::string dir = fs::temp_directory_path().string();
  bool tf = true;
};

// A flag parse() understands (main answers any other with usage_error's exit status 2).
bool known_flag(const std::string& a) {
  if (a == "--quick" || a == "--no-tf") return true;
  for (const char* key :
       {"--images=", "--size=", "--out=", "--batch=", "--threads=", "--intra-op-threads=", "--rounds=", "--dir="})
    if (a.rfind(key, 0) == 0) return true;
  return false;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> std::optional<std::string> {
      const std::string k = std::string("--") + key + "=";
      if (a.rfind(k, 0) == 0) return a.substr(k.size());
      return std::nullopt;
    };
    if (a == "--quick") {
      o.images = 96;
      o.rounds = 2;
    } else if (a == "--no-tf") {
      o.tf = false;
    } else if (auto v = value("images")) {
      o.images = std::stoll(*v);
    } else if (auto v = value("size")) {
      o.size = std::stoll(*v);
    } else if (auto v = value("out")) {
      o.out = std::stoll(*v);
    } else if (auto v = value("batch")) {
      o.batch = std::stoll(*v);
    } else if (auto v = value("threads")) {
      o.threads = std::stoi(*v);
    } else if (auto v = value("intra-op-threads")) {
      o.intra_op_threads = std::stoi(*v);
    } else if (auto v = value("rounds")) {
      o.rounds = std::stoll(*v);
    } else if (auto v = value("dir")) {
      o.dir = *v;
    } else {
      throw InvalidArgumentError("bench_data: unknown argument " + a + " (see --help)");
    }
  }
  CHORUS_REQUIRE(o.images >= 10 && o.size > 0 && o.out > 0 && o.batch > 0 && o.rounds > 0 && o.threads > 0,
                 InvalidArgumentError, "bench_data: --images >= 10 and positive sizes, batch, rounds, threads");
  return o;
}

// Image i: two crossing gradients of random slope and phase per channel, plus noise of amplitude 8.
void write_png_folder(const std::string& root, const Options& o) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> slope(0.005f, 0.05f), phase(0.0f, 6.28f);
  std::uniform_int_distribution<int> noise(-8, 8);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(o.size * o.size * 3));
  for (std::int64_t i = 0; i < o.images; ++i) {
    const std::string cls = str_cat(root, "/class", i % 10);
    fs::create_directories(cls);
    float a[3], b[3], p[3];
    for (int c = 0; c < 3; ++c) a[c] = slope(rng), b[c] = slope(rng), p[c] = phase(rng);
    for (std::int64_t y = 0; y < o.size; ++y)
      for (std::int64_t x = 0; x < o.size; ++x)
        for (int c = 0; c < 3; ++c) {
          const float v = 127.5f + 100.0f * std::sin(a[c] * x + b[c] * y + p[c]) + static_cast<float>(noise(rng));
          px[static_cast<std::size_t>((y * o.size + x) * 3 + c)] =
              static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
        }
    const std::string bytes = data::encode_png(px.data(), o.size, o.size, 3);
    std::FILE* f = std::fopen(str_cat(cls, "/img", i, ".png").c_str(), "wb");
    CHORUS_REQUIRE(f != nullptr, UnknownError, "bench_data: cannot write into ", cls);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

// What one timed pass measured: images/s, and the process's CPU time (every thread) per image.
struct Pass {
  double images_per_s = 0, cpu_ms_per_image = 0;
};

double process_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// One pass of chorus's pipeline over `dir` (the dataset is built before the clock).
Pass chorus_pass(const std::string& dir, const Options& o, bool warm_up) {
  auto ds = data::image_dataset_from_directory(dir, {.batch_size = o.batch,
                                                     .image_size = {o.out, o.out},
                                                     .shuffle = false,
                                                     .num_parallel_calls = o.threads,
                                                     .verbose = false});
  auto it = ds.dataset.make_iterator();
  std::int64_t images = 0, batches = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_ms();
  while (auto e = it.next()) {
    images += (*e)[0].shape().dims()[0];
    if (warm_up && ++batches == 4) return {};
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = process_cpu_ms() - cpu_start;
  CHORUS_REQUIRE(images == o.images, InternalError, "bench_data: chorus's pass yielded ", images, " images of ",
                 o.images);
  return {static_cast<double>(images) / s, cpu / static_cast<double>(images)};
}

// Where one thread's time goes, per image, over the first 200 files of `dir` (sorted): reading
// the file, decoding it, and resizing it into its place in a batch tensor (the bilinear kernel on
// one thread, as the pipeline's fused map and batch does). Milliseconds.
struct Stages {
  double read = 0, decode = 0, resize = 0;
};
Stages profile_stages(const std::string& dir, const Options& o) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.resize(std::min<std::size_t>(files.size(), 200));
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  Stages t;
  const Tensor batch = Tensor::empty(Shape{o.batch, o.out, o.out, 3}, DType::kFloat32, "/CPU:0");
  std::int64_t slot = 0;
  for (const std::string& f : files) {
    auto t0 = clock::now();
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto t1 = clock::now();
    const data::Image img = data::decode_image_values(bytes, {.channels = 3}, f);
    auto t2 = clock::now();
    const ops::ResizeGeometry g{1,
                                img.height,
                                img.width,
                                o.out,
                                o.out,
                                3,
                                ops::resize_scale(img.height, o.out),
                                ops::resize_scale(img.width, o.out)};
    ops::cpu::use_threads(1);
    float* dst = static_cast<float*>(batch.data()) + (slot++ % o.batch) * o.out * o.out * 3;
    ops::cpu::resize_bilinear(DType::kUInt8, img.u8.data(), dst, g);
    auto t3 = clock::now();
    t.read += ms(t1 - t0), t.decode += ms(t2 - t1), t.resize += ms(t3 - t2);
  }
  const double n = static_cast<double>(files.size());
  return {t.read / n, t.decode / n, t.resize / n};
}

std::string script() { return std::string(CHORUS_DATA_BENCH_DIR) + "/tf_image_folder.py"; }

// One TF pass in a fresh Python process; nullopt (and `why`) when it fails.
std::optional<Pass> tf_pass(const std::string& py, const std::string& dir, const Options& o, std::string& why) {
  int status = 0;
  const std::string out = bench::capture(
      str_cat("'", py, "' '", script(), "' time '", dir, "' ", o.threads, " ", o.batch, " ", o.out, " 2>&1"), &status);
  const auto v = bench::result_field(out, "images_per_s");
  const auto n = bench::result_field(out, "images");
  const auto cpu = bench::result_field(out, "cpu_ms_per_image");
  if (status != 0 || !v || !n || !cpu || static_cast<std::int64_t>(*n) != o.images) {
    why = str_cat("TensorFlow run failed (exit ", status, "): ", out.substr(out.size() > 600 ? out.size() - 600 : 0));
    return std::nullopt;
  }
  return Pass{*v, *cpu};
}

struct Row {
  std::string name;
  std::vector<double> chorus, tf;          // images/s
  std::vector<double> chorus_cpu, tf_cpu;  // CPU ms per image
};

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.intra_op_threads > 0) config::set_intra_op_parallelism_threads(o.intra_op_threads);
  const std::string root = str_cat(o.dir, "/chorus_bench_data_", ::getpid());
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{root};
  write_png_folder(root + "/png", o);
  std::string py = o.tf ? bench::tf_python() : "";
  std::string skipped = o.tf ? (py.empty() ? "no Python for TensorFlow (set CHORUS_TF_PYTHON, or make the test venv: "
                                             "scripts/test-python-env.sh)"
                                           : "")
                             : "--no-tf";
  std::vector<std::pair<std::string, std::string>> folders = {{"png", root + "/png"}};
  if (!py.empty()) {
    int status = 0;
    const std::string out =
        bench::capture(str_cat("'", py, "' '", script(), "' jpeg '", root, "/png' '", root, "/jpeg' 90 2>&1"), &status);
    if (status == 0) {
      folders.insert(folders.begin(), {"jpeg", root + "/jpeg"});
    } else {
      skipped = "TensorFlow could not write the JPEGs: " + out.substr(0, 400);
      py.clear();
    }
  }
  std::vector<Row> rows;
  std::vector<std::pair<std::string, Stages>> stages;
  for (const auto& [name, dir] : folders) {
    stages.emplace_back(name, profile_stages(dir, o));
    Row row{name, {}, {}, {}, {}};
    chorus_pass(dir, o, /*warm_up=*/true);
    for (std::int64_t r = 0; r < o.rounds; ++r) {
      const Pass c = chorus_pass(dir, o, false);
      row.chorus.push_back(c.images_per_s);
      row.chorus_cpu.push_back(c.cpu_ms_per_image);
      if (!py.empty()) {
        std::string why;
        if (auto v = tf_pass(py, dir, o, why)) {
          row.tf.push_back(v->images_per_s);
          row.tf_cpu.push_back(v->cpu_ms_per_image);
        } else {
          std::fprintf(stderr, "bench_data: %s\n", why.c_str());
          return 1;
        }
      }
    }
    rows.push_back(row);
  }

  const std::string machine = bench::machine(true) + ", oneDNN " + ops::cpu::onednn_isa();
  std::printf(
      "decode + resize %lldx%lld -> %lldx%lld (bilinear, float32) + batch %lld of %lld images, %d threads; "
      "%lld rounds alternating chorus and TensorFlow (images/s: median [min-max])\nmachine: %s\n",
      static_cast<long long>(o.size), static_cast<long long>(o.size), static_cast<long long>(o.out),
      static_cast<long long>(o.out), static_cast<long long>(o.batch), static_cast<long long>(o.images), o.threads,
      static_cast<long long>(o.rounds), machine.c_str());
  std::printf("%-6s %10s %17s %12s %17s %7s\n", "format", "chorus", "[min-max]", "tensorflow", "[min-max]", "ratio");
  std::vector<bench::Json> cases;
  for (const Row& row : rows) {
    const double c = bench::median(row.chorus);
    const auto [cmin, cmax] = std::minmax_element(row.chorus.begin(), row.chorus.end());
    char trange[48] = "-", tcol[32] = "skipped", rcol[16] = "-";
    std::optional<double> t, ratio;
    if (!row.tf.empty()) {
      t = bench::median(row.tf);
      ratio = c / *t;
      const auto [tmin, tmax] = std::minmax_element(row.tf.begin(), row.tf.end());
      std::snprintf(trange, sizeof trange, "[%.0f-%.0f]", *tmin, *tmax);
      std::snprintf(tcol, sizeof tcol, "%.1f", *t);
      std::snprintf(rcol, sizeof rcol, "%.2f", *ratio);
    }
    char crange[48];
    std::snprintf(crange, sizeof crange, "[%.0f-%.0f]", *cmin, *cmax);
    std::printf("%-6s %10.1f %17s %12s %17s %7s\n", row.name.c_str(), c, crange, tcol, trange, rcol);
    cases.push_back(bench::json_case(str_cat(row.name, " images/s, ", o.threads, " threads"), c, "images/s",
                                     str_cat("tf.keras.utils.image_dataset_from_directory, ", o.threads, " threads"), t,
                                     ratio));
  }
  // CPU time per image: what each side spends, whatever else the machine runs (the images/s above
  // depend on how many cores the pass got; this does much less).
  std::printf("CPU ms per image, every thread of the process over the timed pass (median)\n");
  std::printf("%-6s %10s %12s %22s\n", "format", "chorus", "tensorflow", "ratio (tf / chorus)");
  for (const Row& row : rows) {
    const double c = bench::median(row.chorus_cpu);
    std::optional<double> t, ratio;
    char tcol[32] = "skipped", rcol[16] = "-";
    if (!row.tf_cpu.empty()) {
      t = bench::median(row.tf_cpu);
      ratio = *t / c;
      std::snprintf(tcol, sizeof tcol, "%.3f", *t);
      std::snprintf(rcol, sizeof rcol, "%.2f", *ratio);
    }
    std::printf("%-6s %10.3f %12s %22s\n", row.name.c_str(), c, tcol, rcol);
    cases.push_back(bench::json_case(str_cat(row.name, " CPU ms per image, ", o.threads, " threads"), c, "ms",
                                     "tf.keras.utils.image_dataset_from_directory (ratio: tf / chorus)", t, ratio));
  }
  std::printf("chorus, one thread, ms per image (first 200 files): read, decode, resize into the batch\n");
  for (const auto& [name, t] : stages)
    std::printf("  %-5s %7.3f %7.3f %7.3f  (= %.0f images/s per thread)\n", name.c_str(), t.read, t.decode, t.resize,
                1000.0 / (t.read + t.decode + t.resize));
  bench::Json extra = bench::Json::object();
  if (!skipped.empty()) {
    std::printf("tensorflow: skipped (%s)\n", skipped.c_str());
    extra["skipped"] = {{"tensorflow", skipped}};
  }
  bench::print_json_line("data", machine, cases, extra);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  static constexpr const char* kUsage =
      "usage: bench_data [--images=2000] [--size=256] [--out=224] [--batch=32] [--threads=N] [--rounds=5] "
      "[--intra-op-threads=N] [--dir=/tmp] [--quick] [--no-tf]\n";
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_data", kUsage)) return *rc;
  for (int i = 1; i < argc; ++i)
    if (!chorus::known_flag(argv[i])) return chorus::launch::usage_error("bench_data", argv[i], kUsage);
  return chorus::bench::run_main("bench_data", [&] { return chorus::run(argc, argv); });
}
