// The chorus-train executable: --help, bad flags, and short real training runs (a few seconds each
// on two cores) on synthetic digits and on a TFRecord file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/launch/tool_runner.h"
#include <chorus/data/synthetic_digits.h>
#include <chorus/data/tfrecord.h>
#include <chorus/launch/tfrecord_digits.h>

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

TEST(ChorusTrain, HelpListsEveryFlag) {
  const auto r = run_tool(with_tool({"--help"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--help",
                           "--model",
                           "--strategy",
                           "--devices",
                           "--virtual-devices",
                           "--memory-limit-mb",
                           "--epochs",
                           "--batch",
                           "--learning-rate",
                           "--optimizer",
                           "--data-dir",
                           "--tfrecord",
                           "--train",
                           "--test",
                           "--seed",
                           "--checkpoint-dir",
                           "--no-resume",
                           "--log-dir",
                           "--min-accuracy",
                           "--quiet",
                           "--no-terminate-on-nan"})
    EXPECT_THAT(r.out, HasSubstr(flag));
  for (const char* choice : {"mlp", "cnn", "one_device", "mirrored", "multi_worker", "adam", "sgd"})
    EXPECT_THAT(r.out, HasSubstr(choice));
}

TEST(ChorusTrain, BadFlagsExitTwoWithBoostsMessageAndAHint) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--frobnicate"}, "unrecognised option '--frobnicate'"},
      {{"--epochs"}, "epochs"},
      {{"--batch", "lots"}, "batch"},
      {{"--model", "resnet"}, "--model 'resnet' is not one of: mlp, cnn"},
      {{"--epochs", "0"}, "--epochs must be >= 1, got 0"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_tool(with_tool(args));
    EXPECT_EQ(r.exit_code, 2) << message;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.err, HasSubstr("chorus-train --help"));
  }
}

TEST(ChorusTrain, MlpLearnsUnderMirroredOnTwoVirtualDevices) {
  const auto r = run_tool(with_tool({"--model", "mlp", "--strategy", "mirrored", "--virtual-devices", "2", "--epochs",
                                     "1", "--train", "600", "--test", "200", "--batch", "32", "--learning-rate",
                                     "0.003", "--min-accuracy", "0.6", "--quiet"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Virtual devices: 2 on "));
  EXPECT_THAT(r.out, HasSubstr("Strategy: MirroredStrategy on 2 devices"));
  EXPECT_THAT(r.out, HasSubstr("synthetic digits, 600 train / 200 held out"));
  EXPECT_THAT(r.out, HasSubstr("held-out accuracy: "));
}

TEST(ChorusTrain, BelowMinAccuracyExitsOne) {
  // A learning rate of 1e-9 leaves the random initial weights in place: chance accuracy (~0.1).
  const auto r = run_tool(with_tool({"--model", "mlp", "--strategy", "default", "--epochs", "1", "--train", "100",
                                     "--test", "100", "--learning-rate", "1e-9", "--min-accuracy", "0.9", "--quiet"}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("is below --min-accuracy 0.9"));
}

TEST(ChorusTrain, MultiWorkerAloneIsOneWorker) {
  const auto r = run_tool(with_tool({"--model", "mlp", "--strategy", "multi_worker", "--virtual-devices", "2",
                                     "--epochs", "1", "--train", "600", "--test", "200", "--batch", "32",
                                     "--learning-rate", "0.003", "--min-accuracy", "0.6", "--quiet"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Strategy: MultiWorkerMirroredStrategy on 2 devices in 1 worker(s)"));
}

TEST(ChorusTrain, CheckpointsResumeWhereTheyStopped) {
  const fs::path dir = fs::temp_directory_path() / ("chorus_train_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto run = [&](const char* epochs, bool resume) {
    std::vector<std::string> args{
        "--model",    "mlp",      "--strategy", "mirrored", "--virtual-devices", "2",     "--train", "300",
        "--test",     "100",      "--batch",    "32",       "--learning-rate",   "0.003", "--quiet", "--checkpoint-dir",
        dir.string(), "--epochs", epochs};
    if (!resume) args.push_back("--no-resume");
    return run_tool(with_tool(args));
  };
  auto r = run("1", true);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Resumed")));
  EXPECT_TRUE(fs::exists(dir / "ckpt-1.index"));
  r = run("2", true);  // one more epoch
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ckpt-1 (4 model variables restored, 1 epoch(s) done, 1 to go)"));
  EXPECT_TRUE(fs::exists(dir / "ckpt-2.index"));
  const std::string trained = r.out.substr(r.out.find("held-out accuracy"));
  r = run("2", true);  // nothing left: the restored model evaluates exactly as it did when saved
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ckpt-2 (4 model variables restored, 2 epoch(s) done, 0 to go)"));
  EXPECT_EQ(r.out.substr(r.out.find("held-out accuracy")), trained);
  r = run("1", false);  // --no-resume: starts over, the old checkpoints moved aside, not overwritten
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Resumed")));
  EXPECT_THAT(r.out, HasSubstr("earlier checkpoints of"));
  int replaced = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("replaced-", 0) == 0) {
      ++replaced;
      EXPECT_TRUE(fs::exists(e.path() / "ckpt-2.index"));
    }
  EXPECT_EQ(replaced, 1);
  EXPECT_TRUE(fs::exists(dir / "ckpt-1.index"));
  fs::remove_all(dir);
}

TEST(ChorusTrain, TrainsFromATFRecordFile) {
  // 700 synthetic digits written as tf.train.Example records: 200 held out, 500 trained on.
  const fs::path dir = fs::temp_directory_path() / ("chorus_train_tfrecord_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto arrays = data::synthetic_digits_arrays(700, 5);
  const auto pixels = arrays.images.to_vector<float>();
  const auto labels = arrays.labels.to_vector<std::int32_t>();
  std::vector<std::string> records;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::vector<std::uint8_t> image(kDigitPixels);
    for (int p = 0; p < kDigitPixels; ++p)
      image[static_cast<std::size_t>(p)] = static_cast<std::uint8_t>(pixels[i * kDigitPixels + p] * 255.0f + 0.5f);
    records.push_back(serialize_digit_example(image, labels[i]));
  }
  data::write_tfrecord_file((dir / "digits-0.tfrecord").string(), records);
  const auto r = run_tool(with_tool({"--model", "mlp", "--strategy", "one_device", "--tfrecord",
                                     (dir / "digits-*.tfrecord").string(), "--test", "200", "--epochs", "2", "--batch",
                                     "32", "--learning-rate", "0.003", "--min-accuracy", "0.6", "--quiet"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 TFRecord file(s), first 200 records held out"));
  EXPECT_THAT(r.out, HasSubstr("Strategy: OneDeviceStrategy on 1 device"));
  // The same records GZIP-compressed, as TF's TFRecordWriter(options="GZIP") writes them.
  data::write_tfrecord_file((dir / "digits.tfrecord.gz").string(), records,
                            {.compression = data::TFRecordCompression::kGzip});
  const auto gz = run_tool(
      with_tool({"--model", "mlp", "--strategy", "one_device", "--tfrecord", (dir / "digits.tfrecord.gz").string(),
                 "--tfrecord-compression", "GZIP", "--test", "200", "--epochs", "2", "--batch", "32", "--learning-rate",
                 "0.003", "--min-accuracy", "0.6", "--quiet"}));
  EXPECT_EQ(gz.exit_code, 0) << gz.out << gz.err;
  // Without the flag: the data loss error says what the file is.
  const auto plain = run_tool(with_tool({"--model", "mlp", "--strategy", "one_device", "--tfrecord",
                                         (dir / "digits.tfrecord.gz").string(), "--test", "200", "--quiet"}));
  fs::remove_all(dir);
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_THAT(plain.err, HasSubstr("GZIP magic"));
}

}  // namespace
}  // namespace chorus::launch
