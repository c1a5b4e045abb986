// A small ResNet (examples/resnet.h: residual Add, BatchNormalization, projection shortcuts,
// GlobalAveragePooling2D) built with the functional API and trained with Model::fit under
// MirroredStrategy on two devices — two virtual GPUs carved out of GPU:0 when a GPU exists, two
// logical CPU devices otherwise — on MNIST when --data names a directory of its idx files, else on
// chorus's built-in synthetic digits.
//
//   resnet_mirrored [--epochs N] [--train N] [--test N] [--batch N] [--steps-per-epoch N]
//                   [--lr X] [--seed N] [--data DIR] [--min-accuracy A] [--max-loss-ratio R]
//
// Defaults (the long run): 5 epochs over 60,000 digits, batch 128, SGD with momentum 0.9 and
// learning rate 0.05; --seed seeds the initial weights (ops::set_seed), so a run repeats.
// Prints the loss per epoch and the held-out loss and accuracy. Exits non-zero unless the
// held-out accuracy is >= --min-accuracy and the held-out loss fell to <= --max-loss-ratio times
// ln(10), the loss of a uniform guess over the 10 classes — so CTest's short run checks that the
// network really learns (examples/CMakeLists.txt; docs/functional.md, "Example: a ResNet under
// MirroredStrategy").
#include "resnet.h"

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>

namespace cx = chorus;

namespace {
constexpr const char* kUsage =
    "usage: resnet_mirrored [--epochs N] [--train N] [--test N] [--batch N] [--steps-per-epoch N] [--lr X]\n"
    "                       [--seed N] [--data DIR] [--min-accuracy A] [--max-loss-ratio R]\n"
    "  a small ResNet under MirroredStrategy on two logical devices (two virtual GPUs when there is a GPU)\n";

struct Flags {
  int epochs = 5;
  std::int64_t train = 60000, test = 10000, batch = 128, steps_per_epoch = -1;
  double lr = 0.05, min_accuracy = 0.98, max_loss_ratio = 0.05;
  std::uint64_t seed = 1;
  std::string data;  // empty: synthetic digits
};

// Returns the exit status to leave with, or -1 to go on.
int parse(int argc, char** argv, Flags& f) {
  if (argc % 2 == 0) {  // flags come in pairs: the last one has no value
    std::cerr << "resnet_mirrored: '" << argv[argc - 1] << "' needs a value\n" << kUsage;
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--epochs")
      f.epochs = std::atoi(v);
    else if (flag == "--train")
      f.train = std::atoll(v);
    else if (flag == "--test")
      f.test = std::atoll(v);
    else if (flag == "--batch")
      f.batch = std::atoll(v);
    else if (flag == "--steps-per-epoch")
      f.steps_per_epoch = std::atoll(v);
    else if (flag == "--lr")
      f.lr = std::atof(v);
    else if (flag == "--seed")
      f.seed = std::strtoull(v, nullptr, 10);
    else if (flag == "--data")
      f.data = v;
    else if (flag == "--min-accuracy")
      f.min_accuracy = std::atof(v);
    else if (flag == "--max-loss-ratio")
      f.max_loss_ratio = std::atof(v);
    else
      return chorus::launch::usage_error("resnet_mirrored", flag, kUsage);
  }
  return -1;
}
}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "resnet_mirrored", kUsage)) return *rc;
  Flags f;
  if (const int rc = parse(argc, argv, f); rc >= 0) return rc;
  try {
    // Two virtual devices: on the GPU when there is one (memory limits per device), else the CPU.
    auto gpus = cx::config::list_physical_devices("GPU");
    const cx::PhysicalDevice base = gpus.empty() ? cx::config::list_physical_devices("CPU")[0] : gpus[0];
    cx::config::set_logical_device_configuration(base, {{.memory_limit_mb = 2048}, {.memory_limit_mb = 2048}});

    cx::distribute::MirroredStrategy strategy;
    std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << " ("
              << cx::distribute::cross_device_ops_name(strategy.cross_device_ops().ops) << ")\n";

    cx::ops::set_seed(f.seed);  // the initial weights
    std::unique_ptr<cx::model::Functional> model;
    {
      auto scope = strategy.scope();  // the layers create their (mirrored) weights when called
      const resnet::ResNetGraph g = resnet::build_resnet({});
      model = std::make_unique<cx::model::Functional>(std::vector<cx::layers::KerasTensor>{g.image},
                                                      std::vector<cx::layers::KerasTensor>{g.logits}, "resnet");
      model->compile(
          std::make_shared<cx::optimizers::SGD>(cx::optimizers::SGDOptions{.learning_rate = f.lr, .momentum = 0.9}),
          std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
    }
    std::cout << model->summary();
    // load_digits: the idx files in f.data, or the synthetic digits when it is empty.
    auto train_ds = cx::data::load_digits(f.data, /*train=*/true)
                        .take(f.train)
                        .shuffle(10000, 42)
                        .batch(f.batch)
                        .prefetch(cx::data::kAutotune);
    auto test_ds = cx::data::load_digits(f.data, /*train=*/false).take(f.test).batch(f.batch);
    cx::model::History h =
        model->fit(train_ds, {.epochs = f.epochs, .steps_per_epoch = f.steps_per_epoch, .validation_data = test_ds});
    for (std::size_t e = 0; e < h.history["loss"].size(); ++e)
      std::cout << "epoch " << e + 1 << ": loss " << std::setprecision(4) << h.history["loss"][e] << ", accuracy "
                << h.history["accuracy"][e] << ", held-out loss " << h.history["val_loss"][e] << "\n";
    const auto held_out = model->evaluate(test_ds);
    const double chance = std::log(10.0);
    const bool loss_ok = held_out.at("loss") <= f.max_loss_ratio * chance;
    const bool accuracy_ok = held_out.at("accuracy") >= f.min_accuracy;
    std::cout << "held-out loss " << held_out.at("loss") << " (goal <= " << f.max_loss_ratio
              << " x ln(10) = " << f.max_loss_ratio * chance << ": " << (loss_ok ? "ok" : "MISSED")
              << "), held-out accuracy " << held_out.at("accuracy") << " (goal >= " << f.min_accuracy << ": "
              << (accuracy_ok ? "ok" : "MISSED") << ")\n";
    return loss_ok && accuracy_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
