#include <chorus/collective/in_process.h>

#include <chorus/collective/work.h>
#include <chorus/core/error.h>

namespace chorus::collective {

using internal::str_cat;

void InProcessCommunicator::check_device(const Tensor& t, const CollectiveCall& call, const char* role) const {
  check_on_host(t, call, role,
                "this communicator moves host memory of logical CPU devices (GPU tensors go through "
                "the virtual-GPU or NCCL backend)");
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

template <typename Body>
InProcessCommunicator::WorkPtr InProcessCommunicator::execute(const CollectiveCall& call,
                                                              std::initializer_list<const Tensor*> tensors,
                                                              const Body& body) {
  rendezvous_->check_usable();
  try {
    const void* drained = nullptr;
    for (const Tensor* t : tensors)
      if (t != nullptr && t->data() != drained) {  // in place: one drain
        drain(*t);
        drained = t->data();
      }
  } catch (const Error& e) {
    // The others are (or will be) waiting for us: fail the group so they do not wait for a timeout.
    rendezvous_->abort(rank_, str_cat(call.fp.to_string(), " could not start: ", e.message()));
    throw;
  }
  WorkPtr work = body();
  rendezvous_->completed(rank_, call.fp);
  return work ? work : done_.get(call.fp);
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_all_reduce(const CollectiveCall& call, const Tensor& input,
                                                                    const Tensor& output) {
  return execute(call, {&input, &output}, [&] { return run_all_reduce(call, input, output); });
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_broadcast(const CollectiveCall& call, const Tensor& tensor) {
  return execute(call, {&tensor}, [&] { return run_broadcast(call, tensor); });
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_reduce(const CollectiveCall& call, const Tensor& input,
                                                                const Tensor& output) {
  return execute(call, {&input, rank_ == call.root ? &output : nullptr},
                 [&] { return run_reduce(call, input, output); });
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_all_gather(const CollectiveCall& call, const Tensor& input,
                                                                    const Tensor& output) {
  return execute(call, {&input, &output}, [&] { return run_all_gather(call, input, output); });
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_reduce_scatter(const CollectiveCall& call, const Tensor& input,
                                                                        const Tensor& output) {
  return execute(call, {&input, &output}, [&] { return run_reduce_scatter(call, input, output); });
}

InProcessCommunicator::WorkPtr InProcessCommunicator::do_barrier(const CollectiveCall& call) {
  return execute(call, {}, [&] {
    rendezvous_->arrive(rank_, call.fp, Slot{}, call.timeout);
    return WorkPtr();
  });
}

void InProcessCommunicator::abort(const std::string& reason) { rendezvous_->abort(rank_, reason); }

}  // namespace chorus::collective
