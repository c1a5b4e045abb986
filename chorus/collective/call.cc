#include <chorus/collective/call.h>

#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

constexpr const char* kNames[kNumCollectiveOps] = {"all_reduce", "broadcast",      "reduce",
                                                   "all_gather", "reduce_scatter", "barrier"};

}  // namespace

const char* collective_op_name(CollectiveOp op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumCollectiveOps ? kNames[i] : "?";
}

std::optional<CollectiveOp> collective_op_from_name(std::string_view name) {
  for (int i = 0; i < kNumCollectiveOps; ++i)
    if (name == kNames[i]) return static_cast<CollectiveOp>(i);
  return std::nullopt;
}

void check_on_host(const Tensor& t, const CollectiveCall& call, const char* role, std::string_view why) {
  CHORUS_REQUIRE(!t.device_context().is_gpu(), InvalidArgumentError, call.fp.op, ": the ", role, *role ? " " : "",
                 "tensor is on ", t.device_name(), "; ", why);
}

void check_on_device(const Tensor& t, const DeviceContext& device, int rank, const CollectiveCall& call,
                     const char* role, std::string_view whose) {
  CHORUS_REQUIRE(&t.device_context() == &device, InvalidArgumentError, call.fp.op, ": rank ", rank, "'s ", role,
                 *role ? " " : "", "tensor is on ", t.device_name(), " but ", whose, " is ", device.name());
}

}  // namespace chorus::collective
