#include <chorus/launch/train_options.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <chorus/core/env.h>
#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

namespace po = boost::program_options;
using internal::str_cat;

// The description is built in one place so --help and the parser can never disagree.
po::options_description describe(TrainOptions& o) {
  po::options_description d("chorus-train options");
  // clang-format off
  d.add_options()
    ("help,h", po::bool_switch(&o.help), "print this text and exit")
    ("version", po::bool_switch(&o.version),
     "print chorus's version, git commit and build type, and the libraries it was built with, and exit")
    ("model", po::value(&o.model)->default_value(o.model),
     "mlp (Flatten, Dense 128 relu, Dense 10) or cnn (the seed CNN: Conv2D 32 3x3 relu, MaxPool 2, "
     "Conv2D 64 3x3 relu, MaxPool 2, Conv2D 64 3x3 relu, Flatten, Dense 64 relu, Dense 10)")
    ("strategy", po::value(&o.strategy)->default_value(o.strategy),
     "default (one replica, no communication), one_device (the first of --devices), mirrored (every "
     "device of --devices, else all logical GPUs, else all logical CPUs) or multi_worker (every "
     "process of mpirun/chorus-run, each with its local devices)")
    ("devices", po::value<std::string>(),
     "comma-separated replica devices, e.g. /gpu:0,/gpu:1 or /cpu:0,/cpu:1 (default: all)")
    ("virtual-devices", po::value(&o.virtual_devices)->default_value(o.virtual_devices),
     "carve N logical devices out of the first GPU (the CPU when there is none); 0: one per physical device")
    ("memory-limit-mb", po::value(&o.memory_limit_mb)->default_value(o.memory_limit_mb),
     "memory limit of each logical device in MiB (0: 2048 with --virtual-devices > 1, else no limit)")
    ("epochs", po::value(&o.epochs)->default_value(o.epochs), "passes over the training set")
    ("batch", po::value(&o.batch_size)->default_value(o.batch_size),
     "global batch size, split over all replicas")
    ("learning-rate", po::value(&o.learning_rate)->default_value(o.learning_rate, "0.001"),
     "optimizer learning rate (sgd wants more, e.g. 0.05)")
    ("optimizer", po::value(&o.optimizer)->default_value(o.optimizer), "adam or sgd")
    ("data-dir", po::value(&o.data_dir),
     "directory with the four MNIST idx files (train-images-idx3-ubyte, ...; gunzipped)")
    ("tfrecord", po::value(&o.tfrecord)->composing(),
     "TFRecord files of tf.train.Example {image: bytes 784, label: int64}: paths, glob patterns or "
     "comma-separated lists (repeatable); the first --test records are held out")
    ("tfrecord-compression", po::value(&o.tfrecord_compression),
     "compression_type of the --tfrecord files, as TensorFlow's: ZLIB or GZIP (default: none)")
    ("image-dir", po::value(&o.image_dir),
     "a folder of PNG/JPEG images, one subfolder per class (Keras's image_dataset_from_directory): the classes "
     "are the sorted subfolder names, the model's output has one unit per class, pixels are scaled to [0, 1]")
    ("image-size", po::value<std::string>()->default_value("64,64"),
     "with --image-dir: the size images are resized to (bilinear), \"H,W\" or \"N\" for N,N")
    ("validation-split", po::value(&o.validation_split)->default_value(o.validation_split, "0.2"),
     "with --image-dir: the fraction of the files held out (the last ones after the seeded shuffle, as Keras)")
    ("train", po::value(&o.train_size)->default_value(o.train_size),
     "training examples to use (0: all; synthetic digits: 60000)")
    ("test", po::value(&o.test_size)->default_value(o.test_size),
     "held-out examples (0: all of the MNIST test set; synthetic: 10000; TFRecord: 1000)")
    ("seed", po::value(&o.seed)->default_value(o.seed),
     "seed of the weights, the shuffle order and the synthetic digits")
    ("checkpoint-dir", po::value(&o.checkpoint_dir),
     "save a checkpoint after every epoch here and resume from the latest one; on SIGTERM every worker backs up "
     "the same step to <dir>/backup and exits 0, and the rerun resumes there")
    ("no-resume", "with --checkpoint-dir: start from scratch; existing checkpoints are moved to <dir>/replaced-<time>/")
    ("no-terminate-on-nan", "keep training after a NaN or infinite loss (by default the first one stops training "
     "with an error, before any checkpoint of non-finite weights is written)")
    ("log-dir", po::value(&o.log_dir), "write TensorBoard event files here (train/ and validation/)")
    ("min-accuracy", po::value(&o.min_accuracy)->default_value(o.min_accuracy),
     "exit with status 1 when the final held-out accuracy is below this (0..1)")
    ("collective-timeout", po::value<std::string>(),
     "seconds every collective may wait for the other replicas and workers before it fails, naming "
     "who did not arrive (default: CHORUS_COLLECTIVE_TIMEOUT, else 300); a killed worker is noticed "
     "within seconds either way; at least 0.01")
    ("quiet", "no progress bar or per-epoch lines from fit (the summary lines are still printed)");
  // clang-format on
  return d;
}

void check_choice(const std::string& flag, const std::string& value, std::initializer_list<const char*> valid) {
  std::string list;
  for (const char* v : valid) {
    if (value == v) return;
    list += list.empty() ? v : str_cat(", ", v);
  }
  throw InvalidArgumentError(str_cat("--", flag, " '", value, "' is not one of: ", list));
}

// True when `arg` holds "%name%" (name made of [a-z_]), the form of Boost's message placeholders.
bool holds_placeholder(const char* arg) {
  for (const char* p = std::strchr(arg, '%'); p != nullptr; p = std::strchr(p + 1, '%')) {
    const char* q = p + 1;
    while ((*q >= 'a' && *q <= 'z') || *q == '_') ++q;
    if (*q == '%' && q > p + 1) return true;
  }
  return false;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// --image-size: "N" or "H,W", each a positive integer of at most 5 digits (larger images are not a
// size for this tool's models).
std::array<std::int64_t, 2> parse_image_size(const std::string& text) {
  const std::vector<std::string> parts = split_commas(text);
  const bool shape_ok = (parts.size() == 1 || parts.size() == 2) &&
                        std::count(text.begin(), text.end(), ',') == static_cast<long>(parts.size()) - 1;
  std::array<std::int64_t, 2> size{0, 0};
  bool ok = shape_ok;
  for (std::size_t i = 0; ok && i < parts.size(); ++i) {
    ok = !parts[i].empty() && parts[i].size() <= 5 &&
         std::all_of(parts[i].begin(), parts[i].end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) size[i] = std::stoll(parts[i]);
    ok = ok && size[i] > 0;
  }
  CHORUS_REQUIRE(ok, InvalidArgumentError, "--image-size '", text,
                 "' is not a size: give \"H,W\" or \"N\" with positive integers (e.g. 64,64)");
  if (parts.size() == 1) size[1] = size[0];
  return size;
}

}  // namespace

TrainOptions parse_train_options(int argc, const char* const argv[]) {
  TrainOptions o;
  po::options_description d = describe(o);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv)
                  .options(d)
                  .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
                  .run(),
              vm);
    po::notify(vm);
  } catch (const po::error_with_option_name& e) {
    // Boost (1.74) formats this message by replacing its %name% placeholders with the option and
    // value as typed until none is left: an argument that holds a placeholder ("--epochs=%value%")
    // makes what() loop forever, growing the string (found by tests/fuzz/train_options_fuzz.cc).
    // Then the message is built here instead.
    if (std::none_of(argv + 1, argv + argc, holds_placeholder)) throw InvalidArgumentError(e.what());
    throw InvalidArgumentError(str_cat("option '", e.get_option_name(),
                                       "' is unknown, repeated or has a malformed value (an argument holds a "
                                       "'%name%' placeholder, which Boost.Program_options' messages cannot quote)"));
  } catch (const po::error& e) {
    throw InvalidArgumentError(e.what());
  }
  if (o.help || o.version) return o;
  if (vm.count("devices")) {
    o.devices = split_commas(vm["devices"].as<std::string>());
    CHORUS_REQUIRE(!o.devices.empty(), InvalidArgumentError, "--devices is empty; give e.g. /gpu:0,/gpu:1");
  }
  for (const char* flag : {"checkpoint-dir", "log-dir", "data-dir", "image-dir"}) {
    // An empty path would save or read nothing and still exit 0 (`--checkpoint-dir "$UNSET"`).
    CHORUS_REQUIRE(!vm.count(flag) || !vm[flag].as<std::string>().empty(), InvalidArgumentError, "--", flag,
                   " is empty; give a directory path (omit the flag to go without)");
  }
  if (vm.count("collective-timeout"))
    o.collective_timeout =
        env::parse_timeout_seconds(vm["collective-timeout"].as<std::string>(), "--collective-timeout");
  env::collective_timeout();  // a bad CHORUS_COLLECTIVE_TIMEOUT is a usage error, found before anything starts
  o.resume = vm.count("no-resume") == 0;
  o.terminate_on_nan = vm.count("no-terminate-on-nan") == 0;
  o.verbose = vm.count("quiet") == 0;

  check_choice("model", o.model, {"mlp", "cnn"});
  check_choice("strategy", o.strategy, {"default", "one_device", "mirrored", "multi_worker"});
  check_choice("optimizer", o.optimizer, {"adam", "sgd"});
  CHORUS_REQUIRE(o.epochs >= 1, InvalidArgumentError, "--epochs must be >= 1, got ", o.epochs);
  CHORUS_REQUIRE(o.batch_size >= 1, InvalidArgumentError, "--batch must be >= 1, got ", o.batch_size);
  CHORUS_REQUIRE(o.learning_rate > 0, InvalidArgumentError, "--learning-rate must be > 0, got ", o.learning_rate);
  CHORUS_REQUIRE(o.virtual_devices >= 0, InvalidArgumentError, "--virtual-devices must be >= 0, got ",
                 o.virtual_devices);
  CHORUS_REQUIRE(o.memory_limit_mb >= 0, InvalidArgumentError, "--memory-limit-mb must be >= 0, got ",
                 o.memory_limit_mb);
  CHORUS_REQUIRE(o.train_size >= 0, InvalidArgumentError, "--train must be >= 0 (0: all), got ", o.train_size);
  CHORUS_REQUIRE(o.test_size >= 0, InvalidArgumentError, "--test must be >= 0 (0: all), got ", o.test_size);
  CHORUS_REQUIRE(o.min_accuracy >= 0 && o.min_accuracy <= 1, InvalidArgumentError,
                 "--min-accuracy must be in [0, 1], got ", o.min_accuracy);
  CHORUS_REQUIRE(o.data_dir.empty() + o.tfrecord.empty() + o.image_dir.empty() >= 2, InvalidArgumentError,
                 "more than one of --data-dir, --tfrecord and --image-dir given; choose one source of data");
  o.image_size = parse_image_size(vm["image-size"].as<std::string>());
  CHORUS_REQUIRE(o.validation_split > 0 && o.validation_split < 1, InvalidArgumentError,
                 "--validation-split must be in (0, 1), got ", o.validation_split);
  if (!o.tfrecord_compression.empty()) check_choice("tfrecord-compression", o.tfrecord_compression, {"ZLIB", "GZIP"});
  CHORUS_REQUIRE(o.strategy != "one_device" || o.devices.size() <= 1, InvalidArgumentError,
                 "--strategy one_device takes one device, got --devices with ", o.devices.size());
  CHORUS_REQUIRE(o.strategy != "default" || o.devices.empty(), InvalidArgumentError,
                 "--strategy default runs on the default device; --devices needs one_device or mirrored");
  return o;
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"chorus-train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

std::string train_usage() {
  TrainOptions defaults;
  std::ostringstream os;
  os << "chorus-train: train a built-in model on digits (synthetic, MNIST idx or TFRecord) or on a folder\n"
        "of images, under a tf.distribute-style strategy; alone or under chorus-run/mpirun.\n\n"
        "usage: chorus-train [options]\n\n"
     << describe(defaults)
     << "\nExit status: 0 trained (and reached --min-accuracy), 1 a training error or accuracy below\n"
        "--min-accuracy, 2 a bad command line. Guide: docs/launch.md\n";
  return os.str();
}

}  // namespace chorus::launch
