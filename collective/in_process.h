// The common part of communicators whose participants are threads of one process working on
// host memory (logical CPU devices): argument checks, sequence numbers and fingerprints, the
// rendezvous, error policy. Backends (shared_memory.h, reference.h) supply only data movement.
//
// Error policy of every call:
//   - a bad argument of this participant (wrong device, dtype, shape, root) is detected before it
//     meets the others: the group is aborted (so nobody waits for it) and InvalidArgumentError is
//     thrown here;
//   - a fingerprint mismatch, a timeout or an abort come from the Rendezvous (see rendezvous.h).
// Buffers after a failure: a rank that gives up in the opening phase withdraws before anyone
// moves data, so no peer touches its buffers; the closing phase is never abandoned (peers only
// move memory, so they arrive), so no rank returns while a peer still writes into its buffers.
// Errors found before data moves are thrown by the call itself. Host backends return completed
// Work; device backends return Work that completes with the device stream.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "collective/communicator.h"
#include "collective/rendezvous.h"

namespace chorus::collective {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank);

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }

  std::shared_ptr<Work> all_reduce(const Tensor& input, const Tensor& output, const AllReduceOptions& options) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, const BroadcastOptions& options) override;
  std::shared_ptr<Work> reduce(const Tensor& input, const Tensor& output, const ReduceOptions& options) override;
  std::shared_ptr<Work> all_gather(const Tensor& input, const Tensor& output, const AllGatherOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output,
                                       const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> barrier(const BarrierOptions& options) override;
  void abort(const std::string& reason) override;

 protected:
  // Data movement, called after the arguments were checked and the device streams drained; each
  // starts with rendezvous().arrive(...) and ends with a phase that keeps every participant's
  // buffers alive until all are done with them.
  struct Call {
    const Fingerprint& fp;
    std::chrono::milliseconds timeout;
    ReduceOp op;
    int root;
  };
  // Each returns the Work of the call, or nullptr when it completed before returning.
  using WorkPtr = std::shared_ptr<Work>;
  virtual WorkPtr run_all_reduce(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_broadcast(const Call& call, const Tensor& tensor) = 0;
  virtual WorkPtr run_reduce(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_all_gather(const Call& call, const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr run_reduce_scatter(const Call& call, const Tensor& input, const Tensor& output) = 0;

  // Per-tensor argument check (defined, device kind, dtype). The default accepts host tensors of
  // logical CPU devices; device backends override it.
  virtual void check_tensor(const Tensor& t, const char* op, const char* role) const;
  // For device backends: defined, on `device` (this rank's), supported dtype.
  void check_on_device(const Tensor& t, const DeviceContext& device, const char* op, const char* role) const;
  // Makes the tensor's pending device work visible before the collective touches it. The default
  // synchronizes the device stream (host backends read memory directly); device backends order
  // streams with events instead and override it with a no-op.
  virtual void drain(const Tensor& t) const;

  Rendezvous& rendezvous() const { return *rendezvous_; }

 private:
  Fingerprint fingerprint(const char* op, const Tensor* input, int reduce_op, int root);
  std::shared_ptr<Work> execute(const Fingerprint& fp, const std::function<void()>& check,
                                const std::function<std::shared_ptr<Work>()>& body);

  std::shared_ptr<Rendezvous> rendezvous_;
  int rank_;
  std::uint64_t sequence_ = 0;
};

// The element range [begin, end) of `n` elements that `rank` of `size` works on: contiguous,
// nearly equal, boundaries on multiples of 16 elements (whole cache lines for 4-byte types).
void partition(std::size_t n, int size, int rank, std::size_t* begin, std::size_t* end);

}  // namespace chorus::collective
