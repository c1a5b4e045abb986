#include <chorus/core/variable.h>

#include <gtest/gtest.h>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/placement.h>

namespace chorus {
namespace {

namespace cfg = config;

class VariableTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    cfg::set_visible_devices({}, "GPU");
    cfg::set_logical_device_configuration(cfg::list_physical_devices("CPU")[0],
                                          {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  }
};

TEST_F(VariableTest, AssignAndAssignAdd) {
  Variable v = make_variable({.initial_value = Tensor::from_vector<float>({1, 2}), .name = "w"});
  EXPECT_EQ(v.name(), "w");
  EXPECT_TRUE(v.trainable());
  EXPECT_EQ(v.shape(), Shape({2}));
  v.assign_add(Tensor::from_vector<float>({0.5f, 0.5f}));
  EXPECT_EQ(v.value().to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));
  v.assign(Tensor::from_vector<float>({7, 8}, "/cpu:1"));  // value from another device
  EXPECT_EQ(v.read_value().to_vector<float>(), (std::vector<float>{7, 8}));
}

TEST_F(VariableTest, ValueAliasesReadValueCopies) {
  Variable v = make_variable({.initial_value = Tensor::zeros({3})});
  Tensor alias = v.value();
  Tensor copy = v.read_value();
  v.assign_add(Tensor::ones({3}));
  EXPECT_EQ(alias.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(copy.to_vector<float>()[0], 0.0f);
}

TEST_F(VariableTest, AssignTakingTakesAnUnsharedValuesStorage) {
  Variable v = make_variable({.initial_value = Tensor::zeros({3})});
  Tensor alias = v.value();
  Tensor fresh = Tensor::from_vector<float>({1, 2, 3});
  void* const fresh_bytes = fresh.data();
  v.impl()->assign_taking(std::move(fresh));
  EXPECT_EQ(v.value().data(), fresh_bytes);                            // taken, not copied
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // aliases see it, as after assign
  v.assign_add(Tensor::ones({3}));
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{2, 3, 4}));
}

TEST_F(VariableTest, AssignTakingCopiesASharedOrForeignValue) {
  Variable v = make_variable({.initial_value = Tensor::zeros({2})});
  void* const storage = v.value().data();
  Tensor shared = Tensor::from_vector<float>({5, 6});
  const Tensor keeper = shared;  // someone else still sees these bytes: they must not move
  v.impl()->assign_taking(shared);
  EXPECT_EQ(v.value().data(), storage);
  EXPECT_EQ(v.read_value().to_vector<float>(), (std::vector<float>{5, 6}));
  v.assign_add(Tensor::ones({2}));
  EXPECT_EQ(keeper.to_vector<float>(), (std::vector<float>{5, 6}));
  v.impl()->assign_taking(Tensor::from_vector<float>({1, 1}, "/cpu:1"));  // another device: copied
  EXPECT_EQ(v.value().data(), storage);
  EXPECT_EQ(v.read_value().to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_THROW(v.impl()->assign_taking(Tensor::zeros({3})), InvalidArgumentError);
}

TEST_F(VariableTest, InitialValueIsCopiedNotShared) {
  Tensor init = Tensor::zeros({2});
  Variable v = make_variable({.initial_value = init});
  v.assign_add(Tensor::ones({2}));
  EXPECT_EQ(init.to_vector<float>()[0], 0.0f);
}

TEST_F(VariableTest, Placement) {
  Variable a = make_variable({.initial_value = Tensor::zeros({1}, DType::kFloat32, "/cpu:1")});
  EXPECT_EQ(a.device(), "/job:localhost/replica:0/task:0/device:CPU:1");  // follows the initial value
  Variable b = make_variable({.initial_value = Tensor::zeros({1}), .device = "/cpu:1"});
  EXPECT_EQ(b.device(), "/job:localhost/replica:0/task:0/device:CPU:1");
  DeviceScope scope("/cpu:1");
  Variable c = make_variable({.initial_value = Tensor::zeros({1}, DType::kFloat32, "/cpu:0")});
  EXPECT_EQ(c.device(), "/job:localhost/replica:0/task:0/device:CPU:1");  // the scope wins
}

TEST_F(VariableTest, MismatchesAreRejected) {
  Variable v = make_variable({.initial_value = Tensor::zeros({2, 2}), .name = "kernel"});
  EXPECT_THROW_WITH(v.assign(Tensor::zeros({4})), InvalidArgumentError, "kernel", "float32(4,)", "float32(2, 2)");
  EXPECT_THROW_WITH(v.assign_add(Tensor::zeros({2, 2}, DType::kFloat64)), InvalidArgumentError, "float64");
  EXPECT_THROW_WITH(make_variable({.name = "x"}), InvalidArgumentError, "'x'", "initial_value");
  Variable undefined;
  EXPECT_THROW(undefined.name(), FailedPreconditionError);
}

TEST_F(VariableTest, CreatorChainRunsInnermostFirst) {
  std::vector<std::string> calls;
  VariableCreatorScope outer([&](const VariableArgs& args, const NextCreator& next) {
    calls.push_back("outer:" + args.name);
    return next(args);
  });
  VariableCreatorScope inner([&](const VariableArgs& args, const NextCreator& next) {
    calls.push_back("inner:" + args.name);
    VariableArgs renamed = args;
    renamed.name = "scoped/" + args.name;
    return next(renamed);
  });
  Variable v = make_variable({.initial_value = Tensor::zeros({1}), .name = "bias"});
  EXPECT_EQ(calls, (std::vector<std::string>{"inner:bias", "outer:scoped/bias"}));
  EXPECT_EQ(v.name(), "scoped/bias");
}

TEST_F(VariableTest, CreatorCanBuildItsOwnVariableAndScopeEnds) {
  int made = 0;
  {
    VariableCreatorScope scope([&](const VariableArgs& args, const NextCreator& next) {
      ++made;
      // A strategy would build one component per device here.
      VariableArgs on1 = args;
      on1.device = "/cpu:1";
      return next(on1);
    });
    Variable v = make_variable({.initial_value = Tensor::zeros({1})});
    EXPECT_EQ(v.device(), "/job:localhost/replica:0/task:0/device:CPU:1");
  }
  make_variable({.initial_value = Tensor::zeros({1})});
  EXPECT_EQ(made, 1);
}

TEST_F(VariableTest, CreatorMayOpenAnotherScopeWhileRunning) {
  // push_back inside a running creator used to free the std::function being run (ASan caught it).
  int inner_calls = 0;
  VariableCreatorScope outer([&](const VariableArgs& args, const NextCreator& next) {
    VariableCreatorScope nested([&](const VariableArgs& a, const NextCreator& n) {
      ++inner_calls;
      return n(a);
    });
    for (int i = 0; i < 8; ++i)
      VariableCreatorScope more([](const VariableArgs& a, const NextCreator& n) { return n(a); });
    return next(args);
  });
  Variable v = make_variable({.initial_value = Tensor::zeros({1}), .name = "x"});
  EXPECT_EQ(v.name(), "x");
  EXPECT_EQ(inner_calls, 0);  // scopes opened inside apply to later variables, not this one
}

TEST_F(VariableTest, AssigningAVariableItsOwnValueIsANoOp) {
  Variable v = make_variable({.initial_value = Tensor::from_vector<float>({3, 4})});
  v.assign(v.value());
  EXPECT_EQ(v.value().to_vector<float>(), (std::vector<float>{3, 4}));
}

}  // namespace
}  // namespace chorus
