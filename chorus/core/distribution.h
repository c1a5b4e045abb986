// The distribution context every thread runs in: TensorFlow's tf.distribute.get_strategy(),
// get_replica_context(), in_cross_replica_context(), has_strategy() — the interface layers and
// optimizers program against, so that the same single-device code runs under the default
// strategy and under a mirrored one (distribute/ supplies the real strategies).
//
// Three situations, as in TF:
//   - no strategy scope: the *default strategy* (one replica, no communication). get_strategy()
//     returns it; get_replica_context() returns its replica context (id 0 of 1), whose
//     collectives return their input.
//   - inside `strategy.scope()` on the program's thread: *cross-replica context*.
//     get_strategy() is that strategy; get_replica_context() is nullptr.
//   - inside `strategy.run(fn)`, on a replica thread: *replica context*. get_replica_context()
//     is that replica's context; its collectives meet the other replicas' (SPMD: every replica
//     calls the same collectives in the same order).
// The state is per thread. Thread-safety: the functions are; a ReplicaContext is used by its own
// replica thread only.
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus {

// tf.distribute.ReduceOp.
enum class ReduceOp { kSum, kMean };
std::string_view reduce_op_name(ReduceOp op);  // "SUM", "MEAN"

class DistributionStrategy;

class StepPolicy;  // core/step_policy.h

// The gradient sum overlapped with the backward pass (PyTorch DDP's reducer; chorus's is
// distribute/overlapped_reduction.h), begun by a StepPolicy (core/step_policy.h) for
// GradientTape::gradient_and_sum, which hands it each gradient the moment it is final and returns
// it as a value beside the gradients; Optimizer::apply_gradients takes its result (the same bits
// as reducing the gradients then) instead of reducing again.
class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  // Gradient `index` of the sources given to begin_gradient_sum is final: `grad` is what
  // GradientTape::gradient returns for it (undefined: none). Called once per source, on the
  // replica thread, in the order the backward pass finishes them.
  virtual void ready(std::size_t index, const Tensor& grad) = 0;
};

class ReplicaContext {
 public:
  virtual ~ReplicaContext() = default;
  virtual DistributionStrategy& strategy() const = 0;
  virtual int replica_id_in_sync_group() const = 0;
  virtual int num_replicas_in_sync() const = 0;

  // SUM or MEAN of `value` over all replicas, on this replica's device (same shape and dtype).
  virtual Tensor all_reduce(ReduceOp op, const Tensor& value) = 0;
  // The same for a list (e.g. gradients): packed into fused buffers and reduced pack by pack in an
  // order identical on every replica (distribute's CommunicationOptions). Undefined entries stay
  // undefined (every replica must leave the same entries undefined).
  virtual std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) = 0;
  // Every replica's `value` concatenated along `axis` in replica order (shapes may differ along
  // `axis` only).
  virtual Tensor all_gather(const Tensor& value, int axis) = 0;

  // The step's distribution policy on this replica (core/step_policy.h): how its gradients are
  // summed and its variables updated. The default: the default strategy's (nothing to sum).
  virtual StepPolicy& step_policy();

  // tf.distribute.ReplicaContext.merge_call: every replica passes `value`; once all have, `fn`
  // runs once, in cross-replica context, with all values (index = replica id), and its result is
  // returned to every replica. Variables created inside fn are created once, not per replica.
  template <typename R, typename T>
  R merge_call(const std::function<R(const std::vector<T>&)>& fn, const T& value) {
    std::any result = merge(std::any(value), [&fn](std::vector<std::any>& all) -> std::any {
      std::vector<T> values;
      values.reserve(all.size());
      for (std::any& a : all) values.push_back(std::any_cast<T>(a));
      if constexpr (std::is_void_v<R>) {
        fn(values);
        return std::any();
      } else {
        return std::any(fn(values));
      }
    });
    if constexpr (!std::is_void_v<R>) return std::any_cast<R>(result);
  }

 protected:
  // The rendezvous behind merge_call: all replicas deposit `mine`; `fn` runs once (on one replica
  // thread, in cross-replica context) with all deposits; its result is every replica's return.
  // A replica that fails or does not arrive within the strategy's timeout makes the others throw
  // (AbortedError / DeadlineExceededError naming it) — never a hang.
  virtual std::any merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) = 0;
};

class DistributionStrategy {
 public:
  virtual ~DistributionStrategy() = default;
  // "MirroredStrategy", "OneDeviceStrategy", "DefaultDistributionStrategy".
  virtual std::string name() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  // The device of each replica, in replica order (canonical names).
  virtual std::vector<std::string> replica_devices() const = 0;
  // Multi-process strategies: whether this process is the chief (the one that writes checkpoints
  // and summaries). One process: true.
  virtual bool is_chief() const { return true; }
  // Multi-process strategies: returns once every worker process has called it with the same
  // `tag` (checkpoints use it so that no worker runs ahead of the chief's save), or throws like a
  // collective that timed out. One process: returns at once.
  virtual void worker_barrier(std::string_view tag) const { (void)tag; }
  // The step's distribution policy in cross-replica context (a one-replica strategy's update
  // outside run; core/step_policy.h). The default: sums nothing, updates whole variables.
  virtual StepPolicy& step_policy();
};

// The calling thread's strategy: the innermost active scope's (or the one whose run() called
// this replica thread), else the default strategy.
DistributionStrategy& get_strategy();
// True inside a (non-default) strategy's scope or run.
bool has_strategy();
// The replica context of the calling thread; nullptr in cross-replica context (see above).
ReplicaContext* get_replica_context();
bool in_cross_replica_context();

namespace internal {

// For distribute/: the calling thread enters `strategy`'s scope (cross-replica context) or a
// replica context. Nest and unwind in reverse order (RAII wrappers live in distribute/).
void push_strategy(DistributionStrategy* strategy);
void pop_strategy();
// The innermost pushed strategy of this thread, or nullptr (the default strategy is not pushed).
DistributionStrategy* current_strategy();
// RAII: the calling thread is in replica context `context` (nullptr: cross-replica context, as
// inside merge_call's fn) until destruction, which restores what was before.
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContext* context);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContext* saved_;
  bool saved_set_;
};

}  // namespace internal
}  // namespace chorus
