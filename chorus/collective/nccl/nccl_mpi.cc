// NCCL across processes started by mpirun (nccl_mpi.h): MPI is the side channel (nccl_side.h) of
// the communicator that nccl_process.cc builds.
#include <chorus/collective/nccl/nccl_mpi.h>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

#if defined(CHORUS_WITH_NCCL) && defined(CHORUS_WITH_MPI)
#include <cstring>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/nccl/nccl_side.h>
#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/core/tensor.h>
#endif

namespace chorus::collective {

using internal::str_cat;

#if defined(CHORUS_WITH_NCCL) && defined(CHORUS_WITH_MPI)
namespace {

using std::chrono::milliseconds;

// The device of the small host tensors the MPI communicator moves (fingerprints, claims, the id).
constexpr const char* kHostDevice = "/cpu:0";

// Everything over an MPI communicator of MPI_COMM_WORLD made for this NCCL communicator (without
// validation of its own: its calls are always the same on every process).
class MpiSide final : public NcclSide {
 public:
  explicit MpiSide(std::unique_ptr<Communicator> mpi) : mpi_(std::move(mpi)) {}

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  std::string backend() const override { return "nccl_mpi"; }
  std::string transport() const override { return "MPI"; }
  std::string how_to_choose_gpus() const override { return "by local rank"; }

  std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& words, const char*,
                                       milliseconds timeout) override {
    const auto n = static_cast<std::int64_t>(words.size());
    Tensor in = Tensor::from_host(words.data(), {n}, DType::kInt64, kHostDevice);
    Tensor out = Tensor::zeros({n * mpi_->size()}, DType::kInt64, kHostDevice);
    mpi_->all_gather(in, out, {.timeout = timeout})->wait(timeout);
    return out.to_vector<std::int64_t>();
  }

  void broadcast(std::vector<std::int64_t>& words, milliseconds timeout) override {
    Tensor t = Tensor::from_host(words.data(), {static_cast<std::int64_t>(words.size())}, DType::kInt64, kHostDevice);
    mpi_->broadcast(t, {.root = 0, .timeout = timeout})->wait(timeout);
    std::memcpy(words.data(), t.data(), words.size() * sizeof(std::int64_t));
  }

  void barrier(milliseconds timeout) override { mpi_->barrier({.timeout = timeout})->wait(timeout); }

  void abort(const std::string& notice) noexcept override { mpi_->abort(notice); }  // mpi.h: never throws

 private:
  std::unique_ptr<Communicator> mpi_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& device, const NcclMpiOptions& options) {
  auto mpi = make_mpi_communicator({.validate = false, .timeout = options.timeout});  // collective
  return create_nccl_communicator(device, std::make_unique<MpiSide>(std::move(mpi)), options.validate, options.timeout,
                                  process_peer_monitor());
}

#else  // without NCCL or MPI

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& device, const NcclMpiOptions&) {
#if !defined(CHORUS_WITH_NCCL) && !defined(CHORUS_WITH_MPI)
  const char* missing = "NCCL and MPI";
#elif !defined(CHORUS_WITH_NCCL)
  const char* missing = "NCCL";
#else
  const char* missing = "MPI";
#endif
  throw UnavailableError(
      str_cat("make_nccl_communicator(\"", device, "\"): chorus was built without ", missing,
              "; NCCL across processes needs both (MPI carries the bootstrap). In one process, "
              "make_nccl_group spans the GPUs; across processes without NCCL, make_mpi_communicator "
              "moves host tensors; without MPI, make_nccl_communicator over a store (nccl_store.h)"));
}

#endif

}  // namespace chorus::collective
