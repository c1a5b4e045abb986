// The parity test: training a small 2-layer model with k replicas (k logical CPU devices)
// on global batches of k·B rows equals training it on one replica with the same k·B rows, after 20
// SGD (momentum) steps and after 20 Adam steps, and all replicas' components of every variable and
// slot are bitwise equal after every step.
#include <gtest/gtest.h>

#include "tests/optimizer/parity.h"

namespace chorus::optimizers {
namespace {

class Parity : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { testing::make_cpus(GetParam()); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_P(Parity, SgdWithMomentumMatchesOneReplica) {
  const double rel = testing::train_and_compare(testing::cpus(GetParam()), [] {
    return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
  });
  std::cout << "[parity] SGD k=" << GetParam() << " max relative difference (per variable, ∞-norm) " << rel << "\n";
  EXPECT_LE(rel, 1e-5);
}

TEST_P(Parity, AdamMatchesOneReplica) {
  const double rel = testing::train_and_compare(
      testing::cpus(GetParam()), [] { return std::make_unique<Adam>(AdamOptions{.learning_rate = 0.01}); });
  std::cout << "[parity] Adam k=" << GetParam() << " max relative difference (per variable, ∞-norm) " << rel << "\n";
  EXPECT_LE(rel, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Replicas, Parity, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "replicas"; });

}  // namespace
}  // namespace chorus::optimizers
