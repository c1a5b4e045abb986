// The parity experiment on two logical GPUs carved out of GPU:0 (the virtual-GPU reduction):
// replicas bitwise equal after every step, and equal to one replica to 1e-5 relative. Skips
// without a GPU (label gpu).
#include <gtest/gtest.h>

#include "tests/optimizer/parity.h"
#include <chorus/core/config.h>

namespace chorus::optimizers {
namespace {

class ParityGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    chorus::internal::reset_runtime_for_testing();
    auto gpus = config::list_physical_devices("GPU");
    if (gpus.empty())
      GTEST_SKIP() << "no GPU visible (CUDA-off build or no device): the virtual-GPU parity test needs one";
    config::set_logical_device_configuration(gpus[0], {{.memory_limit_mb = 1024}, {.memory_limit_mb = 1024}});
  }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_F(ParityGpu, SgdAndAdamOnTwoVirtualGpus) {
  const std::vector<std::string> gpus{"/gpu:0", "/gpu:1"};
  const double sgd = testing::train_and_compare(
      gpus, [] { return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1, .momentum = 0.9}); });
  const double adam =
      testing::train_and_compare(gpus, [] { return std::make_unique<Adam>(AdamOptions{.learning_rate = 0.01}); });
  std::cout << "[parity gpu] SGD " << sgd << ", Adam " << adam << "\n";
  EXPECT_LE(sgd, 1e-5);
  EXPECT_LE(adam, 1e-5);
}

}  // namespace
}  // namespace chorus::optimizers
