#include <chorus/core/error.h>

#include <gtest/gtest.h>

namespace chorus {
namespace {

TEST(ErrorTest, ClassesCarryTensorFlowCodesAndNames) {
  try {
    throw ResourceExhaustedError("out of memory");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(static_cast<int>(e.code()), 8);  // TF's RESOURCE_EXHAUSTED
    EXPECT_STREQ(e.what(), "RESOURCE_EXHAUSTED: out of memory");
    EXPECT_EQ(e.message(), "out of memory");
  }
}

TEST(ErrorTest, ThrowErrorPicksTheClassOfTheCode) {
  EXPECT_THROW(throw_error(ErrorCode::kInvalidArgument, "x"), InvalidArgumentError);
  EXPECT_THROW(throw_error(ErrorCode::kFailedPrecondition, "x"), FailedPreconditionError);
  EXPECT_THROW(throw_error(ErrorCode::kDeadlineExceeded, "x"), DeadlineExceededError);
  EXPECT_THROW(throw_error(ErrorCode::kDataLoss, "x"), DataLossError);
  EXPECT_THROW(throw_error(ErrorCode::kUnavailable, "x"), UnavailableError);
  EXPECT_THROW(throw_error(ErrorCode::kAborted, "x"), AbortedError);
  EXPECT_THROW(throw_error(ErrorCode::kNotFound, "x"), NotFoundError);
  EXPECT_THROW(throw_error(ErrorCode::kInternal, "x"), InternalError);
  EXPECT_THROW(throw_error(ErrorCode::kUnknown, "x"), UnknownError);
  for (int c = 1; c <= 15; ++c) {
    try {
      throw_error(static_cast<ErrorCode>(c), "m");
    } catch (const Error& e) {
      EXPECT_EQ(static_cast<int>(e.code()), c);
    }
  }
}

TEST(ErrorTest, RequireThrowsTheNamedClassWithTheMessage) {
  int n = -3;
  try {
    CHORUS_REQUIRE(n > 0, InvalidArgumentError, "n must be > 0, got ", n);
    FAIL() << "no throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message(), "n must be > 0, got -3");
  }
  EXPECT_NO_THROW(CHORUS_REQUIRE(n < 0, InvalidArgumentError, "unused"));
}

TEST(ErrorTest, EnforcePrintsBothValues) {
  try {
    CHORUS_ENFORCE_EQ(2 + 2, 5);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("(4 vs 5)"), std::string::npos) << m;
    EXPECT_NE(m.find("error_test.cc"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace chorus
