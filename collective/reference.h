// Reduction to one device: TensorFlow's simple cross-device fallback (ReductionToOneDevice),
// kept as the plain reference other backends are tested against and the baseline they are
// measured against (bench/collective).
//
// After all participants arrived, rank 0 alone copies every input to its own device, reduces
// them one after another there, and copies the result into every participant's output; the others
// wait. Serial by design: correctness is obvious, speed is not the point.
//
// Contract, errors, thread-safety: see communicator.h and in_process.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"

namespace chorus::collective {

std::vector<std::unique_ptr<Communicator>> make_reference_group(int size, const std::string& name = "reference");

}  // namespace chorus::collective
