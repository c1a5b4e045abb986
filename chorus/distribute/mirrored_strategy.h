// MirroredStrategy and OneDeviceStrategy (tf.distribute.MirroredStrategy, OneDeviceStrategy).
//
//   MirroredStrategy strategy;                                   // all logical GPUs, else CPUs
//   MirroredStrategy on_two({"/cpu:0", "/cpu:1"});               // explicit devices
//   MirroredStrategy forced({"/gpu:0", "/gpu:1"}, {.cross_device_ops = CrossDeviceOps::kVirtualGpu});
//   MirroredStrategy compressed({}, {.communication_options = {.compression = Compression::kBFloat16}});
//   OneDeviceStrategy one("/gpu:0");
//
// MirroredStrategy: one replica per device on persistent replica threads; the reduction is chosen
// from the physical devices behind the logical ones (distribute/cross_device_ops.h) and reported
// by cross_device_ops(); forcing an impossible one (NCCL on virtual GPUs) → InvalidArgumentError
// here, before any replica runs. Logs "Using MirroredStrategy with devices (...)" as TF does.
// OneDeviceStrategy: one replica, on the calling thread, ops and variables placed on `device`.
// With options.sharding.stage = 1 (ZeRO stage 1) the optimizer's slots are sharded over the
// replicas (distribute/zero_variable.h); at stage 2 the gradients are reduce-scattered too; at
// stage 3 the parameters are sharded too (gathered per layer call); the log line names the stage;
// sharding_stage() reports it.
// Errors: an unknown or repeated device → InvalidArgumentError listing the devices that exist;
// an invalid sharding stage (sharding_options.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/distribute/sharding_options.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

struct MirroredStrategyOptions {
  CrossDeviceOps cross_device_ops = CrossDeviceOps::kAuto;
  std::chrono::milliseconds timeout = collective::default_timeout();  // every collective / merge_call
  // Defaults of the replicas' all_reduce(op, values), e.g. gradient compression
  // (.communication_options = {.compression = Compression::kBFloat16}); see communication_options.h.
  // implementation must be kAuto or equal the cross-device ops chosen (InvalidArgumentError).
  CommunicationOptions communication_options;
  // ZeRO sharding (distribute/sharding_options.h, docs/sharding.md): {.stage = 1} partitions the
  // optimizer slots over the replicas, {.stage = 2} the gradients too, {.stage = 3} the parameters
  // too. A value outside 0..3 → InvalidArgumentError, here.
  // (MultiWorkerMirroredStrategyOptions::sharding is the same option across processes.)
  ShardingOptions sharding;
  // All-reduce the gradients during the backward pass, in buckets, as PyTorch DDP and Horovod do
  // (distribute/overlapped_reduction.h, docs/overlap.md), for the steps that ask for the sum:
  // fit's train_step, minimize, and custom loops through Optimizer::compute_gradients; false: one
  // packed all-reduce after it.
  // The results are bitwise the same either way. nullopt (the default): on CPU devices, on when the
  // replicas' op threads leave a core of the host free for the communication threads (on a machine
  // whose cores all compute, overlap costs more than it hides: bench_overlap); on virtual GPUs of
  // one GPU on (each device's side stream; measured faster on an H200, docs/overlap.md); on GPUs
  // reducing over NCCL off until validated on 2+ GPUs. At ZeRO stages 2 and 3 the
  // reduce-scatters (and the all-reduces of gradients without sharded slots) run so, in the
  // buckets they would use after the backward pass, from an optimizer's second step on
  // (docs/sharding.md, "Prefetch and overlap").
  std::optional<bool> overlap_gradient_all_reduce;
};

class MirroredStrategy final : public Strategy {
 public:
  // devices empty: all logical GPUs, else all logical CPUs.
  explicit MirroredStrategy(std::vector<std::string> devices = {}, const MirroredStrategyOptions& options = {});
};

class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device,
                             std::chrono::milliseconds timeout = collective::default_timeout());
};

}  // namespace chorus::distribute
