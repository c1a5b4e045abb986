// chorus-train's flags (Boost.Program_options), parsed and validated into a plain struct. The
// training itself is launch/trainer.h; the tool is launch/tools/chorus_train.cc.
//
//   auto options = chorus::launch::parse_train_options(argc, argv);   // throws on bad flags
//   if (options.help) std::cout << chorus::launch::train_usage();
//
// Every flag, its default and meaning is in train_usage() (the text of `chorus-train --help`) and
// docs/launch.md. Validation happens here, once: an unknown flag, a missing or malformed value (Boost's
// own message), an unknown --model/--strategy/--optimizer, an out-of-range number, more than one
// of --data-dir, --tfrecord and --image-dir, an --image-size that is not "N" or "H,W" (positive), a
// --collective-timeout that is not a number of seconds >= 0.01 (core/env.h), or a badly set CHORUS_COLLECTIVE_TIMEOUT →
// InvalidArgumentError naming the flag (or variable), the value and what is valid. With --help or
// --version only the syntax is checked (the tool prints and exits; the other values are unused). Thread-safe: pure
// functions. Part of chorus-train: the target chorus_launch_cli, which links Boost and is not installed (chorus::chorus
// users do not need Boost).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::launch {

struct TrainOptions {
  bool help = false;
  bool version = false;               // --version: print launch/cli.h's version_text and exit
  std::string model = "cnn";          // mlp | cnn (the seed CNN of examples/mnist_mirrored.cc)
  std::string strategy = "mirrored";  // default | one_device | mirrored | multi_worker
  std::vector<std::string> devices;   // --devices: replica devices ("/gpu:0,/gpu:1"); empty: all
  int virtual_devices = 0;            // > 0: carve this many logical devices out of the first GPU (else the CPU)
  std::int64_t memory_limit_mb = 0;   // per logical device; 0: 2048 when virtual_devices > 1, else none
  int epochs = 2;
  std::int64_t batch_size = 128;  // global batch, split over the replicas
  double learning_rate = 1e-3;
  std::string optimizer = "adam";     // adam | sgd
  std::string data_dir;               // MNIST idx files; empty with no tfrecord: synthetic digits
  std::vector<std::string> tfrecord;  // files or glob patterns (launch/tfrecord_digits.h)
  std::string tfrecord_compression;   // TF's compression_type of the --tfrecord files: "", ZLIB, GZIP
  // --image-dir: a folder of images, one subfolder per class (data/io/image_folder.h), resized to
  // --image-size (height, width); --validation-split of the files held out.
  std::string image_dir;
  std::array<std::int64_t, 2> image_size = {64, 64};
  double validation_split = 0.2;
  std::int64_t train_size = 0;  // 0: all (synthetic: 60000)
  std::int64_t test_size = 0;   // 0: all (synthetic: 10000; TFRecord: 10% of the records, see trainer.h)
  std::uint64_t seed = 1;
  std::string checkpoint_dir;    // empty: no checkpoints
  bool resume = true;            // --no-resume: start fresh even if checkpoint_dir has one
  bool terminate_on_nan = true;  // --no-terminate-on-nan: keep going after a non-finite loss
  std::string log_dir;           // empty: no TensorBoard logs
  double min_accuracy = 0.0;     // exit status 1 below this held-out accuracy
  // --collective-timeout SECONDS: the strategy's timeout for every collective; 0: the default
  // (CHORUS_COLLECTIVE_TIMEOUT, else 300 s: collective::default_timeout()).
  std::chrono::milliseconds collective_timeout{0};
  bool verbose = true;  // --quiet: no progress bar
};

// `argv[0]` is the program name (skipped). Throws InvalidArgumentError.
TrainOptions parse_train_options(int argc, const char* const argv[]);
// The same from words without a program name (for tests).
TrainOptions parse_train_options(const std::vector<std::string>& args);

// The text of `chorus-train --help`: every flag with its default.
std::string train_usage();

}  // namespace chorus::launch
