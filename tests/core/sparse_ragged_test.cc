// SparseTensor and RaggedTensor (core/sparse_tensor.h, core/ragged_tensor.h): the invariants the
// constructors check, to_dense / to_tensor with defaults, nrows, row(i). Expected values are
// written out by hand from the definitions (tf.sparse.to_dense, RaggedTensor.to_tensor).
#include <gtest/gtest.h>

#include <chorus/core/error.h>
#include <chorus/core/ragged_tensor.h>
#include <chorus/core/sparse_tensor.h>

namespace chorus {
namespace {

using I = std::vector<std::int64_t>;
using F = std::vector<float>;

Tensor ints(const I& v, const Shape& s) { return Tensor::from_vector(v, s); }

TEST(SparseTensor, ToDenseFillsZerosOrTheDefault) {
  SparseTensor st(ints({0, 0, 0, 2, 1, 1}, {3, 2}), Tensor::from_vector<float>({1, 2, 3}), Shape{2, 3});
  EXPECT_EQ(st.rank(), 2);
  EXPECT_EQ(st.nnz(), 3);
  EXPECT_EQ(st.dense_shape_tensor().to_vector<std::int64_t>(), (I{2, 3}));
  Tensor d = st.to_dense();
  EXPECT_EQ(d.shape(), (Shape{2, 3}));
  EXPECT_EQ(d.to_vector<float>(), (F{1, 0, 2, 0, 3, 0}));
  EXPECT_EQ(st.to_dense(Tensor::scalar(-1.0f)).to_vector<float>(), (F{1, -1, 2, -1, 3, -1}));
}

TEST(SparseTensor, Int64ValuesAndEmpty) {
  SparseTensor st(ints({1, 4}, {2, 1}), Tensor::from_vector<std::int64_t>({INT64_MIN, INT64_MAX}), Shape{5});
  EXPECT_EQ(st.to_dense().to_vector<std::int64_t>(), (I{0, INT64_MIN, 0, 0, INT64_MAX}));
  SparseTensor empty(Tensor::zeros(Shape{0, 2}, DType::kInt64), Tensor::zeros(Shape{0}), Shape{3, 0});
  EXPECT_EQ(empty.nnz(), 0);
  EXPECT_EQ(empty.to_dense().shape(), (Shape{3, 0}));
}

TEST(SparseTensor, ConstructorChecksTheInvariants) {
  const Tensor v2 = Tensor::from_vector<float>({1, 2});
  // out of bounds, naming the row
  try {
    SparseTensor(ints({0, 0, 2, 0}, {2, 2}), v2, Shape{2, 3});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find("indices[1] = [2,0] is out of bounds"), std::string::npos) << e.message();
  }
  EXPECT_THROW(SparseTensor(ints({0, -1}, {1, 2}), Tensor::from_vector<float>({1}), Shape{2, 3}), InvalidArgumentError);
  EXPECT_THROW(SparseTensor(ints({0, 0}, {1, 2}), v2, Shape{2, 3}), InvalidArgumentError);        // N mismatch
  EXPECT_THROW(SparseTensor(ints({0, 0}, {2, 1}), v2, Shape{2, 3}), InvalidArgumentError);        // rank mismatch
  EXPECT_THROW(SparseTensor(Tensor::zeros(Shape{2, 2}), v2, Shape{2, 3}), InvalidArgumentError);  // float indices
  EXPECT_THROW(SparseTensor(ints({0, 1}, {2, 1}), v2.reshape({1, 2}), Shape{3}), InvalidArgumentError);
  EXPECT_THROW(SparseTensor(ints({}, {0, 2}), Tensor::zeros(Shape{0}), Shape{2, -1}), InvalidArgumentError);
}

TEST(SparseTensor, ToDenseNeedsSortedUniqueIndices) {
  SparseTensor unsorted(ints({0, 2, 0, 1}, {2, 2}), Tensor::from_vector<float>({1, 2}), Shape{2, 3});
  try {
    unsorted.to_dense();
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find("indices[1] = [0,1] is out of order"), std::string::npos) << e.message();
  }
  SparseTensor repeated(ints({1, 1}, {2, 1}), Tensor::from_vector<float>({1, 2}), Shape{3});
  EXPECT_THROW(repeated.to_dense(), InvalidArgumentError);
  SparseTensor ok(ints({1}, {1, 1}), Tensor::from_vector<float>({1}), Shape{3});
  EXPECT_THROW(ok.to_dense(Tensor::scalar<std::int64_t>(1)), InvalidArgumentError);     // default dtype
  EXPECT_THROW(ok.to_dense(Tensor::from_vector<float>({1, 2})), InvalidArgumentError);  // not a scalar
}

TEST(RaggedTensor, RowsAndToTensor) {
  RaggedTensor rt(Tensor::from_vector<float>({1, 2, 3, 4}), ints({0, 3, 3, 4}, {4}));
  EXPECT_EQ(rt.nrows(), 3);
  EXPECT_EQ(rt.row_lengths(), (I{3, 0, 1}));
  EXPECT_EQ(rt.row(0).to_vector<float>(), (F{1, 2, 3}));
  EXPECT_EQ(rt.row(1).shape(), (Shape{0}));
  EXPECT_EQ(rt.row(2).to_vector<float>(), (F{4}));
  EXPECT_THROW(rt.row(3), OutOfRangeError);
  EXPECT_THROW(rt.row(-1), OutOfRangeError);
  Tensor t = rt.to_tensor();
  EXPECT_EQ(t.shape(), (Shape{3, 3}));
  EXPECT_EQ(t.to_vector<float>(), (F{1, 2, 3, 0, 0, 0, 4, 0, 0}));
  EXPECT_EQ(rt.to_tensor(Tensor::scalar(9.0f)).to_vector<float>(), (F{1, 2, 3, 9, 9, 9, 4, 9, 9}));
}

TEST(RaggedTensor, InnerDimsAndRowLengths) {
  // values [3, 2]: rows of pairs.
  RaggedTensor rt =
      RaggedTensor::from_row_lengths(Tensor::from_vector<std::int64_t>({1, 2, 3, 4, 5, 6}, {3, 2}), {1, 0, 2});
  EXPECT_EQ(rt.splits(), (I{0, 1, 1, 3}));
  EXPECT_EQ(rt.row(2).shape(), (Shape{2, 2}));
  EXPECT_EQ(rt.row(2).to_vector<std::int64_t>(), (I{3, 4, 5, 6}));
  Tensor t = rt.to_tensor(Tensor::scalar<std::int64_t>(-7));
  EXPECT_EQ(t.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(t.to_vector<std::int64_t>(), (I{1, 2, -7, -7, -7, -7, -7, -7, 3, 4, 5, 6}));
  RaggedTensor none(Tensor::zeros(Shape{0}), ints({0}, {1}));
  EXPECT_EQ(none.nrows(), 0);
  EXPECT_EQ(none.to_tensor().shape(), (Shape{0, 0}));
  EXPECT_EQ(RaggedTensor().nrows(), 0);
}

TEST(SparseAndRagged, StringValues) {
  using S = std::vector<std::string>;
  SparseTensor st(ints({0, 2}, {2, 1}), Tensor::from_vector<std::string>({"a", std::string("\0b", 2)}), Shape{4});
  EXPECT_EQ(st.to_dense().to_vector<std::string>(), (S{"a", "", std::string("\0b", 2), ""}));
  EXPECT_EQ(st.to_dense(Tensor::scalar("?")).to_vector<std::string>(), (S{"a", "?", std::string("\0b", 2), "?"}));
  EXPECT_THROW(st.to_dense(Tensor::scalar(1.0f)), InvalidArgumentError);
  RaggedTensor rt(Tensor::from_vector<std::string>({"x", "yy", "zzz"}), ints({0, 1, 1, 3}, {4}));
  EXPECT_EQ(rt.row(2).to_vector<std::string>(), (S{"yy", "zzz"}));
  EXPECT_EQ(rt.to_tensor(Tensor::scalar("-")).to_vector<std::string>(), (S{"x", "-", "-", "-", "yy", "zzz"}));
}

TEST(RaggedTensor, ConstructorChecksTheInvariants) {
  const Tensor v = Tensor::from_vector<float>({1, 2, 3});
  EXPECT_THROW(RaggedTensor(v, ints({1, 3}, {2})), InvalidArgumentError);                     // does not start at 0
  EXPECT_THROW(RaggedTensor(v, ints({0, 2, 1, 3}, {4})), InvalidArgumentError);               // decreases
  EXPECT_THROW(RaggedTensor(v, ints({0, 2}, {2})), InvalidArgumentError);                     // last != 3
  EXPECT_THROW(RaggedTensor(v, ints({}, {0})), InvalidArgumentError);                         // empty splits
  EXPECT_THROW(RaggedTensor(v, Tensor::from_vector<float>({0, 3})), InvalidArgumentError);    // float splits
  EXPECT_THROW(RaggedTensor(Tensor::scalar(1.0f), ints({0, 1}, {2})), InvalidArgumentError);  // scalar values
  EXPECT_THROW(RaggedTensor::from_row_lengths(v, {2, -1, 2}), InvalidArgumentError);
  try {
    RaggedTensor(v, ints({0, 2, 1, 3}, {4}));
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find("row_splits[2] = 1 < row_splits[1] = 2"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace chorus
