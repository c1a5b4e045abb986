#include <chorus/collective/nccl/nccl.h>

#include <chorus/core/error.h>

#ifdef CHORUS_WITH_NCCL
#include <mutex>

#include <chorus/collective/host_reduce.h>
#include <chorus/collective/in_process.h>
#include <chorus/collective/nccl/nccl_check.h>
#include <chorus/collective/work.h>
#include <chorus/core/cuda/check.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#endif

namespace chorus::collective {

using internal::str_cat;

#ifdef CHORUS_WITH_NCCL

// The mapping nccl_check.h declares, shared with the multi-process backend (nccl_mpi.cc).
[[noreturn]] void throw_nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  std::string msg =
      str_cat(call, " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(nullptr), ") at ", file, ":", line);
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: throw InvalidArgumentError(msg);
    case ncclSystemError:
    case ncclRemoteError: throw UnavailableError(msg);
    default: throw InternalError(msg);
  }
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    default: break;
  }
  check_collective_dtype(dt, "nccl");
  throw InternalError("unreachable");
}

// ncclAvg divides after summing for integer types, as MEAN promises (communicator.h).
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMean: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProd: return ncclProd;
  }
  return ncclSum;
}

namespace {

// Tearing communicators down happens on failure paths and in destructors, where throwing would
// hide the first error or terminate: a failing NCCL call there is logged instead.
void warn_if_failed(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) CHORUS_LOG(WARNING) << "nccl: " << call << " failed: " << ncclGetErrorString(r);
}

// The NCCL communicators of a group, aborted once when the group fails.
struct Comms {
  std::mutex mu;
  std::vector<ncclComm_t> comms;
  bool aborted = false;

  void abort_all() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return;
    aborted = true;
    for (ncclComm_t c : comms) warn_if_failed(ncclCommAbort(c), "ncclCommAbort");
  }
  ~Comms() {
    if (aborted) return;
    for (ncclComm_t c : comms) warn_if_failed(ncclCommDestroy(c), "ncclCommDestroy");
  }
};

class NcclCommunicator final : public InProcessCommunicator {
 public:
  NcclCommunicator(std::shared_ptr<Rendezvous> rv, int rank, std::shared_ptr<DeviceContext> device,
                   std::shared_ptr<Comms> comms)
      : InProcessCommunicator(std::move(rv), rank), device_(std::move(device)), comms_(std::move(comms)) {}

  std::string_view backend() const override { return "nccl"; }

  void abort(const std::string& reason) override {
    InProcessCommunicator::abort(reason);
    comms_->abort_all();
  }

 protected:
  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override {
    check_on_device(t, *device_, rank(), call, role, "this rank's device");
  }
  void drain(const Tensor&) const override {}  // NCCL runs on the device stream: stream order suffices

 private:
  // Meet on the host (validation, timeout), then enqueue `launch` on this rank's stream.
  WorkPtr run(const Call& c, const std::function<void(ncclComm_t, cudaStream_t)>& launch) {
    try {
      rendezvous().arrive(rank(), c.fp, Slot{}, c.timeout);
    } catch (const DeadlineExceededError&) {
      comms_->abort_all();  // nobody may be left inside an NCCL kernel waiting for the missing rank
      throw;
    } catch (const AbortedError&) {
      comms_->abort_all();
      throw;
    }
    gpu::internal::DeviceGuard guard(device_->gpu_ordinal());
    {
      // Enqueueing under the lock abort_all() takes: a comm is never used after ncclCommAbort.
      // (Enqueueing does not block, so this cannot delay an abort of a hung kernel.)
      std::lock_guard<std::mutex> lock(comms_->mu);
      if (comms_->aborted)
        throw AbortedError(str_cat(c.fp.to_string(), " on rank ", rank(), ": the NCCL communicators were aborted"));
      launch(comms_->comms[rank()], static_cast<cudaStream_t>(stream_of(c).native_handle()));
    }
    return std::make_shared<EventWork>(stream_of(c).record_event(), c.fp.to_string());
  }
  std::size_t count(const Tensor& t) const { return static_cast<std::size_t>(t.num_elements()); }
  // The device's stream, or its side stream for an all-reduce with AllReduceOptions::side_stream.
  Stream& stream_of(const Call& c) const { return c.side_stream ? device_->side_stream() : device_->stream(); }

  WorkPtr run_all_reduce(const Call& c, const Tensor& in, const Tensor& out) override {
    return run(c, [&](ncclComm_t comm, cudaStream_t s) {
      CHORUS_NCCL_CHECK(ncclAllReduce(in.data(), out.data(), count(in), nccl_type(in.dtype()), nccl_op(c.op), comm, s));
    });
  }
  WorkPtr run_broadcast(const Call& c, const Tensor& t) override {
    return run(c, [&](ncclComm_t comm, cudaStream_t s) {
      CHORUS_NCCL_CHECK(ncclBroadcast(t.data(), t.data(), count(t), nccl_type(t.dtype()), c.root, comm, s));
    });
  }
  WorkPtr run_reduce(const Call& c, const Tensor& in, const Tensor& out) override {
    return run(c, [&](ncclComm_t comm, cudaStream_t s) {
      CHORUS_NCCL_CHECK(ncclReduce(in.data(), rank() == c.root ? out.data() : nullptr, count(in), nccl_type(in.dtype()),
                                   nccl_op(c.op), c.root, comm, s));
    });
  }
  WorkPtr run_all_gather(const Call& c, const Tensor& in, const Tensor& out) override {
    return run(c, [&](ncclComm_t comm, cudaStream_t s) {
      CHORUS_NCCL_CHECK(ncclAllGather(in.data(), out.data(), count(in), nccl_type(in.dtype()), comm, s));
    });
  }
  WorkPtr run_reduce_scatter(const Call& c, const Tensor& in, const Tensor& out) override {
    return run(c, [&](ncclComm_t comm, cudaStream_t s) {
      CHORUS_NCCL_CHECK(
          ncclReduceScatter(in.data(), out.data(), count(out), nccl_type(in.dtype()), nccl_op(c.op), comm, s));
    });
  }

  std::shared_ptr<DeviceContext> device_;
  std::shared_ptr<Comms> comms_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<std::string>& devices,
                                                           const std::string& name) {
  CHORUS_REQUIRE(!devices.empty(), InvalidArgumentError, "make_nccl_group: no devices given");
  std::vector<std::shared_ptr<DeviceContext>> contexts;
  std::vector<int> ordinals;
  for (const auto& d : devices) {
    auto ctx = runtime::find(d);
    CHORUS_REQUIRE(ctx->is_gpu(), InvalidArgumentError, "make_nccl_group: ", ctx->name(),
                   " is not a GPU; logical CPU devices use make_shared_memory_group");
    for (const auto& other : contexts)
      CHORUS_REQUIRE(other->gpu_ordinal() != ctx->gpu_ordinal(), InvalidArgumentError,
                     "make_nccl_group: ", other->name(), " and ", ctx->name(), " are both on ",
                     ctx->device().physical_name,
                     "; NCCL refuses two ranks on one GPU — virtual GPUs use make_virtual_gpu_group");
    ordinals.push_back(ctx->gpu_ordinal());
    contexts.push_back(std::move(ctx));
  }
  auto comms = std::make_shared<Comms>();
  comms->comms.resize(contexts.size());
  CHORUS_NCCL_CHECK(ncclCommInitAll(comms->comms.data(), static_cast<int>(contexts.size()), ordinals.data()));
  auto rv = std::make_shared<Rendezvous>(static_cast<int>(contexts.size()), name);
  std::vector<std::unique_ptr<Communicator>> out;
  for (std::size_t r = 0; r < contexts.size(); ++r)
    out.push_back(std::make_unique<NcclCommunicator>(rv, static_cast<int>(r), contexts[r], comms));
  return out;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  return str_cat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

#else  // !CHORUS_WITH_NCCL

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<std::string>&, const std::string&) {
  throw UnavailableError("make_nccl_group: chorus was built without NCCL");
}
std::string nccl_version() { return ""; }

#endif

}  // namespace chorus::collective
