// NCCL across processes, run by CTest as `mpirun -n 2` (labels mpi, gpu). Rank r uses /gpu:r and
// contributes x_r[i] = (r + 1) + (i % 7) (analytic.h).
//   - Without a GPU: make_nccl_communicator fails cleanly and at once on every rank (the device
//     lookup's InvalidArgumentError), never a crash or a hang; MPI stays usable.
//   - With a GPU: every rank asking for /gpu:0 is refused naming the ranks and the GPU; one rank
//     failing its lookup releases the others.
//   - With a distinct GPU per rank on this host: the collectives, checked analytically, and the
//     failure paths (mismatch, missing rank, abort, a hung NCCL kernel ended by Work::wait).
// Otherwise those tests skip (NCCL needs distinct GPUs). Every rank skips alike: the conditions
// are the same on every process of the host. main() is mpi_test.cc's: all ranks agree on the exit
// status.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "analytic.h"
#include "tests/collective/mpi_test_main.h"
#include "tests/core/test_util.h"
#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/nccl/nccl_mpi.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {
namespace {

using chorus::testing::message_of;

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{30000};  // for calls expected to succeed (NCCL's first connections are slow)

std::string gpu_of(int rank) { return "/gpu:" + std::to_string(rank); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int world_size() { return make_mpi_communicator({.timeout = kTimeout})->size(); }

// The rank of this process, from a throwaway MPI communicator (creating it is collective).
int world_rank() { return make_mpi_communicator({.timeout = kTimeout})->rank(); }

#define SKIP_WITHOUT_NCCL() \
  if (nccl_version().empty()) GTEST_SKIP() << "built without NCCL"

// Skips unless every rank can have a GPU of its own on this host.
#define SKIP_WITHOUT_DISTINCT_GPUS(k)                                                                     \
  SKIP_WITHOUT_NCCL();                                                                                    \
  if (gpu::device_count() < (k))                                                                          \
  GTEST_SKIP() << "needs " << (k) << " distinct GPUs on this host (NCCL needs one GPU per rank), it has " \
               << gpu::device_count() << (gpu::device_count() == 0 ? ": " + gpu::unavailable_reason() : "")

std::unique_ptr<Communicator> make_comm(bool validate = true) {
  const int me = world_rank();
  return make_nccl_communicator(gpu_of(me), {.validate = validate, .timeout = kTimeout});
}

TEST(NcclMpiTest, FailsCleanlyAndAtOnceWithoutAGpu) {
  const auto start = Clock::now();
  if (nccl_version().empty()) {
    const std::string m = message_of<UnavailableError>([] { make_nccl_communicator("/gpu:0"); });
    EXPECT_TRUE(contains(m, "built without NCCL")) << m;
    return;
  }
  if (gpu::device_count() > 0) GTEST_SKIP() << "this host has a GPU";
  const std::string m =
      message_of<InvalidArgumentError>([] { make_nccl_communicator("/gpu:0", {.timeout = kTimeout}); });
  EXPECT_TRUE(contains(m, "unknown device '/gpu:0'")) << m;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));  // no rank waited for a timeout
  // MPI is unharmed: a fresh communicator works.
  auto mpi = make_mpi_communicator({.timeout = kTimeout});
  mpi->barrier({.timeout = kTimeout})->wait();
}

TEST(NcclMpiTest, HostDevicesAreRefusedOnEveryRank) {
  SKIP_WITHOUT_NCCL();
  const std::string m =
      message_of<InvalidArgumentError>([] { make_nccl_communicator("/cpu:0", {.timeout = kTimeout}); });
  EXPECT_TRUE(contains(m, "is not a GPU")) << m;
}

TEST(NcclMpiTest, RanksSharingAGpuAreRefusedNamingThemAndTheGpu) {
  SKIP_WITHOUT_NCCL();
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  const int k = world_size();
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  const auto start = Clock::now();
  const std::string m =
      message_of<InvalidArgumentError>([] { make_nccl_communicator("/gpu:0", {.timeout = kTimeout}); });
  const std::string bus = gpu::device_properties(0).pci_bus_id;
  EXPECT_TRUE(contains(m, k == 2 ? "ranks 0 and 1 both use GPU " + bus : "ranks 0, 1 and 2 all use GPU " + bus)) << m;
  EXPECT_TRUE(contains(m, "NCCL needs one GPU per rank")) << m;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST(NcclMpiTest, OneRankFailingItsLookupReleasesTheOthers) {
  SKIP_WITHOUT_NCCL();
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  const int k = world_size(), me = world_rank(), last = k - 1;
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  const auto start = Clock::now();
  if (me == last) {
    EXPECT_THROW(make_nccl_communicator("/cpu:0", {.timeout = kTimeout}), InvalidArgumentError);
  } else {
    const std::string m = message_of<AbortedError>(
        [&] { make_nccl_communicator(gpu_of(me % gpu::device_count()), {.timeout = kTimeout}); });
    EXPECT_TRUE(contains(m, "failed on rank " + std::to_string(last)) && contains(m, "is not a GPU")) << m;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST(NcclMpiTest, AllReduceEveryOpAndDtype) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  auto comm = make_comm();
  const int me = comm->rank();
  EXPECT_EQ(comm->backend(), "nccl_mpi");
  EXPECT_EQ(comm->size(), k);
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps) {
      Tensor t = make_input(me, 1001, dt, "gpu");
      comm->all_reduce(t, t, {.op = op, .timeout = kTimeout})->wait(kTimeout);
      const auto got = t.to_vector<double>();
      for (int i = 0; i < 1001; ++i)
        ASSERT_NEAR(got[i], expected(op, k, i, dt), tolerance(dt, expected(op, k, i, dt)))
            << dtype_name(dt) << " " << reduce_op_name(op) << " i=" << i;
    }
  // Out of place.
  Tensor in = make_input(me, 33, DType::kFloat32, "gpu");
  Tensor out = Tensor::zeros({33}, DType::kFloat32, gpu_of(me));
  comm->all_reduce(in, out, {.timeout = kTimeout})->wait(kTimeout);
  EXPECT_EQ(out.to_vector<double>()[32], expected(ReduceOp::kSum, k, 32, DType::kFloat32));
  EXPECT_EQ(in.to_vector<double>()[32], x(me, 32));
}

TEST(NcclMpiTest, BroadcastReduceAllGatherReduceScatterBarrier) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  auto comm = make_comm();
  const int me = comm->rank();
  for (int root = 0; root < k; ++root) {
    Tensor t = make_input(me, 37, DType::kFloat64, "gpu");
    comm->broadcast(t, {.root = root, .timeout = kTimeout})->wait(kTimeout);
    EXPECT_EQ(t.to_vector<double>()[36], x(root, 36)) << "root " << root;

    Tensor in = make_input(me, 37, DType::kInt32, "gpu");
    Tensor out = Tensor::full({37}, -1, DType::kInt32, gpu_of(me));
    comm->reduce(in, out, {.op = ReduceOp::kMax, .root = root, .timeout = kTimeout})->wait(kTimeout);
    EXPECT_EQ(out.to_vector<double>()[5], me == root ? x(k - 1, 5) : -1) << "root " << root;  // others untouched
  }
  Tensor gathered = Tensor::zeros({k * 3}, DType::kBFloat16, gpu_of(me));
  comm->all_gather(make_input(me, 3, DType::kBFloat16, "gpu"), gathered, {.timeout = kTimeout})->wait(kTimeout);
  const auto g = gathered.to_vector<double>();
  for (int i = 0; i < k * 3; ++i) ASSERT_EQ(g[i], x(i / 3, i % 3)) << i;

  Tensor scattered = Tensor::zeros({5}, DType::kInt64, gpu_of(me));
  comm->reduce_scatter(make_input(me, k * 5, DType::kInt64, "gpu"), scattered, {.timeout = kTimeout})->wait(kTimeout);
  const auto s = scattered.to_vector<double>();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(s[i], expected(ReduceOp::kSum, k, me * 5 + i, DType::kInt64)) << i;

  comm->barrier({.timeout = kTimeout})->wait();
}

TEST(NcclMpiTest, MismatchRaisesOnEveryRankAndTheCommunicatorRecovers) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  auto comm = make_comm();
  const int me = comm->rank(), last = k - 1;
  Tensor t = Tensor::zeros({me == last ? 5 : 4}, DType::kFloat32, gpu_of(me));
  const std::string m = message_of<InvalidArgumentError>([&] { comm->all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_TRUE(contains(m, "rank 0 called all_reduce #0 float32(4,) op=sum but rank " + std::to_string(last) +
                              " called all_reduce #0 float32(5,) op=sum"))
      << m;
  Tensor v = Tensor::ones({4}, DType::kInt32, gpu_of(me));
  comm->all_reduce(v, v, {.timeout = kTimeout})->wait(kTimeout);
  EXPECT_EQ(v.to_vector<int>()[3], k);
}

TEST(NcclMpiTest, MissingRankTimesOutNamingItAndNcclIsAborted) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  auto comm = make_comm();
  const int me = comm->rank(), last = k - 1;
  Tensor t = Tensor::ones({8}, DType::kFloat32, gpu_of(me));
  comm->all_reduce(t, t, {.timeout = kTimeout})->wait(kTimeout);  // #0 everywhere
  if (me != last) {
    const auto start = Clock::now();
    const std::string m =
        message_of<DeadlineExceededError>([&] { comm->all_reduce(t, t, {.timeout = milliseconds(300)}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(contains(m, "all_reduce #1 float32(8,) op=sum on rank " + std::to_string(me))) << m;
    EXPECT_TRUE(contains(m, "rank(s) [" + std::to_string(last) + "] of " + std::to_string(k))) << m;
    EXPECT_THROW(comm->barrier({.timeout = kTimeout}), AbortedError);
  }
  auto sync = make_mpi_communicator({.timeout = kTimeout});  // where the late rank meets the others
  sync->barrier({.timeout = kTimeout})->wait();
  if (me == last) {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_THROW(comm->all_reduce(t, t, {.timeout = kTimeout}), AbortedError);  // told by the others
  }
}

TEST(NcclMpiTest, AbortWakesEveryoneWithTheReason) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  auto comm = make_comm();
  const int me = comm->rank(), last = k - 1;
  if (me == last) {
    std::this_thread::sleep_for(milliseconds(50));
    comm->abort("replica hit a NaN loss");
    EXPECT_THROW(comm->barrier({.timeout = kTimeout}), AbortedError);
    return;
  }
  const auto start = Clock::now();
  Tensor t = Tensor::zeros({8}, DType::kFloat32, gpu_of(me));
  const std::string m = message_of<AbortedError>([&] { comm->all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " aborted the communicator: replica hit a NaN loss")) << m;
}

TEST(NcclMpiTest, BadArgumentOnOneRankReleasesTheOthers) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  auto comm = make_comm();
  const int me = comm->rank();
  Tensor in = Tensor::zeros({8}, DType::kFloat32, gpu_of(me));
  Tensor out = Tensor::zeros({me == 1 ? 9 : 8}, DType::kFloat32, gpu_of(me));
  const auto start = Clock::now();
  if (me == 1) {
    EXPECT_THROW(comm->all_reduce(in, out, {.timeout = kTimeout}), InvalidArgumentError);
  } else {
    const std::string m = message_of<AbortedError>([&] { comm->all_reduce(in, out, {.timeout = kTimeout}); });
    EXPECT_TRUE(contains(m, "rank 1 aborted the communicator: all_reduce #0 float32(8,) op=sum had a bad argument"))
        << m;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// Without validation nothing meets on the host: the NCCL kernel of the ranks that called it waits
// on the GPU for the missing one, until Work::wait's timeout aborts the NCCL communicator.
TEST(NcclMpiTest, HungKernelWithoutValidationIsEndedByTheWorkTimeout) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  auto comm = make_comm(/*validate=*/false);
  const int me = comm->rank(), last = k - 1;
  Tensor t = Tensor::ones({1024}, DType::kFloat32, gpu_of(me));
  comm->all_reduce(t, t, {.timeout = kTimeout})->wait(kTimeout);
  EXPECT_EQ(t.to_vector<float>()[0], static_cast<float>(k));
  if (me != last) {
    const auto start = Clock::now();
    auto work = comm->all_reduce(t, t, {.timeout = kTimeout});
    const std::string m = message_of<DeadlineExceededError>([&] { work->wait(milliseconds(500)); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
    EXPECT_TRUE(contains(m, "all_reduce #1 float32(1024,) op=sum on rank " + std::to_string(me) +
                                " did not complete on the device within 500 ms"))
        << m;
    EXPECT_TRUE(work->is_completed());
    EXPECT_THROW(work->wait(kTimeout), AbortedError);
    EXPECT_THROW(comm->all_reduce(t, t, {.timeout = kTimeout}), AbortedError);
  }
  auto sync = make_mpi_communicator({.timeout = kTimeout});
  sync->barrier({.timeout = kTimeout})->wait();
}

TEST(NcclMpiTest, WrongDeviceIsRefused) {
  const int k = world_size();
  SKIP_WITHOUT_DISTINCT_GPUS(k);
  auto comm = make_comm();
  Tensor host = Tensor::zeros({4}, DType::kFloat32, "/cpu:0");
  const std::string m = message_of<InvalidArgumentError>([&] { comm->all_reduce(host, host); });
  EXPECT_TRUE(contains(m, "CPU:0 but this process's NCCL device is")) << m;
}

}  // namespace
}  // namespace chorus::collective

int main(int argc, char** argv) { return chorus::testing::run_tests_under_mpi(argc, argv); }
