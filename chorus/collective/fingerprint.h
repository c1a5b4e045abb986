// What a participant says it is about to do, compared across participants before data moves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/core/dtype.h>

namespace chorus::collective {

struct Fingerprint {
  std::string op;              // "all_reduce", "broadcast", ...
  std::uint64_t sequence = 0;  // per communicator, from 0
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;  // the input's shape (empty for barrier)
  int root = -1;                    // broadcast/reduce; -1 when not applicable
  int reduce_op = -1;               // static_cast<int>(ReduceOp) or -1
  bool operator==(const Fingerprint&) const = default;
  // "all_reduce #3 float32(1024,) op=sum" — what error messages print.
  std::string to_string() const;
};

}  // namespace chorus::collective
