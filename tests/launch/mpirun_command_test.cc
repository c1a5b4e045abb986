#include <chorus/launch/mpirun_command.h>

#include <chorus/launch/hostfile.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using Argv = std::vector<std::string>;
using ::testing::HasSubstr;

MpirunOptions basic(int np, Argv program = {"./x"}) {
  MpirunOptions o;
  o.num_processes = np;
  o.program = std::move(program);
  return o;
}

std::string error_of(const MpirunOptions& o) {
  try {
    build_mpirun_argv(o);
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  ADD_FAILURE() << "build_mpirun_argv did not throw";
  return "";
}

std::string host_error_of(std::string_view spec) {
  try {
    parse_host_spec(spec);
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  ADD_FAILURE() << "parse_host_spec('" << spec << "') did not throw";
  return "";
}

TEST(HostSpec, ExplicitSlots) {
  EXPECT_EQ(parse_host_spec("a:2,b:2"), (std::vector<HostSlots>{{"a", 2, true}, {"b", 2, true}}));
  EXPECT_EQ(parse_host_spec("node-1.example.com:8"), (std::vector<HostSlots>{{"node-1.example.com", 8, true}}));
}

TEST(HostSpec, DefaultSlotIsOne) {
  EXPECT_EQ(parse_host_spec("a,b"), (std::vector<HostSlots>{{"a", 1, false}, {"b", 1, false}}));
  EXPECT_EQ(parse_host_spec("a,b:3"), (std::vector<HostSlots>{{"a", 1, false}, {"b", 3, true}}));
}

TEST(HostSpec, FormatWritesEverySlotCount) { EXPECT_EQ(format_host_spec(parse_host_spec("a,b:3")), "a:1,b:3"); }

TEST(HostSpec, BadSpecsNameTheEntry) {
  EXPECT_THAT(host_error_of(""), HasSubstr("-H is empty"));
  EXPECT_THAT(host_error_of("a,,b"), HasSubstr("host entry 2 of -H 'a,,b' is empty"));
  EXPECT_THAT(host_error_of("a,"), HasSubstr("host entry 2"));
  EXPECT_THAT(host_error_of(",a"), HasSubstr("host entry 1"));
  EXPECT_THAT(host_error_of(":2"), HasSubstr("no host name"));
  EXPECT_THAT(host_error_of("a:0"), HasSubstr("slots must be >= 1, got 0"));
  EXPECT_THAT(host_error_of("a:-1"), HasSubstr("slots must be >= 1, got -1"));
  EXPECT_THAT(host_error_of("a:x"), HasSubstr("slots 'x' is not a whole number"));
  EXPECT_THAT(host_error_of("a:"), HasSubstr("slots '' is not a whole number"));
  EXPECT_THAT(host_error_of("a:2x"), HasSubstr("slots '2x'"));
  EXPECT_THAT(host_error_of("a:2:3"), HasSubstr("more than one ':'"));
  EXPECT_THAT(host_error_of("a b:2"), HasSubstr("whitespace"));
  EXPECT_THAT(host_error_of("a:2,a:1"), HasSubstr("host 'a' is listed twice"));
  // Slot counts whose sum would overflow (found by fuzz_run_command_line): refused, per host and in all.
  EXPECT_THAT(host_error_of("a:2147483647,b:1"),
              HasSubstr("slots must be at most 4096 (chorus-run's limit on processes), got 2147483647"));
  EXPECT_THAT(host_error_of("a:4096,b:1"), HasSubstr("more than 4096 slots in all"));
  EXPECT_EQ(parse_host_spec("a:4095,b:1").size(), 2u);
}

// Issue 40: a host name reaches `ssh ... HOST true` and Open MPI's `ssh HOST orted`; "-F/path/evil.cfg"
// there is an ssh option whose config's ProxyCommand runs on this machine.
TEST(HostSpec, HostNamesThatCouldBeOptionsOrShellWordsAreRefused) {
  for (const char* good : {"node1", "node-1.cluster", "10.0.0.1", "gpu_node.x", "A1", "a.b-c.d"})
    EXPECT_NO_THROW(parse_host_spec(std::string(good) + ":2")) << good;
  const std::string long_label(64, 'a');
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefgh.";
  long_name.pop_back();
  const std::pair<std::string, std::string> bad[] = {
      {"-F/tmp/evil.cfg:1", "host name '-F/tmp/evil.cfg' starts with '-'"},
      {"-oProxyCommand=x", "starts with '-'"},
      {"-", "starts with '-'"},
      {"node;touch", "has the character ';'"},
      {"$(reboot)", "has the character '$'"},
      {"a`b`", "has the character '`'"},
      {"-l@node1", "user name that starts with '-'"},
      {"@node1", "empty user name"},
      {"a;b@node1", "has the character ';' in its user name"},
      {"alice@-F/x", "starts with '-'"},
      {"a@b@c", "has the character '@'"},
      {"a/b", "has the character '/'"},
      {"a..b", "empty label"},
      {".a", "empty label"},
      {"a.", "empty label"},
      {"a.-b", "starts or ends with '-' ('-b')"},
      {"a-.b", "starts or ends with '-' ('a-')"},
      {long_label, "has a label of 64 characters"},
      {long_name, "characters long"},
      {"a\\x", "has the character '\\'"},
  };
  for (const auto& [spec, why] : bad) {
    const std::string m = host_error_of(spec);
    EXPECT_THAT(m, HasSubstr(why)) << spec;
    EXPECT_THAT(m, HasSubstr("host entry 1 of -H")) << spec;
    EXPECT_THAT(m, HasSubstr("letters, digits, '-' or '_'")) << spec;  // what is allowed
  }
  // Hosts set by hand get the same rule from build_mpirun_argv.
  MpirunOptions o = basic(1);
  o.hosts = {{"-F/tmp/evil.cfg", 1, true}};
  EXPECT_THAT(error_of(o), HasSubstr("host name '-F/tmp/evil.cfg' starts with '-'"));
}

TEST(MpirunArgv, LocalProcesses) {
  EXPECT_EQ(build_mpirun_argv(basic(4)), (Argv{"mpirun", "-np", "4", "--bind-to", "none", "--", "./x"}));
}

TEST(MpirunArgv, OversubscribesOnlyWhenAskedAndBounded) {
  MpirunOptions o = basic(4);
  o.local_cores = 4;
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "4", "--bind-to", "none", "--", "./x"}));
  o.local_cores = 2;  // more processes than cores: refused unless asked for (issue 22)
  try {
    build_mpirun_argv(o);
    ADD_FAILURE() << "-np 4 on 2 cores was accepted without --oversubscribe";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("add --oversubscribe"));
  }
  o.oversubscribe = true;
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "4", "--bind-to", "none", "--oversubscribe", "--", "./x"}));
  o.num_processes = 17;  // 8 per core at most, even oversubscribed
  EXPECT_THROW(build_mpirun_argv(o), InvalidArgumentError);
  o.num_processes = 100000;
  o.hosts = {{"a", 50000, true}, {"b", 50000, true}};  // parse_host_spec refuses these; made by hand
  EXPECT_THROW(build_mpirun_argv(o), InvalidArgumentError);
  o.hosts.clear();
  o.num_processes = 4;
  o.local_cores = 16;
  o.oversubscribe = true;  // forced
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "4", "--bind-to", "none", "--oversubscribe", "--", "./x"}));
}

TEST(MpirunArgv, RecoveryAndTheRankWrapper) {
  MpirunOptions o = basic(2);
  o.enable_recovery = true;
  o.rank_wrapper = {"/opt/bin/chorus-run", "--record-exit-status", "/tmp/s", "--"};
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "2", "--bind-to", "none", "--enable-recovery", "--",
                                        "/opt/bin/chorus-run", "--record-exit-status", "/tmp/s", "--", "./x"}));
}

TEST(MpirunArgv, HostsWithSlots) {
  MpirunOptions o = basic(4);
  o.hosts = parse_host_spec("a:2,b:2");
  o.local_cores = 1;  // hosts give the slots: the local core count does not matter
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "4", "-H", "a:2,b:2", "--bind-to", "none", "--", "./x"}));
}

TEST(MpirunArgv, HostsWithDefaultSlots) {
  MpirunOptions o = basic(2);
  o.hosts = parse_host_spec("a,b");
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "2", "-H", "a:1,b:1", "--bind-to", "none", "--", "./x"}));
}

TEST(MpirunArgv, SlotMismatchNamesBothCounts) {
  MpirunOptions o = basic(4);
  o.hosts = parse_host_spec("a,b");
  const std::string msg = error_of(o);
  EXPECT_THAT(msg, HasSubstr("-np 4 does not match the 2 slots of -H (a:1 (default), b:1 (default)"));
  EXPECT_THAT(msg, HasSubstr("use -np 2"));
  o.num_processes = 3;
  o.hosts = parse_host_spec("a:2,b:2");
  EXPECT_THAT(error_of(o), HasSubstr("-np 3 does not match the 4 slots of -H (a:2, b:2"));
}

TEST(MpirunArgv, BadProcessCountsAndPrograms) {
  EXPECT_THAT(error_of(basic(0)), HasSubstr("-np must be a positive number of processes, got 0"));
  EXPECT_THAT(error_of(basic(-3)), HasSubstr("got -3"));
  EXPECT_THAT(error_of(basic(2, {})), HasSubstr("no program to run"));
  EXPECT_THAT(error_of(basic(2, {""})), HasSubstr("no program to run"));
  MpirunOptions o = basic(2);
  o.bind_to = "";
  EXPECT_THAT(error_of(o), HasSubstr("--bind-to is empty"));
}

TEST(MpirunArgv, RootAndBinding) {
  MpirunOptions o = basic(2);
  o.run_as_root = true;
  o.bind_to = "socket";
  EXPECT_EQ(build_mpirun_argv(o),
            (Argv{"mpirun", "-np", "2", "--bind-to", "socket", "--allow-run-as-root", "--", "./x"}));
  o.run_as_root = false;
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "2", "--bind-to", "socket", "--", "./x"}));
}

TEST(MpirunArgv, ForwardsOnlyTheTrainingEnvironmentSorted) {
  MpirunOptions o = basic(2);
  o.environment = {"HOME",
                   "PATH",
                   "TF_CPP_MIN_LOG_LEVEL",
                   "NCCL_DEBUG",
                   "CHORUS_LOG_LEVEL",
                   "SSH_AUTH_SOCK",
                   "CUDA_VISIBLE_DEVICES",
                   "OMP_NUM_THREADS",
                   "LD_LIBRARY_PATH",
                   "TF_",
                   "CUDA_HOME",
                   "CHORUS_LOG_LEVEL",
                   "OMPI_MCA_btl"};
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun",
                                        "-np",
                                        "2",
                                        "--bind-to",
                                        "none",
                                        "-x",
                                        "CHORUS_LOG_LEVEL",
                                        "-x",
                                        "CUDA_VISIBLE_DEVICES",
                                        "-x",
                                        "LD_LIBRARY_PATH",
                                        "-x",
                                        "NCCL_DEBUG",
                                        "-x",
                                        "OMP_NUM_THREADS",
                                        "-x",
                                        "PATH",
                                        "-x",
                                        "TF_CPP_MIN_LOG_LEVEL",
                                        "--",
                                        "./x"}));
}

TEST(MpirunArgv, ExtraEnvironmentAndExplicitValuesWin) {
  MpirunOptions o = basic(2);
  o.environment = {"NCCL_DEBUG", "PATH"};
  o.extra_environment = {"NCCL_DEBUG=INFO", "MY_VAR", "PATH", "A_1=x y"};
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun", "-np", "2", "--bind-to", "none", "-x", "A_1=x y", "-x", "MY_VAR",
                                        "-x", "NCCL_DEBUG=INFO", "-x", "PATH", "--", "./x"}));
  o.extra_environment = {"1X=2"};
  EXPECT_THAT(error_of(o), HasSubstr("-x '1X=2'"));
  o.extra_environment = {"A-B"};
  EXPECT_THAT(error_of(o), HasSubstr("-x 'A-B'"));
  o.extra_environment = {"=v"};
  EXPECT_THAT(error_of(o), HasSubstr("-x '=v'"));
}

TEST(MpirunArgv, ProgramArgumentsPassUnchanged) {
  MpirunOptions o = basic(2, {"./x", "--flag", "a b", "it's", "", "--"});
  const Argv argv = build_mpirun_argv(o);
  EXPECT_EQ(Argv(argv.end() - 6, argv.end()), (Argv{"./x", "--flag", "a b", "it's", "", "--"}));
  EXPECT_EQ(argv[argv.size() - 7], "--");
}

TEST(MpirunArgv, ForwardedVariableRules) {
  EXPECT_TRUE(is_forwarded_variable("CHORUS_LOG_LEVEL"));
  EXPECT_TRUE(is_forwarded_variable("TF_FORCE_GPU_ALLOW_GROWTH"));
  EXPECT_TRUE(is_forwarded_variable("NCCL_SOCKET_IFNAME"));
  EXPECT_TRUE(is_forwarded_variable("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(is_forwarded_variable("CUDA_VISIBLE_DEVICES_X"));
  EXPECT_FALSE(is_forwarded_variable("TF_"));
  EXPECT_FALSE(is_forwarded_variable("chorus_x"));
  EXPECT_FALSE(is_forwarded_variable("HOME"));
}

TEST(ShellQuote, QuotesOnlyWhatTheShellWouldSplitOrExpand) {
  EXPECT_EQ(shell_quote("abc-1.2/x_y:z,w=v@%+"), "abc-1.2/x_y:z,w=v@%+");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_quote("*.tfrecord"), "'*.tfrecord'");
  EXPECT_EQ(shell_join({"mpirun", "-np", "2", "--", "./x", "--flag", "a b"}), "mpirun -np 2 -- ./x --flag 'a b'");
}

// ---- Hostfiles (issue 18) ----------------------------------------------------------------------

std::string hostfile_error_of(std::string_view text) {
  try {
    parse_hostfile(text, "hostfile hf");
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  ADD_FAILURE() << "parse_hostfile did not throw for: " << text;
  return "";
}

TEST(Hostfile, OpenMpiAndHorovodLinesWithCommentsAndBlankLines) {
  const auto hosts = parse_hostfile(
      "# the cluster\n"
      "node1 slots=4\n"
      "\n"
      "   node2\tslots=2 max_slots=8   # two GPUs\r\n"
      "node3\n",
      "hostfile hf");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0], (HostSlots{"node1", 4, true}));
  EXPECT_EQ(hosts[1], (HostSlots{"node2", 2, true}));
  EXPECT_EQ(hosts[2], (HostSlots{"node3", 1, false}));
  EXPECT_EQ(format_host_spec(hosts), "node1:4,node2:2,node3:1");
  EXPECT_EQ(parse_hostfile("a slots=1", "x").size(), 1u);  // no final newline
}

TEST(Hostfile, BadLinesAreNamedWithTheirLineNumber) {
  EXPECT_THAT(hostfile_error_of("a slots=2\nb slots=0\n"), HasSubstr("hostfile hf line 2: 'slots=0'"));
  EXPECT_THAT(hostfile_error_of("a slots=x"), HasSubstr("whole number from 1 to"));
  EXPECT_THAT(hostfile_error_of("a slots=99999"), HasSubstr("line 1"));
  EXPECT_THAT(hostfile_error_of("a cpu=2"), HasSubstr("unknown entry 'cpu=2' after host a"));
  EXPECT_THAT(hostfile_error_of("a:2"), HasSubstr("contains ':'"));
  EXPECT_THAT(hostfile_error_of("no\x1b[2Jde"), HasSubstr("host name 'no\\x1B[2Jde' has a byte that is not printable"));
  EXPECT_THAT(hostfile_error_of("a slots=4 max_slots=2"), HasSubstr("max_slots=2 is below slots=4"));
  EXPECT_THAT(hostfile_error_of("a\n# b\na slots=2"), HasSubstr("line 3: host 'a' is listed a second time"));
  EXPECT_THAT(hostfile_error_of("# nothing\n\n  \n"), HasSubstr("names no host"));
  EXPECT_THAT(hostfile_error_of(""), HasSubstr("names no host"));
  EXPECT_THAT(hostfile_error_of("a slots=4096\nb slots=1"), HasSubstr("more than 4096 slots in all"));
}

TEST(Hostfile, HostNamesThatCouldBeOptionsOrShellWordsAreRefusedWithTheirLine) {
  EXPECT_THAT(hostfile_error_of("node1 slots=1\n-F/tmp/evil.cfg slots=1\n"),
              HasSubstr("hostfile hf line 2: host name '-F/tmp/evil.cfg' starts with '-'"));
  EXPECT_THAT(hostfile_error_of("-F/tmp/evil.cfg slots=1"), HasSubstr("letters, digits, '-' or '_'"));
  EXPECT_THAT(hostfile_error_of("a;b"), HasSubstr("line 1: host name 'a;b' has the character ';'"));
  EXPECT_THAT(hostfile_error_of("-u@node"), HasSubstr("user name that starts with '-'"));
  EXPECT_THAT(hostfile_error_of("a..b slots=2"), HasSubstr("empty label"));
  // user@host, as Open MPI's hostfiles take it.
  EXPECT_EQ(parse_hostfile("node-1.cluster slots=2\n10.0.0.2\ngpu_3\nalice@node4\n", "x").size(), 4u);
}

TEST(Hostfile, ReadingIsBoundedAndEveryFailureIsACommandLineError) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/chorus_hostfile_good";
  { std::ofstream(good) << "h1 slots=2\nh2\n"; }
  EXPECT_EQ(format_host_spec(read_hostfile(good)), "h1:2,h2:1");
  const auto message = [](const std::string& path) {
    try {
      read_hostfile(path);
    } catch (const InvalidArgumentError& e) {
      return e.message();
    }
    ADD_FAILURE() << "read_hostfile(" << path << ") did not throw";
    return std::string();
  };
  EXPECT_THAT(message(dir + "/chorus_no_such_hostfile"), HasSubstr("--hostfile " + dir + "/chorus_no_such_hostfile"));
  EXPECT_THAT(message(dir), HasSubstr("--hostfile"));  // a directory
  const std::string big = dir + "/chorus_hostfile_big";
  {
    std::ofstream out(big);
    const std::string line(1023, '#');
    for (std::size_t i = 0; i <= kMaxHostfileBytes / 1024; ++i) out << line << "\n";
  }
  EXPECT_THAT(message(big), HasSubstr("bytes"));
  std::remove(good.c_str());
  std::remove(big.c_str());
}

TEST(MpirunCommand, RemoteShellInterfacesAndMcaParameters) {
  MpirunOptions o = basic(2);
  o.hosts = parse_host_spec("a,b");
  o.rsh_agent = "ssh -p 2222";
  o.network_interfaces = {"eth1", "10.0.0.0/24"};
  o.mca = {{"btl", "tcp,self"}, {"btl_tcp_eager_limit", "65536"}};
  EXPECT_EQ(build_mpirun_argv(o), (Argv{"mpirun",
                                        "-np",
                                        "2",
                                        "-H",
                                        "a:1,b:1",
                                        "--bind-to",
                                        "none",
                                        "--mca",
                                        "plm_rsh_agent",
                                        "ssh -p 2222",
                                        "--mca",
                                        "btl_tcp_if_include",
                                        "eth1,10.0.0.0/24",
                                        "--mca",
                                        "oob_tcp_if_include",
                                        "eth1,10.0.0.0/24",
                                        "--mca",
                                        "btl",
                                        "tcp,self",
                                        "--mca",
                                        "btl_tcp_eager_limit",
                                        "65536",
                                        "--",
                                        "./x"}));
  o.network_interfaces = {"eth1,eth2"};
  EXPECT_THAT(error_of(o), HasSubstr("--network-interface 'eth1,eth2'"));
  o.network_interfaces = {""};
  EXPECT_THAT(error_of(o), HasSubstr("separated by single commas"));
  o.network_interfaces.clear();
  o.mca = {{"BTL", "tcp"}};
  EXPECT_THAT(error_of(o), HasSubstr("--mca 'BTL'"));
  o.mca = {{"btl", ""}};
  EXPECT_THAT(error_of(o), HasSubstr("--mca btl has an empty value"));
}

}  // namespace
}  // namespace chorus::launch
