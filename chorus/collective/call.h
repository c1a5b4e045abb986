// The front door's record of one collective call, and the device checks backends add to it.
//
// Every collective goes through Communicator's non-virtual methods (communicator.h), which, once
// per call and in this order:
//   1. number it: the call gets this communicator's next sequence number and a Fingerprint (op,
//      sequence, the input's dtype and shape, root, reduce op) — the one compared across
//      participants, and the one error messages print ("all_reduce #3 float32(1024,) op=sum");
//   2. validate it: every tensor defined, on a device this backend moves (the backend's
//      check_device), of a collective dtype (check_collective_dtype); output matching the input
//      (all_reduce; reduce on the root), root in 0..size-1 (broadcast, reduce), the stacked shapes
//      of all_gather and reduce_scatter. A bad argument aborts the communicator with
//      "<fingerprint> had a bad argument: <message>" (so no peer waits for this participant) and
//      throws InvalidArgumentError here;
//   3. hand the CollectiveCall and the tensors to the backend's do_* method, which only moves bytes
//      (and meets its peers: fingerprint exchange, timeouts, aborts — those differ per transport).
// A backend therefore never sees an undefined tensor, a bad root or mismatched shapes.
//
// Internal to collective/ (the backends include it); communicator.h only forward-declares it.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include <chorus/collective/communicator.h>
#include <chorus/collective/fingerprint.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {

// The collectives, in the order of their wire codes (mpi_internal.h, nccl_bootstrap.h): do not reorder.
enum class CollectiveOp : int { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kBarrier };
inline constexpr int kNumCollectiveOps = 6;
// "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier".
const char* collective_op_name(CollectiveOp op);
// The op named `name` (as Fingerprint::op spells it); nullopt for any other name.
std::optional<CollectiveOp> collective_op_from_name(std::string_view name);

// One validated, numbered call. `fp.op` is collective_op_name(kind). Each communicator rewrites its
// own on every call; cache-line aligned so that two communicators' never share a line.
struct alignas(64) CollectiveCall {
  CollectiveOp kind = CollectiveOp::kBarrier;
  Fingerprint fp;
  std::chrono::milliseconds timeout{0};  // the options' timeout
  ReduceOp op = ReduceOp::kSum;          // the options' reduce op; kSum where the call has none
  int root = -1;                         // broadcast and reduce; -1 otherwise
  bool side_stream = false;              // all_reduce's AllReduceOptions::side_stream
};

// For check_device overrides. `role` is "input", "output", or "" (broadcast's one tensor).
//
// Host backends: InvalidArgumentError when `t` lives on a GPU: "all_reduce: the input tensor is on
// /job:.../device:GPU:0; <why>" (`why` names what this backend moves and where GPU tensors go).
void check_on_host(const Tensor& t, const CollectiveCall& call, const char* role, std::string_view why);
// Device backends: InvalidArgumentError when `t` is not on `device`: "all_reduce: rank 1's input
// tensor is on <device> but <whose> is <device's name>" (`whose`: "this rank's device", ...).
void check_on_device(const Tensor& t, const DeviceContext& device, int rank, const CollectiveCall& call,
                     const char* role, std::string_view whose);

}  // namespace chorus::collective
