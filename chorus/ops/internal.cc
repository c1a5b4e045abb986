#include <chorus/ops/internal.h>

#include <algorithm>
#include <sstream>

#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/logging.h>
#include <chorus/core/profile.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/cpu/dnn.h>

namespace chorus::ops::internal {

using chorus::internal::str_cat;

void no_cuda() { throw UnavailableError("chorus was built without CUDA: GPU kernels are not available"); }

namespace {

// The canonical name of the device the replica runs on.
std::string replica_device_name(const ReplicaContext& replica) {
  const auto devices = replica.strategy().replica_devices();
  const auto id = static_cast<std::size_t>(replica.replica_id_in_sync_group());
  return id < devices.size() ? devices[id] : std::string("?");
}

}  // namespace

std::shared_ptr<DeviceContext> common_device(std::string_view op, Inputs inputs) {
  std::shared_ptr<DeviceContext> dev;
  bool mismatch = false;
  int i = 0;
  for (const Tensor& t : inputs) {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, op, ": input ", i, " is an undefined tensor");
    // No op of this layer reads strings: their elements are std::string objects, not bytes.
    CHORUS_REQUIRE(t.dtype() != DType::kString, InvalidArgumentError, op, ": input ", i, " has dtype string (shape ",
                   t.shape().to_string(), "); ", op,
                   " is not defined for string tensors, whose elements are byte strings, not numbers");
    const auto& d = t.buffer()->device_ptr();
    if (!dev)
      dev = d;
    else if (d.get() != dev.get())
      mismatch = true;
    ++i;
  }
  CHORUS_REQUIRE(dev != nullptr, InvalidArgumentError, op, ": no inputs");
  if (mismatch) {
    std::ostringstream os;
    i = 0;
    for (const Tensor& t : inputs) {
      os << (i ? ", " : "") << "input " << i << " on " << t.device_name();
      ++i;
    }
    // Inside strategy.run with several replicas, the usual cause is a variable created outside
    // strategy.scope(): it lives on one device and is not mirrored (issue 19, item 7).
    const ReplicaContext* replica = get_replica_context();
    if (replica != nullptr && replica->num_replicas_in_sync() > 1) {
      const std::string here = replica_device_name(*replica);
      i = 0;
      for (const Tensor& t : inputs) {
        if (t.is_trainable_variable() && t.device_name() != here) {
          throw InvalidArgumentError(
              str_cat(op, ": input ", i, " is a variable on ", t.device_name(), " but replica ",
                      replica->replica_id_in_sync_group(), " of ", replica->num_replicas_in_sync(), " runs on ", here,
                      ": the variable was created outside strategy.scope(), so it is not mirrored on every replica's "
                      "device. Create the model and its optimizer inside the scope (auto scope = strategy.scope(); as "
                      "TF's `with strategy.scope():`), or build and compile the model with the strategy"));
        }
        ++i;
      }
    }
    // Two contexts of one name: one of them belongs to a device runtime that has been reset since
    // (tests' reset_runtime_for_testing) — say so rather than "CPU:0 and CPU:0".
    i = 0;
    for (const Tensor& t : inputs) {
      std::shared_ptr<DeviceContext> current;
      try {
        current = runtime::find(t.device_name());
      } catch (const Error&) {
        // no such device now: the generic message below
      }
      if (current != nullptr && current.get() != &t.device_context())
        throw InvalidArgumentError(str_cat(op, ": input ", i, " lives on ", t.device_name(),
                                           " of a device runtime that has been reset since it was made "
                                           "(reset_runtime_for_testing): tensors made before the reset cannot "
                                           "meet tensors made after it; make input ",
                                           i, " again"));
      ++i;
    }
    throw InvalidArgumentError(str_cat(op, ": inputs must be on one device, got ", os.str(),
                                       ". Move them first, e.g. x.to(\"", dev->name(), "\")"));
  }
  if (config::get_log_device_placement()) CHORUS_LOG(INFO) << "Executing op " << op << " in device " << dev->name();
  return dev;
}

void require_dtype(std::string_view op, const Tensor& t, std::initializer_list<DType> allowed, std::string_view what) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::ostringstream os;
  bool first = true;
  for (DType d : allowed) {
    os << (first ? "" : ", ") << dtype_name(d);
    first = false;
  }
  throw InvalidArgumentError(str_cat(op, ": ", what, " has dtype ", dtype_name(t.dtype()), "; allowed: ", os.str()));
}

void require_float(std::string_view op, const Tensor& t, std::string_view what) {
  require_dtype(op, t, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}, what);
}

void require_same_dtype(std::string_view op, const Tensor& a, const Tensor& b) {
  CHORUS_REQUIRE(a.dtype() == b.dtype(), InvalidArgumentError, op, ": both operands must have the same dtype, got ",
                 dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), " (use ops::cast)");
}

void require_rank(std::string_view op, const Tensor& t, int rank, std::string_view what) {
  CHORUS_REQUIRE(t.shape().rank() == rank, InvalidArgumentError, op, ": ", what, " must have rank ", rank,
                 ", got shape ", t.shape().to_string());
}

void run_cpu_ref(DeviceContext& dev, void (*call)(void*), void* fn) {
  const int threads = dev.device().intra_op_threads;
  // One reference captured: the std::function stays in its small buffer (no allocation per op).
  dev.stream().execute_host([&] {
    cpu::use_threads(threads);
    profile::ScopedTimer timer(profile::TimeCategory::kLibraryKernel);
    call(fn);
  });
}

Tensor output(const std::shared_ptr<DeviceContext>& dev, const Shape& shape, DType dtype) {
  // Ops that take a target dtype (Cast) reach here before touching data: refuse string outputs.
  CHORUS_REQUIRE(dtype != DType::kString, InvalidArgumentError, "an op asked for an output of dtype string (shape ",
                 shape.to_string(), "): the ops of chorus::ops are not defined for string tensors");
  return Tensor::empty_on(dev, shape, dtype);
}

Tensor zeros_on(const std::shared_ptr<DeviceContext>& dev, const Shape& shape, DType dtype) {
  CHORUS_REQUIRE(dtype != DType::kString, InvalidArgumentError,
                 "an op asked for a zero-filled output of dtype string (shape ", shape.to_string(),
                 "): the ops of chorus::ops are not defined for string tensors");
  return Tensor::zeros(shape, dtype, dev->name());
}

Shape broadcast_shape(std::string_view op, const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> out(static_cast<std::size_t>(r));
  for (int i = 0; i < r; ++i) {
    const int ia = a.rank() - r + i, ib = b.rank() - r + i;
    const std::int64_t da = ia >= 0 ? a.dims()[static_cast<std::size_t>(ia)] : 1;
    const std::int64_t db = ib >= 0 ? b.dims()[static_cast<std::size_t>(ib)] : 1;
    CHORUS_REQUIRE(da == db || da == 1 || db == 1, InvalidArgumentError, op, ": Incompatible shapes: ", a.to_string(),
                   " vs. ", b.to_string());
    out[static_cast<std::size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

namespace {

// Merges dims d and d+1 where every operand's stride satisfies s[d] == s[d+1] * dims[d+1], and
// drops dims of size 1 (their strides never matter). `strides[o]` has r entries for each of the
// nops (<= 3) operands. Writes the layout; works in place, without allocating (it runs per op).
void merge_into(std::string_view op, const std::int64_t* dims, std::size_t r, const std::int64_t* const* strides,
                std::size_t nops, StridedLayout& layout) {
  // Merging is greedy: only the last merged dim can still grow, so it is kept apart and written
  // once it is final; more than kMaxRank merged dims are only counted, for the message.
  std::size_t count = 0;
  std::int64_t back_dim = 0;
  std::int64_t back_strides[3] = {};
  auto flush = [&] {
    if (count == 0 || count > static_cast<std::size_t>(kMaxRank)) return;
    layout.dims[count - 1] = back_dim;
    for (std::size_t o = 0; o < nops; ++o) layout.strides[o][count - 1] = back_strides[o];
  };
  for (std::size_t d = 0; d < r; ++d) {
    if (dims[d] == 1) continue;
    bool can = count > 0;
    for (std::size_t o = 0; o < nops && can; ++o) can = back_strides[o] == strides[o][d] * dims[d];
    if (can) {
      back_dim *= dims[d];
      for (std::size_t o = 0; o < nops; ++o) back_strides[o] = strides[o][d];
    } else {
      flush();
      ++count;
      back_dim = dims[d];
      for (std::size_t o = 0; o < nops; ++o) back_strides[o] = strides[o][d];
    }
  }
  flush();
  CHORUS_REQUIRE(count <= static_cast<std::size_t>(kMaxRank), InvalidArgumentError, op,
                 ": too many non-mergeable dimensions (", count, "); at most ", kMaxRank, " are supported");
  layout.rank = static_cast<int>(count);
}

}  // namespace

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(shape.rank()));
  std::int64_t acc = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    s[static_cast<std::size_t>(d)] = acc;
    acc *= shape.dims()[static_cast<std::size_t>(d)];
  }
  return s;
}

StridedLayout broadcast_layout(std::string_view op, const Shape& out, std::initializer_list<const Shape*> operands) {
  const std::size_t r = static_cast<std::size_t>(out.rank());
  CHORUS_ENFORCE(operands.size() <= 3, "broadcast_layout: ", operands.size(), " operands; a layout has room for 3");
  // Per-thread scratch: no allocation per op once it has grown to the largest rank seen.
  thread_local std::vector<std::int64_t> scratch;
  scratch.assign(r * operands.size(), 0);
  const std::int64_t* strides[3] = {};
  std::size_t o = 0;
  for (const Shape* s : operands) {
    std::int64_t* st = scratch.data() + o * r;
    const std::size_t rank = static_cast<std::size_t>(s->rank());
    const std::size_t shift = r - rank;
    std::int64_t acc = 1;  // row-major stride of dim d in the operand
    for (std::size_t d = rank; d-- > 0;) {
      st[d + shift] = s->dims()[d] == 1 ? 0 : acc;
      acc *= s->dims()[d];
    }
    strides[o++] = st;
  }
  StridedLayout layout;
  merge_into(op, out.dims().data(), r, strides, o, layout);
  return layout;
}

CopyLayout copy_layout(std::string_view op, const std::vector<std::int64_t>& dims,
                       const std::vector<std::int64_t>& src_strides, std::int64_t src_offset,
                       const std::vector<std::int64_t>& dst_strides, std::int64_t dst_offset) {
  CopyLayout layout;
  const std::int64_t* strides[2] = {src_strides.data(), dst_strides.data()};
  merge_into(op, dims.data(), dims.size(), strides, 2, layout);
  layout.offsets[0] = src_offset;
  layout.offsets[1] = dst_offset;
  return layout;
}

int normalize_axis(std::string_view op, int axis, int rank) {
  CHORUS_REQUIRE(axis >= -rank && axis < rank, InvalidArgumentError, op, ": axis ", axis,
                 " is out of range for a tensor of rank ", rank, " (valid: [", -rank, ", ", rank, "))");
  return axis < 0 ? axis + rank : axis;
}

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

}  // namespace chorus::ops::internal
