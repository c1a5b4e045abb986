#include <chorus/checkpoint/checkpoint.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <utility>

#include <chorus/checkpoint/async_writer.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/restore_coordinator.h>
#include <chorus/checkpoint/saveable.h>
#include <chorus/checkpoint/shard_metadata.h>
#include <chorus/checkpoint/worker_exchange.h>
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
  const auto rank = env::process_rank();
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
  commit_pending_logged();
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

void Checkpoint::commit_pending_logged() noexcept {
  if (!commit_pending_) return;
  const auto commit = std::move(commit_pending_);
  commit_pending_ = nullptr;
  try {
    commit();
  } catch (const std::exception& e) {
    CHORUS_LOG(ERROR) << "Checkpoint: the last async sharded save could not be committed: " << e.what();
  }
}

void Checkpoint::meet_barrier() {
  if (commit_pending_) {
    const auto commit = std::move(commit_pending_);
    commit_pending_ = nullptr;
    try {
      commit();
    } catch (...) {
      barrier_pending_.clear();  // every worker saw the same failed reports and throws alike
      throw;
    }
  }
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

namespace {

// The first key whose value is not all finite ("" when all are).
std::string first_non_finite(const std::vector<internal::SaveItem>& items) {
  std::vector<Tensor> values;
  for (const internal::SaveItem& item : items) values.push_back(item.value);
  if (ops::all_finite(values)) return {};
  for (const internal::SaveItem& item : items)
    if (!ops::all_finite(item.value)) return item.key;
  return {};
}

// The first key any worker found not finite: each worker checks its own shards, so they ask
// each other (the metadata exchange, with the key as the "error").
std::string first_non_finite_of_all(const DistributionStrategy& strategy, const internal::WorkerGroup& group,
                                    const std::string& mine) {
  internal::ShardMetadata m;
  m.worker = group.worker_index;
  m.error = mine;
  for (const internal::ShardMetadata& r : internal::decode_shard_metadata(
           internal::gather_across_workers(strategy, internal::encode_shard_metadata(m)), "the workers"))
    if (!r.error.empty()) return r.error;
  return {};
}

// Writes `items` (values in `values`) and the object graph as one bundle (one process).
void write_bundle(const std::string& path, const std::vector<internal::SaveItem>& items,
                  const std::vector<Tensor>& values, const std::string& graph) {
  BundleWriter writer(path);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].shard) {
      writer.add_flat_slice(items[i].key, items[i].full_shape, items[i].begin, values[i]);
    } else {
      writer.add(items[i].key, values[i]);
    }
  }
  writer.add_strings(internal::kObjectGraphKey, {graph});
  writer.finish();
}

// This worker's data file of a multi-process sharded save: its shards, and (the chief) the whole
// values and the object graph. Returns the metadata for the chief; an error is returned in it
// (so that every worker still meets the exchange) and stored in `error`.
std::string write_shard_file(const std::string& path, const internal::WorkerGroup& group, bool chief,
                             const std::vector<internal::SaveItem>& items, const std::vector<Tensor>& values,
                             const std::string& graph, std::exception_ptr& error) {
  try {
    BundleWriter writer(path, group.worker_index, group.num_workers);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].shard) {
        writer.add_flat_slice(items[i].key, items[i].full_shape, items[i].begin, values[i]);
      } else if (chief) {
        writer.add(items[i].key, values[i]);
      }
    }
    if (chief) writer.add_strings(internal::kObjectGraphKey, {graph});
    return writer.finish_shard(chief);
  } catch (const std::exception& e) {
    error = std::current_exception();
    internal::ShardMetadata m;
    m.worker = group.worker_index;
    m.chief = chief;
    m.error = e.what();
    return internal::encode_shard_metadata(m);
  }
}

}  // namespace

void Checkpoint::commit_sharded(const std::string& path, const DistributionStrategy& strategy, int num_workers,
                                const std::string& metadata, const std::function<void(const std::string&)>& written) {
  timeline::Span span("checkpoint", "sharded commit");
  const std::string all = internal::gather_across_workers(strategy, metadata);
  const auto reports = internal::decode_shard_metadata(all, "the workers of '" + path + "'");
  internal::check_shard_reports(reports, num_workers, index_filename(path));  // a failed worker: all throw
  for (const internal::ShardMetadata& r : reports)
    if (r.chief && r.worker == internal::worker_group(strategy).worker_index)
      write_sharded_index(path, num_workers, all);
  if (written) written(path);
}

std::string Checkpoint::write_impl(const std::string& path, const SaveOptions& options,
                                   std::function<void(const std::string&)> written, bool refuse_non_finite) {
  timeline::Span span("checkpoint", "save",
                      timeline::enabled() ? "\"path\": " + timeline::quoted(path) : std::string());
  async_->wait();  // the previous write's error surfaces here
  meet_barrier();
  const DistributionStrategy& strategy = owning_strategy();
  const auto rank = env::process_rank();
  const bool chief = options.chief.value_or(strategy.is_chief() && (!rank || *rank == 0));
  const internal::WorkerGroup group = internal::worker_group(strategy);
  // Every worker walks the graph and takes the values in the same order: an ON_READ variable's
  // aggregate (and, gathered to the chief, a sharded variable's value) is a collective in a
  // multi-worker strategy. Only the chief writes the objects' attributes.
  internal::LiveGraph g = internal::build_live_graph(*this, /*with_values=*/chief);
  std::vector<internal::SaveItem> items;
  for (const internal::LiveNode& n : g.nodes) {
    if (n.ref.is_variable()) {
      internal::append_save_items(n.ref.variable(), internal::attribute_key(n.path, internal::kVariableValue),
                                  options.sharded.value_or(true), items);
    } else {
      for (const auto& [name, tensor] : n.attributes) items.push_back({internal::attribute_key(n.path, name), tensor});
    }
  }
  const bool sharded = std::any_of(items.begin(), items.end(), [](const auto& i) { return i.shard; });
  const bool several = sharded && group.num_workers > 1;  // every worker writes its data file
  if (refuse_non_finite) {
    std::string first = first_non_finite(items);
    if (several) first = first_non_finite_of_all(strategy, group, first);
    if (!first.empty())
      throw FailedPreconditionError(
          str_cat("CheckpointManager: not saving '", path, "': '", first,
                  "' holds NaN or Inf; a checkpoint of non-finite values never becomes the latest over a good one. "
                  "Nothing was written. Pass SaveOptions{.allow_non_finite = true} to save it anyway"));
  }
  std::vector<Tensor> sources;
  for (internal::SaveItem& item : items) sources.push_back(std::exchange(item.value, Tensor()));
  std::string graph = internal::serialize_object_graph(g.proto);
  // A synchronous write writes straight from the variables' storage (BundleWriter waits for the
  // work queued on it, and copies a GPU tensor to the host piece by piece): the caller is in this
  // call until the bundle is durable, and a copy would only cost time and memory. An async write
  // holds the variables' writes until the writer thread has copied them (HeldSnapshot), so the
  // caller returns at once and training reads them meanwhile.
  if (several) {
    // Each worker writes its data file (on the writer thread when async); the exchange and the
    // chief's index follow on this thread, at once or (async) in sync() / the next save.
    struct Shard {
      std::string metadata;
      std::exception_ptr error;
    };
    auto shard = std::make_shared<Shard>();
    auto write = [shard, path, group, chief, items, graph](const std::vector<Tensor>& values) {
      shard->metadata = write_shard_file(path, group, chief, items, values, graph, shard->error);
    };
    commit_pending_ = [this, shard, path, &strategy, n = group.num_workers, done = std::move(written)] {
      try {
        commit_sharded(path, strategy, n, shard->metadata, done);
      } catch (...) {
        if (shard->error) std::rethrow_exception(shard->error);  // this worker's own failure, as it was
        throw;
      }
    };
    if (options.async) {
      auto snapshot = std::make_shared<internal::HeldSnapshot>(sources);
      async_->start([write = std::move(write), snapshot] { write(snapshot->take()); });
    } else {
      write(sources);
    }
  } else if (chief) {
    auto write = [path, items, graph = std::move(graph), done = std::move(written)](const std::vector<Tensor>& values) {
      write_bundle(path, items, values, graph);
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
