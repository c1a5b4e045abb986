// Checkpoints of mirrored variables: written once, restored into every component on its own
// device; k replicas → m replicas for any k, m (default strategy included); ON_READ SUM/MEAN.
#include <gtest/gtest.h>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>

namespace chorus::train {
namespace {

using testing::TempDir;

void make_cpus(int n) { chorus::testing::make_cpus(n, 64); }

using chorus::testing::cpus;

struct Vars {
  Variable weights;  // ON_WRITE
  Variable total;    // ON_READ SUM (a metric's accumulator)
  Variable mean;     // ON_READ MEAN
};

Vars make_vars(float w) {
  return {make_variable({.initial_value = Tensor::from_vector<float>({w, w + 1, w + 2}, {3}), .name = "w"}),
          make_variable({.initial_value = Tensor::scalar<float>(0),
                         .name = "total",
                         .trainable = false,
                         .synchronization = VariableSynchronization::kOnRead,
                         .aggregation = VariableAggregation::kSum}),
          make_variable({.initial_value = Tensor::scalar<float>(0),
                         .name = "mean",
                         .trainable = false,
                         .synchronization = VariableSynchronization::kOnRead,
                         .aggregation = VariableAggregation::kMean})};
}

std::vector<float> component(const Variable& v, std::size_t r) {
  auto m = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
  EXPECT_NE(m, nullptr);
  return m->components()[r].read_value().reshape(Shape{v.shape().num_elements()}).to_vector<float>();
}

// Saves with k replicas: weights {1,2,3}; ON_READ components 1..k (sum k(k+1)/2, mean (k+1)/2).
std::string save_with(int k, const std::string& dir) {
  distribute::MirroredStrategy strategy(cpus(k));
  auto scope = strategy.scope();
  Vars v = make_vars(1);
  auto total = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.total.impl());
  auto mean = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.mean.impl());
  for (int r = 0; r < k; ++r) {
    total->components()[static_cast<std::size_t>(r)].impl()->assign(Tensor::scalar<float>(static_cast<float>(r + 1)));
    mean->components()[static_cast<std::size_t>(r)].impl()->assign(Tensor::scalar<float>(static_cast<float>(r + 1)));
  }
  Checkpoint ckpt({{"w", v.weights}, {"total", v.total}, {"mean", v.mean}});
  return ckpt.write(dir + "/k" + std::to_string(k));
}

class MirroredCheckpointTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(MirroredCheckpointTest, RestoresOntoAnyReplicaCount) {
  const auto [k, m] = GetParam();
  TempDir dir;
  make_cpus(std::max(k, m));
  const std::string path = save_with(k, dir.path());
  // Written once: one value per variable, the aggregate for ON_READ.
  BundleReader r(path);
  EXPECT_EQ(r.keys().size(), 4u);  // 3 variables + the object graph
  EXPECT_FLOAT_EQ(r.read("total/.ATTRIBUTES/VARIABLE_VALUE").item<float>(), k * (k + 1) / 2.0f);
  EXPECT_FLOAT_EQ(r.read("mean/.ATTRIBUTES/VARIABLE_VALUE").item<float>(), (k + 1) / 2.0f);

  if (m == 1) {  // the default strategy: plain variables
    Vars v = make_vars(0);
    Checkpoint({{"w", v.weights}, {"total", v.total}, {"mean", v.mean}}).read(path).assert_consumed();
    EXPECT_EQ(v.weights.read_value().to_vector<float>(), (std::vector<float>{1, 2, 3}));
    EXPECT_FLOAT_EQ(v.total.value().item<float>(), k * (k + 1) / 2.0f);
    EXPECT_FLOAT_EQ(v.mean.value().item<float>(), (k + 1) / 2.0f);
    return;
  }
  distribute::MirroredStrategy strategy(cpus(m));
  auto scope = strategy.scope();
  Vars v = make_vars(0);
  Checkpoint({{"w", v.weights}, {"total", v.total}, {"mean", v.mean}}).read(path).assert_consumed();
  auto w = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.weights.impl());
  for (std::size_t r = 0; r < static_cast<std::size_t>(m); ++r) {
    EXPECT_EQ(component(v.weights, r), (std::vector<float>{1, 2, 3})) << "replica " << r;
    EXPECT_EQ(w->components()[r].device(), strategy.replica_devices()[r]);  // on its own device
    // SUM: each component gets total / m, so the sum is kept; MEAN: each gets the mean.
    EXPECT_FLOAT_EQ(component(v.total, r)[0], k * (k + 1) / 2.0f / static_cast<float>(m));
    EXPECT_FLOAT_EQ(component(v.mean, r)[0], (k + 1) / 2.0f);
  }
  EXPECT_FLOAT_EQ(v.total.value().item<float>(), k * (k + 1) / 2.0f);  // the aggregate read back
}

INSTANTIATE_TEST_SUITE_P(KToM, MirroredCheckpointTest,
                         ::testing::Values(std::make_pair(2, 1), std::make_pair(2, 3), std::make_pair(3, 2),
                                           std::make_pair(1, 4), std::make_pair(4, 4)),
                         [](const auto& info) {
                           return "k" + std::to_string(info.param.first) + "_m" + std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace chorus::train
