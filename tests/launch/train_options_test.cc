#include <chorus/launch/train_options.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using Args = std::vector<std::string>;
using ::testing::HasSubstr;

// The message of the InvalidArgumentError the parser throws (a test failure if none).
std::string error_of(const Args& args) {
  return chorus::testing::message_of<InvalidArgumentError>([&] { parse_train_options(args); });
}

TEST(TrainOptions, Defaults) {
  const TrainOptions o = parse_train_options(Args{});
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.model, "cnn");
  EXPECT_EQ(o.strategy, "mirrored");
  EXPECT_TRUE(o.devices.empty());
  EXPECT_EQ(o.virtual_devices, 0);
  EXPECT_EQ(o.epochs, 2);
  EXPECT_EQ(o.batch_size, 128);
  EXPECT_DOUBLE_EQ(o.learning_rate, 1e-3);
  EXPECT_EQ(o.optimizer, "adam");
  EXPECT_TRUE(o.resume);
  EXPECT_TRUE(o.verbose);
  EXPECT_DOUBLE_EQ(o.min_accuracy, 0.0);
}

TEST(TrainOptions, EveryFlag) {
  const TrainOptions o = parse_train_options(Args{"--model",
                                                  "mlp",
                                                  "--strategy=one_device",
                                                  "--devices",
                                                  "/cpu:1",
                                                  "--virtual-devices",
                                                  "2",
                                                  "--memory-limit-mb",
                                                  "512",
                                                  "--epochs",
                                                  "3",
                                                  "--batch",
                                                  "64",
                                                  "--learning-rate",
                                                  "0.05",
                                                  "--optimizer",
                                                  "sgd",
                                                  "--tfrecord",
                                                  "a.tfrecord",
                                                  "--tfrecord",
                                                  "b-*.tfrecord",
                                                  "--train",
                                                  "500",
                                                  "--test",
                                                  "100",
                                                  "--seed",
                                                  "9",
                                                  "--checkpoint-dir",
                                                  "/tmp/ck",
                                                  "--no-resume",
                                                  "--log-dir",
                                                  "/tmp/logs",
                                                  "--min-accuracy",
                                                  "0.5",
                                                  "--quiet"});
  EXPECT_EQ(o.model, "mlp");
  EXPECT_EQ(o.strategy, "one_device");
  EXPECT_EQ(o.devices, (Args{"/cpu:1"}));
  EXPECT_EQ(o.virtual_devices, 2);
  EXPECT_EQ(o.memory_limit_mb, 512);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_DOUBLE_EQ(o.learning_rate, 0.05);
  EXPECT_EQ(o.optimizer, "sgd");
  EXPECT_EQ(o.tfrecord, (Args{"a.tfrecord", "b-*.tfrecord"}));
  EXPECT_EQ(o.train_size, 500);
  EXPECT_EQ(o.test_size, 100);
  EXPECT_EQ(o.seed, 9u);
  EXPECT_EQ(o.checkpoint_dir, "/tmp/ck");
  EXPECT_FALSE(o.resume);
  EXPECT_EQ(o.log_dir, "/tmp/logs");
  EXPECT_DOUBLE_EQ(o.min_accuracy, 0.5);
  EXPECT_FALSE(o.verbose);
}

TEST(TrainOptions, DevicesAreCommaSeparated) {
  EXPECT_EQ(parse_train_options(Args{"--devices", "/gpu:0,/gpu:1"}).devices, (Args{"/gpu:0", "/gpu:1"}));
  EXPECT_THAT(error_of({"--devices", ","}), HasSubstr("--devices is empty"));
}

TEST(TrainOptions, BoostErrorsBecomeInvalidArgument) {
  EXPECT_THAT(error_of({"--frobnicate"}), HasSubstr("unrecognised option '--frobnicate'"));
  EXPECT_THAT(error_of({"--epochs"}), HasSubstr("epochs"));
  EXPECT_THAT(error_of({"--epochs", "two"}), HasSubstr("epochs"));
  EXPECT_THAT(error_of({"--epo", "2"}), HasSubstr("unrecognised option '--epo'"));  // no guessing
}

TEST(TrainOptions, ValuesAreValidated) {
  EXPECT_THAT(error_of({"--model", "resnet"}), HasSubstr("--model 'resnet' is not one of: mlp, cnn"));
  EXPECT_THAT(error_of({"--strategy", "tpu"}),
              HasSubstr("--strategy 'tpu' is not one of: default, one_device, mirrored, multi_worker"));
  EXPECT_THAT(error_of({"--optimizer", "lamb"}), HasSubstr("is not one of: adam, sgd"));
  EXPECT_THAT(error_of({"--epochs", "0"}), HasSubstr("--epochs must be >= 1, got 0"));
  EXPECT_THAT(error_of({"--batch", "0"}), HasSubstr("--batch must be >= 1"));
  EXPECT_THAT(error_of({"--learning-rate", "-1"}), HasSubstr("--learning-rate must be > 0"));
  EXPECT_THAT(error_of({"--virtual-devices", "-2"}), HasSubstr("--virtual-devices must be >= 0"));
  EXPECT_THAT(error_of({"--memory-limit-mb", "-1"}), HasSubstr("--memory-limit-mb must be >= 0"));
  EXPECT_THAT(error_of({"--train", "-1"}), HasSubstr("--train must be >= 0"));
  EXPECT_THAT(error_of({"--min-accuracy", "1.5"}), HasSubstr("--min-accuracy must be in [0, 1]"));
  EXPECT_THAT(error_of({"--data-dir", "d", "--tfrecord", "x"}), HasSubstr("choose one source of data"));
  EXPECT_THAT(error_of({"--tfrecord-compression", "gzip"}),
              HasSubstr("--tfrecord-compression 'gzip' is not one of: ZLIB, GZIP"));
  EXPECT_EQ(parse_train_options(Args{"--tfrecord-compression", "GZIP"}).tfrecord_compression, "GZIP");
  EXPECT_THAT(error_of({"--strategy", "one_device", "--devices", "/cpu:0,/cpu:1"}), HasSubstr("takes one device"));
  EXPECT_THAT(error_of({"--strategy", "default", "--devices", "/cpu:0"}), HasSubstr("--strategy default"));
}

TEST(TrainOptions, ImageDirFlags) {
  const TrainOptions d = parse_train_options(Args{});
  EXPECT_TRUE(d.image_dir.empty());
  EXPECT_EQ(d.image_size, (std::array<std::int64_t, 2>{64, 64}));
  EXPECT_DOUBLE_EQ(d.validation_split, 0.2);
  const TrainOptions o =
      parse_train_options(Args{"--image-dir", "/data/flowers", "--image-size", "180,120", "--validation-split", "0.1"});
  EXPECT_EQ(o.image_dir, "/data/flowers");
  EXPECT_EQ(o.image_size, (std::array<std::int64_t, 2>{180, 120}));
  EXPECT_DOUBLE_EQ(o.validation_split, 0.1);
  EXPECT_EQ(parse_train_options(Args{"--image-size=32"}).image_size, (std::array<std::int64_t, 2>{32, 32}));
  for (const char* bad : {"0", "0,4", "16,", ",16", "16,16,3", "x", "-4", "16x16", "123456", ""})
    EXPECT_THAT(error_of({"--image-size", bad}), HasSubstr(std::string("--image-size '") + bad + "' is not a size"))
        << bad;
  EXPECT_THAT(error_of({"--image-dir", ""}), HasSubstr("--image-dir is empty"));
  EXPECT_THAT(error_of({"--image-dir", "d", "--tfrecord", "x"}), HasSubstr("choose one source of data"));
  EXPECT_THAT(error_of({"--image-dir", "d", "--data-dir", "x"}), HasSubstr("choose one source of data"));
  for (const char* bad : {"0", "1", "-0.5", "1.5"})
    EXPECT_THAT(error_of({"--validation-split", bad}), HasSubstr("--validation-split must be in (0, 1)")) << bad;
}

TEST(TrainOptions, CollectiveTimeoutIsSecondsAboveZero) {
  EXPECT_EQ(parse_train_options(Args{}).collective_timeout.count(), 0) << "0: the default";
  EXPECT_EQ(parse_train_options(Args{"--collective-timeout", "30"}).collective_timeout.count(), 30000);
  EXPECT_EQ(parse_train_options(Args{"--collective-timeout=2.5"}).collective_timeout.count(), 2500);
  for (const char* bad : {"0", "-5", "abc", "5s", "", " 5", "inf", "nan", "1e9", "1e-9", "0.005"})
    EXPECT_THAT(error_of({"--collective-timeout", bad}), HasSubstr(std::string("--collective-timeout='") + bad + "'"))
        << bad;
}

TEST(TrainOptions, ABadCollectiveTimeoutVariableIsAUsageError) {
  setenv("CHORUS_COLLECTIVE_TIMEOUT", "soon", 1);
  const std::string m = error_of({"--collective-timeout", "10"});
  unsetenv("CHORUS_COLLECTIVE_TIMEOUT");
  EXPECT_THAT(m, HasSubstr("CHORUS_COLLECTIVE_TIMEOUT='soon' is not a valid timeout"));
}

TEST(TrainOptions, HelpListsEveryFlag) {
  EXPECT_TRUE(parse_train_options(Args{"--help"}).help);
  EXPECT_TRUE(parse_train_options(Args{"--version"}).version);
  // Like git's, --help/--version win over values that are checked only for a run (the fuzz
  // target's contract: tests/fuzz/train_options_fuzz.cc).
  EXPECT_TRUE(parse_train_options(Args{"--version", "--optimizer", "lamb"}).version);
  EXPECT_THAT(error_of({"--version", "--no-such-flag"}), HasSubstr("no-such-flag"));
  const std::string usage = train_usage();
  for (const char* flag : {"--help",
                           "--version",
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
                           "--tfrecord-compression",
                           "--image-dir",
                           "--image-size",
                           "--validation-split",
                           "--train",
                           "--test",
                           "--seed",
                           "--checkpoint-dir",
                           "--no-resume",
                           "--log-dir",
                           "--min-accuracy",
                           "--quiet",
                           "--collective-timeout"})
    EXPECT_THAT(usage, HasSubstr(flag));
}

}  // namespace
}  // namespace chorus::launch
