#include <chorus/launch/agent_options.h>

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using Env = std::vector<std::string>;

std::string endpoint_error(std::string_view text) {
  return chorus::testing::message_of<InvalidArgumentError>([&] { parse_rdzv_endpoint(text); });
}

std::string options_error(const AgentOptions& o) {
  return chorus::testing::message_of<InvalidArgumentError>([&] { validate_agent_options(o); });
}

AgentOptions two_nodes() {
  AgentOptions o;
  o.nnodes = 2;
  o.nproc_per_node = 4;
  o.node_rank = 1;
  o.endpoint = RdzvEndpoint{"10.0.0.1", 29500};
  o.program = {"./train"};
  return o;
}

TEST(RdzvEndpoint, HostAndPort) {
  EXPECT_EQ(parse_rdzv_endpoint("node0:29500"), (RdzvEndpoint{"node0", 29500}));
  EXPECT_EQ(parse_rdzv_endpoint("10.0.0.1:1"), (RdzvEndpoint{"10.0.0.1", 1}));
  EXPECT_EQ(parse_rdzv_endpoint("h-1.cluster:65535"), (RdzvEndpoint{"h-1.cluster", 65535}));
}

TEST(RdzvEndpoint, BadEndpointsNameTheProblem) {
  EXPECT_THAT(endpoint_error("node0"), HasSubstr("--rdzv-endpoint 'node0' has no port: give HOST:PORT"));
  EXPECT_THAT(endpoint_error(":29500"), HasSubstr("has no host"));
  EXPECT_THAT(endpoint_error("node0:"), HasSubstr("port '' is not a TCP port (valid: 1..65535)"));
  EXPECT_THAT(endpoint_error("node0:0"), HasSubstr("port '0' is not a TCP port"));
  EXPECT_THAT(endpoint_error("node0:65536"), HasSubstr("port '65536' is not a TCP port"));
  EXPECT_THAT(endpoint_error("node0:29x"), HasSubstr("port '29x' is not a TCP port"));
  EXPECT_THAT(endpoint_error("node0:-1"), HasSubstr("port '-1' is not a TCP port"));
  EXPECT_THAT(endpoint_error("[::1]:29500"), HasSubstr("IPv6 literals are not supported"));
  EXPECT_THAT(endpoint_error("a;b:29500"), HasSubstr("host name 'a;b' has the character ';'"));
  EXPECT_THAT(endpoint_error("alice@node0:29500"), HasSubstr("has the character '@'"));
}

TEST(AgentOptions, ValidOptionsPass) {
  EXPECT_NO_THROW(validate_agent_options(two_nodes()));
  AgentOptions one;  // one node: no endpoint needed
  one.program = {"x"};
  EXPECT_NO_THROW(validate_agent_options(one));
}

TEST(AgentOptions, BadValuesNameTheFlag) {
  auto o = two_nodes();
  o.node_rank = 2;
  EXPECT_THAT(options_error(o), HasSubstr("--node-rank 2 is not a node of --nnodes 2 (valid: 0..1)"));
  o = two_nodes();
  o.node_rank = -1;
  EXPECT_THAT(options_error(o), HasSubstr("--node-rank -1 is not a node"));
  o = two_nodes();
  o.nnodes = 0;
  o.node_rank = 0;
  EXPECT_THAT(options_error(o), HasSubstr("--nnodes must be from 1 to 4096, got 0"));
  o = two_nodes();
  o.nproc_per_node = 0;
  EXPECT_THAT(options_error(o), HasSubstr("--nproc-per-node must be from 1 to 4096, got 0"));
  o = two_nodes();
  o.nproc_per_node = 4000;
  EXPECT_THAT(options_error(o), HasSubstr("--nnodes 2 x --nproc-per-node 4000 is more than 4096 processes"));
  o = two_nodes();
  o.endpoint.reset();
  EXPECT_THAT(options_error(o), HasSubstr("--nnodes 2 needs --rdzv-endpoint HOST:PORT"));
  o = two_nodes();
  o.endpoint->port = 65535;
  EXPECT_THAT(options_error(o), HasSubstr("give a port up to 65534"));
  o.nnodes = 1;  // one node: no agents' store, the last port is fine
  o.node_rank = 0;
  EXPECT_NO_THROW(validate_agent_options(o));
  o = two_nodes();
  o.endpoint->port = 0;
  EXPECT_THAT(options_error(o), HasSubstr("is not a TCP port"));
  o = two_nodes();
  o.max_restarts = 101;
  EXPECT_THAT(options_error(o), HasSubstr("--max-restarts must be from 0 to 100, got 101"));
  o = two_nodes();
  o.failure_grace = std::chrono::seconds(0);
  EXPECT_THAT(options_error(o), HasSubstr("--failure-grace must be at least 1 s"));
  o = two_nodes();
  o.rdzv_timeout = std::chrono::seconds(0);
  EXPECT_THAT(options_error(o), HasSubstr("--rdzv-timeout must be at least 1 s"));
  o = two_nodes();
  o.extra_environment = {"1BAD=x"};
  EXPECT_THAT(options_error(o), HasSubstr("-x '1BAD=x'"));
  o = two_nodes();
  o.program.clear();
  EXPECT_THAT(options_error(o), HasSubstr("no program to run"));
}

TEST(AgentOptions, StorePortIsTheNextOne) { EXPECT_EQ(agent_store_port({"h", 29500}), 29501); }

TEST(WorkerEnvironment, TorchrunVariablesOfEachWorker) {
  auto o = two_nodes();
  o.max_restarts = 2;
  const Env env = worker_environment({}, o, *o.endpoint, /*local_rank=*/3, /*attempt=*/1);
  // RANK = node_rank * nproc_per_node + local_rank = 1 * 4 + 3.
  EXPECT_EQ(env, (Env{"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "RANK=7", "WORLD_SIZE=8", "LOCAL_RANK=3",
                      "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "TORCHELASTIC_RESTART_COUNT=1",
                      "TORCHELASTIC_MAX_RESTARTS=2", "CHORUS_RESTART_COUNT=1", "TORCHELASTIC_USE_AGENT_STORE=True"}));
  o.node_rank = 0;
  const Env first = worker_environment({}, o, *o.endpoint, 0, 0);
  EXPECT_EQ(first[2], "RANK=0");
  EXPECT_EQ(first[6], "GROUP_RANK=0");
}

// Elastic: an attempt's place among its members, not the node rank, numbers the workers.
TEST(WorkerEnvironment, AnElasticAttemptNumbersTheMembers) {
  auto o = two_nodes();
  o.nnodes = 3;
  o.min_nodes = 2;
  o.node_rank = 2;
  ASSERT_TRUE(o.elastic());
  validate_agent_options(o);
  const Env env = worker_environment({}, o, *o.endpoint, /*local_rank=*/1, /*attempt=*/1, NodeGroup{1, 2});
  EXPECT_EQ(env[2], "RANK=5");  // group rank 1 x 4 + 1
  EXPECT_EQ(env[3], "WORLD_SIZE=8");
  EXPECT_EQ(env[6], "GROUP_RANK=1");
  EXPECT_EQ(env[7], "GROUP_WORLD_SIZE=2");
  o.min_nodes = 4;
  EXPECT_THAT(options_error(o), HasSubstr("--nnodes MIN:MAX: MIN 4 is not from 1 to MAX 3"));
  o.min_nodes = 3;
  EXPECT_FALSE(o.elastic());
}

TEST(WorkerEnvironment, InheritedOverriddenAndExtraVariables) {
  auto o = two_nodes();
  o.extra_environment = {"CHORUS_COLLECTIVE_TIMEOUT=60", "HOME", "MASTER_PORT=1"};
  const Env base = {"PATH=/bin",  "RANK=99",    "OMPI_COMM_WORLD_RANK=5",
                    "PMI_RANK=5", "PMI_SIZE=9", "CHORUS_COLLECTIVE_TIMEOUT=5",
                    "HOME=/root", "WEIRD"};
  const Env env = worker_environment(base, o, *o.endpoint, 0, 0);
  // The base without what is set here (RANK, MASTER_PORT, the extras' names) and without an
  // enclosing MPI job's rank variables; a bare -x NAME keeps the inherited value.
  EXPECT_EQ(Env(env.begin(), env.begin() + 3), (Env{"PATH=/bin", "HOME=/root", "WEIRD"}));
  EXPECT_EQ(env[3], "MASTER_ADDR=10.0.0.1");
  EXPECT_EQ(env[4], "MASTER_PORT=1");  // -x NAME=VALUE wins, in place
  EXPECT_EQ(env.back(), "CHORUS_COLLECTIVE_TIMEOUT=60");
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](const std::string& e) { return e.rfind("MASTER_PORT=", 0) == 0; }),
            1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "RANK=4"), 1);
  for (const auto& e : env) {
    EXPECT_NE(e.rfind("OMPI_", 0), 0u) << e;
    EXPECT_NE(e.rfind("PMI_", 0), 0u) << e;
    EXPECT_NE(e, "RANK=99");
  }
}

}  // namespace
}  // namespace chorus::launch
