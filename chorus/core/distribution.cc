#include <chorus/core/distribution.h>

#include <chorus/core/error.h>
#include <chorus/core/runtime.h>

namespace chorus {
namespace {

thread_local std::vector<DistributionStrategy*> t_strategies;
thread_local ReplicaContext* t_context = nullptr;
thread_local bool t_context_set = false;

class DefaultStrategy final : public DistributionStrategy {
 public:
  std::string name() const override { return "DefaultDistributionStrategy"; }
  int num_replicas_in_sync() const override { return 1; }
  std::vector<std::string> replica_devices() const override {
    // Where an op without a device goes: the first GPU, else CPU:0 (core/placement.h).
    for (const auto& d : runtime::devices("the default strategy")) {
      if (d->is_gpu()) return {d->name()};
    }
    return {runtime::devices().front()->name()};
  }
};

DefaultStrategy& default_strategy() {
  static DefaultStrategy* s = new DefaultStrategy;
  return *s;
}

class DefaultReplicaContext final : public ReplicaContext {
 public:
  DistributionStrategy& strategy() const override { return default_strategy(); }
  int replica_id_in_sync_group() const override { return 0; }
  int num_replicas_in_sync() const override { return 1; }
  Tensor all_reduce(ReduceOp, const Tensor& value) override { return value; }
  std::vector<Tensor> all_reduce(ReduceOp, const std::vector<Tensor>& values) override { return values; }
  Tensor all_gather(const Tensor& value, int) override { return value; }

 protected:
  std::any merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) override {
    std::vector<std::any> all{std::move(mine)};
    return fn(all);
  }
};

DefaultReplicaContext& default_replica_context() {
  static DefaultReplicaContext* c = new DefaultReplicaContext;
  return *c;
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "SUM" : "MEAN"; }

DistributionStrategy& get_strategy() {
  if (t_context_set && t_context != nullptr) return t_context->strategy();
  if (!t_strategies.empty()) return *t_strategies.back();
  return default_strategy();
}

bool has_strategy() { return &get_strategy() != &default_strategy(); }

ReplicaContext* get_replica_context() {
  if (t_context_set) return t_context;
  if (!t_strategies.empty()) return nullptr;
  return &default_replica_context();
}

bool in_cross_replica_context() { return get_replica_context() == nullptr; }

namespace internal {

void push_strategy(DistributionStrategy* strategy) {
  CHORUS_REQUIRE(strategy != nullptr, InvalidArgumentError, "push_strategy: null strategy");
  t_strategies.push_back(strategy);
}

void pop_strategy() {
  CHORUS_REQUIRE(!t_strategies.empty(), InternalError, "pop_strategy without a matching push");
  t_strategies.pop_back();
}

DistributionStrategy* current_strategy() { return t_strategies.empty() ? nullptr : t_strategies.back(); }

ReplicaContextScope::ReplicaContextScope(ReplicaContext* context) : saved_(t_context), saved_set_(t_context_set) {
  t_context = context;
  t_context_set = true;
}

ReplicaContextScope::~ReplicaContextScope() {
  t_context = saved_;
  t_context_set = saved_set_;
}

}  // namespace internal
}  // namespace chorus
