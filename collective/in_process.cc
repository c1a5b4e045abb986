#include "collective/in_process.h"

#include "collective/host_reduce.h"
#include "collective/work.h"
#include "core/error.h"

namespace chorus::collective {
namespace {

using internal::str_cat;

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  CHORUS_REQUIRE(a.dtype() == b.dtype() && a.shape() == b.shape(), InvalidArgumentError, op, ": output ",
                 dtype_name(b.dtype()), b.shape().to_string(), " does not match input ", dtype_name(a.dtype()),
                 a.shape().to_string());
}

void check_root(int root, int size, const char* op) {
  CHORUS_REQUIRE(root >= 0 && root < size, InvalidArgumentError, op, ": root ", root, " is not a rank of this ",
                 size, "-participant communicator (valid: 0..", size - 1, ")");
}


}  // namespace

void InProcessCommunicator::check_tensor(const Tensor& t, const char* op, const char* role) const {
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, op, ": the ", role, " tensor is undefined");
  CHORUS_REQUIRE(!t.device_context().is_gpu(), InvalidArgumentError, op, ": the ", role, " tensor is on ",
                 t.device_name(), "; this communicator moves host memory of logical CPU devices (GPU tensors "
                 "go through the virtual-GPU or NCCL backend)");
  check_collective_dtype(t.dtype(), op);
}

void InProcessCommunicator::check_on_device(const Tensor& t, const DeviceContext& device, const char* op,
                                            const char* role) const {
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, op, ": the ", role, " tensor is undefined");
  CHORUS_REQUIRE(&t.device_context() == &device, InvalidArgumentError, op, ": rank ", rank_, "'s ", role,
                 " tensor is on ", t.device_name(), " but this rank's device is ", device.name());
  check_collective_dtype(t.dtype(), op);
}

// Queued device work may still be producing the input or using the output.
void InProcessCommunicator::drain(const Tensor& t) const { t.device_context().stream().synchronize(); }

void partition(std::size_t n, int size, int rank, std::size_t* begin, std::size_t* end) {
  constexpr std::size_t kAlign = 16;
  const std::size_t blocks = (n + kAlign - 1) / kAlign;
  const std::size_t b0 = blocks * static_cast<std::size_t>(rank) / static_cast<std::size_t>(size);
  const std::size_t b1 = blocks * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(size);
  *begin = std::min(n, b0 * kAlign);
  *end = std::min(n, b1 * kAlign);
}

InProcessCommunicator::InProcessCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank)
    : rendezvous_(std::move(rendezvous)), rank_(rank) {
  CHORUS_REQUIRE(rank >= 0 && rank < rendezvous_->size(), InvalidArgumentError, "rank ", rank, " is not in 0..",
                 rendezvous_->size() - 1);
}

Fingerprint InProcessCommunicator::fingerprint(const char* op, const Tensor* input, int reduce_op, int root) {
  Fingerprint fp;
  fp.op = op;
  fp.sequence = sequence_++;
  if (input != nullptr && input->defined()) {
    fp.dtype = input->dtype();
    fp.shape = input->shape().dims();
  }
  fp.reduce_op = reduce_op;
  fp.root = root;
  return fp;
}

std::shared_ptr<Work> InProcessCommunicator::execute(const Fingerprint& fp, const std::function<void()>& check,
                                                     const std::function<std::shared_ptr<Work>()>& body) {
  rendezvous_->check_usable();
  try {
    check();
  } catch (const Error& e) {
    // The others are (or will be) waiting for us: fail the group so they do not wait for a timeout.
    rendezvous_->abort(rank_, str_cat(fp.to_string(), " had a bad argument: ", e.message()));
    throw;
  }
  std::shared_ptr<Work> work = body();
  rendezvous_->completed(rank_, fp);
  return work ? work : std::make_shared<CompletedWork>(fp.to_string());
}

std::shared_ptr<Work> InProcessCommunicator::all_reduce(const Tensor& input, const Tensor& output,
                                                        const AllReduceOptions& options) {
  const Fingerprint fp = fingerprint("all_reduce", &input, static_cast<int>(options.op), -1);
  return execute(
      fp,
      [&] {
        check_tensor(input, "all_reduce", "input");
        check_tensor(output, "all_reduce", "output");
        check_same(input, output, "all_reduce");
        drain(input);
        if (output.data() != input.data()) drain(output);
      },
      [&] { return run_all_reduce({fp, options.timeout, options.op, -1}, input, output); });
}

std::shared_ptr<Work> InProcessCommunicator::broadcast(const Tensor& tensor, const BroadcastOptions& options) {
  const Fingerprint fp = fingerprint("broadcast", &tensor, -1, options.root);
  return execute(
      fp,
      [&] {
        check_tensor(tensor, "broadcast", "");
        check_root(options.root, size(), "broadcast");
        drain(tensor);
      },
      [&] { return run_broadcast({fp, options.timeout, ReduceOp::kSum, options.root}, tensor); });
}

std::shared_ptr<Work> InProcessCommunicator::reduce(const Tensor& input, const Tensor& output,
                                                    const ReduceOptions& options) {
  const Fingerprint fp = fingerprint("reduce", &input, static_cast<int>(options.op), options.root);
  return execute(
      fp,
      [&] {
        check_tensor(input, "reduce", "input");
        check_root(options.root, size(), "reduce");
        if (rank_ == options.root) {
          check_tensor(output, "reduce", "output");
          check_same(input, output, "reduce");
          drain(output);
        }
        drain(input);
      },
      [&] { return run_reduce({fp, options.timeout, options.op, options.root}, input, output); });
}

std::shared_ptr<Work> InProcessCommunicator::all_gather(const Tensor& input, const Tensor& output,
                                                        const AllGatherOptions& options) {
  const Fingerprint fp = fingerprint("all_gather", &input, -1, -1);
  return execute(
      fp,
      [&] {
        check_tensor(input, "all_gather", "input");
        check_tensor(output, "all_gather", "output");
        CHORUS_REQUIRE(input.shape().rank() >= 1, InvalidArgumentError, "all_gather: the input must have rank >= 1, got shape ",
                       input.shape().to_string());
        std::vector<std::int64_t> want = input.shape().dims();
        want[0] *= size();
        CHORUS_REQUIRE(output.dtype() == input.dtype() && output.shape() == Shape(want), InvalidArgumentError,
                       "all_gather: output must be ", dtype_name(input.dtype()), Shape(want).to_string(), " (", size(),
                       " inputs of ", input.shape().to_string(), " stacked on axis 0), got ", dtype_name(output.dtype()),
                       output.shape().to_string());
        drain(input);
        drain(output);
      },
      [&] { return run_all_gather({fp, options.timeout, ReduceOp::kSum, -1}, input, output); });
}

std::shared_ptr<Work> InProcessCommunicator::reduce_scatter(const Tensor& input, const Tensor& output,
                                                            const ReduceScatterOptions& options) {
  const Fingerprint fp = fingerprint("reduce_scatter", &input, static_cast<int>(options.op), -1);
  return execute(
      fp,
      [&] {
        check_tensor(input, "reduce_scatter", "input");
        check_tensor(output, "reduce_scatter", "output");
        const auto& d = input.shape().dims();
        CHORUS_REQUIRE(!d.empty() && d[0] % size() == 0, InvalidArgumentError, "reduce_scatter: the input's first "
                       "dimension must be a multiple of the communicator size ", size(), ", got shape ",
                       input.shape().to_string());
        std::vector<std::int64_t> want = d;
        want[0] /= size();
        CHORUS_REQUIRE(output.dtype() == input.dtype() && output.shape() == Shape(want), InvalidArgumentError,
                       "reduce_scatter: output must be ", dtype_name(input.dtype()), Shape(want).to_string(), ", got ",
                       dtype_name(output.dtype()), output.shape().to_string());
        drain(input);
        drain(output);
      },
      [&] { return run_reduce_scatter({fp, options.timeout, options.op, -1}, input, output); });
}

std::shared_ptr<Work> InProcessCommunicator::barrier(const BarrierOptions& options) {
  const Fingerprint fp = fingerprint("barrier", nullptr, -1, -1);
  return execute(fp, [] {}, [&] {
    rendezvous_->arrive(rank_, fp, Slot{}, options.timeout);
    return std::shared_ptr<Work>();
  });
}

void InProcessCommunicator::abort(const std::string& reason) { rendezvous_->abort(rank_, reason); }

}  // namespace chorus::collective
