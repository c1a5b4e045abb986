#include <chorus/core/shape.h>

#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <chorus/core/error.h>

namespace chorus {
namespace {

TEST(ShapeTest, ScalarHasRankZeroAndOneElement) {
  const Shape s;
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.num_elements(), 1);
  EXPECT_TRUE(s.dims().empty());
  EXPECT_EQ(s, Shape({}));
  EXPECT_EQ(s, Shape(std::vector<std::int64_t>{}));
}

TEST(ShapeTest, DimsRankAndNumElements) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.dims(), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(s.num_elements(), 24);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.dim(2), 4);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.dim(-3), 2);
  EXPECT_EQ(Shape({5}).num_elements(), 5);
  EXPECT_EQ(Shape(std::vector<std::int64_t>{7, 1, 3}).num_elements(), 21);
}

TEST(ShapeTest, ZeroDimensionMeansNoElements) {
  EXPECT_EQ(Shape({0}).num_elements(), 0);
  EXPECT_EQ(Shape({3, 0, 5}).num_elements(), 0);
  // The product of the other dimensions overflows int64, but with a 0 the count is still 0.
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_EQ(Shape({big, big, 0}).num_elements(), 0);
}

TEST(ShapeTest, NumElementsReportsOverflow) {
  const std::int64_t big = std::int64_t{1} << 32;
  EXPECT_EQ(Shape({big, big / 2 - 1}).num_elements(), big * (big / 2 - 1));  // < 2^63
  try {
    Shape({big, big}).num_elements();  // 2^64
    ADD_FAILURE() << "no overflow error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find("(4294967296, 4294967296)"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("overflow"), std::string::npos) << e.message();
  }
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(Shape({max}).num_elements(), max);
  EXPECT_EQ(Shape({1, max, 1}).num_elements(), max);
  EXPECT_THROW(Shape({max, 2}).num_elements(), InvalidArgumentError);
}

TEST(ShapeTest, NegativeDimensionIsRejectedByName) {
  try {
    Shape s{2, -1, 3};
    ADD_FAILURE() << "accepted " << s;
  } catch (const InvalidArgumentError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("dimension 1"), std::string::npos) << m;
    EXPECT_NE(m.find("-1"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, -1, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find(">= 0"), std::string::npos) << m;
  }
  EXPECT_THROW(Shape(std::vector<std::int64_t>{-5}), InvalidArgumentError);
  EXPECT_THROW(Shape({std::numeric_limits<std::int64_t>::min()}), InvalidArgumentError);
}

TEST(ShapeTest, BadAxisIsOutOfRange) {
  const Shape s{2, 3};
  EXPECT_THROW(s.dim(2), OutOfRangeError);
  EXPECT_THROW(s.dim(-3), OutOfRangeError);
  try {
    s.dim(5);
    ADD_FAILURE();
  } catch (const OutOfRangeError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("axis 5"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("-2..1"), std::string::npos) << m;
  }
  EXPECT_THROW(Shape().dim(0), OutOfRangeError);
  EXPECT_THROW(Shape().dim(-1), OutOfRangeError);
  EXPECT_THROW(s.dim(std::numeric_limits<int>::min()), OutOfRangeError);
}

TEST(ShapeTest, PrintsLikePythonTuples) {
  EXPECT_EQ(Shape().to_string(), "()");
  EXPECT_EQ(Shape({5}).to_string(), "(5,)");
  EXPECT_EQ(Shape({2, 3}).to_string(), "(2, 3)");
  EXPECT_EQ(Shape({0, 1, 2, 3}).to_string(), "(0, 1, 2, 3)");
  EXPECT_EQ(Shape({0}).to_string(), "(0,)");
  std::ostringstream os;
  os << Shape({4, 1});
  EXPECT_EQ(os.str(), "(4, 1)");
}

TEST(ShapeTest, Equality) {
  EXPECT_EQ(Shape({2, 3}), Shape(std::vector<std::int64_t>{2, 3}));
  EXPECT_NE(Shape({2, 3}), Shape({3, 2}));
  EXPECT_NE(Shape({1}), Shape());
  EXPECT_NE(Shape({2, 3}), Shape({2, 3, 1}));
}

}  // namespace
}  // namespace chorus
