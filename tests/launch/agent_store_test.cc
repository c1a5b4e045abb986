// The agents' store of chorus-run without MPI (launch/agent_store.h): agents are AgentStore objects
// over TcpStore clients of one in-process TcpStoreServer, as node 0's agent serves it. The hostile
// cases plant what a foreign or broken writer could leave in the store.
#include <chorus/launch/agent_store.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Decision = AgentStore::Decision;
using std::chrono::milliseconds;

constexpr const char* kJob = "nnodes=2 nproc_per_node=2 max_restarts=1";

struct Job {
  collective::TcpStoreServer server{0, "127.0.0.1"};
  std::shared_ptr<collective::Store> client() {
    return std::make_shared<collective::TcpStore>(
        "127.0.0.1", server.port(),
        collective::TcpStoreOptions{.connect_timeout = std::chrono::seconds(5), .timeout = std::chrono::seconds(5)});
  }
};

TEST(AgentStore, TwoAgentsJoinReportAndDecide) {
  Job job;
  AgentStore a0(job.client(), 0, 2), a1(job.client(), 1, 2);
  a0.register_node(kJob, milliseconds(2000));
  a1.register_node(kJob, milliseconds(2000));
  a0.arrive(0);
  EXPECT_FALSE(a0.members(0, milliseconds(0)));
  EXPECT_THAT(a0.missing(0), ElementsAre(1));
  a1.arrive(0);
  EXPECT_FALSE(a1.members(0, milliseconds(0)));  // node 0 has not closed the round yet
  EXPECT_THAT(*a0.members(0, milliseconds(0)), ElementsAre(0, 1));
  EXPECT_THAT(*a1.members(0, milliseconds(0)), ElementsAre(0, 1));
  EXPECT_TRUE(a0.missing(0).empty());

  EXPECT_EQ(a0.decision(0).kind, Decision::kRunning);
  a0.report_done(0);
  EXPECT_EQ(a1.decision(0).kind, Decision::kRunning);  // one of two nodes done
  a1.report_failure(0, /*restart=*/true, "node 1: rank 3 exited with status 4");
  const auto d = a0.decision(0);
  EXPECT_EQ(d.kind, Decision::kRestart);
  EXPECT_EQ(d.what, "node 1: rank 3 exited with status 4");
  // A failure without restarts outranks a restart of the same attempt; attempts are apart.
  a0.report_failure(0, /*restart=*/false, "node 0: chorus-run was asked to stop (SIGTERM)");
  EXPECT_EQ(a1.decision(0).kind, Decision::kFail);
  EXPECT_EQ(a1.decision(0).what, "node 0: chorus-run was asked to stop (SIGTERM)");
  EXPECT_EQ(a1.decision(1).kind, Decision::kRunning);
  a0.report_done(1);
  a1.report_done(1);
  EXPECT_EQ(a0.decision(1).kind, Decision::kDone);

  a1.leave(milliseconds(0));
  const auto start = std::chrono::steady_clock::now();
  a0.leave(milliseconds(5000));  // node 0 waits for the others: node 1 already left
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// Elastic (3 nodes, at least 2): node 0 closes the round with the nodes there once 2 have joined
// and the last call passed; a node that comes later is not a member; the attempt is done when its
// members are, and only members' heartbeats count.
TEST(AgentStore, ElasticRoundsCloseWithTheNodesThereAfterTheLastCall) {
  Job job;
  AgentStore a0(job.client(), 0, 3, 2), a1(job.client(), 1, 3, 2), a2(job.client(), 2, 3, 2);
  a0.arrive(0);
  EXPECT_FALSE(a0.members(0, milliseconds(0)));  // 1 of at least 2
  a1.arrive(0);
  EXPECT_FALSE(a1.members(0, milliseconds(0)));    // only node 0 closes the round
  EXPECT_FALSE(a0.members(0, milliseconds(300)));  // quorum seen now: the last call starts
  std::this_thread::sleep_for(milliseconds(350));
  EXPECT_THAT(*a0.members(0, milliseconds(300)), ElementsAre(0, 1));
  EXPECT_THAT(*a1.members(0, milliseconds(300)), ElementsAre(0, 1));
  a2.arrive(0);  // too late: the round is closed
  EXPECT_THAT(*a2.members(0, milliseconds(300)), ElementsAre(0, 1));
  a0.report_done(0);
  EXPECT_EQ(a1.decision(0).kind, Decision::kRunning);
  a1.report_done(0);
  EXPECT_EQ(a0.decision(0).kind, Decision::kDone);  // 2 members done, not 3 nodes
  EXPECT_TRUE(a0.beat(milliseconds(100)).empty());
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_THAT(a0.beat(milliseconds(100)), ElementsAre(1));  // node 2 is no member: not waited for
  // Every node there: the round closes at once, whatever the last call.
  for (AgentStore* a : {&a0, &a1, &a2}) a->arrive(1);
  EXPECT_THAT(*a0.members(1, std::chrono::hours(1)), ElementsAre(0, 1, 2));
  // Not elastic (at least 3 of 3): two nodes never close the round.
  AgentStore s0(job.client(), 0, 3), s1(job.client(), 1, 3);
  s0.arrive(7);
  s1.arrive(7);
  EXPECT_FALSE(s0.members(7, milliseconds(0)));
  EXPECT_THAT(s0.missing(7), ElementsAre(2));
  EXPECT_THROW(AgentStore(job.client(), 0, 3, 4), InvalidArgumentError);
}

TEST(AgentStore, NodeZeroWaitsForTheOthersToLeaveButNotForever) {
  Job job;
  AgentStore a0(job.client(), 0, 3);
  const auto start = std::chrono::steady_clock::now();
  a0.leave(milliseconds(300));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

// Elastic: node 0 waits for the members of the last attempt to leave, by name; a node that came
// too late (no member) leaving does not stand in for a member still there.
TEST(AgentStore, NodeZeroWaitsForTheMembersToLeaveNotForOtherNodes) {
  Job job;
  AgentStore a0(job.client(), 0, 3, 2), a1(job.client(), 1, 3, 2), a2(job.client(), 2, 3, 2);
  a0.arrive(0);
  a1.arrive(0);
  ASSERT_THAT(*a0.members(0, milliseconds(0)), ElementsAre(0, 1));  // 2 of 3, no last call
  ASSERT_THAT(*a1.members(0, milliseconds(0)), ElementsAre(0, 1));
  a2.leave(milliseconds(0));  // not a member
  auto start = std::chrono::steady_clock::now();
  a0.leave(milliseconds(300));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300)) << "did not wait for node 1, a member";
  a1.leave(milliseconds(0));
  start = std::chrono::steady_clock::now();
  a0.leave(milliseconds(5000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(AgentStore, ASecondAgentWithTheSameNodeRankIsNamed) {
  Job job;
  AgentStore a(job.client(), 1, 2), b(job.client(), 1, 2), zero(job.client(), 0, 2);
  zero.register_node(kJob, milliseconds(1000));
  a.register_node(kJob, milliseconds(1000));
  const std::string m =
      chorus::testing::message_of<InvalidArgumentError>([&] { b.register_node(kJob, milliseconds(1000)); });
  EXPECT_THAT(m, HasSubstr("--node-rank 1 is claimed by 2 agents of the job at tcp store 127.0.0.1:"));
}

TEST(AgentStore, AJobThatDiffersFromNodeZerosIsNamed) {
  Job job;
  AgentStore zero(job.client(), 0, 2), one(job.client(), 1, 2);
  zero.register_node(kJob, milliseconds(1000));
  const std::string m = chorus::testing::message_of<InvalidArgumentError>(
      [&] { one.register_node("nnodes=2 nproc_per_node=3 max_restarts=1", milliseconds(1000)); });
  EXPECT_THAT(m, HasSubstr("node 1's agent has nnodes=2 nproc_per_node=3 max_restarts=1 but node 0's has " +
                           std::string(kJob)));
  // Node 0 never published: the wait ends at the timeout, naming the key.
  Job empty;
  AgentStore lone(empty.client(), 1, 2);
  EXPECT_THROW(lone.register_node(kJob, milliseconds(200)), DeadlineExceededError);
}

TEST(AgentStore, HeartbeatsNameASilentNode) {
  Job job;
  AgentStore a0(job.client(), 0, 3), a1(job.client(), 1, 3);
  EXPECT_TRUE(a0.beat(milliseconds(200)).empty());  // first sight starts each clock
  std::this_thread::sleep_for(milliseconds(250));
  a1.beat(milliseconds(200));
  EXPECT_THAT(a0.beat(milliseconds(200)), ElementsAre(2));  // node 1 beat meanwhile, node 2 never did
}

// Hostile: what another writer may have left under the agents' keys.
TEST(AgentStore, GarbageInTheStoreIsNamedOrBounded) {
  Job job;
  auto raw = job.client();
  AgentStore a0(job.client(), 0, 2);
  // A huge failure message is cut for the reports.
  raw->set("chorus-run/restart/0", std::string(1 << 20, 'x'));
  const auto d = a0.decision(0);
  EXPECT_EQ(d.kind, Decision::kRestart);
  EXPECT_EQ(d.what.size(), AgentStore::kMaxWhatBytes + 3);
  // A counter that is not a number: the store's InvalidArgumentError, naming the key.
  raw->set("chorus-run/done/1", "many");
  const std::string m = chorus::testing::message_of<InvalidArgumentError>([&] { a0.decision(1); });
  EXPECT_THAT(m, HasSubstr("chorus-run/done/1"));
  raw->set("chorus-run/join/2", "\xff\xfe");
  EXPECT_THROW(a0.members(2, milliseconds(0)), InvalidArgumentError);
  // Members that are not ascending node ranks of this job: DataLossError naming them.
  AgentStore a1(job.client(), 1, 2);
  for (const char* bad : {"", "0,5", "1,0", "0,,1", "x", "0,1,"}) {
    raw->set("chorus-run/members/3", bad);
    const std::string e = chorus::testing::message_of<DataLossError>([&] { a1.members(3, milliseconds(0)); });
    EXPECT_THAT(e, HasSubstr("the members of attempt 3")) << bad;
  }
  // A node key claimed before this agent came.
  raw->add("chorus-run/node/0", 5);
  EXPECT_THROW(a0.register_node(kJob, milliseconds(100)), InvalidArgumentError);
}

TEST(AgentStore, AStoreThatIsGoneIsUnavailable) {
  auto job = std::make_unique<Job>();
  AgentStore a1(job->client(), 1, 2);
  a1.arrive(0);
  job.reset();  // node 0's agent (the server) is gone
  EXPECT_THROW(a1.decision(0), UnavailableError);
  a1.leave(milliseconds(100));  // swallowed: the job is over either way
}

}  // namespace
}  // namespace chorus::launch
