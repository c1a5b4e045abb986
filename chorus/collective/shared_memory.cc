#include <chorus/collective/shared_memory.h>

#include <algorithm>
#include <cstring>

#include <chorus/collective/host_reduce.h>
#include <chorus/collective/in_process.h>

namespace chorus::collective {
namespace {

// Groups up to this size take the one-meeting path for small all_reduces (its inputs' pointers live
// on the stack); larger ones always take the chunked path.
constexpr int kMaxStaged = 64;
// Bounds of the chunked all_reduce's chunks, in bytes (multiples of every dtype's size).
constexpr std::size_t kMinChunkBytes = 2048;
constexpr std::size_t kMaxChunkBytes = 65536;

class SharedMemoryCommunicator final : public InProcessCommunicator {
 public:
  using InProcessCommunicator::InProcessCommunicator;
  std::string_view backend() const override { return "shared_memory"; }

 private:
  // Pointers posted by every rank: made (allocated) before arrive(), filled by gather_slots after
  // it, so that nothing allocates, or throws, between arrive() and the closing wait.
  struct Posted {
    explicit Posted(int k) : in(static_cast<std::size_t>(k)), out(static_cast<std::size_t>(k)) {}
    std::vector<const void*> in;
    std::vector<void*> out;
  };
  void gather_slots(Posted* p) const {
    for (int j = 0; j < size(); ++j) {
      p->in[j] = rendezvous().slot(j).input;
      p->out[j] = rendezvous().slot(j).output;
    }
  }

  WorkPtr run_all_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    const std::size_t n = static_cast<std::size_t>(input.num_elements());
    const std::size_t bytes = n * dtype_size(input.dtype());
    if (bytes <= Rendezvous::kStagingBytes && size() <= kMaxStaged) {
      // Small: one meeting. Every rank stages its input, then reduces all staged inputs, in rank
      // order as below, into its own output (bitwise the same on every rank and as the chunked
      // path). In place is fine: the input was copied before the output is written.
      Rendezvous& rv = rendezvous();
      const std::uint64_t phase = rv.next_phase(rank());
      rv.arrive(rank(), c.fp, Slot{}, c.timeout, input.data(), bytes);
      const void* in[kMaxStaged];
      const int k = size();
      for (int j = 0; j < k; ++j) in[j] = rv.staging(j, phase, bytes);
      void* out = output.data();
      reduce_range(input.dtype(), c.op, in, k, &out, 1, 0, n, k);
      return nullptr;
    }
    Posted posted(size());
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    // Chunks taken from a shared counter: ranks that are running do the work of ranks that are not
    // (with more replicas than cores, a fixed split would wait for descheduled threads). Chunks of
    // whole cache lines, 2 KiB to 64 KiB, about bytes/k for mid sizes so every rank gets a share.
    // A 4 KiB minimum left a 4 KiB all_reduce one chunk, done by one rank while the others waited:
    // 2.4-2.7 us for two ranks on the Xeon VM, 1.4-1.7 us with 2 KiB chunks (bench_allreduce).
    const std::size_t per_rank = (bytes / static_cast<std::size_t>(size()) + 63) / 64 * 64;
    const std::size_t chunk =
        std::clamp<std::size_t>(per_rank, kMinChunkBytes, kMaxChunkBytes) / dtype_size(input.dtype());
    const std::size_t total = (n + chunk - 1) / chunk;
    // One meeting point per call instead of a closing barrier: a rank leaves once every chunk is
    // done, without waiting for peers that took none (descheduled ones, with more replicas than
    // cores). The slots are read only while holding a chunk: once all chunks are done, peers may
    // already be posting the slots of their next collective (rendezvous.h).
    std::size_t mine = 0;
    for (;;) {
      const std::size_t i = rendezvous().work(rank()).fetch_add(1, std::memory_order_relaxed);
      if (i >= total) break;
      if (mine++ == 0) gather_slots(&posted);
      const std::size_t b = i * chunk;
      reduce_range(input.dtype(), c.op, posted.in.data(), size(), posted.out.data(), size(), b, std::min(n, b + chunk),
                   size());
    }
    rendezvous().finish_work(rank(), mine, total);
    rendezvous().wait_work(rank(), c.fp, total, c.timeout);  // all chunks of every output are written
    return nullptr;
  }

  WorkPtr run_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    Posted posted(size());
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), rank() == c.root ? output.data() : nullptr}, c.timeout);
    gather_slots(&posted);
    std::size_t begin, end;
    partition(static_cast<std::size_t>(input.num_elements()), size(), rank(), &begin, &end);
    void* root_out = posted.out[c.root];
    reduce_range(input.dtype(), c.op, posted.in.data(), size(), &root_out, 1, begin, end, size());
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_broadcast(const Call& c, const Tensor& tensor) override {
    rendezvous().arrive(rank(), c.fp, Slot{tensor.data(), tensor.data()}, c.timeout);
    const std::size_t esize = dtype_size(tensor.dtype());
    std::size_t begin, end;
    partition(static_cast<std::size_t>(tensor.num_elements()), size(), rank(), &begin, &end);
    const auto* src = static_cast<const unsigned char*>(rendezvous().slot(c.root).input);
    for (int j = 0; j < size(); ++j) {
      if (j == c.root || end == begin) continue;
      auto* dst = static_cast<unsigned char*>(rendezvous().slot(j).output);
      std::memcpy(dst + begin * esize, src + begin * esize, (end - begin) * esize);
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_all_gather(const Call& c, const Tensor& input, const Tensor& output) override {
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    // Rank r writes its input into block r of every output: k writers in parallel, disjoint blocks.
    const std::size_t bytes = input.nbytes();
    for (int j = 0; j < size() && bytes > 0; ++j) {
      auto* dst = static_cast<unsigned char*>(rendezvous().slot(j).output) + bytes * static_cast<std::size_t>(rank());
      if (dst != input.data()) std::memmove(dst, input.data(), bytes);
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_reduce_scatter(const Call& c, const Tensor& input, const Tensor& output) override {
    std::vector<const void*> in(size());  // before arriving: nothing may throw until sync()
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    const std::size_t m = static_cast<std::size_t>(output.num_elements());
    const std::size_t offset = m * dtype_size(input.dtype()) * static_cast<std::size_t>(rank());
    for (int j = 0; j < size(); ++j) in[j] = static_cast<const unsigned char*>(rendezvous().slot(j).input) + offset;
    void* out = output.data();
    reduce_range(input.dtype(), c.op, in.data(), size(), &out, 1, 0, m, size());
    rendezvous().sync(rank(), c.fp, c.timeout);  // others' inputs are read until here
    return nullptr;
  }
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_shared_memory_group(int size, const std::string& name) {
  auto rv = std::make_shared<Rendezvous>(size, name);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<SharedMemoryCommunicator>(rv, r));
  return out;
}

}  // namespace chorus::collective
