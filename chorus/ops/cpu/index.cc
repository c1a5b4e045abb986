// Gather, scatter-add and one-hot on the CPU.
#include <cstring>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {
using chorus::internal::str_cat;

template <typename I>
std::int64_t checked(const I* idx, std::int64_t j, std::int64_t rows) {
  const auto v = static_cast<std::int64_t>(idx[j]);
  if (v < 0 || v >= rows) throw InvalidArgumentError(str_cat("indices[", j, "] = ", v, " is not in [0, ", rows, ")"));
  return v;
}
}  // namespace

void gather(DType dtype, const void* params, std::int64_t rows, std::int64_t inner, DType index_dtype,
            const void* indices, std::int64_t num_indices, void* out) {
  const std::size_t row_bytes = static_cast<std::size_t>(inner) * dtype_size(dtype);
  const auto* p = static_cast<const unsigned char*>(params);
  auto* o = static_cast<unsigned char*>(out);
  dispatch_index(index_dtype, "gather", [&](auto it) {
    using I = decltype(it);
    const auto* idx = static_cast<const I*>(indices);
    for (std::int64_t j = 0; j < num_indices; ++j) {
      const std::int64_t row = checked(idx, j, rows);
      if (row_bytes)
        std::memcpy(o + static_cast<std::size_t>(j) * row_bytes, p + static_cast<std::size_t>(row) * row_bytes,
                    row_bytes);
    }
  });
}

void scatter_add(DType dtype, const void* updates, std::int64_t inner, DType index_dtype, const void* indices,
                 std::int64_t num_indices, void* out, std::int64_t rows) {
  dispatch_dtype(dtype, "scatter_add", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      throw InvalidArgumentError("scatter_add: bool is not defined");
    } else {
      using N = Num<T>;
      const auto* u = static_cast<const T*>(updates);
      auto* o = static_cast<T*>(out);
      dispatch_index(index_dtype, "scatter_add", [&](auto it) {
        using I = decltype(it);
        const auto* idx = static_cast<const I*>(indices);
        for (std::int64_t j = 0; j < num_indices; ++j) {
          const auto row = static_cast<std::int64_t>(idx[j]);
          if (row < 0 || row >= rows) continue;  // as the GPU kernel: gather already rejected these
          T* dst = o + row * inner;
          const T* src = u + j * inner;
          for (std::int64_t i = 0; i < inner; ++i) dst[i] = N::store(N::load(dst[i]) + N::load(src[i]));
        }
      });
    }
  });
}

void one_hot(DType dtype, DType index_dtype, const void* indices, std::int64_t num_indices, std::int64_t depth,
             double on, double off, void* out) {
  const std::size_t es = dtype_size(dtype);
  unsigned char on_bits[8] = {}, off_bits[8] = {};
  convert(&on, DType::kFloat64, on_bits, dtype, 1);
  convert(&off, DType::kFloat64, off_bits, dtype, 1);
  auto* o = static_cast<unsigned char*>(out);
  dispatch_index(index_dtype, "one_hot", [&](auto it) {
    using I = decltype(it);
    const auto* idx = static_cast<const I*>(indices);
    for (std::int64_t j = 0; j < num_indices; ++j) {
      const auto hot = static_cast<std::int64_t>(idx[j]);  // out of range: an all-off row (TF)
      for (std::int64_t d = 0; d < depth; ++d)
        std::memcpy(o + static_cast<std::size_t>(j * depth + d) * es, d == hot ? on_bits : off_bits, es);
    }
  });
}

}  // namespace chorus::ops::cpu
