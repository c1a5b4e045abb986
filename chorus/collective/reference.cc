#include <chorus/collective/reference.h>

#include <cstring>
#include <exception>
#include <functional>

#include <chorus/collective/host_reduce.h>
#include <chorus/collective/in_process.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

// What a participant posts in Slot::context: its tensors, so that rank 0 can move GPU memory.
struct Endpoint {
  const Tensor* input = nullptr;
  const Tensor* output = nullptr;  // nullptr where this rank receives nothing (reduce, non-root)
};

class ReferenceCommunicator final : public InProcessCommunicator {
 public:
  using InProcessCommunicator::InProcessCommunicator;
  std::string_view backend() const override { return "reference"; }

 private:
  // Any logical device: CPU tensors are read and written in place, GPU tensors through host copies.
  void check_device(const Tensor&, const CollectiveCall&, const char*) const override {}

  // Host pointers of every participant's input and output, for rank 0 while all wait: a CPU
  // tensor's own memory, or a host copy of a GPU tensor (input) / host staging that is copied
  // to the GPU tensor afterwards (output).
  struct HostViews {
    std::vector<const void*> in;
    std::vector<void*> out;
    std::vector<std::vector<unsigned char>> staged_in, staged_out;
    std::vector<const Tensor*> upload;  // outputs on GPUs, in the order of staged_out
  };

  HostViews host_views() const {
    const int k = size();
    HostViews v;
    v.in.resize(k);
    v.out.resize(k);
    v.staged_in.reserve(k);
    v.staged_out.reserve(k);
    for (int j = 0; j < k; ++j) {
      const Slot& s = rendezvous().slot(j);
      const auto* e = static_cast<const Endpoint*>(s.context);
      v.in[j] = s.input;
      v.out[j] = s.output;
      if (e->input != nullptr && e->input->device_context().is_gpu()) {
        auto& buf = v.staged_in.emplace_back(e->input->nbytes());
        e->input->copy_to_host(buf.data());
        v.in[j] = buf.data();
      }
      if (e->output != nullptr && e->output->device_context().is_gpu()) {
        auto& buf = v.staged_out.emplace_back(e->output->nbytes());
        // In-place collectives (broadcast) read the output: start from its current contents.
        if (e->output == e->input) std::memcpy(buf.data(), v.in[j], buf.size());
        v.out[j] = buf.data();
        v.upload.push_back(e->output);
      }
    }
    return v;
  }

  static void upload(const HostViews& v) {
    for (std::size_t i = 0; i < v.upload.size(); ++i) {
      const Tensor& dst = *v.upload[i];
      Tensor host = Tensor::empty(dst.shape(), dst.dtype(), "/CPU:0");
      if (!v.staged_out[i].empty()) std::memcpy(host.data(), v.staged_out[i].data(), v.staged_out[i].size());
      Tensor target = dst;  // a handle on the same storage
      target.copy_from(host);
    }
  }

  // The collective: post, rank 0 moves everything through host memory, all leave together.
  WorkPtr run(const Call& c, const Tensor* input, const Tensor* output,
              const std::function<void(const HostViews&)>& move) {
    const Endpoint e{input, output};
    rendezvous().arrive(rank(), c.fp, Slot{input ? input->data() : nullptr, output ? output->data() : nullptr, &e},
                        c.timeout);
    std::exception_ptr failed;
    if (rank() == 0) {
      try {
        HostViews v = host_views();
        move(v);
        upload(v);
      } catch (const std::exception& err) {
        // Fail the group, then still close the collective: the others wait in sync(), which is
        // never abandoned (leaving it would be waiting for ever), and learn of it just after.
        rendezvous().abort(rank(), internal::str_cat("reduction to one device failed on rank 0: ", err.what()));
        failed = std::current_exception();
      }
    }
    rendezvous().sync(rank(), c.fp, c.timeout);
    if (failed) std::rethrow_exception(failed);
    rendezvous().check_usable();  // rank 0's failure fails the collective everywhere
    return nullptr;
  }

  // Rank 0's part of all_reduce/reduce: reduce all inputs serially into a result, copy it out.
  void reduce_to(const Call& c, const Tensor& input, const HostViews& v, const std::vector<int>& receivers) {
    const int k = size();
    const std::size_t bytes = input.nbytes();
    std::vector<unsigned char> result(bytes);
    void* r = result.data();
    reduce_range(input.dtype(), c.op, v.in.data(), k, &r, 1, 0, static_cast<std::size_t>(input.num_elements()), k);
    for (int j : receivers)
      if (v.out[j] != nullptr && bytes) std::memcpy(v.out[j], r, bytes);
  }

  std::vector<int> everyone() const {
    std::vector<int> all(size());
    for (int j = 0; j < size(); ++j) all[j] = j;
    return all;
  }

  WorkPtr run_all_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    return run(c, &input, &output, [&](const HostViews& v) { reduce_to(c, input, v, everyone()); });
  }

  WorkPtr run_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    return run(c, &input, rank() == c.root ? &output : nullptr,
               [&](const HostViews& v) { reduce_to(c, input, v, {c.root}); });
  }

  WorkPtr run_broadcast(const Call& c, const Tensor& tensor) override {
    return run(c, &tensor, &tensor, [&](const HostViews& v) {
      for (int j = 0; j < size(); ++j)
        if (j != c.root && tensor.nbytes()) std::memcpy(v.out[j], v.in[c.root], tensor.nbytes());
    });
  }

  WorkPtr run_all_gather(const Call& c, const Tensor& input, const Tensor& output) override {
    return run(c, &input, &output, [&](const HostViews& v) {
      const std::size_t bytes = input.nbytes();
      for (int j = 0; j < size() && bytes; ++j)
        for (int b = 0; b < size(); ++b)
          std::memmove(static_cast<unsigned char*>(v.out[j]) + bytes * b, v.in[b], bytes);
    });
  }

  WorkPtr run_reduce_scatter(const Call& c, const Tensor& input, const Tensor& output) override {
    return run(c, &input, &output, [&](const HostViews& v) {
      const int k = size();
      const std::size_t m = static_cast<std::size_t>(output.num_elements());
      const std::size_t block = m * dtype_size(input.dtype());
      std::vector<const void*> in(k);
      for (int b = 0; b < k; ++b) {
        for (int j = 0; j < k; ++j) in[j] = static_cast<const unsigned char*>(v.in[j]) + block * b;
        void* out = v.out[b];
        reduce_range(input.dtype(), c.op, in.data(), k, &out, 1, 0, m, k);
      }
    });
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
