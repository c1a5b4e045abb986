#include <chorus/core/env.h>

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chorus/core/error.h>

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

TEST(EnvTest, TimeoutsAreSecondsAboveZero) {
  using std::chrono::milliseconds;
  EXPECT_EQ(env::parse_timeout_seconds("300", "X"), milliseconds(300000));
  EXPECT_EQ(env::parse_timeout_seconds("2.5", "X"), milliseconds(2500));
  EXPECT_EQ(env::parse_timeout_seconds("1e3", "X"), milliseconds(1000000));
  EXPECT_EQ(env::parse_timeout_seconds(".0101", "X"), milliseconds(11)) << "rounded up to a whole millisecond";
  EXPECT_EQ(env::parse_timeout_seconds("0.01", "X"), milliseconds(10)) << "the floor itself";
  for (const char* bad : {"0", "-3", "", "abc", "5s", " 5", "5 ", "inf", "nan", "0x10", "1e99", "--1"}) {
    try {
      env::parse_timeout_seconds(bad, "--flag");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--flag='") + bad + "' is not a valid timeout"),
                std::string::npos)
          << e.what();
    }
  }
}

// Issue 40: CHORUS_COLLECTIVE_TIMEOUT=1e-9 timed out the communicators' creation, and the job
// crashed in MPI_Finalize. Values below the floor are refused, naming the source, value and floor.
TEST(EnvTest, TimeoutsBelowTheFloorAreRefused) {
  for (const char* tiny : {"1e-9", ".0001", "0.001", "0.0099"}) {
    try {
      env::parse_timeout_seconds(tiny, "CHORUS_COLLECTIVE_TIMEOUT");
      ADD_FAILURE() << "accepted '" << tiny << "'";
    } catch (const InvalidArgumentError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("CHORUS_COLLECTIVE_TIMEOUT='") + tiny + "' is not a valid timeout"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("below the floor of 0.01 s"), std::string::npos) << m;
    }
  }
}

TEST(EnvTest, CollectiveTimeoutVariable) {
  unsetenv("CHORUS_COLLECTIVE_TIMEOUT");
  EXPECT_FALSE(env::collective_timeout().has_value());
  setenv("CHORUS_COLLECTIVE_TIMEOUT", "12", 1);
  EXPECT_EQ(env::collective_timeout(), std::chrono::milliseconds(12000));
  setenv("CHORUS_COLLECTIVE_TIMEOUT", "0", 1);
  try {
    env::collective_timeout();
    ADD_FAILURE() << "0 accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("CHORUS_COLLECTIVE_TIMEOUT='0'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 0"), std::string::npos) << e.what();
  }
  unsetenv("CHORUS_COLLECTIVE_TIMEOUT");
}

TEST(EnvTest, PeerMonitorSwitch) {
  unsetenv("CHORUS_PEER_MONITOR");
  EXPECT_TRUE(env::peer_monitor_enabled());
  setenv("CHORUS_PEER_MONITOR", "off", 1);
  EXPECT_FALSE(env::peer_monitor_enabled());
  setenv("CHORUS_PEER_MONITOR", "sometimes", 1);
  EXPECT_THROW(env::peer_monitor_enabled(), InvalidArgumentError);
  unsetenv("CHORUS_PEER_MONITOR");
}

TEST(EnvTest, BusyPollSwitch) {
  unsetenv("CHORUS_BUSY_POLL");
  EXPECT_TRUE(env::busy_poll_enabled());
  setenv("CHORUS_BUSY_POLL", "0", 1);
  EXPECT_FALSE(env::busy_poll_enabled());
  setenv("CHORUS_BUSY_POLL", "maybe", 1);
  EXPECT_THROW(env::busy_poll_enabled(), InvalidArgumentError);
  unsetenv("CHORUS_BUSY_POLL");
}

}  // namespace
}  // namespace chorus
