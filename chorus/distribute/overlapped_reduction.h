// The gradient all-reduce (and, at ZeRO stages 2 and 3, reduce-scatter) overlapped with the
// backward pass: PyTorch DDP's reducer, and FSDP's reduce-scatter during backward, for chorus
// (core/distribution.h's GradientReduction). The replica's StepPolicy (distribute/step_policy.h)
// begins one for GradientTape::gradient_and_sum when its strategy overlaps (the strategy options'
// overlap_gradient_all_reduce), and takes its results in apply_gradients (sum_gradients).
//
// Buckets are all_reduce(list)'s packs (distribute/all_reduce_packs.h) of the gradients the tape
// expects (consecutive ones of one dtype up to bytes_per_pack, in the variables' order), so the
// same bytes meet in the same collectives as without overlap: the results are bitwise equal on
// every backend. A bucket is packed on the replica thread and handed to the replica's
// communication thread (distribute/comm_worker.h) as soon as its last gradient is final — and,
// as in DDP, strictly in reverse bucket order (the last layers' gradients are final first), so
// that every replica issues the same collectives in the same order whatever order its backward
// pass finishes them in. A bucket ready early waits for the ones after it.
//
// At ZeRO stages 2 and 3 (the sharded constructor) the buckets are of two kinds, each exactly the
// pieces the non-overlapped step policy moves: all-reduce packs of the gradients it all-reduces
// whole (all_reduce of the list with only those defined), and reduce-scatter pieces of those it
// reduce-scatters (StrategyReplicaContext::reduce_scatter_shards of them, in order: packs of
// padded [n, c] views up to bytes_per_pack, a large even gradient alone, as it is). Both kinds are
// launched in one order, by their last member from the end of the list (the reverse order of use),
// on the same communication thread. take() gives the whole sums and this replica's shards in the
// sources' places; a source in no bucket (none expected, a stage-3 parameter's shard, or a value
// without elements) is left undefined.
//
// Unused variables (no gradient this step, DDP's find_unused_parameters trouble): the tape says
// up front which gradients it expects (a variable no recorded op read gets none), so such a
// variable is in no bucket and nothing waits for it. A gradient that turns out different from
// what the tape expected (undefined after all: its ops did not reach the target) abandons the
// reduction: the buckets already handed over still run everywhere (the same ones on every
// replica, which all compute alike), no more are launched, complete() is false and
// apply_gradients reduces as without overlap.
//
// Thread-safety: the replica thread only (the communication thread runs what it is handed).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/distribute/all_reduce_packs.h>
#include <chorus/distribute/replica_context.h>

namespace chorus::distribute::internal {

class OverlappedReduction final : public GradientReduction {
 public:
  // Hands a bucket to the communication thread (which all-reduces pack->send into pack->out; the
  // task shares the pack, so that it outlives the reduction if need be); returns its ticket.
  using Launch = std::function<std::uint64_t(std::shared_ptr<Pack> pack)>;
  // Waits for a ticket, rethrowing the collective's error.
  using Wait = std::function<void(std::uint64_t ticket)>;

  // What the sharded form does with a reduce-scatter bucket: pack it on the replica thread
  // (releasing the gradients it copies), hand it to the communication thread (its ticket), and
  // cut the reduced piece into the members' shards (out[member]) on the replica thread.
  struct ScatterOps {
    std::function<void(ShardPiece& piece, std::vector<Tensor>& grads)> pack;
    std::function<std::uint64_t(std::shared_ptr<ShardPiece> piece)> launch;
    std::function<void(ShardPiece& piece, std::vector<Tensor>& out)> unpack;
  };

  // `expected`: the sources' tensors, undefined where the tape expects no gradient. `wire`: the
  // wire dtype of a bucket of each dtype (compression); `pack_bytes`: the bucket size.
  OverlappedReduction(const std::vector<Tensor>& expected, std::int64_t pack_bytes, std::function<DType(DType)> wire,
                      std::string device, Launch launch, Wait wait);
  // The sharded form: `whole` are the all-reduce packs (members: source indices), `pieces` the
  // reduce-scatter pieces (planned, no tensors yet; members: source indices). Every expected source
  // in neither is only booked when ready.
  OverlappedReduction(const std::vector<Tensor>& expected, std::vector<std::vector<std::size_t>> whole,
                      std::vector<ShardPiece> pieces, std::function<DType(DType)> wire, std::string device,
                      Launch launch, ScatterOps scatter, Wait wait);

  // Waits for every bucket it launched (their errors are the caller's business elsewhere).
  ~OverlappedReduction() override;

  void ready(std::size_t index, const Tensor& grad) override;

  // Whether `values` could be its gradients: as many, defined where it expects gradients, with
  // their shapes and dtypes (the same answer on every replica).
  bool fits(const std::vector<Tensor>& values) const;
  // True when every gradient was final and every bucket launched (not abandoned), and the sums
  // were not taken yet: the same answer on every replica, whose tapes are alike.
  bool complete() const;
  // The summed gradients (sharded form: whole sums and shards), once their buckets are reduced
  // (after complete()).
  std::vector<Tensor> take();
  // Launches no further bucket (the reduction will not be taken); those launched still run.
  void abandon();

 private:
  void launch_ready_buckets();
  void add_buckets(std::vector<std::vector<std::size_t>> whole, std::vector<ShardPiece> pieces);

  struct Bucket {
    std::vector<std::size_t> members;
    std::size_t remaining = 0;          // members not yet final
    std::shared_ptr<Pack> pack;         // an all-reduce bucket's
    std::shared_ptr<ShardPiece> piece;  // a reduce-scatter bucket's (set from the start)
    std::uint64_t ticket = 0;           // 0: not launched
  };
  std::vector<Tensor> grads_;  // the final gradients, until their bucket is packed
  std::vector<Shape> expected_shapes_;
  std::vector<DType> expected_dtypes_;
  std::vector<char> expected_, final_;
  std::vector<int> bucket_of_;  // -1: in no bucket (no gradient expected)
  std::vector<Bucket> buckets_;
  int next_ = 0;               // the next bucket to launch, counting down; -1: all launched
  std::size_t remaining_ = 0;  // gradients not yet final
  bool abandoned_ = false;
  bool taken_ = false;
  std::function<DType(DType)> wire_;
  std::string device_;
  Launch launch_;
  ScatterOps scatter_;
  Wait wait_;
};

}  // namespace chorus::distribute::internal
