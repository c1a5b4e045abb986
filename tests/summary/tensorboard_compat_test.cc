// TensorBoard's own loader reads what SummaryWriter writes: tests/summary/tensorboard_check.py
// loads the run with tensorboard.backend.event_processing's EventAccumulator and checks every
// scalar, histogram, image and text, at each of several steps, against the inputs chorus was
// given (histogram buckets against TensorBoard's own histogram_pb, images decoded by PIL). Runs in
// the interop Python (tests/core/interop_python.h): skipped without it outside CI, FAILED under
// CI=true.
//   EventAccumulatorReadsEveryValue: TensorBoard with TensorFlow installed (TF's record reader).
//   EventAccumulatorWithoutTensorFlowReadsEveryValue: TensorBoard's TensorFlow stub, as in an
//     install of tensorboard alone (its own record reader, which checks every CRC).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/summary/summary_test_util.h"
#include <chorus/core/tensor.h>
#include <chorus/summary/summary_writer.h>

namespace chorus::summary {
namespace {

using testing::TempDir;
using testing::write_file;

std::string check_script() { return std::string(CHORUS_SOURCE_ROOT) + "/tests/summary/tensorboard_check.py"; }

// Writes the run and, beside it, what tensorboard_check.py must find (expected.tsv + raw inputs).
class Expected {
 public:
  explicit Expected(std::string dir) : dir_(std::move(dir)), tsv_(dir_ + "/expected.tsv") {}
  void add(const std::string& kind, const std::string& tag, std::int64_t step, const std::string& arg,
           const std::string& dtype, const std::vector<std::int64_t>& dims, const void* data, std::size_t bytes) {
    const std::string name = std::to_string(n_++) + ".bin";
    write_file(dir_ + "/" + name, std::string(static_cast<const char*>(data), bytes));
    std::string d;
    for (std::int64_t x : dims) {
      if (!d.empty()) d += ',';
      d += std::to_string(x);
    }
    tsv_ << kind << '\t' << tag << '\t' << step << '\t' << arg << '\t' << dtype << '\t' << d << '\t' << name << '\n';
    tsv_.flush();
  }

 private:
  std::string dir_;
  std::ofstream tsv_;
  int n_ = 0;
};

// Three steps of each kind, with the cases TensorBoard treats specially: histograms of spread
// data, of one repeated value and of no data, and a float32 tensor with its own bucket count;
// uint8 RGB images (2 of 2 shown), float32 grayscale images in [0, 1] (values past both ends,
// converted as TF does), RGBA images (2 of 4 shown, max_outputs); Markdown/UTF-8 text.
void write_run(const std::string& logdir, const std::string& expected_dir) {
  std::filesystem::create_directories(expected_dir);
  Expected ex(expected_dir);
  SummaryWriter writer(logdir);
  const std::int64_t steps[] = {0, 7, 1000000000000};
  std::uint64_t seed = 12345;
  auto next = [&seed] {  // deterministic pseudo-random numbers in [0, 1)
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(seed >> 11) / 9007199254740992.0;
  };
  for (int i = 0; i < 3; ++i) {
    const std::int64_t step = steps[i];
    // scalars
    const double loss = 2.5 / (i + 1) - 0.1;
    writer.scalar("loss", loss, step);
    ex.add("scalar", "loss", step, "", "float64", {}, &loss, sizeof loss);
    const double lr = -1e-3 * (i + 1);
    writer.scalar("train/learning_rate", lr, step);
    ex.add("scalar", "train/learning_rate", step, "", "float64", {}, &lr, sizeof lr);
    // histograms
    std::vector<double> data;
    if (i == 0) {
      for (int k = 0; k < 1000; ++k)
        data.push_back(std::sqrt(-2 * std::log(1 - next())) * std::cos(6.283185307179586 * next()));
    } else if (i == 1) {
      data.assign(5, 3.25);
    }  // i == 2: no data
    writer.histogram("activations", data, step);
    ex.add("histogram", "activations", step, "30", "float64", {static_cast<std::int64_t>(data.size())}, data.data(),
           data.size() * sizeof(double));
    std::vector<float> wf;
    for (int k = 0; k < 64; ++k) wf.push_back(static_cast<float>(next() * (i + 1) - 0.5));
    writer.histogram("dense/kernel", Tensor::from_vector(wf, Shape{8, 8}), step, 17);
    std::vector<double> wd(wf.begin(), wf.end());
    ex.add("histogram", "dense/kernel", step, "17", "float64", {64}, wd.data(), wd.size() * sizeof(double));
    // images
    const std::int64_t h = 5 + i, w = 7;
    std::vector<std::uint8_t> rgb(static_cast<std::size_t>(2 * h * w * 3));
    for (std::size_t k = 0; k < rgb.size(); ++k) rgb[k] = static_cast<std::uint8_t>(next() * 256);
    writer.image("inputs", Tensor::from_vector(rgb, Shape{2, h, w, 3}), step);
    ex.add("image", "inputs", step, "3", "uint8", {2, h, w, 3}, rgb.data(), rgb.size());
    std::vector<float> gray(static_cast<std::size_t>(h * w));
    for (std::size_t k = 0; k < gray.size(); ++k) gray[k] = static_cast<float>(next() * 1.2 - 0.1);
    writer.image("masks", Tensor::from_vector(gray, Shape{1, h, w, 1}), step);
    ex.add("image", "masks", step, "3", "float32", {1, h, w, 1}, gray.data(), gray.size() * sizeof(float));
    std::vector<std::uint8_t> rgba(static_cast<std::size_t>(4 * 3 * 4 * 4));
    for (std::size_t k = 0; k < rgba.size(); ++k) rgba[k] = static_cast<std::uint8_t>(next() * 256);
    writer.image("samples/rgba", Tensor::from_vector(rgba, Shape{4, 3, 4, 4}), step, /*max_outputs=*/2);
    ex.add("image", "samples/rgba", step, "2", "uint8", {4, 3, 4, 4}, rgba.data(), rgba.size());
    // text
    const std::string text = "step " + std::to_string(step) + ": **bold**, `code`, \xc3\xbc\xe2\x82\xac\n| a | b |";
    writer.text("notes", text, step);
    ex.add("text", "notes", step, "", "uint8", {static_cast<std::int64_t>(text.size())}, text.data(), text.size());
  }
  writer.close();
}

int run_check(const std::string& python, const std::string& run, const std::string& expected, bool no_tf) {
  return chorus::testing::run_interop_command(
      "'" + python + "' '" + check_script() + "' '" + run + "' '" + expected + "'" + (no_tf ? " --no-tf" : ""),
      "tensorboard");
}

TEST(TensorBoardCompat, EventAccumulatorReadsEveryValue) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorboard, tensorflow, numpy, PIL");
  TempDir dir;
  write_run(dir.str("run"), dir.str("expected"));
  EXPECT_EQ(run_check(python, dir.str("run"), dir.str("expected"), /*no_tf=*/false), 0);
}

TEST(TensorBoardCompat, EventAccumulatorWithoutTensorFlowReadsEveryValue) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorboard, numpy, PIL");
  TempDir dir;
  write_run(dir.str("run"), dir.str("expected"));
  EXPECT_EQ(run_check(python, dir.str("run"), dir.str("expected"), /*no_tf=*/true), 0);
}

}  // namespace
}  // namespace chorus::summary
