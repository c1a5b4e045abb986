// chorus-train --image-dir: the seed CNN trained under MirroredStrategy (2 virtual CPU devices) on
// a folder of PNGs that chorus's encode_png writes — three classes told apart by their dominant
// colour — for a few epochs; the epoch losses fall and the held-out accuracy beats chance. And the
// flag's errors: a missing folder, a folder without images, --image-size that is not a size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "tests/launch/tool_runner.h"
#include <chorus/data/io/png.h>

namespace chorus::launch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::run_tool;

const std::string kTool = CHORUS_TRAIN_PATH;

std::vector<std::string> with_tool(std::vector<std::string> args) {
  args.insert(args.begin(), kTool);
  return args;
}

// `per_class` 20x24 RGB images in red/, green/ and blue/: the class's channel bright (150..255),
// the others dark (0..110), every pixel drawn independently.
void write_folder(const fs::path& root, int per_class) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> bright(150, 255), dark(0, 110);
  const char* names[] = {"red", "green", "blue"};
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root / names[c]);
    for (int i = 0; i < per_class; ++i) {
      std::vector<std::uint8_t> px(20 * 24 * 3);
      for (std::size_t p = 0; p < px.size(); ++p)
        px[p] = static_cast<std::uint8_t>(static_cast<int>(p % 3) == c ? bright(rng) : dark(rng));
      const std::string bytes = data::encode_png(px.data(), 20, 24, 3);
      std::FILE* f = std::fopen((root / names[c] / ("img" + std::to_string(i) + ".png")).c_str(), "wb");
      ASSERT_NE(f, nullptr);
      std::fwrite(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
    }
  }
}

// The training loss of each epoch, from fit's one-line-per-epoch output (" - loss: 0.1234 ...").
std::vector<double> epoch_losses(const std::string& out) {
  std::vector<double> losses;
  for (std::size_t p = out.find("\n"); p != std::string::npos; p = out.find("\n", p + 1)) {
    const std::size_t end = out.find('\n', p + 1);
    const std::string line = out.substr(p + 1, end == std::string::npos ? std::string::npos : end - p - 1);
    const std::size_t k = line.find(" - loss: ");
    if (k != std::string::npos && line.find("ms/step") != std::string::npos)
      losses.push_back(std::stod(line.substr(k + 9)));
  }
  return losses;
}

TEST(ChorusTrainImageDir, SeedCnnLearnsAFolderOfPngsUnderMirrored) {
  const fs::path dir = fs::temp_directory_path() / ("chorus_train_images_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_folder(dir, 40);
  const auto r = run_tool(with_tool({"--image-dir", dir.string(), "--image-size", "24,24", "--model", "cnn",
                                     "--strategy", "mirrored", "--virtual-devices", "2", "--epochs", "4", "--batch",
                                     "16", "--learning-rate", "0.003", "--min-accuracy", "0.6"}));
  fs::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Strategy: MirroredStrategy on 2 devices"));
  // 120 files, validation_split 0.2: int(0.2 * 120) = 24 held out.
  EXPECT_THAT(r.out, HasSubstr("image folder " + dir.string() + ": 3 classes, 96 train / 24 held out, 24x24"));
  const auto losses = epoch_losses(r.out);
  ASSERT_EQ(losses.size(), 4u) << r.out;
  EXPECT_LT(losses.back(), losses.front()) << r.out;
  EXPECT_LT(losses.back(), 0.9 * std::log(3.0)) << r.out;  // below a guess's loss (ln 3)
}

TEST(ChorusTrainImageDir, FlagErrors) {
  const fs::path dir = fs::temp_directory_path() / ("chorus_train_images_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto missing = run_tool(with_tool({"--image-dir", (dir / "nope").string(), "--quiet"}));
  EXPECT_EQ(missing.exit_code, 1) << missing.out << missing.err;
  EXPECT_THAT(missing.err, HasSubstr((dir / "nope").string()));
  fs::create_directories(dir / "a");
  auto empty = run_tool(with_tool({"--image-dir", dir.string(), "--quiet"}));
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.err, HasSubstr("No training images found in directory " + dir.string()));
  fs::remove_all(dir);
  for (const char* bad : {"0", "16,", "16,16,3", "x", "-4", "123456"}) {
    auto r = run_tool(with_tool({"--image-dir", "/tmp", "--image-size", bad}));
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("--image-size '" + std::string(bad) + "' is not a size")) << bad;
  }
  auto both = run_tool(with_tool({"--image-dir", "/tmp", "--data-dir", "/tmp"}));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("more than one of --data-dir, --tfrecord and --image-dir"));
}

}  // namespace
}  // namespace chorus::launch
