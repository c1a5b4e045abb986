// ZeRO stage 3 (FSDP): gathering sharded parameters for their use, and sending their gradients
// back to the shards, during one replica's step (distribute/sharding_options.h, stage 3).
//
// Forward: gather_whole_values() allocates each parameter's whole value on this replica's device
// and all-gathers every replica's shard into it (ShardingCollectives::all_gather_shards: one
// collective per pack, no temporary of the model's size). When a GradientTape records the shards,
// it records one "GatherParameters" node (inputs: the shards; outputs: the whole values) whose
// backward zero-fills a missing whole gradient (every replica must send the same list),
// reduce-scatters the whole gradients (ShardingCollectives::reduce_scatter_shards, kSum) and
// returns this replica's shards of the sums: what tape.gradient(loss, {parameter}) returns. With
// offload it also starts copying to the host the shards whose update ran there last time
// (distribute/optimizer_offload.h, "Staging"), while the backward pass goes on.
//
// Per layer call (gather_layer_parameters, what Layer::operator() asks for through
// ShardingCollectives::gather_parameters): the layer's own stage-3 parameters are gathered in one
// go and become their variables' value() for this replica until after_call(y). If a tape records
// y, after_call records a "RegatherParameters" node (y → a fresh alias of y) and releases the
// whole values' storage (Buffer::release): the tape keeps the handles, not the bytes. In the
// backward pass that node runs before the layer's ops — it restores the storage and gathers the
// shards into it again — and the GatherParameters node runs after them, reduce-scatters and
// releases the storage for good. So a replica holds whole parameters only for the layer it is
// running, forward or backward (plus whatever the layer's own ops keep), as FSDP's
// reshard_after_forward. Without a tape (evaluate, predict) the whole values just die after the
// call. Storage that a layer's output shares with a parameter (a layer returning its weight) is
// never released.
//
// Prefetch (ShardingOptions::prefetch_limit, distribute/gather_prefetch.h): a layer call's gather
// and its RegatherParameters node take their whole values from a gather issued ahead on the
// replica's communication thread while the previous layer ran, when there is one; the bytes are
// the same. The GatherParameters node's reduce-scatter runs on the replica thread, inside the
// backward pass (it must hand the tape its result).
//
// Every gather and every reduce-scatter is a collective over the strategy's communicators (shared
// memory, MPI, hierarchical, virtual GPU, NCCL): the replicas must call layers and read stage-3
// parameters in the same order, and their backward passes must reach the same layers (SPMD, as the
// model is the same on every replica); one that does not meets the others in a different
// collective — a mismatch error or the collective's timeout, never a silent hang.
//
// Thread-safety: called on the replica's own thread, in its replica context.
#pragma once

#include <memory>
#include <vector>

#include <chorus/core/sharded_variable.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus::distribute {

class StrategyReplicaContext;
class ZeroVariable;

// The whole values of `vars` (stage-3 parameters of ctx's strategy) for ctx's replica, gathered
// in one collective and recorded for the tapes as above. `keep`: null, or one flag per var; when
// given, the GatherParameters node releases the whole values' storage once it ran (a
// RegatherParameters node restores it for another gradient() of a persistent tape), except those
// whose flag the caller set (a layer output that aliases the weight), and except while an outer
// tape records the backward pass (a gradient penalty differentiates it again).
std::vector<Tensor> gather_whole_values(StrategyReplicaContext& ctx, const std::vector<ZeroVariable*>& vars,
                                        std::shared_ptr<std::vector<char>> keep);

// The layer-call gather of `weights`' stage-3 parameters (those not already gathered on this
// replica); nullptr when there is none.
std::unique_ptr<ParameterGather> gather_layer_parameters(StrategyReplicaContext& ctx,
                                                         const std::vector<Variable>& weights);

}  // namespace chorus::distribute
