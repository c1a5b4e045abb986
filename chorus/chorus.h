// chorus: the umbrella header. `#include <chorus/chorus.h>` gives the whole public API.
#pragma once

#include <chorus/core/config.h>
#include <chorus/core/device_spec.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/placement.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/stream.h>
#include <chorus/core/tensor.h>
#include <chorus/core/timeline.h>
#include <chorus/core/variable.h>

#include <chorus/ops/ops.h>

#include <chorus/collective/communicator.h>
#include <chorus/collective/hierarchical.h>
#ifdef CHORUS_WITH_MPI
#include <chorus/collective/mpi/mpi.h>
#endif
#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/nccl/nccl_mpi.h>  // always declared: UnavailableError without NCCL or MPI
#include <chorus/collective/reference.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/collective/virtual_gpu.h>

#include <chorus/data/dataset.h>
#include <chorus/data/mnist.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/data/tfrecord.h>
#include <chorus/distribute/cluster_resolver.h>
#include <chorus/distribute/communication_options.h>
#include <chorus/distribute/cross_device_ops.h>
#include <chorus/distribute/distributed_dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/per_replica.h>
#include <chorus/distribute/preemption.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/replica_pool.h>
#include <chorus/distribute/sharding_options.h>
#include <chorus/distribute/zero_variable.h>

#include <chorus/summary/summary_writer.h>
#include <chorus/summary/trace.h>

#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/checkpoint/trackable.h>

#include <chorus/optimizer/optimizers.h>

#include <chorus/model/callbacks.h>
#include <chorus/model/conv_layers.h>
#include <chorus/model/functional.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layer_normalization.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/metrics.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/model.h>
#include <chorus/model/multi_head_attention.h>
#include <chorus/model/serialization.h>
#include <chorus/model/shape_layers.h>

#include <chorus/launch/build_info.h>
#include <chorus/launch/cli.h>
#include <chorus/launch/mpirun_command.h>
#include <chorus/launch/tfrecord_digits.h>
#include <chorus/launch/trainer.h>
