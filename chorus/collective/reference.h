// Reduction to one device: TensorFlow's simple cross-device fallback (ReductionToOneDevice),
// kept as the plain reference other backends are tested against and the baseline they are
// measured against (bench/collective).
//
// After all participants arrived, rank 0 alone reduces every input one after another and copies
// the result into every participant's output; the others wait. Serial by design: correctness is
// obvious, speed is not the point. Participants may be on any logical devices, mixed: CPU tensors
// are read and written in place, GPU tensors through host copies (the reduction runs on the host,
// like TF's ReductionToOneDevice(reduce_to_device="/cpu:0")). It is the fallback for GPUs when
// NCCL cannot serve them (no NCCL in the build, CPU and GPU devices mixed, GPUs partly shared).
// If rank 0 fails while moving data (a device error), the group is aborted and the others raise
// AbortedError naming it.
//
// Contract, errors, thread-safety: see communicator.h and in_process.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

std::vector<std::unique_ptr<Communicator>> make_reference_group(int size, const std::string& name = "reference");

}  // namespace chorus::collective
