// core/host.h: the host name is gethostname(2)'s.
#include <chorus/core/host.h>

#include <gtest/gtest.h>
#include <unistd.h>

namespace chorus {
namespace {

TEST(HostName, IsWhatTheOsSays) {
  char expected[256] = {};
  ASSERT_EQ(::gethostname(expected, sizeof expected - 1), 0);
  ASSERT_NE(expected[0], '\0');
  ASSERT_TRUE(host_name().has_value());
  EXPECT_EQ(*host_name(), expected);
  EXPECT_EQ(host_name_or("unknown-host"), expected);
}

}  // namespace
}  // namespace chorus
