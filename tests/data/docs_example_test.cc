// The example of docs/data.md, kept compiling and running (its main() body is the test body).
#include <gtest/gtest.h>

#include <iostream>

#include <chorus/core/tensor.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/ops/elementwise.h>

namespace cx = chorus;
namespace data = chorus::data;

TEST(DocsExample, RunsAsWritten) {
  // 1,000 built-in digits: (image [28, 28, 1] float32, label int32).
  auto ds = data::synthetic_digits(1000, /*seed=*/0)
                .shuffle(500, /*seed=*/42)
                .map(
                    [](const data::Element& e) {  // runs on 2 worker threads,
                      return data::Element{cx::ops::sub(e[0], cx::Tensor::scalar<float>(0.5f)), e[1]};
                    },
                    /*num_parallel_calls=*/2)                      // output order = input order
                .batch(128)                                        // 7 batches of 128, then 104
                .prefetch(data::kAutotune);                        // a background thread
  std::cout << "batches per epoch: " << ds.cardinality() << "\n";  // 8
  EXPECT_EQ(ds.cardinality(), 8);
  for (int epoch = 0; epoch < 2; ++epoch) {  // a new order each epoch
    auto it = ds.make_iterator();
    std::int64_t rows = 0;
    while (auto batch = it.next()) {
      const cx::Tensor& images = (*batch)[0];  // [128, 28, 28, 1]
      const cx::Tensor& labels = (*batch)[1];  // [128]
      EXPECT_EQ(images.shape().dims()[0], labels.shape().dims()[0]);
      rows += labels.shape().dims()[0];
    }
    EXPECT_EQ(rows, 1000);
  }
  auto it = ds.make_iterator();
  it.next();
  data::IteratorState state = it.save();  // where the iterator stands, with its buffers
  auto resumed = ds.make_iterator();
  resumed.restore(state);  // yields exactly what `it` yields next
  EXPECT_EQ((*resumed.next())[1].to_vector<std::int32_t>(), (*it.next())[1].to_vector<std::int32_t>());
}
