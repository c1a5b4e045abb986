#include <chorus/core/tensor.h>

#include <gtest/gtest.h>

#include <thread>

#include <chrono>

#include <atomic>

#include "test_util.h"
#include <chorus/core/config.h>

namespace chorus {
namespace {

namespace cfg = config;

class TensorTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    cfg::set_visible_devices({}, "GPU");
    cfg::set_logical_device_configuration(cfg::list_physical_devices("CPU")[0],
                                          {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  }
};

TEST_F(TensorTest, FromVectorRoundTripsEveryDtype) {
  auto f = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f}, {2, 2});
  EXPECT_EQ(f.shape(), Shape({2, 2}));
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.nbytes(), 16u);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f}));
  EXPECT_EQ(Tensor::from_vector<double>({1e300, -1}).to_vector<double>(), (std::vector<double>{1e300, -1}));
  EXPECT_EQ(Tensor::from_vector<std::int64_t>({1LL << 40}).item<std::int64_t>(), 1LL << 40);
  EXPECT_EQ(Tensor::from_vector<std::int32_t>({-7, 7}).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-7, 7}));
  EXPECT_EQ(Tensor::from_vector<std::uint8_t>({255}).item<int>(), 255);
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(Tensor::from_vector<float16>({float16(0.5f)}).item<float>(), 0.5f);
  EXPECT_EQ(Tensor::from_vector<bfloat16>({bfloat16(-4.0f)}).item<float>(), -4.0f);
  EXPECT_EQ(Tensor::scalar(2.5).shape().rank(), 0);
  // Conversion on the way out: float tensor read as int truncates toward zero.
  EXPECT_EQ(f.to_vector<int>(), (std::vector<int>{1, -2, 3, 0}));
}

TEST_F(TensorTest, BufferExchangeSwapsStorageWithoutCopying) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3});
  Tensor alias = a.reshape({3, 1});  // another Tensor viewing a's storage
  Tensor b = Tensor::from_vector<float>({7, 8, 9});
  void* const a_bytes = a.data();
  void* const b_bytes = b.data();
  a.buffer()->exchange(*b.buffer());
  EXPECT_EQ(a.data(), b_bytes);  // no copy: the storages traded places
  EXPECT_EQ(b.data(), a_bytes);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_F(TensorTest, BufferExchangeRefusesOtherDevicesSizesAndReleasedStorage) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3});
  Tensor other_device = Tensor::from_vector<float>({4, 5, 6}, "/cpu:1");
  Tensor other_size = Tensor::from_vector<float>({4, 5});
  EXPECT_THROW(a.buffer()->exchange(*other_device.buffer()), InvalidArgumentError);
  EXPECT_THROW(a.buffer()->exchange(*other_size.buffer()), InvalidArgumentError);
  Tensor released = Tensor::from_vector<float>({4, 5, 6});
  released.buffer()->release();
  EXPECT_THROW(a.buffer()->exchange(*released.buffer()), InvalidArgumentError);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // nothing changed
  EXPECT_EQ(other_device.to_vector<float>(), (std::vector<float>{4, 5, 6}));
}

// Runs `write` on another thread while `t`'s buffer is held; checks that it waits for the hold
// (t unchanged, reads still served) and completes once the hold ends.
template <typename Write>
void expect_write_waits_for_hold(Tensor t, Write write) {
  const std::vector<float> before = t.to_vector<float>();
  t.buffer()->hold_writes();
  std::atomic<bool> done{false};
  std::thread writer([&] {
    write();
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(t.to_vector<float>(), before);  // reads do not wait
  t.buffer()->end_hold();
  writer.join();
  EXPECT_TRUE(done.load());
}

TEST_F(TensorTest, WriteHoldsMakeInPlaceWritesWaitAndLetReadsThrough) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3});
  expect_write_waits_for_hold(t, [&] { t.copy_from(Tensor::from_vector<float>({4, 5, 6})); });
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{4, 5, 6}));
  expect_write_waits_for_hold(t, [&] { t.add_inplace(Tensor::ones({3})); });
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{5, 6, 7}));
  Tensor other = Tensor::from_vector<float>({0, 0, 0});
  expect_write_waits_for_hold(t, [&] { t.buffer()->exchange(*other.buffer()); });
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  Tensor released = Tensor::from_vector<float>({9, 9, 9});
  expect_write_waits_for_hold(released, [&] { released.buffer()->release(); });
  EXPECT_TRUE(released.buffer()->released());
}

// Buffer::writes counts the in-place writes (a version for host-side caches of the contents).
TEST_F(TensorTest, InPlaceWritesAreCountedReadsAreNot) {
  Tensor t = Tensor::from_vector<float>({1, 2});
  const std::uint64_t w0 = t.buffer()->writes();
  (void)t.to_vector<float>();
  (void)t.clone();
  EXPECT_EQ(t.buffer()->writes(), w0) << "reads";
  t.copy_from(Tensor::from_vector<float>({3, 4}));
  EXPECT_EQ(t.buffer()->writes(), w0 + 1);
  t.add_inplace(Tensor::from_vector<float>({1, 1}));
  EXPECT_EQ(t.buffer()->writes(), w0 + 2);
}

TEST_F(TensorTest, AWriteWaitsUntilEveryHoldEnded) {
  Tensor t = Tensor::from_vector<float>({1});
  t.buffer()->hold_writes();
  t.buffer()->hold_writes();
  std::atomic<bool> done{false};
  std::thread writer([&] {
    t.copy_from(Tensor::from_vector<float>({2}));
    done = true;
  });
  t.buffer()->end_hold();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());  // one hold is still on
  t.buffer()->end_hold();
  writer.join();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2}));
  EXPECT_THROW(t.buffer()->end_hold(), InternalError);  // no hold left to end
}

TEST_F(TensorTest, FullAndZerosForEveryDtype) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64,
                   DType::kUInt8, DType::kBool}) {
    auto t = Tensor::full({3, 5}, 3.0, dt, "/cpu:1");
    const double want = dt == DType::kBool ? 1.0 : 3.0;
    for (double v : t.to_vector<double>()) EXPECT_EQ(v, want) << dtype_name(dt);
    for (double v : Tensor::zeros({7}, dt).to_vector<double>()) EXPECT_EQ(v, 0.0) << dtype_name(dt);
  }
}

TEST_F(TensorTest, CopiesBetweenLogicalDevices) {
  std::vector<float> data(10000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  auto a = Tensor::from_vector(data, "/cpu:0");
  auto b = a.to("/cpu:1");
  EXPECT_EQ(b.device_name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  EXPECT_NE(a.data(), b.data());
  EXPECT_EQ(b.to_vector<float>(), data);
  auto c = b.clone();
  EXPECT_EQ(c.device_name(), b.device_name());
  EXPECT_EQ(c.to_vector<float>(), data);
}

TEST_F(TensorTest, CopyWaitsForPendingWorkOnTheSource) {
  // full() is asynchronous on the CPU stream; the copy to another device must see its result.
  for (int i = 0; i < 50; ++i) {
    auto a = Tensor::full({1 << 16}, static_cast<double>(i), DType::kFloat32, "/cpu:0");
    auto b = a.to("/cpu:1");
    auto v = b.to_vector<float>();
    EXPECT_EQ(v.front(), static_cast<float>(i));
    EXPECT_EQ(v.back(), static_cast<float>(i));
  }
}

TEST_F(TensorTest, AddInplaceAcrossDevices) {
  auto a = Tensor::from_vector<float>({1, 2, 3}, "/cpu:0");
  auto b = Tensor::from_vector<float>({10, 20, 30}, "/cpu:1");
  a.add_inplace(b);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{11, 22, 33}));
  auto h = Tensor::full({2}, 1.5, DType::kFloat16);
  h.add_inplace(Tensor::full({2}, 0.25, DType::kFloat16));
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.75f, 1.75f}));
  EXPECT_THROW_WITH(a.add_inplace(Tensor::zeros({4})), InvalidArgumentError, "float32(4,)", "float32(3,)");
  EXPECT_THROW(a.add_inplace(Tensor::zeros({3}, DType::kInt32)), InvalidArgumentError);
  auto flags = Tensor::zeros({2}, DType::kBool);
  EXPECT_THROW(flags.add_inplace(flags), InvalidArgumentError);
}

TEST_F(TensorTest, ReshapeSharesStorage) {
  auto a = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = a.reshape({3, 2});
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(b.shape(), Shape({3, 2}));
  EXPECT_THROW_WITH(a.reshape({4}), InvalidArgumentError, "(2, 3)", "(4,)");
}

TEST_F(TensorTest, BadInputsGiveClearErrors) {
  EXPECT_THROW_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), InvalidArgumentError, "3 values", "(2, 2)");
  EXPECT_THROW_WITH(Tensor::zeros({3}).item<float>(), InvalidArgumentError, "exactly one element", "(3,)");
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_THROW_WITH(undefined.to_vector<float>(), FailedPreconditionError, "undefined");
  EXPECT_THROW(undefined.to("/cpu:0"), FailedPreconditionError);
  EXPECT_THROW(Tensor::zeros({-1}), InvalidArgumentError);
  EXPECT_THROW_WITH(Tensor::zeros({1}, DType::kFloat32, "/cpu:zero"), InvalidArgumentError, "/cpu:zero");
}

TEST_F(TensorTest, EmptyTensors) {
  auto e = Tensor::zeros({0, 3});
  EXPECT_EQ(e.num_elements(), 0);
  EXPECT_TRUE(e.to_vector<float>().empty());
  EXPECT_EQ(e.to("/cpu:1").num_elements(), 0);
  EXPECT_NE(e.to_string().find("[]"), std::string::npos);
}

TEST_F(TensorTest, PrintsLikeTensorFlow) {
  auto t = Tensor::from_vector<float>({1, 2, 3.5f, 4}, {2, 2}, "/cpu:1");
  EXPECT_EQ(t.to_string(),
            "tf.Tensor(\n[[1. 2.]\n [3.5 4.]], shape=(2, 2), dtype=float32, "
            "device=/job:localhost/replica:0/task:0/device:CPU:1)");
  EXPECT_EQ(Tensor::scalar<std::int32_t>(7, "/cpu:0").to_string(),
            "tf.Tensor(7, shape=(), dtype=int32, device=/job:localhost/replica:0/task:0/device:CPU:0)");
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, "/cpu:0").to_string(),
            "tf.Tensor([True False], shape=(2,), dtype=bool, device=/job:localhost/replica:0/task:0/device:CPU:0)");
  std::vector<std::int64_t> big(100);
  for (int i = 0; i < 100; ++i) big[i] = i;
  std::string s = Tensor::from_vector(big).to_string(/*max_elements=*/10);
  EXPECT_NE(s.find("[0 1 2 ... 97 98 99]"), std::string::npos) << s;
}

TEST_F(TensorTest, TensorOutlivesARuntimeReset) {
  auto t = Tensor::full({8}, 2.0);
  internal::reset_runtime_for_testing();  // the device stays alive while the tensor holds it
  EXPECT_EQ(t.to_vector<float>()[7], 2.0f);
}

}  // namespace
}  // namespace chorus
