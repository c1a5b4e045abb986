#include <chorus/model/step_capture.h>

#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/random.h>

namespace chorus::model::internal {

StepCapture::StepCapture(optimizers::Optimizer& optimizer, std::function<std::vector<Variable>()> variables,
                         int warmup_steps, std::string why_not)
    : optimizer_(optimizer), variables_(std::move(variables)), warmup_left_(warmup_steps) {
  CHORUS_REQUIRE(warmup_steps >= 1, InvalidArgumentError, "fit: capture_warmup_steps must be >= 1, got ", warmup_steps);
  if (!why_not.empty()) turn_off(std::move(why_not));
}

StepCapture::~StepCapture() {
  graph_.reset();  // its pool back before the inputs go
  optimizer_.set_scalars_on_device(false);
}

void StepCapture::turn_off(std::string why) {
  if (off_) return;
  off_ = true;
  why_eager_ = std::move(why);
  graph_.reset();
  optimizer_.set_scalars_on_device(false);
  CHORUS_LOG(WARNING) << "fit: capture_steps is on, but the training steps run eagerly: " << why_eager_;
}

bool StepCapture::same_shapes(const data::Element& batch) const {
  if (batch.size() != inputs_.size()) return false;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (!(batch[i].shape() == inputs_[i].shape()) || batch[i].dtype() != inputs_[i].dtype() ||
        &batch[i].device_context() != &inputs_[i].device_context())
      return false;
  }
  return true;
}

std::vector<const void*> StepCapture::storage() const {
  std::vector<const void*> out;
  for (const Variable& v : variables_()) out.push_back(v.value().data());
  return out;
}

void StepCapture::capture(const data::Element& batch, const std::function<void(const data::Element&)>& train_step) {
  inputs_.clear();
  for (const Tensor& t : batch) inputs_.push_back(t.clone());  // the graph's own inputs
  storage_ = storage();
  DeviceContext& dev = inputs_.front().device_context();
  optimizer_.prepare_step();
  CapturedGraph::Capture c = CapturedGraph::capture(dev, [&] { train_step(inputs_); });
  if (c.graph == nullptr) {
    // Nothing of the step ran on the device; the optimizer's host copy of the counter advanced.
    optimizer_.forget_step_counter_copies();
    turn_off("CUDA could not capture the step: " + c.why_not);
    train_step(batch);
    return;
  }
  graph_ = std::move(c.graph);
  ++captures_;
  graph_->replay();  // this step
}

void StepCapture::step(const data::Element& batch, const std::function<void(const data::Element&)>& train_step) {
  if (off_) {
    train_step(batch);
    return;
  }
  if (batch.empty() || !batch.front().defined() || !batch.front().device_context().is_gpu()) {
    turn_off(batch.empty() || !batch.front().defined()
                 ? "the batch has no tensors"
                 : "the step's device " + batch.front().device_name() + " is not a GPU: CUDA graphs need one");
    train_step(batch);
    return;
  }
  if (warmup_left_ > 0) {
    // Eager, with the optimizer's scalars read on the device, and watched for what a replay
    // cannot repeat.
    optimizer_.set_scalars_on_device(true);
    optimizer_.prepare_step();
    const std::int64_t waits = gpu::host_waits();
    const std::int64_t draws = ops::random_fills_on_this_thread();
    train_step(batch);
    --warmup_left_;
    // Host waits count in the last warm-up step only: a first step may still wait once (a
    // library's set-up), which the steady step it warms up for does not.
    if (ops::random_fills_on_this_thread() != draws)
      turn_off(
          "the step draws random numbers (dropout, random ops) whose seeds the host picks each step: a "
          "replay would repeat them");
    else if (warmup_left_ == 0 && gpu::host_waits() != waits)
      turn_off("the last warm-up step waited for the GPU on the host " + std::to_string(gpu::host_waits() - waits) +
               " time(s) (a read of a device value, a synchronize), which a captured step cannot");
    return;
  }
  if (graph_ != nullptr && storage() != storage_) {
    CHORUS_LOG(INFO) << "fit: a variable's storage changed since the step was captured (a restore): capturing again";
    graph_.reset();
  }
  if (graph_ == nullptr) {
    capture(batch, train_step);
    return;
  }
  if (!same_shapes(batch)) {
    if (!logged_shapes_) {
      logged_shapes_ = true;
      CHORUS_LOG(INFO) << "fit: a batch of other shapes than the captured step's runs eagerly (logged once)";
    }
    optimizer_.prepare_step();
    train_step(batch);
    return;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) inputs_[i].copy_from(batch[i]);
  optimizer_.prepare_step();
  graph_->replay();
  optimizer_.count_replayed_step();
  ++replays_;
}

}  // namespace chorus::model::internal
