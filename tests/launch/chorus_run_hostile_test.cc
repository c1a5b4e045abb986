// chorus-run --hostfile and the host check against what a hostile or careless operator hands it
// (labels cpu, hostile): a FIFO (opening it would wait for a writer forever), a device that never
// ends, a directory, a symlink to either, a file far too large, binary garbage, and hosts that do
// not answer. Every case must end at once with exit 2 (a bad command line) or 3 (a host did not
// answer) and a message naming the file or the host; mpirun is never started for them. Each run
// is under timeout(1), so a hang fails the test instead of blocking CTest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/launch/tool_runner.h"
#include <chorus/launch/process.h>

extern char** environ;

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using testing::run_tool;
namespace fs = std::filesystem;

const std::string kTool = CHORUS_RUN_PATH;

class ChorusRunHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("chorus_run_hostile_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // chorus-run with `args`, 20 s at most.
  testing::ToolResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/timeout", "20", kTool});
    return run_tool(args);
  }
  fs::path dir_;
};

TEST_F(ChorusRunHostile, HostfilesThatAreNotFilesOfHostsExitTwoAtOnce) {
  const fs::path fifo = dir_ / "fifo", big = dir_ / "big", garbage = dir_ / "garbage", link = dir_ / "link";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  { std::ofstream(big).close(); }
  fs::resize_file(big, 2u << 20);  // sparse: 2 MiB of zero bytes
  {
    std::ofstream out(garbage, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 7919) & 0xff));
  }
  fs::create_symlink(fifo, link);
  const std::pair<std::string, std::string> cases[] = {
      {fifo.string(), "not a regular file"},         {"/dev/zero", "not a regular file"},
      {dir_.string(), "not a regular file"},         {link.string(), "not a regular file"},
      {big.string(), "more than a hostfile's"},      {garbage.string(), "line "},
      {(dir_ / "missing").string(), "No such file"},
  };
  for (const auto& [path, why] : cases) {
    const auto r = run({"--hostfile", path, "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--hostfile " + path)) << path;
    EXPECT_THAT(r.err, HasSubstr(why)) << path;
  }
}

TEST_F(ChorusRunHostile, HostsThatDoNotAnswerStopTheJobBeforeMpirunStarts) {
  const char* path = std::getenv("PATH");
  if (!find_executable("mpirun", path ? path : "")) GTEST_SKIP() << "mpirun is not installed";
  // An agent that never answers (sleeps past the 10 s check) and one that refuses.
  const fs::path silent = dir_ / "silent_agent.sh", marker = dir_ / "mpirun_started";
  { std::ofstream(silent) << "#!/bin/sh\nexec sleep 60\n"; }
  fs::permissions(silent, fs::perms::owner_all);
  const auto refused = run({"-H", "nodeA:1,nodeB:1", "--rsh-agent", "/bin/false", "--", "/usr/bin/touch", marker});
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("2 of 2 hosts did not answer through '/bin/false'"));
  EXPECT_THAT(refused.err, HasSubstr("nodeA: exit 1"));
  EXPECT_THAT(refused.err, HasSubstr("--no-host-check"));
  const auto start = std::chrono::steady_clock::now();
  const auto silent_run = run({"-H", "nodeC:2", "--rsh-agent", silent.string(), "--", "/usr/bin/touch", marker});
  EXPECT_EQ(silent_run.exit_code, 3) << silent_run.err;
  EXPECT_THAT(silent_run.err, HasSubstr("nodeC: no answer within 10 s"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_FALSE(fs::exists(marker)) << "the program ran although a host did not answer";
}

// Issue 40: a host name that is an ssh option. "-F/path/evil.cfg" in a hostfile or -H made the host
// check run `ssh -F/path/evil.cfg true`, and the config's ProxyCommand ran on this machine. A fake
// ssh (and mpirun) first on PATH records any run: none may happen, and chorus-run exits 2 naming
// the file and line (or the -H entry), the name and what a host name may be.
TEST_F(ChorusRunHostile, HostNamesThatAreSshOptionsAreRefusedBeforeSshRuns) {
  const fs::path bin = dir_ / "bin", ran = dir_ / "ran", evil = dir_ / "evil.cfg", hostfile = dir_ / "hosts";
  fs::create_directories(bin);
  for (const char* tool : {"ssh", "mpirun"}) {
    { std::ofstream(bin / tool) << "#!/bin/sh\necho \"" << tool << " $*\" >> " << ran.string() << "\nexit 1\n"; }
    fs::permissions(bin / tool, fs::perms::owner_all);
  }
  { std::ofstream(evil) << "Host *\n  ProxyCommand /usr/bin/touch " << (dir_ / "proxy_ran").string() << "\n"; }
  std::vector<std::string> env;
  const char* path = std::getenv("PATH");
  env.push_back("PATH=" + bin.string() + ":" + (path ? path : "/usr/bin:/bin"));
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("PATH=", 0) != 0 && entry.rfind("OMPI_MCA_plm_rsh_agent=", 0) != 0) env.push_back(entry);
  }
  const auto run_with_fakes = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/timeout", "20", kTool});
    return run_tool(args, env);
  };
  const std::string option = "-F" + evil.string();
  { std::ofstream(hostfile) << "# a hostile hostfile\nnode1 slots=1\n" << option << " slots=1\n"; }
  const auto from_file = run_with_fakes({"--hostfile", hostfile.string(), "--", "/bin/true"});
  EXPECT_EQ(from_file.exit_code, 2) << from_file.err;
  EXPECT_THAT(from_file.err,
              HasSubstr("--hostfile " + hostfile.string() + " line 3: host name '" + option + "' starts with '-'"));
  EXPECT_THAT(from_file.err, HasSubstr("letters, digits, '-' or '_'"));
  const auto from_h = run_with_fakes({"-H", option + ":1", "--", "/bin/true"});
  EXPECT_EQ(from_h.exit_code, 2) << from_h.err;
  EXPECT_THAT(from_h.err,
              HasSubstr("host entry 1 of -H '" + option + ":1': host name '" + option + "' starts with '-'"));
  for (const std::string spec : {"node1,-oProxyCommand=touch:1", "node1;touch:1", "$(touch):1", "node1,`id`"}) {
    const auto r = run_with_fakes({"-H", spec, "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << spec << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("host name")) << spec;
  }
  EXPECT_FALSE(fs::exists(ran)) << "ssh or mpirun ran:\n" << std::ifstream(ran).rdbuf();
  EXPECT_FALSE(fs::exists(dir_ / "proxy_ran")) << "the ProxyCommand ran";
  // The fakes work: valid remote hosts reach the fake ssh, each after "--".
  const auto valid = run_with_fakes({"-H", "node1:1,node2:1", "--", "/bin/true"});
  EXPECT_EQ(valid.exit_code, 3) << valid.err;
  std::stringstream said;
  said << std::ifstream(ran).rdbuf();
  EXPECT_THAT(said.str(), HasSubstr("ssh -o BatchMode=yes -o ConnectTimeout=5 -- node1 true"));
}

}  // namespace
}  // namespace chorus::launch
