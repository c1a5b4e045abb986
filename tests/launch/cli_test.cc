// Every chorus program answers --help and --version and refuses an unknown flag with exit status 2
// (issue 23 item 4; launch/cli.h). The programs are run as child processes; their paths come from
// CMake (CHORUS_PROGRAMS: every executable this build made — tools, examples, benches).
#include <chorus/launch/cli.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/launch/tool_runner.h"

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using testing::run_tool;

std::vector<std::string> programs() {
  std::vector<std::string> out;
  std::istringstream in(CHORUS_PROGRAMS);
  for (std::string p; std::getline(in, p, ';');)
    if (!p.empty()) out.push_back(p);
  return out;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

TEST(Cli, VersionNamesTheProjectCommitAndBuild) {
  const VersionInfo v = version_info();
  EXPECT_EQ(v.version, CHORUS_EXPECTED_VERSION);
  EXPECT_FALSE(v.commit.empty());
  const std::string text = version_text("tool");
  EXPECT_THAT(text, HasSubstr("tool (chorus " + v.version + ", commit " + v.commit));
  EXPECT_THAT(text, HasSubstr("oneDNN"));
  EXPECT_THAT(text, HasSubstr("GPUs visible"));
}

TEST(Cli, EveryProgramAnswersHelpAndVersionAndRefusesAnUnknownFlag) {
  const auto all = programs();
  // chorus-run, chorus-devices and the five examples at least; the benches and chorus-train where
  // the build has them (sanitizer builds leave the benches out).
  ASSERT_GE(all.size(), 7u) << CHORUS_PROGRAMS;
  for (const std::string& path : all) {
    const std::string name = base_name(path);
    SCOPED_TRACE(name);
    const auto help = run_tool({path, "--help"});
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_THAT(help.out, HasSubstr("usage"));
    const auto version = run_tool({path, "--version"});
    EXPECT_EQ(version.exit_code, 0) << version.err;
    EXPECT_THAT(version.out, HasSubstr(name + " (chorus " + version_info().version + ", commit "));
    const auto bad = run_tool({path, "--no-such-flag"});
    EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
    EXPECT_THAT(bad.err, HasSubstr("no-such-flag"));
  }
}

}  // namespace
}  // namespace chorus::launch
