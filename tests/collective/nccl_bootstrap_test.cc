// The host-side logic of the multi-process NCCL backend, without MPI, NCCL or a GPU: the one-GPU-
// per-rank check, and the wire forms of GPU claims and fingerprints.
#include <chorus/collective/nccl/nccl_bootstrap.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

GpuClaim claim(int rank, const std::string& host, const std::string& bus) {
  return {.rank = rank, .host = host, .pci_bus_id = bus, .device = "/job:localhost/replica:0/task:0/device:GPU:0"};
}

std::string error_of(const std::vector<GpuClaim>& claims) {
  try {
    check_distinct_gpus(claims);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(NcclBootstrapTest, DistinctGpusOnOneHostPass) {
  EXPECT_NO_THROW(check_distinct_gpus(
      {claim(0, "node7", "0000:19:00.0"), claim(1, "node7", "0000:3B:00.0"), claim(2, "node7", "0000:4C:00.0")}));
  EXPECT_NO_THROW(check_distinct_gpus({}));
  EXPECT_NO_THROW(check_distinct_gpus({claim(0, "node7", "0000:19:00.0")}));
}

TEST(NcclBootstrapTest, SameBusIdOnDifferentHostsPasses) {
  // Every node of a cluster has its GPU 0 at the same bus id: that is not a conflict.
  EXPECT_NO_THROW(check_distinct_gpus({claim(0, "node7", "0000:19:00.0"), claim(1, "node8", "0000:19:00.0")}));
}

TEST(NcclBootstrapTest, SameGpuOnOneHostNamesBothRanksTheGpuAndTheRemedy) {
  const std::string m = error_of({claim(0, "node7", "0000:19:00.0"), claim(1, "node7", "0000:19:00.0")});
  EXPECT_TRUE(contains(m,
                       "INVALID_ARGUMENT: ranks 0 and 1 both use GPU 0000:19:00.0 on host node7: NCCL needs one "
                       "GPU per rank; give each process its own GPU (e.g. by local rank) or use virtual GPUs in "
                       "one process"))
      << m;
}

TEST(NcclBootstrapTest, BusIdsCompareCaseInsensitively) {
  const std::string m = error_of({claim(0, "n", "0000:1A:00.0"), claim(1, "n", "0000:1a:00.0")});
  EXPECT_TRUE(contains(m, "ranks 0 and 1 both use GPU 0000:1A:00.0 on host n")) << m;
}

TEST(NcclBootstrapTest, EveryConflictIsListedWithAllItsRanks) {
  // Claims arrive in rank order from MPI, but the check does not rely on it.
  const std::string m =
      error_of({claim(3, "a", "0000:19:00.0"), claim(0, "a", "0000:19:00.0"), claim(1, "b", "0000:19:00.0"),
                claim(2, "a", "0000:19:00.0"), claim(4, "b", "0000:3B:00.0"), claim(5, "b", "0000:3B:00.0")});
  EXPECT_TRUE(contains(m, "ranks 0, 2 and 3 all use GPU 0000:19:00.0 on host a")) << m;
  EXPECT_TRUE(contains(m, "; ranks 4 and 5 both use GPU 0000:3B:00.0 on host b")) << m;
  EXPECT_FALSE(contains(m, " 1 ") || contains(m, "ranks 1")) << m;  // rank 1 is alone on its GPU of host b
}

TEST(NcclBootstrapTest, UnknownBusIdsNeverConflict) {
  EXPECT_NO_THROW(check_distinct_gpus({claim(0, "n", ""), claim(1, "n", "")}));
}

TEST(NcclBootstrapTest, ClaimsSurviveTheWireAndLongNamesAreCut) {
  const GpuClaim c = claim(5, "node7.cluster.example.org", "0000:19:00.0");
  const std::vector<std::int64_t> w = pack_claim(c);
  ASSERT_EQ(w.size(), static_cast<std::size_t>(kGpuClaimWords));
  const GpuClaim back = unpack_claim(w.data(), 3);
  EXPECT_EQ(back.rank, 3);  // the block it came from, not anything on the wire
  EXPECT_EQ(back.host, c.host);
  EXPECT_EQ(back.pci_bus_id, c.pci_bus_id);
  EXPECT_EQ(back.device, c.device);

  const GpuClaim long_one = claim(0, std::string(400, 'h'), std::string(40, 'b'));
  const GpuClaim cut = unpack_claim(pack_claim(long_one).data(), 0);
  EXPECT_EQ(cut.host, std::string(255, 'h'));
  EXPECT_EQ(cut.pci_bus_id, std::string(31, 'b'));
  EXPECT_EQ(cut.device, long_one.device);
}

Fingerprint fp(const std::string& op, std::vector<std::int64_t> shape, int reduce_op = 0, int root = -1,
               std::uint64_t seq = 0) {
  Fingerprint f;
  f.op = op;
  f.sequence = seq;
  f.shape = std::move(shape);
  f.reduce_op = reduce_op;
  f.root = root;
  return f;
}

std::vector<std::int64_t> gather(const std::vector<Fingerprint>& fps) {
  std::vector<std::int64_t> all;
  for (std::size_t r = 0; r < fps.size(); ++r) {
    const auto w = pack_fingerprint(fps[r], static_cast<int>(r));
    EXPECT_EQ(w.size(), static_cast<std::size_t>(kFingerprintWords));
    all.insert(all.end(), w.begin(), w.end());
  }
  return all;
}

TEST(NcclBootstrapTest, SameFingerprintsMatchWhateverTheRank) {
  const Fingerprint a = fp("all_reduce", {1024, 3});
  EXPECT_EQ(compare_fingerprints(gather({a, a, a}), 3), "");
  const Fingerprint b = fp("barrier", {}, -1, -1, 7);
  EXPECT_EQ(compare_fingerprints(gather({b, b}), 2), "");
}

TEST(NcclBootstrapTest, MismatchesAreDescribedAsTheMpiBackendDoes) {
  std::string m =
      compare_fingerprints(gather({fp("all_reduce", {4}), fp("all_reduce", {4}), fp("all_reduce", {5})}), 3);
  EXPECT_TRUE(contains(m,
                       "participants called different collectives: rank 0 called all_reduce #0 float32(4,) op=sum "
                       "but rank 2 called all_reduce #0 float32(5,) op=sum"))
      << m;
  m = compare_fingerprints(gather({fp("all_reduce", {4}), fp("broadcast", {4}, -1, 0)}), 2);
  EXPECT_TRUE(contains(m, "rank 1 called broadcast #0 float32(4,) root=0")) << m;
  m = compare_fingerprints(gather({fp("all_reduce", {4}, 0), fp("all_reduce", {4}, 1)}), 2);
  EXPECT_TRUE(contains(m, "op=mean")) << m;
  m = compare_fingerprints(gather({fp("all_reduce", {4}, 0, -1, 3), fp("all_reduce", {4}, 0, -1, 4)}), 2);
  EXPECT_TRUE(contains(m, "rank 1 called all_reduce #4")) << m;
  Fingerprint f64 = fp("all_reduce", {4});
  f64.dtype = DType::kFloat64;
  m = compare_fingerprints(gather({fp("all_reduce", {4}), f64}), 2);
  EXPECT_TRUE(contains(m, "float64(4,)")) << m;
}

TEST(NcclBootstrapTest, DimsPastTheEighthAreComparedThroughAHash) {
  const std::vector<std::int64_t> dims(10, 2);
  std::vector<std::int64_t> other = dims;
  other[9] = 3;
  EXPECT_EQ(compare_fingerprints(gather({fp("all_gather", dims, -1), fp("all_gather", dims, -1)}), 2), "");
  const std::string m = compare_fingerprints(gather({fp("all_gather", dims, -1), fp("all_gather", other, -1)}), 2);
  EXPECT_TRUE(contains(m, "(first 8 dims shown)")) << m;
}

TEST(NcclBootstrapTest, GarbageFromAPeerIsDescribedNotTrusted) {
  std::vector<std::int64_t> all = gather({fp("all_reduce", {4}), fp("all_reduce", {4})});
  all[kFingerprintWords + 0] = 99;  // op of rank 1
  all[kFingerprintWords + 2] = -5;  // dtype
  const std::string m = compare_fingerprints(all, 2);
  EXPECT_TRUE(contains(m, "rank 1 called an unrecognised call (op 99, dtype -5, sequence 0)")) << m;
}

}  // namespace
}  // namespace chorus::collective
