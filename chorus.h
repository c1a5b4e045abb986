// chorus: the umbrella header. `#include <chorus/chorus.h>` gives the whole public API.
#pragma once

#include "core/config.h"
#include "core/device_spec.h"
#include "core/distributed_variable.h"
#include "core/distribution.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/placement.h"
#include "core/runtime.h"
#include "core/sharded_variable.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "core/timeline.h"
#include "core/variable.h"

#include "ops/ops.h"

#include "collective/communicator.h"
#include "collective/hierarchical.h"
#ifdef CHORUS_WITH_MPI
#include "collective/mpi.h"
#endif
#include "collective/nccl.h"
#include "collective/nccl_mpi.h"  // always declared: UnavailableError without NCCL or MPI
#include "collective/reference.h"
#include "collective/shared_memory.h"
#include "collective/virtual_gpu.h"

#include "data/dataset.h"
#include "data/mnist.h"
#include "data/synthetic_digits.h"
#include "data/tfrecord.h"
#include "distribute/cluster_resolver.h"
#include "distribute/communication_options.h"
#include "distribute/cross_device_ops.h"
#include "distribute/distributed_dataset.h"
#include "distribute/mirrored_strategy.h"
#include "distribute/mirrored_variable.h"
#include "distribute/multi_worker_mirrored_strategy.h"
#include "distribute/per_replica.h"
#include "distribute/preemption.h"
#include "distribute/replica_context.h"
#include "distribute/replica_pool.h"
#include "distribute/sharded_variable.h"
#include "distribute/sharding_options.h"

#include "summary/summary_writer.h"

#include "checkpoint/bundle.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/trackable.h"

#include "optimizer/optimizers.h"

#include "model/callbacks.h"
#include "model/initializers.h"
#include "model/layers.h"
#include "model/losses.h"
#include "model/metrics.h"
#include "model/mixed_precision.h"
#include "model/model.h"

#include "launch/build_info.h"
#include "launch/cli.h"
#include "launch/mpirun_command.h"
#include "launch/tfrecord_digits.h"
#include "launch/trainer.h"
