// TensorFlow itself reads chorus's checkpoints (tf.train.load_checkpoint, and object-based
// tf.train.Checkpoint.restore(...).assert_consumed()), and chorus restores a checkpoint TensorFlow
// wrote. Runs tests/checkpoint/tf_interop.py with a Python that can import tensorflow: the one in
// $CHORUS_TF_PYTHON, else python3, else /usr/bin/python3; skips with the reason when none can
// (chorus does not depend on TensorFlow; CI has none).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "core/runtime.h"
#include "model/layers.h"
#include "model/model.h"
#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"

namespace chorus::train {
namespace {

using testing::TempDir;

std::optional<std::string> python_with_tensorflow() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("CHORUS_TF_PYTHON")) candidates.push_back(p);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const std::string& py : candidates) {
    if (std::system(("TF_CPP_MIN_LOG_LEVEL=3 " + py + " -c 'import tensorflow' >/dev/null 2>&1").c_str()) == 0) return py;
  }
  return std::nullopt;
}

std::string script() { return std::string(CHORUS_CHECKPOINT_TEST_DIR) + "/tf_interop.py"; }

// A tf.Module-like object: one child variable "w".
class Net final : public Trackable {
 public:
  explicit Net(Variable w) : w_(std::move(w)) {}
  std::vector<TrackableChild> trackable_children() const override { return {{"w", w_}}; }

 private:
  Variable w_;
};

class TensorFlowInterop : public chorus::testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    python_ = python_with_tensorflow();
    if (!python_) GTEST_SKIP() << "no Python here can import tensorflow (set CHORUS_TF_PYTHON to one that can)";
  }
  int run(const std::string& args) {
    const std::string cmd = *python_ + " '" + script() + "' " + args + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return -1;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) std::cout << "  [tf] " << buf;
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::optional<std::string> python_;
};

TEST_F(TensorFlowInterop, TensorFlowReadsChorusCheckpoints) {
  TempDir dir;
  Variable v = make_variable({.initial_value = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), .name = "v"});
  Variable step = make_variable({.initial_value = Tensor::scalar<std::int64_t>(42), .name = "step", .trainable = false});
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({5, 6}, {2}), .name = "w"});
  Checkpoint ckpt({{"v", v}, {"step", step}, {"net", std::make_shared<Net>(w)}});
  const std::string prefix = ckpt.save(dir / "ckpt");
  std::ofstream expected(dir / "expected.txt");
  expected << "v/.ATTRIBUTES/VARIABLE_VALUE float32 1 2 3 4 5 6\n"
           << "step/.ATTRIBUTES/VARIABLE_VALUE int64 42\n"
           << "net/w/.ATTRIBUTES/VARIABLE_VALUE float32 5 6\n"
           << "save_counter/.ATTRIBUTES/VARIABLE_VALUE int64 1\n";
  expected.close();
  EXPECT_EQ(run("read '" + prefix + "' '" + dir / "expected.txt" + "'"), 0);
}

// Keras's own layer_with_weights-N names: a Keras 2 (tf_keras) Sequential of the same layers
// restores a chorus Sequential's checkpoint by object-based matching.
TEST_F(TensorFlowInterop, KerasRestoresAChorusSequential) {
  TempDir dir;
  model::Sequential m({layers::Dense(3), layers::Dropout(0.1), layers::Dense(2)});
  m.build(Shape({1, 4}));
  const std::string prefix = Checkpoint({{"model", m}}).write(dir / "seq");
  std::ofstream expected(dir / "weights.txt");
  expected << std::setprecision(9);  // float32 round trip
  for (const Variable& v : m.variables()) {
    expected << v.name();
    for (float x : v.read_value().reshape(Shape{v.shape().num_elements()}).to_vector<float>()) expected << " " << x;
    expected << "\n";
  }
  expected.close();
  const int rc = run("keras '" + prefix + "' '" + dir / "weights.txt" + "'");
  if (rc == 77) GTEST_SKIP() << "tf_keras (Keras 2) is not installed next to tensorflow";
  EXPECT_EQ(rc, 0);
}

TEST_F(TensorFlowInterop, ChorusRestoresTensorFlowCheckpoints) {
  TempDir dir;
  ASSERT_EQ(run("write '" + dir / "tf" + "'"), 0);
  Variable v = make_variable({.initial_value = Tensor::zeros({2, 3}, DType::kFloat64), .name = "v"});
  Variable step = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "step", .trainable = false});
  Variable ids = make_variable({.initial_value = Tensor::zeros({3}, DType::kInt32), .name = "ids", .trainable = false});
  Variable w = make_variable({.initial_value = Tensor::zeros({2}), .name = "w"});
  Checkpoint ckpt({{"v", v}, {"step", step}, {"ids", ids}, {"net", std::make_shared<Net>(w)}});
  ckpt.read(dir / "tf").assert_consumed();
  EXPECT_EQ(v.read_value().to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(step.value().item<std::int64_t>(), 7);
  EXPECT_EQ(ids.read_value().to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 1, 2}));
  EXPECT_EQ(w.read_value().to_vector<float>(), (std::vector<float>{1.5f, -2.5f}));
}

}  // namespace
}  // namespace chorus::train
