#include <chorus/checkpoint/checkpoint.h>

#include <algorithm>
#include <atomic>

#include <chorus/checkpoint/async_writer.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/restore_coordinator.h>
#include <chorus/checkpoint/saveable.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/strings.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/finite.h>

namespace chorus::train {

using ::chorus::internal::join;
using ::chorus::internal::str_cat;

namespace {

constexpr const char* kSaveCounter = "save_counter";
const std::string kSaveCounterKey = std::string(kSaveCounter) + "/.ATTRIBUTES/VARIABLE_VALUE";

// Keys and object paths in messages: one a line, indented, at most 20 (the caller writes the
// first "\n  ").
constexpr chorus::internal::JoinOptions kOnePerLine{.separator = "\n  ", .max_items = 20};

}  // namespace

bool is_checkpoint_chief() {
  const auto rank = env::launcher_rank();
  return get_strategy().is_chief() && (!rank || *rank == 0);
}

// ---- LoadStatus ----

LoadStatus::LoadStatus(std::shared_ptr<internal::RestoreCoordinator> coordinator)
    : coordinator_(std::move(coordinator)) {}

const LoadStatus& LoadStatus::assert_consumed() const {
  const auto unused = unused_keys();
  const auto unmatched = unmatched_objects();
  if (!unused.empty() || !unmatched.empty()) {
    std::string msg = str_cat("checkpoint '", coordinator_->path(), "' was not consumed:");
    if (!unused.empty())
      msg +=
          str_cat("\n", unused.size(), " value(s) in the checkpoint were not restored:\n  ", join(unused, kOnePerLine));
    if (!unmatched.empty())
      msg +=
          str_cat("\n", unmatched.size(), " object(s) of the program got no value:\n  ", join(unmatched, kOnePerLine));
    throw FailedPreconditionError(msg);
  }
  return *this;
}

const LoadStatus& LoadStatus::assert_existing_objects_matched() const {
  const auto unmatched = unmatched_objects();
  if (!unmatched.empty()) {
    throw FailedPreconditionError(str_cat("checkpoint '", coordinator_->path(), "': ", unmatched.size(),
                                          " existing object(s) got no value:\n  ", join(unmatched, kOnePerLine)));
  }
  return *this;
}

const LoadStatus& LoadStatus::assert_nontrivial_match() const {
  if (!coordinator_->nontrivial_match()) {
    throw FailedPreconditionError(
        str_cat("checkpoint '", coordinator_->path(),
                "': nothing besides the root was matched (a checkpoint of another program?)"));
  }
  return *this;
}

const LoadStatus& LoadStatus::expect_partial() const {
  coordinator_->expect_partial();
  return *this;
}

std::vector<std::string> LoadStatus::unused_keys() const { return coordinator_->unused_keys(); }
std::vector<std::string> LoadStatus::unmatched_objects() const { return coordinator_->unmatched_objects(); }

// ---- Checkpoint ----

Checkpoint::Checkpoint(std::initializer_list<std::pair<std::string, TrackableRef>> children)
    : Checkpoint([&] {
        std::vector<TrackableChild> v;
        for (const auto& [name, ref] : children) v.push_back({name, ref});
        return v;
      }()) {}

Checkpoint::Checkpoint(std::vector<TrackableChild> children)
    : children_(std::move(children)), async_(std::make_unique<internal::AsyncWriter>()) {
  std::set<std::string> names;
  for (const TrackableChild& c : children_) {
    CHORUS_REQUIRE(!c.name.empty(), InvalidArgumentError, "Checkpoint: a child needs a non-empty name");
    CHORUS_REQUIRE(c.name != kSaveCounter, InvalidArgumentError, "Checkpoint: the name '", kSaveCounter,
                   "' is reserved for the checkpoint's own counter");
    CHORUS_REQUIRE(names.insert(c.name).second, InvalidArgumentError, "Checkpoint: two children named '", c.name, "'");
  }
}

Checkpoint::~Checkpoint() {
  async_.reset();  // joins the writer (it may still run a manager's callback)
  for (auto& weak : coordinators_) {
    if (auto c = weak.lock()) {
      c->warn_if_unused();
      c->detach_root();
    }
  }
}

std::vector<TrackableChild> Checkpoint::trackable_children() const {
  std::vector<TrackableChild> out = children_;
  if (save_counter_.defined()) out.push_back({kSaveCounter, TrackableRef(save_counter_)});
  return out;
}

const Variable& Checkpoint::save_counter() {
  ensure_save_counter();
  return save_counter_;
}

void Checkpoint::ensure_save_counter() {
  if (save_counter_.defined()) return;
  // Not mirrored, whatever scope is active: one host counter per process (TF's save_counter).
  save_counter_ = default_variable_creator(
      {.initial_value = Tensor::scalar<std::int64_t>(0, "/CPU:0"), .name = kSaveCounter, .trainable = false});
}

std::string Checkpoint::save(const std::string& file_prefix, const SaveOptions& options) {
  CHORUS_REQUIRE(!file_prefix.empty(), InvalidArgumentError, "Checkpoint::save: empty file prefix");
  async_->wait();
  ensure_save_counter();
  save_counter_.assign_add(Tensor::scalar<std::int64_t>(1, "/CPU:0"));
  const std::int64_t n = save_counter_.value().item<std::int64_t>();
  return write_impl(str_cat(file_prefix, "-", n), options);
}

std::string Checkpoint::write(const std::string& file_path, const SaveOptions& options) {
  CHORUS_REQUIRE(!file_path.empty(), InvalidArgumentError, "Checkpoint::write: empty path");
  return write_impl(file_path, options);
}

void Checkpoint::meet_barrier() {
  if (!barrier_pending_.empty()) {
    const std::string tag = std::move(barrier_pending_);
    barrier_pending_.clear();
    barrier_strategy_->worker_barrier(tag);
  }
}

const DistributionStrategy& Checkpoint::owning_strategy() const {
  // The strategy the variables belong to: saves usually run outside any scope (a callback, the
  // training loop), where get_strategy() is the default strategy.
  const internal::LiveGraph g = internal::build_live_graph(*this, /*with_values=*/false);
  for (const internal::LiveNode& n : g.nodes) {
    if (!n.ref.is_variable()) continue;
    if (const DistributedVariable* d = as_distributed(n.ref.variable())) return d->strategy();
  }
  return get_strategy();
}

std::string Checkpoint::write_impl(const std::string& path, const SaveOptions& options,
                                   std::function<void(const std::string&)> written, bool refuse_non_finite) {
  timeline::Span span("checkpoint", "save",
                      timeline::enabled() ? "\"path\": " + timeline::quoted(path) : std::string());
  async_->wait();  // the previous write's error surfaces here
  meet_barrier();
  const DistributionStrategy& strategy = owning_strategy();
  const auto rank = env::launcher_rank();
  const bool chief = options.chief.value_or(strategy.is_chief() && (!rank || *rank == 0));
  // Every worker walks the graph and takes the sources in the same order: an ON_READ variable's
  // aggregate is a collective in a multi-worker strategy. Only the chief copies and writes.
  internal::LiveGraph g = internal::build_live_graph(*this, /*with_values=*/chief);
  std::vector<std::string> keys;
  std::vector<Tensor> sources;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const internal::LiveNode& n = g.nodes[i];
    if (n.ref.is_variable()) {
      keys.push_back(internal::attribute_key(n.path, internal::kVariableValue));
      sources.push_back(internal::snapshot_source(n.ref.variable()));
    } else {
      for (const auto& [name, tensor] : n.attributes) {
        keys.push_back(internal::attribute_key(n.path, name));
        sources.push_back(tensor);
      }
    }
  }
  if (refuse_non_finite && !ops::all_finite(sources)) {
    std::string first;
    for (std::size_t i = 0; i < sources.size() && first.empty(); ++i)
      if (!ops::all_finite(sources[i])) first = keys[i];
    throw FailedPreconditionError(
        str_cat("CheckpointManager: not saving '", path, "': '", first,
                "' holds NaN or Inf; a checkpoint of non-finite values never becomes the latest over a good one. "
                "Nothing was written. Pass SaveOptions{.allow_non_finite = true} to save it anyway"));
  }
  if (chief) {
    // A synchronous write writes straight from the variables' storage (BundleWriter waits for
    // the work queued on it, and copies a GPU tensor to the host piece by piece): the caller is in
    // this call until the bundle is durable, and a copy would only cost time and memory. An async
    // write holds the variables' writes until the writer thread has copied them (HeldSnapshot),
    // so the caller returns at once and training reads them meanwhile.
    std::string graph = internal::serialize_object_graph(g.proto);
    auto write = [path, keys, graph = std::move(graph), done = std::move(written)](const std::vector<Tensor>& values) {
      BundleWriter writer(path);
      for (std::size_t i = 0; i < keys.size(); ++i) writer.add(keys[i], values[i]);
      writer.add_strings(internal::kObjectGraphKey, {graph});
      writer.finish();
      if (done) done(path);
    };
    if (options.async) {
      auto snapshot = std::make_shared<internal::HeldSnapshot>(sources);
      async_->start([write = std::move(write), snapshot] { write(snapshot->take()); });
    } else {
      write(sources);
    }
  } else if (written) {
    written(path);  // a non-chief's manager keeps its bookkeeping (it writes no files)
  }
  barrier_pending_ = "checkpoint " + path;
  barrier_strategy_ = &strategy;
  if (!options.async) meet_barrier();
  return path;
}

void Checkpoint::sync() {
  async_->wait();
  meet_barrier();
}

LoadStatus Checkpoint::restore(const std::string& save_path) { return restore_impl(save_path, true); }
LoadStatus Checkpoint::read(const std::string& save_path) { return restore_impl(save_path, false); }

LoadStatus Checkpoint::restore_impl(const std::string& path, bool expect_save_counter) {
  CHORUS_REQUIRE(!path.empty(), InvalidArgumentError, "Checkpoint::restore: empty path");
  async_->wait();
  if (!bundle_exists(path)) {
    throw NotFoundError(str_cat("checkpoint '", path, "' not found: '", index_filename(path),
                                "' does not exist (pass a prefix such as 'dir/ckpt-3', as latest_checkpoint returns)"));
  }
  std::set<std::string> ignored;
  if (!expect_save_counter) ignored.insert(kSaveCounterKey);
  auto coordinator = std::make_shared<internal::RestoreCoordinator>(path, *this, std::move(ignored));
  if (expect_save_counter && coordinator->has_key(kSaveCounterKey)) ensure_save_counter();
  coordinator->restore_root();
  coordinators_.erase(
      std::remove_if(coordinators_.begin(), coordinators_.end(), [](const auto& w) { return w.expired(); }),
      coordinators_.end());
  coordinators_.push_back(coordinator);
  return LoadStatus(coordinator);
}

}  // namespace chorus::train
