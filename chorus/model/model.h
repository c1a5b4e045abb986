// Model and Sequential (tf.keras.Model, tf.keras.Sequential): layers, training and inference.
//
//   distribute::MirroredStrategy strategy;
//   auto scope = strategy.scope();                 // the model and its variables belong to it
//   model::Sequential model({layers::Conv2D(32, 3, "relu"), layers::MaxPooling2D(2), layers::Flatten(),
//                            layers::Dense(10)});
//   model.compile(std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 1e-3}),
//                 std::make_shared<losses::SparseCategoricalCrossentropy>(true), {"accuracy"});
//   model.fit(data::synthetic_digits(60000, 1).batch(128), {.epochs = 3});
//
// The strategy is the one active when the model is constructed (as Keras: build the model inside
// strategy.scope()); without a scope, the default strategy. fit distributes each global batch
// over the replicas (Strategy::experimental_distribute_dataset), runs the training step on every
// replica (forward with training = true, per-example loss, compute_average_loss over the global
// batch, GradientTape, Optimizer::apply_gradients — which sums the gradients over replicas — and
// the metrics), and reports the loss as the mean per-example loss of the epoch. Datasets yield
// (x, y) elements. Under a mixed dtype policy (model/mixed_precision.h) a 16-bit model output is
// cast to float32 before the loss and the metrics. Variables are named "<model name>/<layer name>/<weight>".
// Subclass Model for custom architectures: create layers with track(), override call().
//
// Errors: fit/evaluate before compile → FailedPreconditionError; an element without (x, y) →
// InvalidArgumentError; a layer or variable of another strategy → FailedPreconditionError.
//
// The strategy's lifetime: the constructor keeps a plain, non-owning pointer to
// distribute::get_strategy() — the strategy of the innermost scope (or run), else the default
// strategy. That strategy must outlive the model: build (so the first call), compile, fit,
// evaluate, predict and strategy() use it, and nothing checks that it is still alive (a model
// used after its strategy is destroyed is undefined behaviour). The scope itself need not stay
// open: build and compile enter the strategy's scope, fit/evaluate/predict run through it. The
// default strategy lives until the process ends; it is remade only when the device runtime is
// reset (tests do), and a model made before such a reset must not be used after it.
//
// Thread-safety: a Model is not thread-safe. Call compile, build, fit, evaluate, predict,
// summary, add and the variable lists from one thread at a time, never while another of them
// runs. The exception is operator(), which every replica of one Strategy::run may call at once
// (as fit's step does); an unbuilt model is then built once, by one replica inside a merge_call,
// while the others wait. fit runs the callbacks on its calling thread, between steps, so they
// may read the model and set stop_training.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/trackable.h>
#include <chorus/core/tensor.h>
#include <chorus/data/dataset.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/layer.h>
#include <chorus/model/losses.h>
#include <chorus/model/metrics.h>
#include <chorus/summary/graph_def.h>

namespace chorus::distribute {
class Strategy;
}
namespace chorus::optimizers {
class Optimizer;
}

namespace chorus::model {

struct FitOptions {
  int epochs = 1;
  // Keras's initial_epoch: the epochs run are [initial_epoch, epochs) (resuming a run; the
  // dataset's earlier passes are skipped, so a shuffle takes the order of the pass it would have).
  int initial_epoch = 0;
  std::int64_t steps_per_epoch = -1;  // -1: until the dataset ends
  std::optional<data::Dataset> validation_data;
  std::vector<callbacks::CallbackPtr> callbacks;
  int verbose = 1;  // 1: progress bar (ProgressBar callback added); 0: silent
  // Adds callbacks::TerminateOnNaN first: the first non-finite loss ends fit with
  // InvalidArgumentError naming the step, before any callback could save the weights.
  bool terminate_on_nan = false;
  // Keras's compile(steps_per_execution=N): the callbacks' on_train_batch_end (the progress bar,
  // checkpoints by batch, TerminateOnNaN, a preemption stop) runs after every N-th step and after
  // an epoch's last, not after every step. Each call reads the running loss and metrics from the
  // replicas' devices — a host wait (core/gpu.h host_waits) — so on a GPU N > 1 keeps the steps
  // between them free of waits. The steps and their results are the same for every N. Must be
  // >= 1 (InvalidArgumentError).
  int steps_per_execution = 1;
  // Captured steps on a GPU (model/step_capture.h; torch.compile(mode="reduce-overhead"), TF's
  // XLA-compiled tf.function): after capture_warmup_steps eager steps, one step is captured as a
  // CUDA graph and replayed for every later batch of the same shapes. The weights are bitwise those
  // of eager steps. One replica only (OneDeviceStrategy or the default strategy on a GPU); anything
  // that cannot be captured runs eagerly, with one log line saying why (History::why_eager).
  // Off by default: it has not yet run on a GPU.
  bool capture_steps = false;
  int capture_warmup_steps = 2;  // >= 1, else InvalidArgumentError
};

struct History {
  std::map<std::string, std::vector<double>> history;  // "loss" → per-epoch values, ...
  // True when fit stopped right after a step because the job is being preempted (a callback
  // called Model::stop_after_this_step: callbacks::BackupAndRestore on SIGTERM, every worker at
  // the same step). The program should exit 0; rerunning it resumes.
  bool preempted = false;
  // capture_steps: the steps run as replays of a captured graph, and why the others ran eagerly
  // ("" when nothing stopped the capture).
  std::int64_t replayed_steps = 0;
  std::string why_eager;
};

// A Model is a Layer (Keras): it can be called inside another model or layer, and nests in the
// checkpoint as Keras nests it.
class Model : public layers::Layer {
 public:
  explicit Model(std::string name = "model");
  ~Model() override;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::string class_name() const override { return "Model"; }
  using layers::Layer::operator();
  Tensor operator()(const Tensor& x, bool training = false);
  // Builds every layer for inputs of `input_shape` (batch dim included) in cross-replica context.
  void build(const Shape& input_shape);
  // The number of inputs and outputs of call (Functional: as given; other models: 1 and 1). fit,
  // evaluate and predict read dataset elements as (x_1, ..., x_n, y_1, ..., y_m).
  virtual std::size_t num_inputs() const { return 1; }
  virtual std::size_t num_outputs() const { return 1; }
  // The name of output i in the logs of a model with several outputs (Keras's output_names: the
  // producing layer's name for a functional model; "output_<i + 1>" otherwise).
  virtual std::string output_name(std::size_t i) const;

  std::vector<layers::LayerPtr> layers() const;
  std::vector<Variable> trainable_variables() const;
  std::vector<Variable> non_trainable_variables() const;
  std::vector<Variable> variables() const;

  void compile(std::shared_ptr<optimizers::Optimizer> optimizer, losses::LossPtr loss,
               const std::vector<std::string>& metrics = {});
  // An exception out of fit is recorded as this process's failure first
  // (collective::set_process_failure): if the process then leaves, its goodbye carries the message
  // and the other workers' collectives raise at once instead of waiting for their timeout.
  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  // Keras's Model.train_step(data): one training step on this replica's slice `batch` = (x, y) of
  // the global batch. fit (and so chorus-train) runs it on every replica, inside strategy.run
  // (replica context), between the timeline's "train step" span's ends. The default: the forward
  // pass, compute_loss, Optimizer::compute_gradients (the gradients' sum over the replicas begun
  // during the backward pass when the strategy overlaps), Optimizer::apply_gradients. Override it
  // for a custom step (a second loss, gradient surgery, a GAN's two optimizers); every replica
  // must make the same collectives in the same order (SPMD), as in strategy.run.
  virtual void train_step(const data::Element& batch);
  // Mean per-example loss and metrics over the dataset: {"loss", "accuracy", ...}.
  std::map<std::string, double> evaluate(const data::Dataset& dataset, int verbose = 0);
  // Outputs for every x of the dataset (elements (x) or (x, y)), concatenated in order.
  Tensor predict(const data::Dataset& dataset);

  optimizers::Optimizer& optimizer() const;
  // The compiled optimizer, or nullptr before compile.
  const std::shared_ptr<optimizers::Optimizer>& optimizer_ptr() const { return optimizer_; }
  distribute::Strategy& strategy() const { return *strategy_; }
  // Keras-style table of layers, output shapes and parameter counts, and each layer's dtype
  // policy when any layer's is not "float32".
  std::string summary() const;
  // The model as a TensorFlow GraphDef for TensorBoard's Graphs tab (summary/trace.h writes it,
  // as Keras's TensorBoard(write_graph=True) does): an input node "<model>/input" (op
  // "Placeholder", attrs "dtype" and "shape"), then one node per layer, "<model>/<layer>", op =
  // the layer's class ("Dense"), fed by the node before it — the layers in the order they were
  // tracked, as a Sequential runs them (a subclassed model whose call() is not a chain is drawn as
  // one). A Functional draws its graph: a Placeholder per Input, a node per layer call (a shared
  // layer's later calls "<layer>_<k>"), fed by the nodes of its inputs. Every node has device = replica 0's device (the
  // strategy's first replica device),
  // "_output_shapes" (a list of one shape, the batch dimension -1 as TF's unknown), "T" (the
  // compute dtype), and, under several replicas, "_replica_devices" (every replica's device).
  // While summary::trace_on(graph) traces, the first call of the model records this graph.
  // FailedPreconditionError when the model is not built (call it or build() first).
  summary::GraphDef graph_def() const;
  // Checkpointing (checkpoint/trackable.h): the tracked layers by name, then "optimizer" once
  // compiled; Sequential numbers its layers as Keras does ("layer_with_weights-0", ...,
  // "layer-0", ...), so keys read "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE".
  // A model restored before it is built gets its values when build (or the first call) creates
  // the weights.
  std::vector<train::TrackableChild> trackable_children() const override;

  // Keras's save_weights / load_weights in TensorFlow's checkpoint format: the model is the root
  // of the object graph, so the keys read "layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"
  // (and the optimizer's, once compiled) — what tf_keras's model.save_weights(path) writes and its
  // load_weights(path) reads. `path` is a file prefix: path.index and path.data-00000-of-00001 are
  // written (crash-safe, checkpoint/checkpoint.h; only the chief writes in a multi-worker job).
  // load_weights before the model is built keeps the values until the build creates the weights;
  // the returned status says what matched (assert_consumed() to insist on everything; it stays
  // valid until the next load_weights). Errors:
  // a missing file → NotFoundError; a weight of another shape → InvalidArgumentError naming it.
  void save_weights(const std::string& path);
  train::LoadStatus load_weights(const std::string& path);
  // Keras's model.to_json(): the architecture as tf_keras 2.21 writes it (model/serialization.h;
  // model::model_from_json reads it back). Functional and Sequential only: another model →
  // InvalidArgumentError, as Keras cannot serialize a subclassed model either.
  std::string to_json() const;

  // Set by callbacks (EarlyStopping) to end fit after the current epoch.
  bool stop_training = false;
  // The variables behind the loss and metrics fit reports (each metric's total and count), for
  // BackupAndRestore: a run resumed mid-epoch continues the epoch's metrics.
  std::vector<Variable> metric_variables() const;
  // For callbacks (BackupAndRestore), from on_train_begin: fit starts at `epoch` (at least
  // FitOptions::initial_epoch) and skips the first `step` batches of it — the ones a restored
  // state already trained on; with step > 0 the epoch's metrics are not reset (they were restored).
  void set_resume_point(int epoch, std::int64_t step);
  // For callbacks, from on_train_batch_end: fit returns after this step, without the epoch's end
  // (on_train_end still runs), with History::preempted set.
  void stop_after_this_step() { stop_now_ = true; }

 protected:
  // Keras's compute_loss for train_step: the compiled loss of (y, y_pred) per example, added to
  // the running loss and metrics fit reports, averaged over the global batch (every replica's and
  // worker's rows: losses::compute_average_loss), so that the sum over the replicas of the
  // gradients is the gradient of the global mean. A 16-bit y_pred is cast to float32 first.
  Tensor compute_loss(const Tensor& y, Tensor y_pred);
  // The rows of the global batch of the step that fit or evaluate runs now (all replicas and workers).
  std::int64_t global_batch_size() const { return global_batch_rows_; }
  // Registers a sub-layer under a unique name ("dense", "dense_1"), which is also its attribute
  // in the checkpoint. Returns it.
  layers::LayerPtr track(layers::LayerPtr layer);
  // Builds the layers by running call once on a batch of one row of zeros (float32).
  void build_weights(const Shape& input_shape) override;
  bool autocast() const override { return false; }
  // Keras's numbering of a model's layers in checkpoints, for Sequential and Functional:
  // "layer_with_weights-N" over the layers that have weights, "layer-N" over all, then "optimizer".
  std::vector<train::TrackableChild> numbered_layer_children() const;
  // graph_def()'s nodes: the default an input Placeholder and one node per layer, each fed by the
  // one before (a Sequential's chain); Functional draws its graph.
  struct GraphNode {
    std::string name, op;
    std::vector<std::string> inputs;
    Shape shape;  // batch dimension included (drawn as -1)
    DType dtype;
    bool placeholder;
  };
  virtual std::vector<GraphNode> graph_nodes() const;
  // summary()'s "Output Shape" column, one entry per layers() entry: "(None, 10)"; the default
  // follows the layers as a chain from the built input shape.
  virtual std::vector<std::string> layer_output_shapes() const;
  // compute_loss for several outputs: the compiled loss of each, summed per example.
  Tensor compute_loss(const std::vector<Tensor>& ys, const std::vector<Tensor>& y_preds);

 private:
  History fit_impl(const data::Dataset& dataset, const FitOptions& options);
  void reset_metrics();
  // The loss and metrics so far: this worker's (per-batch callbacks), or summed over every worker
  // (all_workers: a collective every worker calls; epoch ends and evaluate).
  callbacks::Logs logs(const std::string& prefix = "", bool all_workers = false) const;

  distribute::Strategy* strategy_;
  std::shared_ptr<train::Checkpoint> weights_checkpoint_;  // load_weights': its status needs it alive
  std::optional<std::pair<int, std::int64_t>> resume_;     // set_resume_point, consumed by fit
  bool stop_now_ = false;
  std::int64_t global_batch_rows_ = 0;  // global_batch_size()
  std::shared_ptr<optimizers::Optimizer> optimizer_;
  losses::LossPtr loss_;
  std::shared_ptr<metrics::Mean> loss_metric_;
  // Every metric the logs report after "loss", in Keras's order. With several outputs (Keras 2's
  // logs): "<output>_loss" per output (output_losses_), then each output's compiled metrics,
  // "<output>_<metric>" (output_metrics_[i]) — the same objects, also listed in metrics_.
  std::vector<metrics::MetricPtr> metrics_;
  std::vector<std::shared_ptr<metrics::Mean>> output_losses_;
  std::vector<std::vector<metrics::MetricPtr>> output_metrics_;
  Shape built_input_;
};

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<layers::LayerPtr> layers = {}, std::string name = "sequential");
  std::string class_name() const override { return "Sequential"; }
  void add(layers::LayerPtr layer);
  std::vector<train::TrackableChild> trackable_children() const override;

 protected:
  Tensor call(const Tensor& x, bool training) override;
};

}  // namespace chorus::model
