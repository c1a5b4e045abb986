#include "core/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/error.h"

namespace chorus {
namespace {

TEST(EnvTest, GetBoolAcceptsCommonSpellings) {
  for (const char* t : {"1", "true", "TRUE", "yes", "on"}) {
    setenv("CHORUS_TEST_FLAG", t, 1);
    EXPECT_EQ(env::get_bool("CHORUS_TEST_FLAG"), true) << t;
  }
  for (const char* f : {"0", "false", "No", "off"}) {
    setenv("CHORUS_TEST_FLAG", f, 1);
    EXPECT_EQ(env::get_bool("CHORUS_TEST_FLAG"), false) << f;
  }
  unsetenv("CHORUS_TEST_FLAG");
  EXPECT_FALSE(env::get_bool("CHORUS_TEST_FLAG").has_value());
}

TEST(EnvTest, BadBoolNamesVariableAndValue) {
  setenv("CHORUS_TEST_FLAG", "maybe", 1);
  try {
    env::get_bool("CHORUS_TEST_FLAG");
    FAIL();
  } catch (const InvalidArgumentError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CHORUS_TEST_FLAG='maybe'"), std::string::npos) << m;
  }
  unsetenv("CHORUS_TEST_FLAG");
}

}  // namespace
}  // namespace chorus
