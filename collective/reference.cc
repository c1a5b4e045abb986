#include "collective/reference.h"

#include <cstring>

#include "collective/host_reduce.h"
#include "collective/in_process.h"

namespace chorus::collective {
namespace {

class ReferenceCommunicator final : public InProcessCommunicator {
 public:
  using InProcessCommunicator::InProcessCommunicator;
  std::string_view backend() const override { return "reference"; }

 private:
  // Rank 0's part of all_reduce/reduce: gather copies of all inputs on its device, reduce them
  // serially into a result tensor there, and copy it into `outputs`.
  void reduce_on_rank0(const Call& c, const Tensor& input, const std::vector<void*>& outputs) {
    const int k = size();
    const std::size_t bytes = input.nbytes();
    const std::string device = input.device_name();
    std::vector<Tensor> copies;
    std::vector<const void*> ptrs;
    for (int j = 0; j < k; ++j) {
      Tensor t = Tensor::empty(input.shape(), input.dtype(), device);
      if (bytes) std::memcpy(t.data(), rendezvous().slot(j).input, bytes);
      ptrs.push_back(t.data());
      copies.push_back(std::move(t));
    }
    Tensor result = Tensor::empty(input.shape(), input.dtype(), device);
    void* r = result.data();
    reduce_range(input.dtype(), c.op, ptrs.data(), k, &r, 1, 0, static_cast<std::size_t>(input.num_elements()), k);
    for (void* o : outputs)
      if (o != nullptr && bytes) std::memcpy(o, r, bytes);
  }

  std::vector<void*> all_outputs() const {
    std::vector<void*> out;
    for (int j = 0; j < size(); ++j) out.push_back(rendezvous().slot(j).output);
    return out;
  }

  WorkPtr run_all_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    if (rank() == 0) reduce_on_rank0(c, input, all_outputs());
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), rank() == c.root ? output.data() : nullptr}, c.timeout);
    if (rank() == 0) reduce_on_rank0(c, input, {rendezvous().slot(c.root).output});
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_broadcast(const Call& c, const Tensor& tensor) override {
    rendezvous().arrive(rank(), c.fp, Slot{tensor.data(), tensor.data()}, c.timeout);
    if (rank() == 0) {
      const void* src = rendezvous().slot(c.root).input;
      for (int j = 0; j < size(); ++j)
        if (j != c.root && tensor.nbytes()) std::memcpy(rendezvous().slot(j).output, src, tensor.nbytes());
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_all_gather(const Call& c, const Tensor& input, const Tensor& output) override {
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    if (rank() == 0) {
      const std::size_t bytes = input.nbytes();
      for (int j = 0; j < size() && bytes; ++j)
        for (int b = 0; b < size(); ++b)
          std::memmove(static_cast<unsigned char*>(rendezvous().slot(j).output) + bytes * b, rendezvous().slot(b).input,
                       bytes);
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }

  WorkPtr run_reduce_scatter(const Call& c, const Tensor& input, const Tensor& output) override {
    rendezvous().arrive(rank(), c.fp, Slot{input.data(), output.data()}, c.timeout);
    if (rank() == 0) {
      const int k = size();
      const std::size_t m = static_cast<std::size_t>(output.num_elements());
      const std::size_t block = m * dtype_size(input.dtype());
      std::vector<const void*> in(k);
      for (int b = 0; b < k; ++b) {
        for (int j = 0; j < k; ++j) in[j] = static_cast<const unsigned char*>(rendezvous().slot(j).input) + block * b;
        void* out = rendezvous().slot(b).output;
        reduce_range(input.dtype(), c.op, in.data(), k, &out, 1, 0, m, k);
      }
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    return nullptr;
  }
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_reference_group(int size, const std::string& name) {
  auto rv = std::make_shared<Rendezvous>(size, name);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<ReferenceCommunicator>(rv, r));
  return out;
}

}  // namespace chorus::collective
