// The common part of communicators whose participants are threads of one process: the
// rendezvous, draining device streams, error policy. Argument checks, sequence numbers and
// fingerprints come from the front door (communicator.h, call.h). Backends (shared_memory.h,
// reference.h, virtual_gpu.h, nccl.h) supply only data movement and their device rule.
//
// Error policy of every call:
//   - a bad argument of this participant (wrong device, dtype, shape, root) is detected by the
//     front door before it meets the others: the group is aborted (so nobody waits for it) and
//     InvalidArgumentError is thrown here;
//   - a fingerprint mismatch, a timeout or an abort come from the Rendezvous (see rendezvous.h).
// Buffers after a failure: a rank that gives up in the opening phase withdraws before anyone
// moves data, so no peer touches its buffers; the closing phase is never abandoned (peers only
// move memory, so they arrive), so no rank returns while a peer still writes into its buffers.
// Errors found before data moves are thrown by the call itself. Host backends return completed
// Work; device backends return Work that completes with the device stream.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include <chorus/collective/call.h>
#include <chorus/collective/communicator.h>
#include <chorus/collective/rendezvous.h>
#include <chorus/collective/work.h>

namespace chorus::collective {

// Cache-line aligned: the group's communicators are allocated one after another, and each call
// writes its own (the sequence number, the reused Work); sharing a line, two ranks' calls moved it
// between cores every time.
class alignas(64) InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank);

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }
  void abort(const std::string& reason) override;

 protected:
  // Data movement, called after the front door validated the call (communicator.h) and the
  // device streams were drained; each starts with rendezvous().arrive(...) and ends with a phase
  // that keeps every participant's buffers alive until all are done with them.
  using Call = CollectiveCall;
  // Each returns the Work of the call, or nullptr when it completed before returning.
  using WorkPtr = std::shared_ptr<Work>;
  virtual WorkPtr run_all_reduce(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_broadcast(const Call& call, const Tensor& tensor) = 0;
  virtual WorkPtr run_reduce(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_all_gather(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_reduce_scatter(const Call& call, const Tensor& input, const Tensor& output) = 0;

  // The default device rule: host tensors of logical CPU devices. Device backends override it
  // (call.h's check_on_device), the reference backend accepts any device.
  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override;
  // Makes the tensor's pending device work visible before the collective touches it. The default
  // synchronizes the device stream (host backends read memory directly); device backends order
  // streams with events instead and override it with a no-op.
  virtual void drain(const Tensor& t) const;

  Rendezvous& rendezvous() const { return *rendezvous_; }

 private:
  WorkPtr do_all_reduce(const CollectiveCall& call, const Tensor& input, const Tensor& output) final;
  WorkPtr do_broadcast(const CollectiveCall& call, const Tensor& tensor) final;
  WorkPtr do_reduce(const CollectiveCall& call, const Tensor& input, const Tensor& output) final;
  WorkPtr do_all_gather(const CollectiveCall& call, const Tensor& input, const Tensor& output) final;
  WorkPtr do_reduce_scatter(const CollectiveCall& call, const Tensor& input, const Tensor& output) final;
  WorkPtr do_barrier(const CollectiveCall& call) final;

  // check_usable, drain `tensors` (null entries skipped), run `body`, record completion.
  template <typename Body>
  WorkPtr execute(const CollectiveCall& call, std::initializer_list<const Tensor*> tensors, const Body& body);

  std::shared_ptr<Rendezvous> rendezvous_;
  int rank_;
  CompletedWorkSlot done_;
};

// The element range [begin, end) of `n` elements that `rank` of `size` works on: contiguous,
// nearly equal, boundaries on multiples of 16 elements (whole cache lines for 4-byte types).
void partition(std::size_t n, int size, int rank, std::size_t* begin, std::size_t* end);

}  // namespace chorus::collective
