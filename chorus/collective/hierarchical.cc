#include <chorus/collective/hierarchical.h>

#include <functional>

#include <chorus/collective/call.h>
#include <chorus/collective/work.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

using internal::str_cat;

class HierarchicalCommunicator final : public Communicator {
  using WorkPtr = std::shared_ptr<Work>;

 public:
  HierarchicalCommunicator(std::unique_ptr<Communicator> local, std::shared_ptr<Communicator> cross, int process,
                           int processes)
      : local_(std::move(local)), cross_(std::move(cross)), process_(process), processes_(processes) {
    CHORUS_REQUIRE(local_ != nullptr, InvalidArgumentError, "make_hierarchical: the local communicator is null");
    CHORUS_REQUIRE(processes >= 1 && process >= 0 && process < processes, InvalidArgumentError,
                   "make_hierarchical: process ", process, " of ", processes, " is not valid");
    const bool leader = local_->rank() == 0;
    CHORUS_REQUIRE(leader == (cross_ != nullptr), InvalidArgumentError, "make_hierarchical: local rank ",
                   local_->rank(),
                   leader ? " is its process's leader and needs the cross-process communicator"
                          : " must not hold the cross-process communicator (only local rank 0 does)");
    if (cross_)
      CHORUS_REQUIRE(cross_->size() == processes && cross_->rank() == process, InvalidArgumentError,
                     "make_hierarchical: the cross communicator is rank ", cross_->rank(), " of ", cross_->size(),
                     " but this is process ", process, " of ", processes);
  }

  int rank() const override { return process_ * local_->size() + local_->rank(); }
  int size() const override { return processes_ * local_->size(); }
  std::string_view backend() const override { return "hierarchical"; }

  void abort(const std::string& reason) override {
    local_->abort(reason);
    if (cross_) cross_->abort(reason);
  }

 private:
  // The front door has validated the call against the global size (shapes, root, dtype); each
  // step below validates again in its own group. Any device: the local group has its own rule.
  void check_device(const Tensor&, const CollectiveCall&, const char*) const override {}

  WorkPtr do_all_reduce(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    local_->reduce(in, out, {.op = o.op, .root = 0, .timeout = o.timeout})->wait(o.timeout);
    cross_step([&] { cross_->all_reduce(out, out, {.op = o.op, .timeout = o.timeout})->wait(o.timeout); });
    local_->broadcast(out, {.root = 0, .timeout = o.timeout})->wait(o.timeout);
    return done(o);
  }

  WorkPtr do_broadcast(const CollectiveCall& o, const Tensor& t) override {
    const int root_process = o.root / local_->size();
    const int root_local = o.root % local_->size();
    if (process_ == root_process && root_local != 0)
      local_->broadcast(t, {.root = root_local, .timeout = o.timeout})->wait(o.timeout);
    cross_step([&] { cross_->broadcast(t, {.root = root_process, .timeout = o.timeout})->wait(o.timeout); });
    local_->broadcast(t, {.root = 0, .timeout = o.timeout})->wait(o.timeout);
    return done(o);
  }

  WorkPtr do_reduce(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    Tensor tmp = Tensor::empty(in.shape(), in.dtype(), in.device_name());
    local_->reduce(in, tmp, {.op = o.op, .root = 0, .timeout = o.timeout})->wait(o.timeout);
    cross_step([&] { cross_->all_reduce(tmp, tmp, {.op = o.op, .timeout = o.timeout})->wait(o.timeout); });
    local_->broadcast(tmp, {.root = 0, .timeout = o.timeout})->wait(o.timeout);
    if (rank() == o.root) {
      Tensor target = out;  // a handle to the same storage
      target.copy_from(tmp);
    }
    return done(o);
  }

  WorkPtr do_all_gather(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    std::vector<std::int64_t> dims = in.shape().dims();
    dims[0] *= local_->size();
    Tensor local_block = Tensor::empty(Shape(dims), in.dtype(), in.device_name());
    local_->all_gather(in, local_block, {.timeout = o.timeout})->wait(o.timeout);
    cross_step([&] { cross_->all_gather(local_block, out, {.timeout = o.timeout})->wait(o.timeout); });
    local_->broadcast(out, {.root = 0, .timeout = o.timeout})->wait(o.timeout);
    return done(o);
  }

  WorkPtr do_reduce_scatter(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    std::vector<std::int64_t> dims = in.shape().dims();
    Tensor reduced = Tensor::empty(in.shape(), in.dtype(), in.device_name());
    local_->reduce(in, reduced, {.op = o.op, .root = 0, .timeout = o.timeout})->wait(o.timeout);
    dims[0] /= processes_;  // this process's k blocks
    Tensor mine = local_->rank() == 0 ? Tensor::empty(Shape(dims), in.dtype(), in.device_name())
                                      : Tensor::zeros(Shape(dims), in.dtype(), in.device_name());
    cross_step([&] { cross_->reduce_scatter(reduced, mine, {.op = o.op, .timeout = o.timeout})->wait(o.timeout); });
    local_->reduce_scatter(mine, out, {.op = ReduceOp::kSum, .timeout = o.timeout})->wait(o.timeout);
    return done(o);
  }

  WorkPtr do_barrier(const CollectiveCall& o) override {
    local_->barrier({.timeout = o.timeout})->wait(o.timeout);
    cross_step([&] { cross_->barrier({.timeout = o.timeout})->wait(o.timeout); });
    local_->barrier({.timeout = o.timeout})->wait(o.timeout);
    return done(o);
  }

  // Runs the cross-process step on local rank 0; a failure there releases the local participants
  // (waiting in the following local step) at once.
  void cross_step(const std::function<void()>& step) {
    if (!cross_) return;
    try {
      step();
    } catch (const Error& e) {
      local_->abort(str_cat("the cross-process step failed on process ", process_, ": ", e.what()));
      throw;
    }
  }
  static WorkPtr done(const CollectiveCall& c) { return std::make_shared<CompletedWork>(c.fp, "hierarchical "); }

  std::unique_ptr<Communicator> local_;
  std::shared_ptr<Communicator> cross_;
  int process_;
  int processes_;
};

}  // namespace

std::unique_ptr<Communicator> make_hierarchical(std::unique_ptr<Communicator> local,
                                                std::shared_ptr<Communicator> cross, int process_index,
                                                int num_processes) {
  return std::make_unique<HierarchicalCommunicator>(std::move(local), std::move(cross), process_index, num_processes);
}

}  // namespace chorus::collective
