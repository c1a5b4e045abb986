// bench_image_ops: ops::image::resize on the CPU against tf.image.resize (TF 2.21's own CPU
// kernels, TF_ENABLE_ONEDNN_OPTS=0, eager) on the same shapes, dtypes and thread count, in the
// same run: a decode-and-resize pipeline's uint8 → 224x224, float32 down- and upsampling,
// nearest, and the bilinear gradient. Prints a table and the JSON line (ratio > 1: chorus is
// faster). TF is skipped, with the reason, when its Python is missing. --quick: one repeat, small.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"

#include <chorus/launch/cli.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/image.h>
#include <chorus/ops/ops.h>

namespace cx = chorus;
namespace img = chorus::ops::image;
using cx::bench::capture;
using cx::bench::result_field;

namespace {

struct Case {
  const char* name;
  cx::Shape shape;
  std::array<std::int64_t, 2> size;
  cx::DType dtype;
  img::ResizeMethod method;
  bool grad;
};

std::string csv(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

double chorus_ms(const Case& c, int repeats) {
  const cx::Tensor x = cx::ops::cast(cx::Tensor::ones(c.shape, cx::DType::kFloat32, "/CPU:0"), c.dtype);
  // CPU kernels run on the calling thread before the op returns (ops/internal.h): no copy-out needed.
  auto step = [&] {
    if (!c.grad) return img::resize(x, c.size, {.method = c.method}).num_elements();
    cx::ops::GradientTape tape;
    tape.watch(x);
    const cx::Tensor y = img::resize(x, c.size, {.method = c.method});
    return tape.gradient(cx::ops::reduce_sum(y), {x})[0].num_elements();
  };
  step();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return cx::bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  static constexpr const char* kUsage = "usage: bench_image_ops [--quick]\n";
  if (auto rc = cx::launch::answer_help_or_version(argc, argv, "bench_image_ops", kUsage)) return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--quick") return cx::launch::usage_error("bench_image_ops", argv[i], kUsage);
  return cx::bench::run_main("bench_image_ops", [&] {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    const int repeats = quick ? 1 : 10;
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::int64_t b = quick ? 2 : 32;
    const std::vector<Case> cases = {
        {"uint8 256x256x3 -> 224 bilinear",
         {b, 256, 256, 3},
         {224, 224},
         cx::DType::kUInt8,
         img::ResizeMethod::kBilinear,
         false},
        {"float32 256x256x3 -> 224 bilinear",
         {b, 256, 256, 3},
         {224, 224},
         cx::DType::kFloat32,
         img::ResizeMethod::kBilinear,
         false},
        {"float32 64x64x3 -> 224 bilinear",
         {b, 64, 64, 3},
         {224, 224},
         cx::DType::kFloat32,
         img::ResizeMethod::kBilinear,
         false},
        {"uint8 256x256x3 -> 224 nearest",
         {b, 256, 256, 3},
         {224, 224},
         cx::DType::kUInt8,
         img::ResizeMethod::kNearestNeighbor,
         false},
        {"float32 64x64x16 -> 128 bilinear grad",
         {b, 64, 64, 16},
         {128, 128},
         cx::DType::kFloat32,
         img::ResizeMethod::kBilinear,
         true},
    };
    std::string tf_py = cx::bench::tf_python(), skipped;
    if (tf_py.empty()) skipped = "no Python for TensorFlow (set CHORUS_TF_PYTHON or make the test venv)";
    std::printf("bench_image_ops: %d threads, oneDNN ISA %s\n", threads, cx::ops::cpu::onednn_isa().c_str());
    std::printf("%-40s %12s %12s %8s\n", "case", "chorus ms", "TF ms", "ratio");
    std::vector<cx::bench::Json> json;
    for (const Case& c : cases) {
      const double ms = chorus_ms(c, repeats);
      std::optional<double> tf_ms;
      if (skipped.empty()) {
        int status = 0;
        const std::string out = capture("'" + tf_py + "' '" + CHORUS_IMAGE_BENCH_DIR + "/tf_image_resize.py' --shape " +
                                            csv(c.shape.dims()) + " --size " + csv({c.size[0], c.size[1]}) +
                                            " --dtype " + std::string(cx::dtype_name(c.dtype)) + " --method " +
                                            (c.method == img::ResizeMethod::kBilinear ? "bilinear" : "nearest") +
                                            " --grad " + (c.grad ? "1" : "0") + " --threads " +
                                            std::to_string(threads) + " --repeats " + std::to_string(repeats) + " 2>&1",
                                        &status);
        tf_ms = result_field(out, "ms");
        if (status != 0 || !tf_ms)
          skipped = "TensorFlow run failed (exit " + std::to_string(status) + "): " + out.substr(0, 300);
      }
      const std::optional<double> ratio = tf_ms ? std::optional<double>(*tf_ms / ms) : std::nullopt;
      std::printf("%-40s %12.3f %12s %8s\n", c.name, ms, tf_ms ? std::to_string(*tf_ms).c_str() : "-",
                  ratio ? std::to_string(*ratio).c_str() : "-");
      json.push_back(cx::bench::json_case(c.name, ms, "ms", "tf.image.resize", tf_ms, ratio));
    }
    if (!skipped.empty()) std::printf("TensorFlow skipped: %s\n", skipped.c_str());
    const std::string machine = cx::bench::machine(true) + ", oneDNN " + cx::ops::cpu::onednn_isa();
    cx::bench::print_json_line("image_ops", machine, json,
                               skipped.empty() ? cx::bench::Json::object() : cx::bench::Json{{"skipped", skipped}});
    return 0;
  });
}
