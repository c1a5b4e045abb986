// Checkpoints with a CheckpointManager: train a small model under MirroredStrategy on two logical
// devices, save after every epoch (ModelCheckpoint), and resume from the latest save when run
// again — weights, Adam slots and the optimizer's step all come back (docs/checkpoints.md).
//
//   checkpoint_resume --dir /tmp/ckpt_demo [--epochs N] [--fresh] [--expect-resume]
//
// --fresh deletes the directory first; --expect-resume fails (exit 1) unless a checkpoint was
// restored (CTest runs the example twice: fresh, then resuming).
#include <chorus/chorus.h>

#include <filesystem>
#include <iostream>
#include <string>

namespace cx = chorus;

namespace {
constexpr const char* kUsage =
    "usage: checkpoint_resume [--dir DIR] [--epochs N] [--fresh] [--expect-resume]\n  trains, saves with a CheckpointManager and resumes from DIR on the next run\n";
}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "checkpoint_resume", kUsage)) return *rc;
  std::string dir = "/tmp/chorus_checkpoint_resume";
  int epochs = 1;
  bool fresh = false, expect_resume = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (flag == "--epochs" && i + 1 < argc)
      epochs = std::stoi(argv[++i]);
    else if (flag == "--fresh")
      fresh = true;
    else if (flag == "--expect-resume")
      expect_resume = true;
    else
      return chorus::launch::usage_error("checkpoint_resume", flag, kUsage);
  }
  try {
    if (fresh) std::filesystem::remove_all(dir);
    const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
    cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 512}, {.memory_limit_mb = 512}});
    cx::distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});

    std::unique_ptr<cx::model::Sequential> model;
    {
      auto scope = strategy.scope();
      namespace L = cx::layers;
      model = std::make_unique<cx::model::Sequential>(
          std::vector<L::LayerPtr>{L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
      model->compile(std::make_shared<cx::optimizers::Adam>(1e-3),
                     std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
    }
    cx::train::Checkpoint ckpt({{"model", *model}, {"optimizer", model->optimizer()}});
    cx::train::CheckpointManager manager(ckpt, dir, /*max_to_keep=*/2);
    const auto resumed = manager.restore_or_initialize();  // before the model is built: values wait for it
    std::cout << (resumed ? "resumed from " + *resumed : std::string("no checkpoint in ") + dir + ": starting afresh")
              << "\n";

    auto train_ds = cx::data::synthetic_digits(2000, /*seed=*/1).batch(100);
    auto save = std::make_shared<cx::callbacks::ModelCheckpoint>(manager);
    model->fit(train_ds, {.epochs = epochs, .callbacks = {save}, .verbose = 0});
    const auto steps = model->optimizer().iterations().value().item<std::int64_t>();
    std::cout << "optimizer steps so far: " << steps
              << "; latest checkpoint: " << manager.latest_checkpoint().value_or("-")
              << "; kept: " << manager.checkpoints().size() << "\n";
    if (expect_resume && (!resumed || steps <= 20)) {
      std::cerr << "expected to resume from an earlier run's checkpoint\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
