// CommunicationOptions (tf.distribute.experimental.CommunicationOptions): how a list of tensors
// (gradients) is all-reduced across replicas.
//
// Packing: the tensors are taken in the given order and grouped into packs of consecutive
// tensors of one dtype whose sizes add up to at most bytes_per_pack (a larger tensor is a pack of
// its own); each pack is flattened into one buffer, all-reduced with one collective, and split
// back. The order of packs and of tensors in them depends only on the list's shapes and dtypes,
// so it is identical on every replica (the SPMD contract of collective/communicator.h).
// Fewer, larger collectives amortize each call's fixed cost (PyTorch DDP's buckets, Horovod's
// fusion buffer); 0 selects the default, 25 MiB (DDP's bucket size).
#pragma once

#include <cstdint>

#include "distribute/cross_device_ops.h"

namespace chorus::distribute {

inline constexpr std::int64_t kDefaultBytesPerPack = 25LL << 20;

struct CommunicationOptions {
  std::int64_t bytes_per_pack = 0;  // 0: kDefaultBytesPerPack; must be >= 0
  double timeout_seconds = 0;       // 0: the strategy's timeout (collective/communicator.h's default)
  // kAuto: the strategy's choice. Anything else must equal the strategy's choice
  // (InvalidArgumentError otherwise: the communicators are chosen when the strategy is built).
  CrossDeviceOps implementation = CrossDeviceOps::kAuto;
};

}  // namespace chorus::distribute
