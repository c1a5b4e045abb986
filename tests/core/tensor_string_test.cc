// String tensors (DType::kString, TF's tf.string): creation, host-only placement, zero-copy access,
// copies between logical CPU devices, TF's printing, memory accounting, and the errors of every
// numeric path (core/tensor.h "String tensors").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/placement.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus {
namespace {

namespace cfg = config;
using Strings = std::vector<std::string>;

// Two logical CPU devices, GPUs hidden.
class StringTensorTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    cfg::set_visible_devices({}, "GPU");
    cfg::set_logical_device_configuration(cfg::list_physical_devices("CPU")[0],
                                          {{.memory_limit_mb = 16}, {.memory_limit_mb = 16}});
  }
};

// The InvalidArgumentError message `fn` throws ("" and a test failure when it throws none).
template <typename Fn>
std::string invalid_argument(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgumentError";
  return "";
}

const std::string kBinary("a\0\xff\n", 4);  // NUL and a non-UTF-8 byte inside
const std::string kLong(1000, 'x');         // past the small-string buffer

TEST_F(StringTensorTest, FromVectorKeepsArbitraryBytesRowMajor) {
  Tensor t = Tensor::from_vector<std::string>({"ab", kBinary, "", kLong, "z", "é"}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::kString);
  EXPECT_TRUE(t.is_string());
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<std::string>(), (Strings{"ab", kBinary, "", kLong, "z", "é"}));
  EXPECT_EQ(t.strings()[1].size(), 4u);
  EXPECT_EQ(t.strings()[3], kLong);
  EXPECT_EQ(t.nbytes(), 6 * sizeof(std::string));  // the objects: see MemoryCountsTheObjects
  EXPECT_EQ(Tensor::from_vector<std::string>({"a", "b"}).shape(), Shape({2}));
  std::string why = invalid_argument([] { Tensor::from_vector<std::string>({"a", "b", "c"}, {2, 2}); });
  EXPECT_NE(why.find("3 values do not fill shape (2, 2)"), std::string::npos) << why;
}

TEST_F(StringTensorTest, ScalarAndItem) {
  Tensor s = Tensor::scalar(std::string("hello"));
  EXPECT_EQ(s.dtype(), DType::kString);
  EXPECT_EQ(s.shape().rank(), 0);
  EXPECT_EQ(s.item<std::string>(), "hello");
  EXPECT_EQ(Tensor::scalar("a literal").item<std::string>(), "a literal");  // const char* → string
  EXPECT_EQ(Tensor::scalar(kBinary).item<std::string>(), kBinary);
  EXPECT_EQ(Tensor::scalar(2.5).dtype(), DType::kFloat64);  // numbers unchanged
  std::string why = invalid_argument([] { Tensor::from_vector<std::string>({"a", "b"}).item<std::string>(); });
  EXPECT_NE(why.find("exactly one element"), std::string::npos) << why;
}

TEST_F(StringTensorTest, EmptyAndZerosAreEmptyStrings) {
  for (Tensor t : {Tensor::empty({2, 2}, DType::kString), Tensor::zeros({2, 2}, DType::kString)}) {
    EXPECT_EQ(t.dtype(), DType::kString);
    EXPECT_EQ(t.to_vector<std::string>(), Strings(4));
  }
  EXPECT_TRUE(Tensor::empty({0, 3}, DType::kString).strings().empty());
  EXPECT_EQ(Tensor::empty({}, DType::kString).item<std::string>(), "");
}

TEST_F(StringTensorTest, MutableStringsFillAFreshOutputAndReshapeShares) {
  Tensor t = Tensor::empty({3}, DType::kString, "/cpu:1");
  std::span<std::string> out = t.mutable_strings();
  ASSERT_EQ(out.size(), 3u);
  out[0] = "x";
  out[2] = kLong;
  Tensor r = t.reshape({3, 1});
  EXPECT_EQ(r.dtype(), DType::kString);
  EXPECT_EQ(r.to_vector<std::string>(), (Strings{"x", "", kLong}));
  r.mutable_strings()[1] = "y";  // one storage
  EXPECT_EQ(t.strings()[1], "y");
  EXPECT_EQ(t.strings().data(), r.strings().data());  // zero-copy views of it
}

TEST_F(StringTensorTest, ToCloneAndCopyFromAreDeepCopiesAcrossCpuDevices) {
  Tensor a = Tensor::from_vector<std::string>({"one", kLong}, "/cpu:0");
  Tensor b = a.to("/cpu:1");
  EXPECT_EQ(b.device_name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  EXPECT_EQ(b.to_vector<std::string>(), (Strings{"one", kLong}));
  Tensor c = a.clone();
  EXPECT_EQ(c.device_name(), a.device_name());
  a.mutable_strings()[0] = "changed";
  EXPECT_EQ(b.strings()[0], "one");
  EXPECT_EQ(c.strings()[0], "one");

  Tensor dst = Tensor::empty({2}, DType::kString, "/cpu:1");
  dst.copy_from(a);  // across devices
  EXPECT_EQ(dst.to_vector<std::string>(), (Strings{"changed", kLong}));
  dst.copy_from(b);  // on one device
  EXPECT_EQ(dst.to_vector<std::string>(), (Strings{"one", kLong}));
  dst.copy_from(dst);  // onto itself: nothing to do
  EXPECT_EQ(dst.strings()[1], kLong);
  std::string why = invalid_argument([&] { dst.copy_from(Tensor::from_vector<float>({1, 2})); });
  EXPECT_NE(why.find("float32(2,) does not match the target's string(2,)"), std::string::npos) << why;
}

TEST_F(StringTensorTest, ExplicitGpuPlacementIsRefused) {
  // Checked before looking for the device: the same error with or without a GPU.
  std::string why = invalid_argument([] { Tensor::from_vector<std::string>({"a"}, "/GPU:0"); });
  EXPECT_NE(why.find("Const: a string tensor cannot be placed on '/GPU:0'"), std::string::npos) << why;
  EXPECT_NE(why.find("host memory"), std::string::npos) << why;
  invalid_argument([] { Tensor::empty({2}, DType::kString, "/device:gpu:1"); });
  invalid_argument([] { Tensor::scalar("a", "/job:localhost/replica:0/task:0/device:GPU:0"); });
  Tensor t = Tensor::scalar("a");
  why = invalid_argument([&] { t.to("/GPU:0"); });
  EXPECT_NE(why.find("Copy: a string tensor cannot be placed on '/GPU:0'"), std::string::npos) << why;
}

TEST_F(StringTensorTest, DefaultPlacementIsTheHostEvenUnderAGpuScope) {
  EXPECT_EQ(Tensor::scalar("a").device_name(), "/job:localhost/replica:0/task:0/device:CPU:0");
  {
    DeviceScope scope("/cpu:1");
    EXPECT_EQ(Tensor::empty({1}, DType::kString).device_name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  }
  {
    // As TF places string ops on the host: a GPU scope soft-places them on CPU:0.
    DeviceScope scope("/GPU:0");
    EXPECT_EQ(Tensor::from_vector<std::string>({"a"}).device_name(), "/job:localhost/replica:0/task:0/device:CPU:0");
  }
  cfg::set_soft_device_placement(false);
  DeviceScope scope("/GPU:0");
  EXPECT_THROW(Tensor::scalar("a"), InvalidArgumentError);
}

TEST_F(StringTensorTest, NumericAccessIsRefusedNamingTheCall) {
  Tensor s = Tensor::from_vector<std::string>({"1", "2"});
  std::string why = invalid_argument([&] { s.data(); });
  EXPECT_NE(why.find("data() of a string tensor of shape (2,)"), std::string::npos) << why;
  why = invalid_argument([&] { s.to_vector<float>(); });
  EXPECT_NE(why.find("to_vector: a string tensor"), std::string::npos) << why;
  EXPECT_NE(why.find("not numbers"), std::string::npos) << why;
  why = invalid_argument([&] { Tensor::scalar("7").item<int>(); });
  EXPECT_NE(why.find("item: a string tensor"), std::string::npos) << why;
  std::string buf(2 * sizeof(std::string), '\0');
  invalid_argument([&] { s.copy_to_host(buf.data()); });
  why = invalid_argument([&] { s.add_inplace(s); });
  EXPECT_NE(why.find("assign_add is not defined for string tensors"), std::string::npos) << why;
  why = invalid_argument([] { Tensor::full({2}, 1.0, DType::kString); });
  EXPECT_NE(why.find("Fill: cannot fill a string tensor"), std::string::npos) << why;
  invalid_argument([] { Tensor::ones({2}, DType::kString); });
  const std::string raw[1] = {"x"};
  why = invalid_argument([&] { Tensor::from_host(raw, {1}, DType::kString); });
  EXPECT_NE(why.find("from_vector<std::string>"), std::string::npos) << why;
  // And the other way round: numbers are not read as strings.
  why = invalid_argument([] { Tensor::from_vector<float>({1}).to_vector<std::string>(); });
  EXPECT_NE(why.find("to_vector<std::string>: the tensor has dtype float32"), std::string::npos) << why;
  invalid_argument([] { Tensor::scalar(1).strings(); });
  invalid_argument([] { Tensor::scalar(1).mutable_strings(); });
  invalid_argument([] { Tensor::scalar(1).item<std::string>(); });
}

// Expected strings printed by TF 2.21 (print(tf.constant(...))), with chorus's device suffix.
TEST_F(StringTensorTest, PrintsLikeTensorFlow) {
  const std::string dev = ", device=/job:localhost/replica:0/task:0/device:CPU:0)";
  EXPECT_EQ(Tensor::scalar("abc").to_string(), "tf.Tensor(b'abc', shape=(), dtype=string" + dev);
  // Both quotes present: single quotes, the ' escaped; bytes as \xNN, \t \n \r and \\ escaped.
  EXPECT_EQ(Tensor::from_vector<std::string>({std::string("a\0\xff\n\t\\'\"", 8), "x"}).to_string(),
            "tf.Tensor([b'a\\x00\\xff\\n\\t\\\\\\'\"' b'x'], shape=(2,), dtype=string" + dev);
  EXPECT_EQ(Tensor::scalar("it's").to_string(), "tf.Tensor(b\"it's\", shape=(), dtype=string" + dev);
  EXPECT_EQ(Tensor::scalar("\x7f\x80 ~\r").to_string(), "tf.Tensor(b'\\x7f\\x80 ~\\r', shape=(), dtype=string" + dev);
  EXPECT_EQ(Tensor::from_vector<std::string>({"é"}).to_string(),
            "tf.Tensor([b'\\xc3\\xa9'], shape=(1,), dtype=string" + dev);
  EXPECT_EQ(Tensor::from_vector<std::string>({"a", "b", "c", "d"}, {2, 2}).to_string(),
            "tf.Tensor(\n[[b'a' b'b']\n [b'c' b'd']], shape=(2, 2), dtype=string" + dev);
  EXPECT_EQ(Tensor::zeros({2}, DType::kString).to_string(), "tf.Tensor([b'' b''], shape=(2,), dtype=string" + dev);
  EXPECT_EQ(Tensor::empty({0}, DType::kString).to_string(), "tf.Tensor([], shape=(0,), dtype=string" + dev);
  Strings many;
  for (int i = 0; i < 2000; ++i) many.push_back(std::to_string(i));
  EXPECT_EQ(Tensor::from_vector(many).to_string(),
            "tf.Tensor([b'0' b'1' b'2' ... b'1997' b'1998' b'1999'], shape=(2000,), dtype=string" + dev);
}

TEST_F(StringTensorTest, MemoryCountsTheObjectsNotTheHeapBytes) {
  const MemoryInfo before = cfg::get_memory_info("CPU:1");
  {
    Tensor t = Tensor::from_vector<std::string>(Strings(256, kLong), "/cpu:1");
    EXPECT_EQ(cfg::get_memory_info("CPU:1").current - before.current, 256 * sizeof(std::string));
  }
  EXPECT_EQ(cfg::get_memory_info("CPU:1").current, before.current);
  // The device's memory limit applies to the objects (16 MiB here).
  EXPECT_THROW(Tensor::empty({(std::int64_t{32} << 20) / static_cast<std::int64_t>(sizeof(std::string))},
                             DType::kString, "/cpu:1"),
               ResourceExhaustedError);
}

TEST_F(StringTensorTest, ReleaseRestoreAndExchangeKeepObjectsValid) {
  Tensor a = Tensor::from_vector<std::string>({kLong, "a"});
  Tensor b = Tensor::from_vector<std::string>({"b", kLong});
  a.buffer()->exchange(*b.buffer());
  EXPECT_EQ(a.to_vector<std::string>(), (Strings{"b", kLong}));
  EXPECT_EQ(b.to_vector<std::string>(), (Strings{kLong, "a"}));
  Tensor bytes = Tensor::zeros({2 * sizeof(std::string)}, DType::kUInt8);
  std::string why = invalid_argument([&] { a.buffer()->exchange(*bytes.buffer()); });
  EXPECT_NE(why.find("of strings"), std::string::npos) << why;
  a.buffer()->release();  // destroys the strings (ASan sees a leak otherwise)
  EXPECT_THROW(a.strings(), FailedPreconditionError);
  a.buffer()->restore();
  EXPECT_EQ(a.to_vector<std::string>(), Strings(2));  // fresh, empty
}

TEST_F(StringTensorTest, StringVariableAssignsAndReads) {
  Variable v = make_variable(
      {.initial_value = Tensor::from_vector<std::string>({"a", "b"}), .name = "vocab", .trainable = false});
  EXPECT_EQ(v.dtype(), DType::kString);
  v.assign(Tensor::from_vector<std::string>({"c", kLong}, "/cpu:1"));
  EXPECT_EQ(v.read_value().to_vector<std::string>(), (Strings{"c", kLong}));
  EXPECT_EQ(v.value().strings()[0], "c");
  EXPECT_THROW(v.assign_add(Tensor::from_vector<std::string>({"x", "y"})), InvalidArgumentError);
}

// With a real GPU visible: its device refuses string storage however it is asked.
class StringTensorGpuTest : public testing::CoreTest {};

TEST_F(StringTensorGpuTest, GpuDeviceRefusesStringStorage) {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  std::shared_ptr<DeviceContext> gpu0 = place_op("Empty", "/GPU:0");
  ASSERT_TRUE(gpu0->is_gpu());
  std::string why = invalid_argument([&] { Tensor::empty_on(gpu0, {2}, DType::kString); });
  EXPECT_NE(why.find("string tensor storage cannot live on"), std::string::npos) << why;
  // Default placement still finds the host although a GPU exists.
  EXPECT_FALSE(Tensor::scalar("a").device_context().is_gpu());
  EXPECT_THROW(Tensor::scalar("a").to("/GPU:0"), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus
