#include <chorus/collective/virtual_gpu.h>

#include <chorus/collective/host_reduce.h>
#include <chorus/collective/in_process.h>
#include <chorus/collective/work.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>

#ifdef CHORUS_WITH_CUDA
#include <chorus/collective/cuda/fused_reduce.h>
#endif

namespace chorus::collective {

using internal::str_cat;

#ifdef CHORUS_WITH_CUDA
namespace {

// What the group's participants share beyond the rendezvous: the event rank 0 records after the
// collective's device work, read by the others after the closing phase.
struct Shared {
  std::shared_ptr<Event> done;
};

// Per call, posted through Slot::context: the participant's stream and the point in it at which
// its inputs are ready and its outputs free.
struct Post {
  Stream* stream;
  std::shared_ptr<Event> ready;
};

class VirtualGpuCommunicator final : public InProcessCommunicator {
 public:
  VirtualGpuCommunicator(std::shared_ptr<Rendezvous> rv, int rank, std::shared_ptr<DeviceContext> device,
                         std::shared_ptr<Shared> shared)
      : InProcessCommunicator(std::move(rv), rank), device_(std::move(device)), shared_(std::move(shared)) {}

  std::string_view backend() const override { return "virtual_gpu"; }

 protected:
  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override {
    check_on_device(t, *device_, rank(), call, role, "this rank's device");
  }
  void drain(const Tensor&) const override {}  // ordered by events, never by blocking the host

 private:
  // The common skeleton: meet, let rank 0 enqueue `device_work` on its stream after everyone's
  // ready event, publish its done event, and make every stream wait for it. The stream is the
  // device's, or its side stream for an all-reduce with AllReduceOptions::side_stream.
  WorkPtr collective(const Call& c, const void* in, void* out, const std::function<void(Stream&)>& device_work) {
    Stream& mine = c.side_stream ? device_->side_stream() : device_->stream();
    Post post{&mine, mine.record_event()};
    rendezvous().arrive(rank(), c.fp, Slot{in, out, &post}, c.timeout);
    if (rank() == 0) {
      Stream& s0 = mine;
      try {
        for (int j = 1; j < size(); ++j) s0.wait_event(static_cast<const Post*>(rendezvous().slot(j).context)->ready);
        device_work(s0);
      } catch (const std::exception& e) {
        rendezvous().abort(rank(),
                           std::string("the device work failed: ") + e.what());  // peers must not report success
      } catch (...) {
        rendezvous().abort(rank(), "the device work failed (not a std::exception)");
      }
      // After whatever was enqueued, so buffers stay ordered. Nothing may escape before sync():
      // the peers wait there without a deadline.
      std::shared_ptr<Event> done;
      std::string failure = "no event";
      try {
        done = s0.record_event();
      } catch (const std::exception& e) {
        failure = e.what();
      } catch (...) {
        failure = "not a std::exception";
      }
      if (!done) {
        // The peers cannot wait for what was enqueued on s0 (into their buffers): wait here, before
        // sync() lets them return and free those buffers.
        try {
          s0.synchronize();
        } catch (...) {
        }
        rendezvous().abort(rank(), "recording the completion event failed: " + failure);
      }
      shared_->done = std::move(done);
    }
    rendezvous().sync(rank(), c.fp, c.timeout);  // shared_->done is published; slots are no longer read
    std::shared_ptr<Event> done = shared_->done;
    if (rank() != 0 && done) mine.wait_event(done);
    rendezvous().check_usable();  // a failed launch on rank 0 fails the collective everywhere
    return std::make_shared<EventWork>(done, c.fp.to_string());
  }

  std::vector<const void*> inputs(std::size_t byte_offset = 0) const {
    std::vector<const void*> v;
    for (int j = 0; j < size(); ++j) v.push_back(static_cast<const char*>(rendezvous().slot(j).input) + byte_offset);
    return v;
  }
  std::vector<void*> outputs() const {
    std::vector<void*> v;
    for (int j = 0; j < size(); ++j) v.push_back(rendezvous().slot(j).output);
    return v;
  }
  int ordinal() const { return device_->gpu_ordinal(); }

  WorkPtr run_all_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    return collective(c, input.data(), output.data(), [&](Stream& s) {
      auto in = inputs();
      auto out = outputs();
      cuda::fused_reduce_async(ordinal(), s.native_handle(), input.dtype(), static_cast<int>(c.op), in.data(), size(),
                               out.data(), size(), static_cast<std::size_t>(input.num_elements()), size());
    });
  }

  WorkPtr run_reduce(const Call& c, const Tensor& input, const Tensor& output) override {
    return collective(c, input.data(), rank() == c.root ? output.data() : nullptr, [&](Stream& s) {
      auto in = inputs();
      void* out = rendezvous().slot(c.root).output;
      cuda::fused_reduce_async(ordinal(), s.native_handle(), input.dtype(), static_cast<int>(c.op), in.data(), size(),
                               &out, 1, static_cast<std::size_t>(input.num_elements()), size());
    });
  }

  WorkPtr run_broadcast(const Call& c, const Tensor& tensor) override {
    return collective(c, tensor.data(), tensor.data(), [&](Stream& s) {
      const void* src = rendezvous().slot(c.root).input;
      for (int j = 0; j < size(); ++j)
        if (j != c.root)
          gpu::memcpy_async(ordinal(), s.native_handle(), rendezvous().slot(j).output, src, tensor.nbytes(),
                            gpu::CopyKind::kDeviceToDevice);
    });
  }

  WorkPtr run_all_gather(const Call& c, const Tensor& input, const Tensor& output) override {
    return collective(c, input.data(), output.data(), [&](Stream& s) {
      const std::size_t bytes = input.nbytes();
      for (int j = 0; j < size(); ++j)
        for (int b = 0; b < size(); ++b)
          gpu::memcpy_async(ordinal(), s.native_handle(), static_cast<char*>(rendezvous().slot(j).output) + bytes * b,
                            rendezvous().slot(b).input, bytes, gpu::CopyKind::kDeviceToDevice);
    });
  }

  WorkPtr run_reduce_scatter(const Call& c, const Tensor& input, const Tensor& output) override {
    return collective(c, input.data(), output.data(), [&](Stream& s) {
      const std::size_t m = static_cast<std::size_t>(output.num_elements());
      for (int b = 0; b < size(); ++b) {
        auto in = inputs(m * dtype_size(input.dtype()) * static_cast<std::size_t>(b));
        void* out = rendezvous().slot(b).output;
        cuda::fused_reduce_async(ordinal(), s.native_handle(), input.dtype(), static_cast<int>(c.op), in.data(), size(),
                                 &out, 1, m, size());
      }
    });
  }

  std::shared_ptr<DeviceContext> device_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_virtual_gpu_group(const std::vector<std::string>& devices,
                                                                  const std::string& name) {
  CHORUS_REQUIRE(!devices.empty() && devices.size() <= static_cast<std::size_t>(cuda::kMaxFused), InvalidArgumentError,
                 "make_virtual_gpu_group: ", devices.size(), " devices; give 1..", cuda::kMaxFused);
  std::vector<std::shared_ptr<DeviceContext>> contexts;
  for (const auto& d : devices) {
    auto ctx = runtime::find(d);
    CHORUS_REQUIRE(ctx->is_gpu(), InvalidArgumentError, "make_virtual_gpu_group: ", ctx->name(),
                   " is not a GPU; logical CPU devices use make_shared_memory_group");
    for (const auto& other : contexts) {
      CHORUS_REQUIRE(other.get() != ctx.get(), InvalidArgumentError, "make_virtual_gpu_group: ", ctx->name(),
                     " is listed twice");
      CHORUS_REQUIRE(other->gpu_ordinal() == ctx->gpu_ordinal(), InvalidArgumentError,
                     "make_virtual_gpu_group: ", other->name(), " is on ", other->device().physical_name, " but ",
                     ctx->name(), " is on ", ctx->device().physical_name,
                     "; distinct physical GPUs are connected by NCCL");
    }
    contexts.push_back(std::move(ctx));
  }
  auto rv = std::make_shared<Rendezvous>(static_cast<int>(devices.size()), name);
  auto shared = std::make_shared<Shared>();
  std::vector<std::unique_ptr<Communicator>> out;
  for (std::size_t r = 0; r < contexts.size(); ++r)
    out.push_back(std::make_unique<VirtualGpuCommunicator>(rv, static_cast<int>(r), contexts[r], shared));
  return out;
}

#else  // !CHORUS_WITH_CUDA

std::vector<std::unique_ptr<Communicator>> make_virtual_gpu_group(const std::vector<std::string>&, const std::string&) {
  throw UnavailableError("make_virtual_gpu_group: chorus was built without CUDA");
}

#endif

}  // namespace chorus::collective
