// The training job behind chorus-train: devices, strategy, model, data, fit, evaluate — the Keras
// flow of examples/mnist_mirrored.cc driven by TrainOptions (launch/train_options.h).
//
//   auto result = chorus::launch::train(options, std::cout);
//   if (result.accuracy < options.min_accuracy) return 1;
//
// What it does, in order:
//   1. ops::set_seed(seed) (weights, dropout), so runs with the same flags start from the same weights.
//   2. Devices. --virtual-devices N > 0: N logical devices carved out of the first GPU, or the CPU
//      when there is no GPU, each limited to --memory-limit-mb (2048 MiB when 0 and N > 1).
//      --virtual-devices 0 with a memory limit: one logical device per physical GPU (or the CPU)
//      with that limit. Otherwise the default: one logical device per physical device.
//   3. Strategy (timeout of every collective: --collective-timeout, else
//      collective::default_timeout()). default: the default strategy (one replica on the default device). one_device:
//      OneDeviceStrategy on --devices[0], else /gpu:0 when a GPU is visible, else /cpu:0.
//      mirrored: MirroredStrategy(--devices) (empty: all logical GPUs, else all logical CPUs).
//      multi_worker: MultiWorkerMirroredStrategy over the processes of the mpirun job (cluster from
//      ClusterResolver::from_environment(); MPI is initialized here when launched by mpirun, and a
//      single process is a one-worker cluster). Each worker uses --devices, else its GPU
//      (local rank mod GPUs; --virtual-devices are carved out of that GPU), else its
//      --virtual-devices CPU devices (at least one). --batch is the global batch over all workers;
//      the data are sharded across workers. Only the chief (worker 0) prints.
//   4. The model (mlp or the seed CNN, its last Dense with one unit per class: 10 for digits),
//      compiled inside the strategy's scope with Adam or SGD, SparseCategoricalCrossentropy(from_logits)
//      and accuracy. (The data set is made first: an image folder says how many classes.)
//   5. Data, elements (image [28,28,1] float32, label int32):
//      - default: data::synthetic_digits(train or 60000, seed) for training and
//        synthetic_digits(test or 10000, seed + 1) held out;
//      - --data-dir: the MNIST idx train and t10k files, the first --train / --test of each;
//      - --tfrecord: launch/tfrecord_digits.h; the first --test records (1000 when 0) are held out
//        and the rest (the first --train of them) are trained on.
//      - --image-dir: data::image_dataset_from_directory_both (subset "both", --validation-split,
//        seed --seed, --image-size, rgb, bilinear), unbatched, pixels scaled by 1/255; the first
//        --train / --test of the training and validation subsets (elements: image [H,W,3] float32,
//        label int32, one class per subfolder).
//      Training data is shuffled (buffer 10000, seed; an image folder's by image_dataset_from_directory),
//      batched by --batch and prefetched.
//      Under multi_worker the workers then compare their numbers of training and held-out examples
//      (MultiWorkerMirroredStrategy::check_counts_agree): a difference is an InvalidArgumentError
//      on every worker naming each worker's sizes, before anything is trained.
//   6. fit for --epochs (fewer when resuming, see below) with validation on the held-out set (TensorBoard logs in
//   --log-dir), then
//      evaluate the held-out set.
//
// Under mpirun (env::launcher_rank() set) with a strategy other than multi_worker, every process
// trains its own copy; a warning says so.
//
// --checkpoint-dir: a train::Checkpoint of the model and optimizer, managed by a CheckpointManager
// (max_to_keep 3) and saved after every epoch, so the checkpoint number is the number of epochs
// done. With resume (the default) the latest checkpoint is restored before training and only the
// epochs still missing from --epochs are trained (none: the restored model is just evaluated).
// --no-resume starts from fresh weights (later saves continue the numbering in the directory).
//
// Errors: chorus errors from the layers below propagate (bad devices → InvalidArgumentError, a
// missing data file → NotFoundError, a corrupt record → DataLossError, out of memory →
// ResourceExhaustedError); the tool prints them and exits 1. Call once per process: device
// configuration is fixed at first use (core/config.h).
#pragma once

#include <iosfwd>
#include <string>

#include <chorus/launch/train_options.h>

namespace chorus::launch {

struct TrainResult {
  double accuracy = 0;   // held-out accuracy after the last epoch
  double loss = 0;       // held-out mean loss
  int replicas = 0;      // num_replicas_in_sync of the strategy used
  std::string strategy;  // e.g. "MirroredStrategy on 2 devices (shared memory: ...)"
  // SIGTERM reached a worker (with --checkpoint-dir): every worker backed up the same step and
  // training stopped; nothing was evaluated. Rerunning the command resumes.
  bool preempted = false;
};

// Runs the job described above, writing progress and a summary to `out`.
TrainResult train(const TrainOptions& options, std::ostream& out);

}  // namespace chorus::launch
