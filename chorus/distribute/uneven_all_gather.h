// Internal to distribute/: all_gather of tensors whose length along `axis` differs between the
// participants (TF's strategy.gather / ReplicaContext.all_gather allow that; collectives move
// equal-sized buffers). Every participant calls it (SPMD) with the same rank, dtype and other dims.
//
// How: `axis` is moved to the front; one all_gather exchanges the lengths; each participant pads
// its tensor to the longest; one all_gather of the padded tensors; the pads are cut off and the
// pieces concatenated in rank order; `axis` goes back. The result lives on `device`. Both
// collectives are timed as kCollective (core/profile.h) with the input drained first while
// profiling, like every collective of a replica context.
#pragma once

#include <chrono>
#include <string>

#include <chorus/collective/communicator.h>
#include <chorus/core/tensor.h>

namespace chorus::distribute::internal {

// `axis` must be in range for `value` (the callers check and name their own API in messages).
Tensor all_gather_uneven(collective::Communicator& comm, const Tensor& value, int axis, const std::string& device,
                         std::chrono::milliseconds timeout);

}  // namespace chorus::distribute::internal
