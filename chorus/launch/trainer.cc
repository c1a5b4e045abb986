#include <chorus/launch/trainer.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <memory>
#include <ostream>

#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/config.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/data/io/image_folder.h>
#include <chorus/data/mnist.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/cluster_resolver.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/launch/tfrecord_digits.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/random.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/sgd.h>
#if defined(CHORUS_WITH_MPI)
#include <chorus/collective/mpi/mpi.h>
#endif

namespace chorus::launch {
namespace {

using internal::str_cat;

constexpr std::int64_t kDefaultVirtualLimitMb = 2048;
constexpr std::int64_t kSyntheticTrain = 60000;
constexpr std::int64_t kSyntheticTest = 10000;
constexpr std::int64_t kTFRecordTest = 1000;
constexpr std::int64_t kShuffleBuffer = 10000;

// One whole line per write and flush: the processes of an mpirun job share one terminal, and lines
// written piecewise would interleave.
void line(std::ostream& out, const std::string& text) { out << (text + "\n") << std::flush; }

// local_rank picks the GPU that virtual devices are carved out of: one physical GPU per process on
// a multi-GPU host (what MultiWorkerMirroredStrategy's kLocalRankGpu policy then selects).
void configure_devices(const TrainOptions& o, int local_rank, std::ostream& out) {
  const auto gpus = config::list_physical_devices("GPU");
  const auto cpu = config::list_physical_devices("CPU").at(0);
  if (o.virtual_devices > 0) {
    const PhysicalDevice& base = gpus.empty() ? cpu : gpus[static_cast<std::size_t>(local_rank) % gpus.size()];
    std::int64_t limit = o.memory_limit_mb;
    if (limit == 0) limit = o.virtual_devices > 1 ? kDefaultVirtualLimitMb : -1;
    config::set_logical_device_configuration(
        base, std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(o.virtual_devices),
                                                      LogicalDeviceConfiguration{.memory_limit_mb = limit}));
    line(out, str_cat("Virtual devices: ", o.virtual_devices, " on ", base.name,
                      limit > 0 ? str_cat(", ", limit, " MiB each") : std::string()));
  } else if (o.memory_limit_mb > 0) {
    for (const auto& d : gpus.empty() ? std::vector<PhysicalDevice>{cpu} : gpus)
      config::set_logical_device_configuration(d, {{.memory_limit_mb = o.memory_limit_mb}});
    line(out, str_cat("Memory limit: ", o.memory_limit_mb, " MiB per device"));
  }
}

std::unique_ptr<distribute::Strategy> make_strategy(const TrainOptions& o,
                                                    const std::optional<distribute::ClusterResolver>& cluster) {
  if (o.strategy == "default") return nullptr;
  const std::chrono::milliseconds timeout =
      o.collective_timeout.count() > 0 ? o.collective_timeout : collective::default_timeout();
  if (o.strategy == "multi_worker") {
    distribute::MultiWorkerMirroredStrategyOptions mw;
    mw.cluster_resolver = cluster;
    mw.devices = o.devices;
    mw.timeout = timeout;
    // Without a GPU the policy is kCpu: use every virtual CPU device this process configured.
    if (config::list_physical_devices("GPU").empty() && o.virtual_devices > 1)
      mw.cpu_devices_per_worker = o.virtual_devices;
    return std::make_unique<distribute::MultiWorkerMirroredStrategy>(mw);
  }
  if (o.strategy == "one_device") {
    std::string device = o.devices.empty() ? "" : o.devices[0];
    if (device.empty()) device = config::list_logical_devices("GPU").empty() ? "/cpu:0" : "/gpu:0";
    return std::make_unique<distribute::OneDeviceStrategy>(device, timeout);
  }
  if (o.strategy == "mirrored")
    return std::make_unique<distribute::MirroredStrategy>(o.devices,
                                                          distribute::MirroredStrategyOptions{.timeout = timeout});
  throw InternalError(str_cat("make_strategy: unhandled --strategy ", o.strategy));
}

std::vector<layers::LayerPtr> make_layers(const std::string& model, std::int64_t classes) {
  namespace L = layers;
  if (model == "mlp") return {L::Flatten(), L::Dense(128, "relu"), L::Dense(classes)};
  return {L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
          L::Conv2D(64, 3, "relu"), L::Flatten(),       L::Dense(64, "relu"),     L::Dense(classes)};
}

std::shared_ptr<optimizers::Optimizer> make_optimizer(const TrainOptions& o) {
  if (o.optimizer == "sgd")
    return std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = o.learning_rate});
  return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = o.learning_rate});
}

// A dataset limited to its first n elements (n = 0: all).
data::Dataset first(const data::Dataset& ds, std::int64_t n) { return n > 0 ? ds.take(n) : ds; }

struct Data {
  data::Dataset train, test;
  std::string description;
  std::int64_t classes = 10;
  bool shuffled = false;  // the training set is shuffled already (an image folder)
};

// --image-dir: image_dataset_from_directory's training and validation subsets (seeded, so every
// worker lists the same split), single images scaled from 0..255 to [0, 1] as a Keras model's
// Rescaling(1/255) does.
Data image_folder_data(const TrainOptions& o) {
  CHORUS_REQUIRE(o.seed <= 0xffffffffull, InvalidArgumentError, "--seed ", o.seed,
                 " with --image-dir must be below 2^32 (numpy's RandomState, whose shuffle splits the files)");
  auto [train, val] = data::image_dataset_from_directory_both(o.image_dir, {.batch_size = std::nullopt,
                                                                            .image_size = o.image_size,
                                                                            .seed = o.seed,
                                                                            .validation_split = o.validation_split,
                                                                            .subset = "both",
                                                                            .verbose = false});
  const auto scale = [](const data::Element& e) { return data::Element{e[0] * (1.0 / 255.0), e[1]}; };
  Data d{first(train.dataset.map(scale), o.train_size), first(val.dataset.map(scale), o.test_size),
         str_cat("image folder ", o.image_dir, ": ", train.class_names.size(), " classes, ", train.file_paths.size(),
                 " train / ", val.file_paths.size(), " held out, ", o.image_size[0], "x", o.image_size[1]),
         static_cast<std::int64_t>(train.class_names.size()), true};
  return d;
}

Data make_data(const TrainOptions& o) {
  if (!o.image_dir.empty()) return image_folder_data(o);
  if (!o.tfrecord.empty()) {
    const auto files = expand_file_patterns(o.tfrecord);
    const std::int64_t test = o.test_size > 0 ? o.test_size : kTFRecordTest;
    const auto all =
        tfrecord_digits_dataset(files, data::TFRecordOptions::from_compression_type(o.tfrecord_compression));
    return {first(all.skip(test), o.train_size), all.take(test),
            str_cat(files.size(), " TFRecord file(s), first ", test, " records held out")};
  }
  if (!o.data_dir.empty()) {
    return {first(data::load_digits(o.data_dir, true), o.train_size),
            first(data::load_digits(o.data_dir, false), o.test_size), "MNIST idx files in " + o.data_dir};
  }
  const std::int64_t train = o.train_size > 0 ? o.train_size : kSyntheticTrain;
  const std::int64_t test = o.test_size > 0 ? o.test_size : kSyntheticTest;
  return {data::synthetic_digits(train, o.seed), data::synthetic_digits(test, o.seed + 1),
          str_cat("synthetic digits, ", train, " train / ", test, " held out")};
}

// --no-resume: the earlier run's files move to <dir>/replaced-<unix time>/ (never deleted) — the
// epoch checkpoints' and, into its backup/, the backup's — each by its own CheckpointManager
// (CheckpointManagerOptions::start_over_into): only the files a manager owns move, and only once
// it holds the directory's lock, so a directory a running job holds is refused before anything
// moves. Returns the manager of the epoch checkpoints and prints where the files went.
std::unique_ptr<train::CheckpointManager> start_over(train::Checkpoint& ckpt, const TrainOptions& o,
                                                     std::ostream& out) {
  const std::string to =
      (std::filesystem::path(o.checkpoint_dir) / str_cat("replaced-", static_cast<std::int64_t>(std::time(nullptr))))
          .string();
  auto manager = std::make_unique<train::CheckpointManager>(ckpt, o.checkpoint_dir, /*max_to_keep=*/3,
                                                            train::CheckpointManagerOptions{.start_over_into = to});
  std::size_t moved = manager->files_moved_aside();
  const std::string backup_dir = o.checkpoint_dir + "/backup";
  std::error_code ec;
  if (std::filesystem::is_directory(backup_dir, ec)) {
    train::Checkpoint none(std::vector<train::TrackableChild>{});
    train::CheckpointManager backup(none, backup_dir, /*max_to_keep=*/1,
                                    train::CheckpointManagerOptions{.start_over_into = to + "/backup"});
    moved += backup.files_moved_aside();
  }
  if (moved > 0)
    line(out,
         str_cat("--no-resume: the earlier checkpoints of ", o.checkpoint_dir, " (", moved, " file(s)) moved to ", to));
  return manager;
}

// The checkpoints of a run with --checkpoint-dir (all null without one): model and optimizer,
// saved after every epoch, so save_counter = epochs done.
struct Checkpoints {
  std::unique_ptr<train::Checkpoint> ckpt;
  std::unique_ptr<train::CheckpointManager> manager;
  int epochs_done = 0;  // by the restored checkpoint, at most o.epochs
};

// --no-resume: start_over. Otherwise restores the latest epoch checkpoint, if there is one, into
// `net` — built first on test_ds's first batch (in `owned`'s scope, when there is one) — and throws
// FailedPreconditionError when it is not a checkpoint of this model.
Checkpoints open_checkpoints(const TrainOptions& o, model::Sequential& net, distribute::Strategy* owned,
                             distribute::Strategy& strategy, const data::Dataset& test_ds, std::ostream& out) {
  Checkpoints ck;
  if (o.checkpoint_dir.empty()) return ck;
  ck.ckpt.reset(new train::Checkpoint{{"model", net}, {"optimizer", net.optimizer()}});
  if (!o.resume) {
    ck.manager = start_over(*ck.ckpt, o, out);
    strategy.worker_barrier("chorus-train --no-resume");
    return ck;
  }
  ck.manager = std::make_unique<train::CheckpointManager>(*ck.ckpt, o.checkpoint_dir, /*max_to_keep=*/3);
  // Build the model first, so that the restore can be checked against every model variable:
  // a checkpoint of another model (other keys, another program's object graph) must not
  // "resume" into random weights.
  if (auto first_batch = test_ds.make_iterator().next()) {
    std::optional<distribute::Strategy::Scope> scope;
    if (owned != nullptr) scope.emplace(*owned);
    net.build((*first_batch)[0].shape());
  }
  const auto restored = ck.manager->restore_or_initialize();
  if (!restored) return ck;
  const train::LoadStatus& status = *ck.manager->restore_status();
  // Optimizer slots are created by training and restored then; every model variable (and
  // the optimizer's iteration count) exists now and must have come from the checkpoint.
  status.expect_partial();
  const auto unmatched = status.unmatched_objects();
  if (!unmatched.empty()) {
    std::string list;
    for (const auto& u : unmatched) list += "\n  " + u;
    throw FailedPreconditionError(
        str_cat("cannot resume from ", *restored, ": it is not a checkpoint of this model; ", unmatched.size(),
                " of its variable(s) got no value:", list,
                "\nUse another --checkpoint-dir, or --no-resume to start over (the old checkpoints are moved aside)"));
  }
  const auto done = ck.ckpt->save_counter().value().item<std::int64_t>();
  ck.epochs_done = static_cast<int>(std::min<std::int64_t>(done, o.epochs));
  line(out, str_cat("Resumed from ", *restored, " (", net.variables().size(), " model variables restored, ", done,
                    " epoch(s) done, ", o.epochs - ck.epochs_done, " to go)"));
  return ck;
}

// The epoch checkpoints and the preemption backup in `backup_dir` are saved one after the other at
// each epoch's end: a crash between the two leaves one older than the other. The newer one wins: a
// backup behind the epoch checkpoints is moved aside by the chief (its restore would take the model
// back); a backup ahead of them sets the epochs done, and ckpt's save_counter with them, so the
// next epoch checkpoint gets the right number. Returns the epochs done. Every worker calls it.
int reconcile_backup(const std::string& backup_dir, int epochs_done, const TrainOptions& o, train::Checkpoint& ckpt,
                     distribute::Strategy& strategy, bool chief, std::ostream& out) {
  const auto point = callbacks::BackupAndRestore::saved_point(backup_dir);
  if (!point) return epochs_done;
  if (point->first >= epochs_done) {
    epochs_done = std::min(point->first, o.epochs);
    Variable counter = ckpt.save_counter();  // a handle: assigning it sets the checkpoint's counter
    counter.assign(Tensor::scalar<std::int64_t>(epochs_done, "/cpu:0"));
    return epochs_done;
  }
  strategy.worker_barrier("chorus-train: reading the backup");
  if (chief) {
    const std::string aside = str_cat(backup_dir, ".stale-", static_cast<std::int64_t>(std::time(nullptr)));
    std::filesystem::rename(backup_dir, aside);
    line(out, str_cat("The backup in ", backup_dir, " (epoch ", point->first + 1,
                      ") is older than the epoch checkpoints (", epochs_done, " epoch(s) done): moved to ", aside));
  }
  strategy.worker_barrier("chorus-train: stale backup moved aside");
  return epochs_done;
}

}  // namespace

TrainResult train_impl(const TrainOptions& o, std::ostream& all_out, std::string& phase) {
  const bool multi_worker = o.strategy == "multi_worker";
  if (const auto rank = env::launcher_rank(); rank && !multi_worker)
    line(all_out,
         str_cat("warning: process ", *rank, " of a multi-process job with --strategy ", o.strategy,
                 ": every process trains its own copy of the model; --strategy multi_worker trains one model"));

  // Destruction order matters: the model (declared below) before the strategy, the strategy before
  // MPI (multi_worker_mirrored_strategy.h).
  std::optional<distribute::ClusterResolver> cluster;
#if defined(CHORUS_WITH_MPI)
  std::optional<collective::MpiEnvironment> mpi;
  if (multi_worker && collective::MpiEnvironment::launched_by_mpirun()) mpi.emplace();
#endif
  if (multi_worker) cluster = distribute::ClusterResolver::from_environment();
  // Workers talk over MPI (started by mpirun) or meet through a store (TF_CONFIG's chief address,
  // torchrun's MASTER_ADDR/MASTER_PORT: chorus-run --nproc-per-node, a Kubernetes operator). The
  // strategy's own refusal speaks to a C++ programmer; a command-line user needs the command.
  bool over_mpi = false;
#if defined(CHORUS_WITH_MPI)
  over_mpi = mpi.has_value();
#endif
  if (cluster && cluster->num_workers() > 1 && !over_mpi && !cluster->store_address())
    throw FailedPreconditionError(str_cat(
        "--strategy multi_worker: ", cluster->source(), " describes ", cluster->num_workers(),
        " workers, but this process was not started by mpirun and the cluster names no rendezvous store (a "
        "TF_CONFIG chief address with a port, or MASTER_ADDR/MASTER_PORT). Start one process per worker: chorus-run "
        "--nproc-per-node ",
        cluster->num_workers(), " -- chorus-train --strategy multi_worker ... (torchrun style), or chorus-run -np ",
        cluster->num_workers(), " -- ... (mpirun); or unset TF_CONFIG to train as one worker"));
  // Only the chief of a multi-worker job prints progress; the other workers print errors only.
  const bool chief = !cluster || cluster->is_chief();
  std::ostream silent(nullptr);
  std::ostream& out = chief ? all_out : silent;

  ops::set_seed(o.seed);
  configure_devices(o, cluster ? cluster->local_rank() : 0, out);
  std::unique_ptr<distribute::Strategy> owned = make_strategy(o, cluster);
  distribute::Strategy& strategy = owned ? *owned : distribute::get_strategy();

  TrainResult result;
  result.replicas = strategy.num_replicas_in_sync();
  result.strategy = str_cat(strategy.name(), " on ", result.replicas, " device", result.replicas == 1 ? "" : "s");
  if (cluster) result.strategy += str_cat(" in ", cluster->num_workers(), " worker(s)");
  if (result.replicas > 1)
    result.strategy += str_cat(" (", distribute::cross_device_ops_name(strategy.cross_device_ops().ops), ")");
  line(out, "Strategy: " + result.strategy);

  phase = str_cat("making the data set (--train ", o.train_size, ", --test ", o.test_size, ")");
  Data d = make_data(o);
  line(out, "Data: " + d.description);

  std::unique_ptr<model::Sequential> net;
  {
    std::optional<distribute::Strategy::Scope> scope;
    if (owned) scope.emplace(*owned);
    net = std::make_unique<model::Sequential>(make_layers(o.model, d.classes), o.model);
    net->compile(make_optimizer(o), std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true),
                 {"accuracy"});
  }

  if (multi_worker) {
    // Workers with different data would take different numbers of steps, and the one with more
    // would wait for the others until the collective timeout: compare the sizes first, so that
    // every worker fails at once with the same message.
    phase = "comparing the data set sizes of the workers";
    static_cast<const distribute::MultiWorkerMirroredStrategy&>(strategy).check_counts_agree(
        "the data sets (--train, --test, --data-dir, --tfrecord, --image-dir)",
        {{"training examples", d.train.cardinality()}, {"held-out examples", d.test.cardinality()}});
  }
  auto train_ds =
      (d.shuffled ? d.train : d.train.shuffle(kShuffleBuffer, o.seed)).batch(o.batch_size).prefetch(data::kAutotune);
  auto test_ds = d.test.batch(o.batch_size);

  phase = "restoring the checkpoint";
  Checkpoints ck = open_checkpoints(o, *net, owned.get(), strategy, test_ds, out);
  int epochs_done = ck.epochs_done;

  // Epochs are numbered from the run's start (initial_epoch), so a resumed run reads the data in
  // the uninterrupted run's order and a mid-epoch backup's epoch means the same epoch.
  model::FitOptions fit{.epochs = o.epochs,
                        .initial_epoch = epochs_done,
                        .validation_data = test_ds,
                        .verbose = o.verbose && chief ? 1 : 0,
                        .terminate_on_nan = o.terminate_on_nan};
  if (!o.log_dir.empty()) fit.callbacks.push_back(std::make_shared<callbacks::TensorBoard>(o.log_dir));
  // Every worker calls save after each epoch; the chief writes (checkpoint/checkpoint.h).
  if (ck.manager) fit.callbacks.push_back(std::make_shared<callbacks::ModelCheckpoint>(*ck.manager));
  // Preemption (SIGTERM to any worker): every worker backs up the same step into
  // <checkpoint-dir>/backup and fit returns; the rerun resumes from it, mid-epoch.
  if (ck.manager) {
    const std::string backup_dir = o.checkpoint_dir + "/backup";
    epochs_done = reconcile_backup(backup_dir, epochs_done, o, *ck.ckpt, strategy, chief, out);
    fit.callbacks.push_back(std::make_shared<callbacks::BackupAndRestore>(backup_dir));
    fit.initial_epoch = epochs_done;
  }
  phase = str_cat("training (--batch ", o.batch_size, ")");
  if (epochs_done < o.epochs) {
    const model::History history = net->fit(train_ds, fit);
    if (history.preempted) {
      result.preempted = true;
      line(out, "Preempted: every worker backed up the same step to " + o.checkpoint_dir +
                    "/backup; rerun the same command to continue");
      return result;
    }
  }
  phase = "evaluating";

  const auto metrics = net->evaluate(test_ds);
  result.accuracy = metrics.at("accuracy");
  result.loss = metrics.at("loss");
  line(out, str_cat("held-out accuracy: ", result.accuracy, ", loss: ", result.loss));
  if (!o.log_dir.empty()) line(out, "TensorBoard logs in " + o.log_dir);
  return result;
}

TrainResult train(const TrainOptions& o, std::ostream& all_out) {
  // std::bad_alloc from anywhere below (a huge --train, --batch or a shape) becomes a typed error
  // that says what was being done, rather than a bare "std::bad_alloc".
  std::string phase = "setting up";
  try {
    return train_impl(o, all_out, phase);
  } catch (const std::bad_alloc&) {
    throw ResourceExhaustedError(
        str_cat("out of host memory while ", phase, "; lower the sizes, or give the process more memory"));
  }
}

}  // namespace chorus::launch
