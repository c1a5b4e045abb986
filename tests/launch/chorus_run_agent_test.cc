// chorus-run without MPI (launch/agent.h): real local jobs of torchrun_probe, which prints the
// torchrun variables it got and meets its peers through the store rendezvous. No mpirun. Two
// chorus-run agents on this host (--nnodes 2, one endpoint) stand for two nodes.
//
// run_tool returns when chorus-run's stdout and stderr close, i.e. when chorus-run and every worker
// it started are gone: the time bounds below also show that no worker outlives its agent.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "tests/launch/tool_runner.h"
#include <chorus/launch/agent.h>

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_tool;
using testing::ToolResult;
using Args = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

const std::string kTool = CHORUS_RUN_PATH;
const std::string kProbe = TORCHRUN_PROBE_PATH;

struct ProbeLine {
  std::map<std::string, std::string> fields;  // "rank" → "1", ...
};

// The lines starting with `prefix` ("probe", "rdzv"), keyed by their rank= field.
std::map<int, ProbeLine> lines_of(const std::string& out, const std::string& prefix) {
  std::map<int, ProbeLine> by_rank;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix + " ", 0) != 0) continue;
    ProbeLine p;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (const auto eq = w.find('='); eq != std::string::npos) p.fields[w.substr(0, eq)] = w.substr(eq + 1);
    by_rank[std::stoi(p.fields.at("rank"))] = p;
  }
  return by_rank;
}

ToolResult chorus_run(Args args) {
  args.insert(args.begin(), kTool);
  return run_tool(args);
}

bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// A port P with P and P + 1 free now (the workers' store and the agents' store).
int free_port_pair() {
  for (int tries = 0; tries < 100; ++tries) {
    const int p = free_local_port();
    if (p < 65535 && port_is_free(p + 1)) return p;
  }
  ADD_FAILURE() << "no two free consecutive ports on 127.0.0.1";
  return 29511;
}

TEST(ChorusRunAgent, OneHostTwoAndThreeWorkersGetTorchrunVariables) {
  for (int n : {2, 3}) {
    const auto r = chorus_run({"--nproc-per-node", std::to_string(n), "-x", "CHORUS_PROBE_EXTRA=hello", "--", kProbe});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto probes = lines_of(r.out, "probe");
    const auto rdzv = lines_of(r.out, "rdzv");
    ASSERT_EQ(probes.size(), static_cast<std::size_t>(n)) << r.out;
    ASSERT_EQ(rdzv.size(), static_cast<std::size_t>(n)) << r.out;
    std::set<std::string> masters;
    for (int rank = 0; rank < n; ++rank) {
      const auto& f = probes.at(rank).fields;
      EXPECT_EQ(f.at("world"), std::to_string(n));
      EXPECT_EQ(f.at("local_rank"), std::to_string(rank));
      EXPECT_EQ(f.at("local_world"), std::to_string(n));
      EXPECT_EQ(f.at("group_rank"), "0");
      EXPECT_EQ(f.at("group_world"), "1");
      EXPECT_EQ(f.at("restart"), "0");
      EXPECT_EQ(f.at("chorus_restart"), "0");
      EXPECT_EQ(f.at("extra"), "hello");
      EXPECT_THAT(f.at("master"), ::testing::StartsWith("127.0.0.1:"));
      masters.insert(f.at("master"));
      // distribute::ClusterResolver read the same variables: worker index/number of workers/attempt.
      EXPECT_EQ(f.at("resolver"), "torchrun_environment:" + std::to_string(rank) + "/" + std::to_string(n) + "/0");
      EXPECT_EQ(rdzv.at(rank).fields.at("size"), std::to_string(n));
      EXPECT_EQ(rdzv.at(rank).fields.at("workers"), std::to_string(n));
    }
    EXPECT_EQ(masters.size(), 1u) << "every worker meets at one endpoint";
    EXPECT_EQ(r.err, "");
  }
}

TEST(ChorusRunAgent, AFailedWorkerStopsTheOthersAndIsNamed) {
  const auto start = Clock::now();
  // Rank 1 exits 3 before the rendezvous; ranks 0 and 2 wait there (60 s) until they are stopped.
  const auto r = chorus_run({"--nproc-per-node", "3", "--", kProbe, "--fail-rank", "1", "--exit-code", "3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("chorus-run: rank 1 exited with status 3\n"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run: stopped ranks 0, 2 because rank 1 exited with status 3 (SIGTERM)\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("restart")));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(lines_of(r.out, "rdzv").size(), 0u) << r.out;
}

TEST(ChorusRunAgent, AKilledWorkerAndOneThatIgnoresSigtermEndTheJob) {
  const auto start = Clock::now();
  // Rank 0 kills itself; rank 1 ignores SIGTERM and gets SIGKILL after --failure-grace 1.
  const std::string body = "if [ $RANK = 0 ]; then sleep 0.3; kill -9 $$; fi; trap '' TERM; sleep 60 & wait; wait";
  const auto r = chorus_run({"--nproc-per-node", "2", "--failure-grace", "1", "--", "/bin/sh", "-c", body});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_THAT(r.err, HasSubstr("chorus-run: rank 0 was killed by signal 9 (SIGKILL)\n"));
  EXPECT_THAT(r.err, HasSubstr("stopped rank 1 because rank 0 was killed by signal 9 (SIGKILL) (SIGTERM; SIGKILL after "
                               "--failure-grace 1 s: 1)"));
  // The worker's own child (sleep 60) is in its process group: it is gone too, or run_tool would wait.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST(ChorusRunAgent, AStoppedWorkerIsWokenToTakeSigterm) {
  // Rank 0 stops itself (SIGSTOP, as a worker reading the terminal would be with SIGTTIN); rank 1
  // fails. SIGTERM then SIGCONT end rank 0 at once, not after --failure-grace 60.
  const auto start = Clock::now();
  const std::string body = "if [ $RANK = 0 ]; then kill -STOP $$; sleep 60; fi; sleep 0.5; exit 2";
  const auto r = chorus_run({"--nproc-per-node", "2", "--failure-grace", "60", "--", "/bin/sh", "-c", body});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopped rank 0 because rank 1 exited with status 2 (SIGTERM)\n"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST(ChorusRunAgent, MaxRestartsStartsAgainWithTheNextRestartCount) {
  const auto r = chorus_run({"--nproc-per-node", "2", "--max-restarts", "1", "--", kProbe, "--fail-rank", "1",
                             "--fail-attempt", "0", "--exit-code", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.err, HasSubstr("chorus-run: rank 1 exited with status 5\n"));
  EXPECT_THAT(r.err,
              HasSubstr("chorus-run: the job failed (rank 1 exited with status 5)\nchorus-run: restart 1 of 1\n"));
  const auto rdzv = lines_of(r.out, "rdzv");  // only the second attempt gets there
  ASSERT_EQ(rdzv.size(), 2u) << r.out;
  for (const auto& [rank, line] : rdzv) {
    EXPECT_EQ(line.fields.at("attempt"), "1");
    EXPECT_EQ(line.fields.at("size"), "2");
  }
  // The probe lines of attempt 1 (the last of each rank) carry the count.
  std::istringstream in(r.out);
  int restart_one = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("probe ", 0) == 0 && line.find(" restart=1 chorus_restart=1 ") != std::string::npos) ++restart_one;
  EXPECT_EQ(restart_one, 2) << r.out;

  // Restarts used up: the last failure's status, one restart only.
  const auto failed = chorus_run(
      {"--nproc-per-node", "2", "--max-restarts", "1", "--", kProbe, "--fail-rank", "0", "--exit-code", "4"});
  EXPECT_EQ(failed.exit_code, 4) << failed.err;
  EXPECT_THAT(failed.err, HasSubstr("restart 1 of 1"));
  EXPECT_THAT(failed.err, Not(HasSubstr("restart 2")));
}

TEST(ChorusRunAgent, SigtermToTheAgentStopsTheWorkersWithoutRestart) {
  const auto start = Clock::now();
  // The SIGTERM comes once both workers run (each leaves a file), not after a guessed second: on a
  // loaded machine the agent may not have started them by then.
  const std::string script =
      "d=$(mktemp -d); '" + kTool +
      "' --nproc-per-node 2 --max-restarts 3 -- /bin/sh -c \"touch $d/w\\$RANK; sleep 60 & wait\" & pid=$!; "
      "for i in $(seq 200); do [ -e $d/w0 ] && [ -e $d/w1 ] && break; sleep 0.1; done; "
      "kill -TERM $pid; wait $pid; echo status=$?; rm -rf $d";
  const auto r = run_tool({"/bin/sh", "-c", script});
  EXPECT_THAT(r.out, HasSubstr("status=143"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run: stopped ranks 0, 1 because chorus-run was asked to stop (SIGTERM)\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("restart")));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

// Two agents on this host: --nnodes 2, node ranks 0 and 1, one endpoint.
std::pair<ToolResult, ToolResult> two_nodes(const Args& common, const Args& program) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port_pair());
  const auto agent = [&](int node) {
    Args a = {"--nnodes", "2", "--node-rank", std::to_string(node), "--rdzv-endpoint", endpoint};
    a.insert(a.end(), common.begin(), common.end());
    a.push_back("--");
    a.insert(a.end(), program.begin(), program.end());
    return chorus_run(a);
  };
  auto one = std::async(std::launch::async, agent, 1);  // node 1 first: it waits for node 0
  auto zero = agent(0);
  return {zero, one.get()};
}

TEST(ChorusRunAgent, TwoAgentsFormOneJob) {
  const auto [zero, one] = two_nodes({"--nproc-per-node", "2"}, {kProbe});
  ASSERT_EQ(zero.exit_code, 0) << zero.err << zero.out;
  ASSERT_EQ(one.exit_code, 0) << one.err << one.out;
  const auto on0 = lines_of(zero.out, "probe"), on1 = lines_of(one.out, "probe");
  ASSERT_EQ(on0.size(), 2u) << zero.out;
  ASSERT_EQ(on1.size(), 2u) << one.out;
  for (int rank = 0; rank < 4; ++rank) {
    const auto& f = (rank < 2 ? on0 : on1).at(rank).fields;
    EXPECT_EQ(f.at("world"), "4");
    EXPECT_EQ(f.at("local_rank"), std::to_string(rank % 2));
    EXPECT_EQ(f.at("local_world"), "2");
    EXPECT_EQ(f.at("group_rank"), std::to_string(rank / 2));
    EXPECT_EQ(f.at("group_world"), "2");
  }
  for (const auto* out : {&zero.out, &one.out})
    for (const auto& [rank, line] : lines_of(*out, "rdzv")) EXPECT_EQ(line.fields.at("size"), "4") << *out;
  EXPECT_EQ(lines_of(zero.out, "rdzv").size() + lines_of(one.out, "rdzv").size(), 4u);
  EXPECT_THAT(zero.err, HasSubstr("node 0 of 2: starting ranks 0..1 of 4 (attempt 0"));
  EXPECT_THAT(one.err, HasSubstr("node 1 of 2: starting ranks 2..3 of 4 (attempt 0"));
}

TEST(ChorusRunAgent, AFailureOnOneNodeRestartsBothNodes) {
  const auto [zero, one] = two_nodes({"--nproc-per-node", "2", "--max-restarts", "1"},
                                     {kProbe, "--fail-rank", "3", "--fail-attempt", "0", "--exit-code", "6"});
  ASSERT_EQ(zero.exit_code, 0) << zero.err << zero.out;
  ASSERT_EQ(one.exit_code, 0) << one.err << one.out;
  EXPECT_THAT(one.err, HasSubstr("chorus-run: rank 3 exited with status 6"));
  EXPECT_THAT(zero.err, HasSubstr("another node reported: node 1: rank 3 exited with status 6"));
  for (const auto* r : {&zero, &one}) {
    EXPECT_THAT(r->err, HasSubstr("restart 1 of 1"));
    const auto rdzv = lines_of(r->out, "rdzv");
    ASSERT_EQ(rdzv.size(), 2u) << r->out;
    for (const auto& [rank, line] : rdzv) {
      EXPECT_EQ(line.fields.at("attempt"), "1");
      EXPECT_EQ(line.fields.at("size"), "4");
    }
  }
}

// Elastic (--nnodes 2:3): node 2's host is lost in attempt 0 (its worker kills its agent; the
// worker dies with it). Nodes 0 and 1 hear nothing from it for --failure-grace + 10 s, restart, and
// attempt 1 goes on with the two of them, renumbered: WORLD_SIZE 2, ranks 0 and 1.
TEST(ChorusRunAgent, ElasticNodesRestartWithoutALostNode) {
  const auto start = Clock::now();
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port_pair());
  const auto agent = [&](int node, const Args& program) {
    Args a = {"--nnodes",
              "2:3",
              "--node-rank",
              std::to_string(node),
              "--rdzv-endpoint",
              endpoint,
              "--max-restarts",
              "1",
              "--failure-grace",
              "1",
              "--rdzv-last-call",
              "1",
              "--"};
    a.insert(a.end(), program.begin(), program.end());
    return chorus_run(a);
  };
  auto two = std::async(std::launch::async, agent, 2, Args{"/bin/sh", "-c", "sleep 1; kill -9 $PPID"});
  auto one = std::async(std::launch::async, agent, 1, Args{kProbe});
  const auto zero = agent(0, {kProbe});
  const auto r1 = one.get(), r2 = two.get();
  ASSERT_EQ(zero.exit_code, 0) << zero.err << zero.out;
  ASSERT_EQ(r1.exit_code, 0) << r1.err << r1.out;
  EXPECT_NE(r2.exit_code, 0);
  EXPECT_THAT(zero.err, HasSubstr("the agent of node(s) 2 has not been heard from for 11 s"));
  // The agent that found the silence says so as its own finding, not as another node's report.
  const std::string found = "because the agent of node(s) 2 has not been heard from";
  EXPECT_TRUE(zero.err.find(found) != std::string::npos || r1.err.find(found) != std::string::npos)
      << zero.err << "\n---\n"
      << r1.err;
  for (const auto* r : {&zero, &r1}) {
    EXPECT_THAT(r->err, HasSubstr("restart 1 of 1"));
    EXPECT_THAT(r->err, HasSubstr("attempt 1 goes on with 2 of 3 nodes (without node(s) 2)"));
    const auto rdzv = lines_of(r->out, "rdzv");
    ASSERT_EQ(rdzv.size(), 1u) << r->out;
    EXPECT_EQ(rdzv.begin()->second.fields.at("attempt"), "1");
    EXPECT_EQ(rdzv.begin()->second.fields.at("size"), "2");
  }
  EXPECT_THAT(zero.err, HasSubstr("node 0 of 3: starting rank 0 of 2 (attempt 1"));
  EXPECT_THAT(r1.err, HasSubstr("node 1 of 3: starting rank 1 of 2 (attempt 1"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(60));
}

TEST(ChorusRunAgent, AFailureOnOneNodeWithoutRestartsEndsBothNonZero) {
  const auto start = Clock::now();
  const auto [zero, one] =
      two_nodes({"--nproc-per-node", "2", "--failure-grace", "2"}, {kProbe, "--fail-rank", "2", "--exit-code", "7"});
  EXPECT_EQ(one.exit_code, 7) << one.err;
  EXPECT_EQ(zero.exit_code, 1) << zero.err;
  EXPECT_THAT(one.err, HasSubstr("chorus-run: rank 2 exited with status 7"));
  EXPECT_THAT(one.err, HasSubstr("stopped rank 3 because rank 2 exited with status 7"));
  EXPECT_THAT(zero.err, HasSubstr("stopped ranks 0, 1 because another node reported: node 1: rank 2 exited with "
                                  "status 7"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(40));
}

TEST(ChorusRunAgent, AgentsThatDoNotMeetAreNamedAfterTheTimeout) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port_pair());
  const int store_port = std::stoi(endpoint.substr(endpoint.find(':') + 1)) + 1;
  const auto alone1 = chorus_run(
      {"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "2", "--", "/bin/true"});
  EXPECT_EQ(alone1.exit_code, 1);
  EXPECT_THAT(alone1.err, HasSubstr("node 1: the agent of node 0 did not answer at 127.0.0.1:" +
                                    std::to_string(store_port) + " within --rdzv-timeout 2 s"));
  const auto alone0 = chorus_run(
      {"--nnodes", "3", "--node-rank", "0", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "2", "--", "/bin/true"});
  EXPECT_EQ(alone0.exit_code, 1);
  EXPECT_THAT(alone0.err, HasSubstr("node(s) 1, 2 did not join attempt 0 within --rdzv-timeout 2 s"));
  // Agents that disagree on the job.
  const std::string e2 = "127.0.0.1:" + std::to_string(free_port_pair());
  auto other = std::async(std::launch::async, [&] {
    return chorus_run({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "3", "--rdzv-endpoint", e2,
                       "--rdzv-timeout", "3", "--", "/bin/true"});
  });
  const auto node0 = chorus_run({"--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2", "--rdzv-endpoint", e2,
                                 "--rdzv-timeout", "3", "--", "/bin/true"});
  const auto node1 = other.get();
  EXPECT_EQ(node1.exit_code, 1);
  EXPECT_THAT(node1.err, HasSubstr("node 1's agent has nnodes=2 nproc_per_node=3 max_restarts=0 but node 0's has "
                                   "nnodes=2 nproc_per_node=2 max_restarts=0"));
  EXPECT_EQ(node0.exit_code, 1);
  EXPECT_THAT(node0.err, HasSubstr("node(s) 1 did not join attempt 0"));
}

TEST(ChorusRunAgent, AnAgentStoppedBeforeTheStartEndsTheOthersWaiting) {
  // --nnodes 3 with nodes 0 and 1 only: both wait for node 2 until node 0 gets SIGTERM; node 1
  // then reads fail/0 and ends too, long before --rdzv-timeout 60.
  const auto start = Clock::now();
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port_pair());
  const std::string agent =
      "'" + kTool + "' --nnodes 3 --rdzv-endpoint " + endpoint + " --rdzv-timeout 60 --node-rank ";
  const std::string script = agent + "0 -- /bin/true & p0=$!; " + agent +
                             "1 -- /bin/true & p1=$!; sleep 1.5; kill -TERM $p0; wait $p0; echo s0=$?; wait $p1; "
                             "echo s1=$?";
  const auto r = run_tool({"/bin/sh", "-c", script});
  EXPECT_THAT(r.out, HasSubstr("s0=143\ns1=1\n"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run: another node reported: node 0: chorus-run was asked to stop (SIGTERM)"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST(ChorusRunAgent, DryRunPrintsEachWorkersVariables) {
  const auto r = run_tool({kTool, "--dry-run", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                           "--rdzv-endpoint", "h0:29500", "-x", "A=1", "--", "./x", "a b"},
                          std::vector<std::string>{"PATH=/bin"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string common =
      " WORLD_SIZE=4 LOCAL_RANK=%L LOCAL_WORLD_SIZE=2 GROUP_RANK=1 GROUP_WORLD_SIZE=2 TORCHELASTIC_RESTART_COUNT=0 "
      "TORCHELASTIC_MAX_RESTARTS=0 CHORUS_RESTART_COUNT=0 TORCHELASTIC_USE_AGENT_STORE=True A=1 ./x 'a b'\n";
  std::string expected;
  for (int local : {0, 1}) {
    std::string line = "env MASTER_ADDR=h0 MASTER_PORT=29500 RANK=" + std::to_string(2 + local) + common;
    line.replace(line.find("%L"), 2, std::to_string(local));
    expected += line;
  }
  EXPECT_EQ(r.out, expected);
}

struct BadLine {
  Args args;
  const char* message;
};

TEST(ChorusRunAgent, BadCommandLinesExitTwoNamingTheProblem) {
  const BadLine cases[] = {
      {{"--nproc-per-node", "2", "-np", "2", "--", "./x"}, "--nproc-per-node (chorus-run without MPI) and -np"},
      {{"--nnodes", "2", "--", "./x"}, "--nnodes 2 needs --rdzv-endpoint HOST:PORT"},
      {{"--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1", "--", "./x"},
       "--node-rank 2 is not a node of --nnodes 2 (valid: 0..1)"},
      {{"--nnodes", "0", "--", "./x"}, "--nnodes expects a whole number from 1"},
      {{"--rdzv-endpoint", "h0", "--", "./x"}, "--rdzv-endpoint 'h0' has no port"},
      {{"--rdzv-endpoint", "h0:70000", "--", "./x"}, "port '70000' is not a TCP port (valid: 1..65535)"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h0:65535", "--", "./x"}, "give a port up to 65534"},
      {{"--nproc-per-node", "2", "--min-hosts", "2", "--", "./x"}, "--min-hosts 2 is above --nnodes 1"},
      {{"--nnodes", "3:2", "--rdzv-endpoint", "h:1", "--", "./x"}, "--nnodes '3:2': MIN 3 is above MAX 2"},
      {{"--nproc-per-node", "2", "-x", "9=1", "--", "./x"}, "-x '9=1'"},
  };
  for (const auto& c : cases) {
    Args argv{kTool};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto r = run_tool(argv);
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, HasSubstr("chorus-run --help"));
    EXPECT_EQ(r.out, "");
  }
}

TEST(ChorusRunAgent, AMissingProgramIsAFailedRank) {
  const auto r = chorus_run({"--nproc-per-node", "1", "--", "./no-such-program-here"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("cannot execute ./no-such-program-here"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run: rank 0 exited with status 127"));
}

}  // namespace
}  // namespace chorus::launch
