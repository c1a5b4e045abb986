// tf.config.experimental.enable_op_determinism(): from the call on, every op either runs a
// deterministic algorithm (same inputs → bitwise-same outputs, run after run) or throws
// UnimplementedError naming the op and why (TF raises for the same cases). Effects:
//   - cuDNN convolutions choose only algorithms cuDNN marks deterministic;
//   - gather's gradient on GPU (scatter-add) sums in index order without atomics;
//   - CPU kernels and chorus's reductions are deterministic already (fixed order).
// Process-wide, irreversible (as in TF); thread-safe.
#pragma once

namespace chorus::ops {

void enable_op_determinism();
bool op_determinism_enabled();

}  // namespace chorus::ops
