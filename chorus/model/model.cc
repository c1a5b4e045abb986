#include <chorus/model/model.h>

#include <algorithm>

#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/profile.h>
#include <chorus/core/timeline.h>
#include <chorus/distribute/strategy.h>
#include <chorus/model/step_capture.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/optimizer.h>
#include <chorus/summary/trace.h>

namespace chorus::model {

using chorus::internal::str_cat;

Model::Model(std::string name) : layers::Layer(std::move(name)), strategy_(&distribute::get_strategy()) {}
Model::~Model() = default;

layers::LayerPtr Model::track(layers::LayerPtr layer) {
  CHORUS_REQUIRE(layer != nullptr, InvalidArgumentError, "model '", name(), "': null layer");
  CHORUS_REQUIRE(!layer->built() || built(), InvalidArgumentError, "model '", name(), "': layer '", layer->name(),
                 "' is already built (by another model); create a new layer");
  std::set<std::string> taken;
  for (const auto& [attribute, l] : sublayers()) taken.insert(attribute);
  std::string base = layer->name().empty() ? layers::to_snake_case(layer->class_name()) : layer->name();
  std::string unique = base;
  for (int i = 1; taken.count(unique); ++i) unique = str_cat(base, "_", i);
  if (!layer->built()) layer->set_name(unique);
  return track_layer(std::move(layer), unique);
}

std::vector<layers::LayerPtr> Model::layers() const {
  std::vector<layers::LayerPtr> out;
  for (const auto& [attribute, l] : sublayers()) out.push_back(l);
  return out;
}

Tensor Model::operator()(const Tensor& x, bool training) {
  if (!built()) build(x.shape());
  if (summary::graph_wanted(name())) summary::record_graph(name(), graph_def());  // summary/trace.h
  return layers::Layer::operator()(x, training);  // the model's timeline span, its layers' path
}

void Model::build(const Shape& input_shape) {
  if (built()) return;
  // In cross-replica context of the model's strategy, so weights are created once, mirrored
  // (Layer::build runs build_weights in a merge_call under several replicas).
  if (get_replica_context() != nullptr && get_replica_context()->num_replicas_in_sync() > 1) {
    layers::Layer::build(input_shape);
  } else {
    auto scope = strategy_->scope();
    layers::Layer::build(input_shape);
  }
}

void Model::build_weights(const Shape& input_shape) {
  std::vector<std::int64_t> one = input_shape.dims();
  one[0] = 1;
  // built_input_ is written once, by the thread that builds: under several replicas the others
  // wait in the merge_call meanwhile.
  (void)call_list({Tensor::zeros(Shape(one), DType::kFloat32, strategy_->replica_devices()[0])}, false);
  built_input_ = input_shape;
}

std::vector<Variable> Model::trainable_variables() const { return trainable_weights(); }
std::vector<Variable> Model::non_trainable_variables() const { return non_trainable_weights(); }
std::vector<Variable> Model::variables() const { return weights(); }

void Model::compile(std::shared_ptr<optimizers::Optimizer> optimizer, losses::LossPtr loss,
                    const std::vector<std::string>& metric_names) {
  CHORUS_REQUIRE(optimizer != nullptr && loss != nullptr, InvalidArgumentError,
                 "compile: optimizer and loss are required");
  auto scope = strategy_->scope();  // metric variables belong to the model's strategy
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  loss_metric_ = std::make_shared<metrics::Mean>("loss");
  metrics_.clear();
  output_losses_.clear();
  output_metrics_.clear();
  const bool sparse = dynamic_cast<const losses::SparseCategoricalCrossentropy*>(loss_.get()) != nullptr;
  const std::size_t n = num_outputs();
  if (n == 1) {
    for (const auto& m : metric_names) metrics_.push_back(metrics::get(m, sparse));
    return;
  }
  // Keras 2's names and order: loss, <out>_loss per output, then <out>_<metric> output by output.
  for (std::size_t i = 0; i < n; ++i) {
    output_losses_.push_back(std::make_shared<metrics::Mean>(output_name(i) + "_loss"));
    metrics_.push_back(output_losses_.back());
  }
  for (std::size_t i = 0; i < n; ++i) {
    output_metrics_.emplace_back();
    for (const auto& m : metric_names) output_metrics_.back().push_back(metrics::get(m, sparse, output_name(i) + "_"));
    metrics_.insert(metrics_.end(), output_metrics_.back().begin(), output_metrics_.back().end());
  }
}

std::string Model::output_name(std::size_t i) const { return str_cat("output_", i + 1); }

optimizers::Optimizer& Model::optimizer() const {
  CHORUS_REQUIRE(optimizer_ != nullptr, FailedPreconditionError, "model '", name(),
                 "' is not compiled: call compile() first");
  return *optimizer_;
}

void Model::reset_metrics() {
  loss_metric_->reset_state();
  for (auto& m : metrics_) m->reset_state();
}

callbacks::Logs Model::logs(const std::string& prefix, bool all_workers) const {
  std::vector<const metrics::Metric*> ms{loss_metric_.get()};
  for (const auto& m : metrics_) ms.push_back(m.get());
  std::vector<double> states;
  for (const metrics::Metric* m : ms) {
    const auto [total, count] = m->state();
    states.push_back(total);
    states.push_back(count);
  }
  if (all_workers) states = strategy_->sum_over_workers(std::move(states));  // a collective
  callbacks::Logs out;
  for (std::size_t i = 0; i < ms.size(); ++i)
    out[prefix + (i == 0 ? std::string("loss") : ms[i]->name())] =
        metrics::Metric::result_of(states[2 * i], states[2 * i + 1]);
  return out;
}

namespace {

void require_xy(const data::Element& e, const char* what, std::size_t inputs, std::size_t outputs) {
  if (inputs == 1 && outputs == 1) {
    CHORUS_REQUIRE(e.size() >= 2, InvalidArgumentError, what, ": dataset elements must be (x, y), got ", e.size(),
                   " component(s)");
    return;
  }
  CHORUS_REQUIRE(e.size() >= inputs + outputs, InvalidArgumentError, what, ": the model has ", inputs, " input(s) and ",
                 outputs, " output(s), so dataset elements must be (x_1, ..., x_", inputs, ", y_1, ..., y_", outputs,
                 "), got ", e.size(), " component(s)");
}

std::vector<Tensor> components(const data::Element& e, std::size_t begin, std::size_t n) {
  return {e.begin() + static_cast<std::ptrdiff_t>(begin), e.begin() + static_cast<std::ptrdiff_t>(begin + n)};
}

std::int64_t global_rows(const distribute::PerReplica<data::Element>& batch) {
  std::int64_t n = 0;
  for (const auto& e : batch.values()) n += e.empty() ? 0 : e[0].shape().dims()[0];
  return n;
}

}  // namespace

Tensor Model::compute_loss(const std::vector<Tensor>& ys, const std::vector<Tensor>& y_preds) {
  CHORUS_REQUIRE(ys.size() == y_preds.size(), InvalidArgumentError, "compute_loss: ", ys.size(), " targets for ",
                 y_preds.size(), " outputs");
  CHORUS_REQUIRE(ys.size() == 1 || metrics_.empty() || output_losses_.size() == ys.size(), InvalidArgumentError,
                 "model '", name(), "': ", ys.size(), " outputs but compiled for ",
                 std::max<std::size_t>(1, output_losses_.size()), " (num_outputs() says ", num_outputs(),
                 "): a model with several outputs and metrics must say how many "
                 "it has (num_outputs(); Functional models do)");
  Tensor per_example, first_pred;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    // Loss and metrics in float32 (Keras's losses cast y_pred to their float32 dtype): a 16-bit
    // output layer under a mixed policy would otherwise round the loss and its gradient's start.
    Tensor p = y_preds[i];
    if (p.dtype() == DType::kFloat16 || p.dtype() == DType::kBFloat16) p = ops::cast(p, DType::kFloat32);
    Tensor l = loss_->per_example(ys[i], p);
    per_example = per_example.defined() ? per_example + l : l;  // several outputs: the losses' sum
    if (i < output_losses_.size()) {
      output_losses_[i]->add(l);
      for (auto& m : output_metrics_[i]) m->update_state(ys[i], p);
    }
    if (i == 0) first_pred = p;
  }
  loss_metric_->add(per_example);
  if (output_losses_.empty())
    for (auto& m : metrics_) m->update_state(ys[0], first_pred);
  return losses::compute_average_loss(per_example, global_batch_rows_);
}

Tensor Model::compute_loss(const Tensor& y, Tensor y_pred) { return compute_loss(std::vector<Tensor>{y}, {y_pred}); }

void Model::train_step(const data::Element& batch) {
  const std::vector<Variable> vars = trainable_variables();
  optimizers::Gradients gradients;
  {
    ops::GradientTape tape;
    const std::size_t n = num_inputs(), m = num_outputs();
    Tensor loss = n == 1 && m == 1 ? compute_loss(batch[1], (*this)(batch[0], true))
                                   : compute_loss(components(batch, n, m), (*this)(components(batch, 0, n), true));
    // Zeros (not "none") for a replica whose slice is empty, so every replica sums the same list.
    gradients = optimizer_->compute_gradients(loss, vars, tape, ops::UnconnectedGradients::kZero);
  }
  // The optimizer holds the only references to the local gradients: it releases each as soon as
  // it is done with it (at ZeRO stage 2, during the reduce-scatter).
  optimizer_->apply_gradients(std::move(gradients));
}

History Model::fit(const data::Dataset& dataset, const FitOptions& options) {
  try {
    return fit_impl(dataset, options);
  } catch (const std::exception& e) {
    // Before the strategy's communicators go (the goodbye says why this worker leaves).
    collective::set_process_failure(str_cat("Model::fit of '", name(), "' failed: ", e.what()));
    throw;
  }
}

namespace {

// FitOptions::capture_steps' controller (model/step_capture.h), or null when not asked for.
std::unique_ptr<internal::StepCapture> make_step_capture(Model& m, distribute::Strategy& strategy,
                                                         const FitOptions& options) {
  if (!options.capture_steps) return nullptr;
  std::string why_not = strategy.num_replicas_in_sync() == 1
                            ? m.optimizer().why_not_capturable(m.trainable_variables())
                            : str_cat("captured steps run on one replica (OneDeviceStrategy or the default strategy); ",
                                      strategy.name(), " has ", strategy.num_replicas_in_sync());
  return std::make_unique<internal::StepCapture>(
      m.optimizer(),
      [&m] {
        std::vector<Variable> all = m.variables();
        for (const Variable& v : m.optimizer().variables()) all.push_back(v);
        for (const Variable& v : m.metric_variables()) all.push_back(v);
        return all;
      },
      options.capture_warmup_steps, std::move(why_not));
}

// What the captured steps did, into the fit's History (nothing without capture_steps).
void record_capture(const internal::StepCapture* capture, History& history) {
  if (capture == nullptr) return;
  history.replayed_steps = capture->replays();
  history.why_eager = capture->why_eager();
}

}  // namespace

History Model::fit_impl(const data::Dataset& dataset, const FitOptions& options) {
  CHORUS_REQUIRE(optimizer_ != nullptr, FailedPreconditionError, "model '", name(), "': call compile() before fit()");
  CHORUS_REQUIRE(options.epochs >= 1, InvalidArgumentError, "fit: epochs must be >= 1, got ", options.epochs);
  std::vector<callbacks::CallbackPtr> cbs = options.callbacks;
  distribute::Strategy& strategy = *strategy_;
  // The progress of a multi-worker job is the chief's; the other workers print it too only when
  // CHORUS_PROGRESS asks for a form (model/callbacks.h).
  if (options.verbose && (strategy.is_chief() || callbacks::progress_mode_requested()))
    cbs.insert(cbs.begin(), std::make_shared<callbacks::ProgressBar>(options.epochs));
  if (options.terminate_on_nan) cbs.insert(cbs.begin(), std::make_shared<callbacks::TerminateOnNaN>());
  // With terminate_on_nan the summed gradients are checked too, every step, before the update
  // (Optimizer::set_check_numerics), for this fit only.
  struct RestoreCheckNumerics {
    optimizers::Optimizer& optimizer;
    bool before;
    ~RestoreCheckNumerics() { optimizer.set_check_numerics(before); }
  } restore_check_numerics{*optimizer_, optimizer_->check_numerics()};
  if (options.terminate_on_nan) optimizer_->set_check_numerics(true);
  auto dist = strategy.experimental_distribute_dataset(dataset);
  CHORUS_REQUIRE(options.initial_epoch >= 0, InvalidArgumentError, "fit: initial_epoch must be >= 0, got ",
                 options.initial_epoch);
  CHORUS_REQUIRE(options.steps_per_execution >= 1, InvalidArgumentError, "fit: steps_per_execution must be >= 1, got ",
                 options.steps_per_execution);
  History history;
  std::unique_ptr<internal::StepCapture> capture = make_step_capture(*this, strategy, options);
  stop_training = false;
  stop_now_ = false;
  resume_.reset();
  for (auto& cb : cbs) cb->on_train_begin(*this);
  // Where to start: initial_epoch, or later when a callback restored a later state.
  int first_epoch = options.initial_epoch;
  std::int64_t skip = 0;  // batches of first_epoch already trained on
  if (resume_ && resume_->first >= first_epoch) {
    first_epoch = resume_->first;
    skip = resume_->second;
  }
  resume_.reset();
  // Epoch e reads the dataset's pass e (a shuffle reshuffles per pass, its seed sequence fixed):
  // the skipped epochs' passes are started and dropped, so the orders stay the uninterrupted run's.
  for (int e = 0; e < first_epoch && e < options.epochs; ++e) (void)dist.make_iterator();
  bool slots_built = false;
  for (int epoch = first_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    for (auto& cb : cbs) cb->on_epoch_begin(*this, epoch);
    if (skip == 0) reset_metrics();  // resumed mid-epoch: the restored metrics go on
    auto it = dist.make_iterator();
    std::int64_t step = 0;
    for (; step < skip && it.next(); ++step) {
    }
    skip = 0;
    const std::int64_t steps = options.steps_per_epoch > 0  ? options.steps_per_epoch
                               : dataset.cardinality() >= 0 ? dataset.cardinality()
                                                            : -1;
    while (options.steps_per_epoch < 0 || step < options.steps_per_epoch) {
      std::optional<distribute::DistributedDataset::Batch> batch;
      {
        timeline::Span input("input", "next batch");  // core/timeline.h
        batch = it.next();
      }
      if (!batch) break;
      require_xy((*batch)[0], "fit", num_inputs(), num_outputs());
      if (!built()) build((*batch)[0][0].shape());
      if (!slots_built) {
        auto scope = strategy.scope();
        optimizer_->build(trainable_variables());  // slots in cross-replica context, once (idempotent)
        slots_built = true;
      }
      const std::int64_t rows = strategy.sum_over_workers(global_rows(*batch));  // all workers' rows
      global_batch_rows_ = rows;
      try {
        const bool timed = timeline::enabled();
        const std::int64_t waits = timed ? gpu::host_waits() : 0;
        timeline::Span step_span("step", "train step");
        strategy.run(
            [&](const data::Element& e) {
              profile::ScopedTimer timer(profile::TimeCategory::kReplicaStep);  // bench_train's accounting
              if (capture != nullptr)
                capture->step(e, [&](const data::Element& x) { train_step(x); });
              else
                train_step(e);
            },
            *batch);
        if (timed)  // the GPU waits of the step (core/gpu.h host_waits; issue 42 wants 0)
          step_span.set_args(str_cat("\"epoch\": ", epoch + 1, ", \"step\": ", step + 1,
                                     ", \"host_waits\": ", gpu::host_waits() - waits));
      } catch (const std::bad_alloc&) {
        throw ResourceExhaustedError(str_cat("fit: out of host memory in the step of epoch ", epoch + 1, ", step ",
                                             step + 1, " (a global batch of ", rows,
                                             " rows): lower the batch size or the model's size"));
      }
      ++step;
      // The running metrics are read (a cross-replica sum and a host sync each) only for callbacks,
      // after every steps_per_execution-th step and the epoch's last.
      const bool executed = step % options.steps_per_execution == 0 || step == steps;
      if (!cbs.empty() && executed) {
        const callbacks::Logs l = logs();
        for (auto& cb : cbs) cb->on_train_batch_end(*this, step, steps, l);
      }
      if (stop_now_) break;
    }
    // The dataset ended inside an execution: its callbacks run for the last step.
    if (!cbs.empty() && !stop_now_ && step > 0 && step % options.steps_per_execution != 0 && step != steps) {
      const callbacks::Logs l = logs();
      for (auto& cb : cbs) cb->on_train_batch_end(*this, step, steps, l);
    }
    if (stop_now_) break;  // preempted: no epoch end, no validation
    CHORUS_REQUIRE(step > 0, InvalidArgumentError, "fit: the dataset produced no batches");
    callbacks::Logs epoch_logs = logs("", /*all_workers=*/true);
    if (options.validation_data) {
      for (const auto& [k, v] : evaluate(*options.validation_data)) epoch_logs["val_" + k] = v;
    }
    for (const auto& [k, v] : epoch_logs) history.history[k].push_back(v);
    for (auto& cb : cbs) cb->on_epoch_end(*this, epoch, epoch_logs);
  }
  history.preempted = stop_now_;
  record_capture(capture.get(), history);
  stop_now_ = false;
  for (auto& cb : cbs) cb->on_train_end(*this);
  return history;
}

std::vector<Variable> Model::metric_variables() const {
  std::vector<Variable> out;
  if (loss_metric_ != nullptr) out = loss_metric_->variables();
  for (const auto& m : metrics_)
    for (const Variable& v : m->variables()) out.push_back(v);
  return out;
}

void Model::set_resume_point(int epoch, std::int64_t step) {
  CHORUS_REQUIRE(epoch >= 0 && step >= 0, InvalidArgumentError, "set_resume_point: epoch ", epoch, " and step ", step,
                 " must be >= 0");
  resume_ = std::make_pair(epoch, step);
}

std::map<std::string, double> Model::evaluate(const data::Dataset& dataset, int verbose) {
  CHORUS_REQUIRE(loss_ != nullptr, FailedPreconditionError, "model '", name(), "': call compile() before evaluate()");
  distribute::Strategy& strategy = *strategy_;
  reset_metrics();
  auto it = strategy.experimental_distribute_dataset(dataset).make_iterator();
  std::int64_t steps = 0;
  while (auto batch = it.next()) {
    require_xy((*batch)[0], "evaluate", num_inputs(), num_outputs());
    if (!built()) build((*batch)[0][0].shape());
    global_batch_rows_ = strategy.sum_over_workers(global_rows(*batch));  // all workers' rows
    strategy.run(
        [&](const data::Element& e) {
          const std::size_t n = num_inputs(), m = num_outputs();
          if (n == 1 && m == 1)
            (void)compute_loss(e[1], (*this)(e[0], false));
          else
            (void)compute_loss(components(e, n, m), (*this)(components(e, 0, n), false));
        },
        *batch);
    ++steps;
  }
  std::map<std::string, double> out = logs("", /*all_workers=*/true);
  if (verbose) {
    std::ostringstream os;
    os << steps << " steps";
    for (const auto& [k, v] : out) os << " - " << k << ": " << std::setprecision(4) << v;
    std::cout << os.str() << "\n";
  }
  return out;
}

Tensor Model::predict(const data::Dataset& dataset) {
  distribute::Strategy& strategy = *strategy_;
  auto it = strategy.experimental_distribute_dataset(dataset).make_iterator();
  std::vector<Tensor> parts;
  while (auto batch = it.next()) {
    CHORUS_REQUIRE(!(*batch)[0].empty(), InvalidArgumentError, "predict: dataset elements are empty");
    if (!built()) build((*batch)[0][0].shape());
    CHORUS_REQUIRE(num_outputs() == 1, InvalidArgumentError, "predict: model '", name(), "' has ", num_outputs(),
                   " outputs; call it on the inputs instead (predict returns one tensor)");
    CHORUS_REQUIRE((*batch)[0].size() >= num_inputs(), InvalidArgumentError, "predict: the model has ", num_inputs(),
                   " inputs, the dataset's elements ", (*batch)[0].size(), " component(s)");
    auto out = strategy.run(
        [&](const data::Element& e) {
          return num_inputs() == 1 ? (*this)(e[0], false) : (*this)(components(e, 0, num_inputs()), false)[0];
        },
        *batch);
    parts.push_back(strategy.gather(out, 0));
  }
  CHORUS_REQUIRE(!parts.empty(), InvalidArgumentError, "predict: the dataset produced no batches");
  return parts.size() == 1 ? parts[0] : ops::concat(parts, 0);
}

std::vector<std::string> Model::layer_output_shapes() const {
  std::vector<std::string> out;
  Shape shape = built_input_;
  for (const auto& l : layers()) {
    if (!built()) {
      out.push_back("?");
      continue;
    }
    shape = l->compute_output_shape(shape);
    std::vector<std::int64_t> d = shape.dims();
    std::ostringstream s;
    s << "(None";
    for (std::size_t i = 1; i < d.size(); ++i) s << ", " << d[i];
    s << ")";
    out.push_back(s.str());
  }
  return out;
}

std::string Model::summary() const {
  // A "Dtype policy" column (Keras 3 shows the policy per layer) when any layer is not float32.
  bool mixed = false;
  for (const auto& l : layers()) mixed = mixed || l->dtype_policy().name() != "float32";
  std::ostringstream os;
  os << "Model: \"" << name() << "\"\n";
  os << std::left << std::setw(32) << "Layer (type)" << std::setw(24) << "Output Shape" << std::setw(mixed ? 12 : 0)
     << "Param #" << (mixed ? "Dtype policy" : "") << "\n";
  std::int64_t total = 0, trainable = 0;
  const std::vector<std::string> shapes = layer_output_shapes();
  const auto all = layers();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& l = all[i];
    const std::string title = l->name() + " (" + l->class_name() + ")";  // a space before the shape, always
    os << std::setw(32) << (title.size() < 32 ? title : title + " ") << std::setw(24) << shapes[i];
    if (mixed)
      os << std::setw(12) << l->count_params() << l->dtype_policy().name() << "\n";
    else
      os << l->count_params() << "\n";
    total += l->count_params();
    for (const auto& w : l->trainable_weights()) trainable += w.shape().num_elements();
  }
  os << "Total params: " << total << "\nTrainable params: " << trainable
     << "\nNon-trainable params: " << total - trainable << "\n";
  return os.str();
}

std::vector<Model::GraphNode> Model::graph_nodes() const {
  std::vector<GraphNode> out;
  const std::string input = name() + "/input";
  out.push_back({input, "Placeholder", {}, built_input_, DType::kFloat32, true});
  Shape shape = built_input_;
  std::string previous = input;
  for (const auto& l : layers()) {
    shape = l->compute_output_shape(shape);
    std::string node_name = str_cat(name(), "/", l->name());
    out.push_back({node_name, l->class_name(), {previous}, shape, l->compute_dtype(), false});
    previous = std::move(node_name);
  }
  return out;
}

summary::GraphDef Model::graph_def() const {
  CHORUS_REQUIRE(built(), FailedPreconditionError, "graph_def: model '", name(),
                 "' is not built; call it on an input or build(input_shape) first");
  using summary::AttrValue;
  const std::vector<std::string> devices = strategy_->replica_devices();
  const std::string device = devices.empty() ? std::string() : devices[0];
  auto shape_of = [](const Shape& s) {
    std::vector<std::int64_t> d = s.dims();
    if (!d.empty()) d[0] = -1;  // the batch dimension: any size
    return d;
  };
  summary::GraphDef g;
  for (const GraphNode& gn : graph_nodes()) {
    summary::NodeDef n{.name = gn.name, .op = gn.op, .device = device};
    n.input = gn.inputs;
    n.attr["_output_shapes"] = AttrValue::shapes({shape_of(gn.shape)});
    if (gn.placeholder) {  // a Placeholder says its type in "dtype"
      n.attr["dtype"] = AttrValue::dtype(summary::tf_data_type(gn.dtype));
      n.attr["shape"] = AttrValue::tensor_shape({shape_of(gn.shape)});
    } else {
      n.attr["T"] = AttrValue::dtype(summary::tf_data_type(gn.dtype));
    }
    if (devices.size() > 1) n.attr["_replica_devices"] = AttrValue::strings(devices);
    g.node.push_back(std::move(n));
  }
  return g;
}

std::vector<train::TrackableChild> Model::trackable_children() const {
  std::vector<train::TrackableChild> out;
  for (const auto& [attribute, l] : sublayers()) out.push_back({attribute, std::shared_ptr<train::Trackable>(l)});
  if (optimizer_) out.push_back({"optimizer", std::shared_ptr<train::Trackable>(optimizer_)});
  return out;
}

void Model::save_weights(const std::string& path) {
  train::Checkpoint ckpt(trackable_children());
  ckpt.write(path);
}

train::LoadStatus Model::load_weights(const std::string& path) {
  weights_checkpoint_ = std::make_shared<train::Checkpoint>(trackable_children());
  return weights_checkpoint_->read(path).expect_partial();  // the caller asserts what it needs
}

std::vector<train::TrackableChild> Model::numbered_layer_children() const {
  std::vector<train::TrackableChild> out;
  const auto all = layers();
  int with_weights = 0;
  for (const auto& l : all) {
    if (l->has_weights())
      out.push_back({str_cat("layer_with_weights-", with_weights++), std::shared_ptr<train::Trackable>(l)});
  }
  for (std::size_t i = 0; i < all.size(); ++i)
    out.push_back({str_cat("layer-", i), std::shared_ptr<train::Trackable>(all[i])});
  if (optimizer_ptr()) out.push_back({"optimizer", std::shared_ptr<train::Trackable>(optimizer_ptr())});
  return out;
}

std::vector<train::TrackableChild> Sequential::trackable_children() const { return numbered_layer_children(); }

Sequential::Sequential(std::vector<layers::LayerPtr> layers, std::string name) : Model(std::move(name)) {
  for (auto& l : layers) add(std::move(l));
}

void Sequential::add(layers::LayerPtr layer) { track(std::move(layer)); }

Tensor Sequential::call(const Tensor& x, bool training) {
  Tensor h = x;
  for (const auto& l : layers()) h = (*l)(h, training);
  return h;
}

}  // namespace chorus::model
