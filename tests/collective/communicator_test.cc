// The front door's defaults (collective/communicator.h): a backend that implements only what it
// must (rank, size, backend, abort) and one collective gets UnimplementedError for every other
// collective, naming the backend and the collective, and stays usable afterwards.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "group_harness.h"
#include <chorus/collective/call.h>
#include <chorus/collective/communicator.h>
#include <chorus/collective/work.h>
#include <chorus/core/error.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {
namespace {

// One participant; implements barrier only.
class BarrierOnlyCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "barrier_only_backend"; }
  void abort(const std::string& reason) override { aborts.push_back(reason); }

  std::vector<std::string> aborts;
  int barriers = 0;

 protected:
  std::shared_ptr<Work> do_barrier(const CollectiveCall& call) override {
    ++barriers;
    return std::make_shared<CompletedWork>(call.fp);
  }
};

// Runs `call` and returns its UnimplementedError's message; fails the test when it throws anything
// else or nothing.
template <typename Call>
std::string unimplemented_message(const Call& call, const char* collective) {
  try {
    call();
  } catch (const UnimplementedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << collective;
    return e.message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << collective << " threw another error than UnimplementedError: " << e.what();
    return "";
  }
  ADD_FAILURE() << collective << " did not throw";
  return "";
}

TEST(CommunicatorDefaultsTest, UnimplementedCollectivesNameBackendAndCollective) {
  testing::use_cpu_devices(1);
  BarrierOnlyCommunicator comm;
  const Tensor in = Tensor::zeros({4}, DType::kFloat32, "/cpu:0");
  const Tensor out = Tensor::zeros({4}, DType::kFloat32, "/cpu:0");
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"all_reduce", [&] { comm.all_reduce(in, out); }},
      {"broadcast", [&] { comm.broadcast(in); }},
      {"reduce", [&] { comm.reduce(in, out); }},
      {"all_gather", [&] { comm.all_gather(in, out); }},
      {"reduce_scatter", [&] { comm.reduce_scatter(in, out); }},
  };
  for (const auto& [collective, call] : calls) {
    const std::string message = unimplemented_message(call, collective);
    const std::string want = std::string("barrier_only_backend: ") + collective + " is not implemented";
    EXPECT_EQ(message.substr(0, want.size()), want) << message;
  }
  // Not a failure of the group: nothing aborted, and the implemented collective still runs.
  EXPECT_TRUE(comm.aborts.empty());
  comm.barrier()->wait();
  EXPECT_EQ(comm.barriers, 1);
}

// A collective the backend does implement is not shadowed by the default.
TEST(CommunicatorDefaultsTest, ImplementedCollectiveRuns) {
  BarrierOnlyCommunicator comm;
  auto work = comm.barrier();
  ASSERT_NE(work, nullptr);
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(comm.barriers, 1);
}

}  // namespace
}  // namespace chorus::collective
