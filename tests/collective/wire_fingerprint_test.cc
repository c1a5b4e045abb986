// collective/wire_fingerprint.h: the fixed-size fingerprint the MPI and Gloo backends exchange.
#include <chorus/collective/wire_fingerprint.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace chorus::collective {
namespace {

CollectiveCall call(std::vector<std::int64_t> shape, std::uint64_t sequence = 3) {
  CollectiveCall c;
  c.kind = CollectiveOp::kAllReduce;
  c.fp.op = collective_op_name(c.kind);
  c.fp.sequence = sequence;
  c.fp.dtype = DType::kFloat32;
  c.fp.shape = std::move(shape);
  c.fp.reduce_op = static_cast<int>(ReduceOp::kSum);
  return c;
}

TEST(WireFingerprint, TheSameCallFromTwoRanksIsTheSameAndDescribesItself) {
  const WireFingerprint a = to_wire(call({4, 5}), 0), b = to_wire(call({4, 5}), 1);
  EXPECT_TRUE(same_call(a, b));  // the sender's rank is not part of the call
  EXPECT_EQ(describe(a), call({4, 5}).fp.to_string());
  EXPECT_FALSE(same_call(a, to_wire(call({4, 6}), 1)));
  EXPECT_FALSE(same_call(a, to_wire(call({4, 5}, 4), 1)));
}

TEST(WireFingerprint, DimsPastTheEighthAreComparedByHashAndShownAsTheFirstEight) {
  const std::vector<std::int64_t> nine{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::int64_t> other = nine;
  other.back() = 10;
  EXPECT_TRUE(same_call(to_wire(call(nine), 0), to_wire(call(nine), 1)));
  EXPECT_FALSE(same_call(to_wire(call(nine), 0), to_wire(call(other), 1)));
  EXPECT_NE(describe(to_wire(call(nine), 0)).find("(first 8 dims shown)"), std::string::npos);
}

// A peer built from other sources (or a corrupted message) sends garbage: described, never thrown.
TEST(WireFingerprint, GarbageIsDescribedAsUnrecognisedNeverThrown) {
  WireFingerprint w = to_wire(call({4, 5}), 0);
  w.dims[1] = -7;  // Shape refuses it: the MPI backend threw here before the Gloo fuzzer found it
  EXPECT_NE(describe(w).find("an unrecognised call"), std::string::npos);
  for (const auto& bad : {std::pair<int, int>{99, 0}, {0, 99}, {-1, 0}}) {
    WireFingerprint g = to_wire(call({4}), 0);
    g.op = bad.first;
    g.dtype = bad.second;
    EXPECT_NE(describe(g).find("an unrecognised call"), std::string::npos);
  }
  WireFingerprint neg = to_wire(call({4}), 0);
  neg.ndim = -3;
  EXPECT_NE(describe(neg).find("an unrecognised call"), std::string::npos);
  WireFingerprint big = to_wire(call({4}), 0);
  big.ndim = 1 << 30;  // only the 8 dims on the wire are read
  EXPECT_NO_THROW(describe(big));
}

}  // namespace
}  // namespace chorus::collective
