#include <chorus/collective/fingerprint.h>

#include <chorus/core/shape.h>

namespace chorus::collective {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProd: return "prod";
  }
  return "?";
}

std::string Fingerprint::to_string() const {
  // Appended piece by piece: `"literal" + std::string` trips a GCC 12 -Wrestrict false positive.
  std::string s = op;
  s.append(" #").append(std::to_string(sequence));
  if (op != "barrier") s.append(" ").append(dtype_name(dtype)).append(Shape(shape).to_string());
  if (reduce_op >= 0) s.append(" op=").append(reduce_op_name(static_cast<ReduceOp>(reduce_op)));
  if (root >= 0) s.append(" root=").append(std::to_string(root));
  return s;
}

}  // namespace chorus::collective
