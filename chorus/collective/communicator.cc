// The front door of every collective (communicator.h, call.h): number, validate once, hand over.
#include <chorus/collective/communicator.h>

#include <chorus/collective/call.h>
#include <chorus/collective/host_reduce.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/shape.h>

namespace chorus::collective {
namespace {

using internal::str_cat;

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  CHORUS_REQUIRE(a.dtype() == b.dtype() && a.shape() == b.shape(), InvalidArgumentError, op, ": output ",
                 dtype_name(b.dtype()), b.shape().to_string(), " does not match input ", dtype_name(a.dtype()),
                 a.shape().to_string());
}

void check_root(int root, int size, const char* op) {
  CHORUS_REQUIRE(root >= 0 && root < size, InvalidArgumentError, op, ": root ", root, " is not a rank of this ", size,
                 "-participant communicator (valid: 0..", size - 1, ")");
}

// all_gather: output = `size` inputs stacked on axis 0.
void check_gathered(const Tensor& input, const Tensor& output, int size) {
  CHORUS_REQUIRE(input.shape().rank() >= 1, InvalidArgumentError,
                 "all_gather: the input must have rank >= 1, got "
                 "shape ",
                 input.shape().to_string());
  std::vector<std::int64_t> want = input.shape().dims();
  want[0] *= size;
  CHORUS_REQUIRE(output.dtype() == input.dtype() && output.shape() == Shape(want), InvalidArgumentError,
                 "all_gather: output must be ", dtype_name(input.dtype()), Shape(want).to_string(), " (", size,
                 " inputs of ", input.shape().to_string(), " stacked on axis 0), got ", dtype_name(output.dtype()),
                 output.shape().to_string());
}

// reduce_scatter: input = `size` outputs stacked on axis 0.
void check_scattered(const Tensor& input, const Tensor& output, int size) {
  const auto& d = input.shape().dims();
  CHORUS_REQUIRE(!d.empty() && d[0] % size == 0, InvalidArgumentError,
                 "reduce_scatter: the input's first dimension "
                 "must be a multiple of the communicator size ",
                 size, ", got shape ", input.shape().to_string());
  std::vector<std::int64_t> want = d;
  want[0] /= size;
  CHORUS_REQUIRE(output.dtype() == input.dtype() && output.shape() == Shape(want), InvalidArgumentError,
                 "reduce_scatter: output must be ", dtype_name(input.dtype()), Shape(want).to_string(), ", got ",
                 dtype_name(output.dtype()), output.shape().to_string());
}

// The call's record, written into `call` (the communicator's, reused: its shape keeps its
// capacity, so numbering a call allocates nothing); the sequence number is taken whether or not the
// call turns out valid, so every participant numbers the same calls alike.
const CollectiveCall& numbered(CollectiveCall& call, CollectiveOp kind, std::uint64_t sequence, const Tensor* input,
                               std::optional<ReduceOp> op, int root, std::chrono::milliseconds timeout) {
  if (call.kind != kind || call.fp.op.empty()) call.fp.op = collective_op_name(kind);  // a strlen and a copy
  call.kind = kind;
  call.fp.sequence = sequence;
  call.fp.dtype = DType::kFloat32;
  call.fp.shape.clear();
  if (input != nullptr && input->defined()) {
    call.fp.dtype = input->dtype();
    const auto& dims = input->shape().dims();
    call.fp.shape.assign(dims.begin(), dims.end());
  }
  call.fp.root = root;
  call.fp.reduce_op = op ? static_cast<int>(*op) : -1;
  call.timeout = timeout;
  call.op = op.value_or(ReduceOp::kSum);
  call.root = root;
  call.side_stream = false;
  return call;
}

}  // namespace

Communicator::Communicator() : call_(std::make_unique<CollectiveCall>()) {}
Communicator::~Communicator() = default;

std::chrono::milliseconds default_timeout() { return env::collective_timeout().value_or(kDefaultTimeout); }

namespace {
thread_local bool t_passive_wait = false;
}  // namespace

PassiveWaitScope::PassiveWaitScope() : saved_(t_passive_wait) { t_passive_wait = true; }
PassiveWaitScope::~PassiveWaitScope() { t_passive_wait = saved_; }
bool passive_wait() { return t_passive_wait; }

void Communicator::check_device(const Tensor&, const CollectiveCall&, const char*) const {}

// A collective writes its output in place, also from the peers' threads once this rank has
// arrived: an async checkpoint's write hold on it (core/tensor.h) must end first. Waiting here,
// before this rank arrives anywhere, is enough (ZeRO's all-gather writes straight into a weight).
void Communicator::await_writable(const Tensor& output) {
  if (output.defined()) output.buffer()->await_writable();
}

void Communicator::check_tensor(const Tensor& t, const CollectiveCall& call, const char* role) const {
  const char* op = call.fp.op.c_str();
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, op, ": the ", role, *role ? " " : "", "tensor is undefined");
  check_device(t, call, role);
  check_collective_dtype(t.dtype(), op);
}

void Communicator::validate(const CollectiveCall& call, const Tensor* input, const Tensor* output) {
  const char* op = call.fp.op.c_str();
  try {
    switch (call.kind) {
      case CollectiveOp::kAllReduce:
        check_tensor(*input, call, "input");
        if (output == input) break;  // in place, the same Tensor object: nothing more to check
        check_tensor(*output, call, "output");
        check_same(*input, *output, op);
        break;
      case CollectiveOp::kBroadcast:
        check_tensor(*input, call, "");
        check_root(call.root, size(), op);
        break;
      case CollectiveOp::kReduce:
        check_tensor(*input, call, "input");
        check_root(call.root, size(), op);
        if (rank() == call.root) {  // a non-root's output is not used
          check_tensor(*output, call, "output");
          check_same(*input, *output, op);
        }
        break;
      case CollectiveOp::kAllGather:
        check_tensor(*input, call, "input");
        check_tensor(*output, call, "output");
        check_gathered(*input, *output, size());
        break;
      case CollectiveOp::kReduceScatter:
        check_tensor(*input, call, "input");
        check_tensor(*output, call, "output");
        check_scattered(*input, *output, size());
        break;
      case CollectiveOp::kBarrier: break;
    }
  } catch (const Error& e) {
    // The others are (or will be) waiting for this participant: fail the communicator so they do
    // not wait for a timeout.
    abort(str_cat(call.fp.to_string(), " had a bad argument: ", e.message()));
    throw;
  }
}

void Communicator::unimplemented(const CollectiveCall& call) const {
  throw UnimplementedError(str_cat(backend(), ": ", collective_op_name(call.kind),
                                   " is not implemented by this backend (", call.fp.to_string(), ")"));
}

std::shared_ptr<Work> Communicator::do_all_reduce(const CollectiveCall& call, const Tensor&, const Tensor&) {
  unimplemented(call);
}
std::shared_ptr<Work> Communicator::do_broadcast(const CollectiveCall& call, const Tensor&) { unimplemented(call); }
std::shared_ptr<Work> Communicator::do_reduce(const CollectiveCall& call, const Tensor&, const Tensor&) {
  unimplemented(call);
}
std::shared_ptr<Work> Communicator::do_all_gather(const CollectiveCall& call, const Tensor&, const Tensor&) {
  unimplemented(call);
}
std::shared_ptr<Work> Communicator::do_reduce_scatter(const CollectiveCall& call, const Tensor&, const Tensor&) {
  unimplemented(call);
}
std::shared_ptr<Work> Communicator::do_barrier(const CollectiveCall& call) { unimplemented(call); }

std::shared_ptr<Work> Communicator::all_reduce(const Tensor& input, const Tensor& output,
                                               const AllReduceOptions& options) {
  CollectiveCall& call = *call_;
  numbered(call, CollectiveOp::kAllReduce, sequence_++, &input, options.op, -1, options.timeout);
  call.side_stream = options.side_stream;
  validate(call, &input, &output);
  await_writable(output);
  return do_all_reduce(call, input, output);
}

std::shared_ptr<Work> Communicator::broadcast(const Tensor& tensor, const BroadcastOptions& options) {
  const CollectiveCall& call =
      numbered(*call_, CollectiveOp::kBroadcast, sequence_++, &tensor, std::nullopt, options.root, options.timeout);
  validate(call, &tensor, nullptr);
  await_writable(tensor);
  return do_broadcast(call, tensor);
}

std::shared_ptr<Work> Communicator::reduce(const Tensor& input, const Tensor& output, const ReduceOptions& options) {
  const CollectiveCall& call =
      numbered(*call_, CollectiveOp::kReduce, sequence_++, &input, options.op, options.root, options.timeout);
  validate(call, &input, &output);
  if (rank() == call.root) await_writable(output);
  return do_reduce(call, input, output);
}

std::shared_ptr<Work> Communicator::all_gather(const Tensor& input, const Tensor& output,
                                               const AllGatherOptions& options) {
  const CollectiveCall& call =
      numbered(*call_, CollectiveOp::kAllGather, sequence_++, &input, std::nullopt, -1, options.timeout);
  validate(call, &input, &output);
  await_writable(output);
  return do_all_gather(call, input, output);
}

std::shared_ptr<Work> Communicator::reduce_scatter(const Tensor& input, const Tensor& output,
                                                   const ReduceScatterOptions& options) {
  const CollectiveCall& call =
      numbered(*call_, CollectiveOp::kReduceScatter, sequence_++, &input, options.op, -1, options.timeout);
  validate(call, &input, &output);
  await_writable(output);
  return do_reduce_scatter(call, input, output);
}

std::shared_ptr<Work> Communicator::barrier(const BarrierOptions& options) {
  const CollectiveCall& call =
      numbered(*call_, CollectiveOp::kBarrier, sequence_++, nullptr, std::nullopt, -1, options.timeout);
  return do_barrier(call);
}

}  // namespace chorus::collective
