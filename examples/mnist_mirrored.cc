// The main job: the seed CNN trained with Model::fit under MirroredStrategy on two virtual devices
// — two virtual GPUs carved out of GPU:0 when a GPU exists, two logical CPU devices otherwise —
// on chorus's embedded synthetic digits, with a progress bar and TensorBoard logs.
//
//   mnist_mirrored [--epochs N] [--train N] [--test N] [--batch N] [--logdir DIR] [--min-accuracy A]
//
// Exits non-zero when the held-out accuracy is below --min-accuracy (default 0.97), so CTest and
// the README's first command check that training really works.
#include <chorus/chorus.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

namespace cx = chorus;

namespace {
constexpr const char* kUsage =
    "usage: mnist_mirrored [--epochs N] [--train N] [--test N] [--batch N] [--logdir DIR] [--min-accuracy X]\n  the seed CNN under MirroredStrategy on two logical devices (two virtual GPUs when there is a GPU)\n";
}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "mnist_mirrored", kUsage)) return *rc;
  int epochs = 2;
  std::int64_t train = 30000, test = 5000, batch = 128;
  std::string logdir = "logs/mnist_mirrored";
  double min_accuracy = 0.97;
  if (argc % 2 == 0) {  // flags come in pairs: the last one has no value
    std::cerr << "mnist_mirrored: '" << argv[argc - 1] << "' needs a value\n" << kUsage;
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--epochs")
      epochs = std::atoi(v);
    else if (flag == "--train")
      train = std::atoll(v);
    else if (flag == "--test")
      test = std::atoll(v);
    else if (flag == "--batch")
      batch = std::atoll(v);
    else if (flag == "--logdir")
      logdir = v;
    else if (flag == "--min-accuracy")
      min_accuracy = std::atof(v);
    else
      return chorus::launch::usage_error("mnist_mirrored", flag, kUsage);
  }
  try {
    // Two virtual devices: on the GPU when there is one (memory limits per device), else the CPU.
    auto gpus = cx::config::list_physical_devices("GPU");
    const cx::PhysicalDevice base = gpus.empty() ? cx::config::list_physical_devices("CPU")[0] : gpus[0];
    cx::config::set_logical_device_configuration(base, {{.memory_limit_mb = 2048}, {.memory_limit_mb = 2048}});

    cx::distribute::MirroredStrategy strategy;
    std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << " ("
              << cx::distribute::cross_device_ops_name(strategy.cross_device_ops().ops) << ")\n";

    std::unique_ptr<cx::model::Sequential> model;
    {
      auto scope = strategy.scope();
      namespace L = cx::layers;
      model = std::make_unique<cx::model::Sequential>(std::vector<L::LayerPtr>{
          L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
          L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
      model->compile(std::make_shared<cx::optimizers::Adam>(1e-3),
                     std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
    }
    auto train_ds =
        cx::data::synthetic_digits(train, /*seed=*/1).shuffle(10000, 42).batch(batch).prefetch(cx::data::kAutotune);
    auto test_ds = cx::data::synthetic_digits(test, /*seed=*/2).batch(batch);
    model->fit(train_ds, {.epochs = epochs,
                          .validation_data = test_ds,
                          .callbacks = {std::make_shared<cx::callbacks::TensorBoard>(logdir)}});
    std::cout << model->summary();
    const double accuracy = model->evaluate(test_ds)["accuracy"];
    std::cout << "held-out accuracy: " << accuracy << " (goal >= " << min_accuracy << "); TensorBoard logs in "
              << logdir << "\n";
    return accuracy >= min_accuracy ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
