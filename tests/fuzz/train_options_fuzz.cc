// libFuzzer target: chorus-train's command line, launch/train_options.h's parse_train_options
// (Boost.Program_options underneath). Input: argv[1..] split on NUL bytes (argv_split.h).
//
// Contract: only InvalidArgumentError, the one error class launch/tools/chorus_train.cc catches
// around the parse (exit 2); any other exception, Boost's included, would escape. An accepted
// line without --help or --version satisfies the ranges the header promises.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/argv_split.h"
#include "tests/fuzz/fuzz_util.h"
#include <chorus/launch/train_options.h>

using chorus::fuzz::check;
namespace launch = chorus::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> args = chorus::fuzz::split_argv(chorus::fuzz::as_view(data, size));
  launch::TrainOptions o;
  try {
    o = launch::parse_train_options(args);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    return 0;
  }
  // --help and --version print and exit before the other flags are checked (as git's and
  // Boost-based tools' do), so only a line without them promises the ranges below.
  if (o.help || o.version) return 0;
  check(o.model == "mlp" || o.model == "cnn", "--model");
  check(o.optimizer == "adam" || o.optimizer == "sgd", "--optimizer");
  check(o.epochs >= 1 && o.batch_size >= 1 && o.learning_rate > 0, "--epochs, --batch, --learning-rate");
  check(o.virtual_devices >= 0 && o.memory_limit_mb >= 0 && o.train_size >= 0 && o.test_size >= 0, "sizes >= 0");
  check(o.min_accuracy >= 0 && o.min_accuracy <= 1, "--min-accuracy in [0, 1]");
  check(o.data_dir.empty() || o.tfrecord.empty(), "one data source");
  check(o.tfrecord_compression.empty() || o.tfrecord_compression == "ZLIB" || o.tfrecord_compression == "GZIP",
        "--tfrecord-compression");
  for (const auto& d : o.devices) check(!d.empty(), "no empty device");
  return 0;
}
