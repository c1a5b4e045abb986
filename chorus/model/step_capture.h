// Model::fit's captured step (FitOptions::capture_steps; issue 42): on a GPU, after warm-up steps
// run eagerly, one training step is captured as a CUDA graph (core/graph_capture.h) and every later
// step whose batch has the same shapes replays it — one launch instead of a few hundred, the
// host's share of a small step gone (TF's XLA-compiled tf.function, torch.compile's
// mode="reduce-overhead").
//
// Each step, on the replica's thread (inside strategy.run):
//   - warm-up (FitOptions::capture_warmup_steps steps, eager): the optimizer reads its scalars on
//     the device (Optimizer::set_scalars_on_device); a step that draws random numbers (dropout:
//     the host picks the seeds, which a replay would repeat), or a last warm-up step that waits for
//     the GPU on the host, turns capture off for the fit;
//   - capture: the batch copied into static input tensors, the step captured and launched once;
//   - replay: the batch copied into the static inputs (device to device, on the step's stream),
//     the optimizer's scalars for the step written (Optimizer::prepare_step), the graph launched,
//     the optimizer's host step counter advanced. A batch of other shapes (an epoch's last, smaller
//     batch) runs eagerly instead; a variable whose storage moved since the capture (a checkpoint
//     restore takes fresh storage) drops the graph, and the next step captures again.
// Whatever keeps the steps from being captured — a CPU device, several replicas (not built yet),
// the optimizer (Optimizer::why_not_capturable), a capture CUDA refused — is logged once, and the
// steps run eagerly; a refused capture's step runs again eagerly (its device work did not run,
// and the optimizer's host copy of the step counter is dropped). The weights are bitwise those of
// eager steps: the same kernels, in the same order, with the same scalars.
//
// Thread-safety: step() from the replica's thread only (one replica).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/core/graph_capture.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>
#include <chorus/data/dataset.h>
#include <chorus/optimizer/optimizer.h>

namespace chorus::model::internal {

class StepCapture {
 public:
  // `variables`: whose storage a graph writes (the model's, the optimizer's, the metrics').
  // `why_not`: "" to try, else the reason the steps run eagerly (logged at the first step).
  StepCapture(optimizers::Optimizer& optimizer, std::function<std::vector<Variable>()> variables, int warmup_steps,
              std::string why_not);
  ~StepCapture();  // the optimizer's scalars back to by-value
  StepCapture(const StepCapture&) = delete;
  StepCapture& operator=(const StepCapture&) = delete;

  // One training step on this replica's slice `batch`, by `train_step` (eager) or a replay.
  void step(const data::Element& batch, const std::function<void(const data::Element&)>& train_step);

  std::int64_t replays() const { return replays_; }
  std::int64_t captures() const { return captures_; }
  // Why the steps run eagerly ("" while warming up or captured).
  const std::string& why_eager() const { return why_eager_; }

 private:
  void turn_off(std::string why);
  bool same_shapes(const data::Element& batch) const;
  std::vector<const void*> storage() const;  // the variables' data pointers, in order
  void capture(const data::Element& batch, const std::function<void(const data::Element&)>& train_step);

  optimizers::Optimizer& optimizer_;
  std::function<std::vector<Variable>()> variables_;
  int warmup_left_;
  bool off_ = false;
  std::string why_eager_;
  std::unique_ptr<CapturedGraph> graph_;
  data::Element inputs_;              // the graph's static inputs
  std::vector<const void*> storage_;  // the variables' storage at the capture
  bool logged_shapes_ = false;
  std::int64_t replays_ = 0;
  std::int64_t captures_ = 0;
};

}  // namespace chorus::model::internal
