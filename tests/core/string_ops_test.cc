// Ops refuse string tensors (ops/internal.h common_device and output): each call throws
// InvalidArgumentError naming the op and the dtype instead of reading std::string objects as bytes.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"
#include <chorus/core/tensor.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class StringOpsTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    config::set_visible_devices({}, "GPU");
  }
};

TEST_F(StringOpsTest, EveryKindOfOpRefusesStringInputsNamingOpAndDtype) {
  const Tensor s = Tensor::from_vector<std::string>({"1", "2", "3", "4"}, {2, 2});
  const Tensor f = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor idx = Tensor::from_vector<std::int32_t>({1, 0});
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"add", [&] { ops::add(s, s); }},
      {"add with a float", [&] { ops::add(f, s); }},
      {"relu", [&] { ops::relu(s); }},
      {"matmul", [&] { ops::matmul(s, s); }},
      {"reduce_sum", [&] { ops::reduce_sum(s); }},
      {"cast from string", [&] { ops::cast(s, DType::kFloat32); }},
      {"reshape", [&] { ops::reshape(s, {4}); }},
      {"transpose",
       [&] {
         ops::transpose(s, {1, 0});
       }},
      {"concat",
       [&] {
         ops::concat({s, s}, 0);
       }},
      {"stack",
       [&] {
         ops::stack({s, s});
       }},
      {"gather", [&] { ops::gather(s, idx); }},
  };
  for (const auto& [what, call] : calls) {
    try {
      call();
      ADD_FAILURE() << what << ": no error";
    } catch (const InvalidArgumentError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("has dtype string"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("is not defined for string tensors"), std::string::npos) << what << ": " << msg;
    }
  }
}

TEST_F(StringOpsTest, CastToStringIsRefused) {
  try {
    ops::cast(Tensor::from_vector<float>({1.5f}), DType::kString);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("output of dtype string"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus
