#include <chorus/checkpoint/saveable.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include <chorus/checkpoint/worker_exchange.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/timeline.h>

namespace chorus::train::internal {

using ::chorus::internal::str_cat;

namespace {

constexpr const char* kHostDevice = "/CPU:0";

const void* identity(const TrackableRef& ref) {
  if (ref.is_variable()) return ref.variable().impl().get();
  return ref.object();
}

std::string child_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? escape_local_name(name) : parent + "/" + escape_local_name(name);
}

}  // namespace

std::string attribute_key(const std::string& path, const std::string& attribute) {
  return (path.empty() ? std::string() : path + "/") + ".ATTRIBUTES/" + escape_local_name(attribute);
}

LiveGraph build_live_graph(const Trackable& root, bool with_values) {
  LiveGraph g;
  std::unordered_map<const void*, int> ids;
  // The root is held by reference only for the walk.
  g.nodes.push_back({TrackableRef(const_cast<Trackable&>(root)), "", {}});
  g.proto.nodes.emplace_back();
  ids[&root] = 0;
  std::deque<int> queue{0};
  std::vector<int> objects;
  while (!queue.empty()) {
    const int id = queue.front();
    queue.pop_front();
    const TrackableRef ref = g.nodes[static_cast<std::size_t>(id)].ref;
    const std::string path = g.nodes[static_cast<std::size_t>(id)].path;
    if (ref.is_variable()) {
      g.proto.nodes[static_cast<std::size_t>(id)].attributes.push_back(
          {kVariableValue, ref.variable().name(), attribute_key(path, kVariableValue)});
      continue;
    }
    objects.push_back(id);
    Trackable* object = ref.object();
    if (with_values) {
      auto attrs = object->serialize_to_tensors();
      for (const auto& [name, tensor] : attrs) {
        g.proto.nodes[static_cast<std::size_t>(id)].attributes.push_back({name, name, attribute_key(path, name)});
      }
      g.nodes[static_cast<std::size_t>(id)].attributes = std::move(attrs);
    }
    for (TrackableChild& child : object->trackable_children()) {
      CHORUS_REQUIRE(child.ref.is_variable() || child.ref.object() != nullptr, InvalidArgumentError,
                     "checkpoint: child '", child.name, "' of '", path.empty() ? "(root)" : path, "' is empty");
      const void* key = identity(child.ref);
      auto [it, fresh] = ids.emplace(key, static_cast<int>(g.nodes.size()));
      if (fresh) {
        g.nodes.push_back({child.ref, child_path(path, child.name), {}});
        g.proto.nodes.emplace_back();
        queue.push_back(it->second);
      }
      g.proto.nodes[static_cast<std::size_t>(id)].children.push_back({it->second, child.name});
    }
  }
  // Slots hang off the variable they belong to: "<var path>/.OPTIMIZER_SLOT/<optimizer path>/<slot>".
  for (const int id : objects) {
    const std::string opt_path = g.nodes[static_cast<std::size_t>(id)].path;
    for (const SlotVariableRef& s : g.nodes[static_cast<std::size_t>(id)].ref.object()->slot_variables()) {
      auto orig = ids.find(s.original.impl().get());
      if (orig == ids.end()) continue;  // the variable is not in this checkpoint: nor is its slot
      const std::string path = g.nodes[static_cast<std::size_t>(orig->second)].path + "/.OPTIMIZER_SLOT/" + opt_path +
                               "/" + escape_local_name(s.slot_name);
      auto [it, fresh] = ids.emplace(s.slot.impl().get(), static_cast<int>(g.nodes.size()));
      if (fresh) {
        g.nodes.push_back({TrackableRef(s.slot), path, {}});
        g.proto.nodes.emplace_back();
        g.proto.nodes.back().attributes.push_back({kVariableValue, s.slot.name(), attribute_key(path, kVariableValue)});
      }
      g.proto.nodes[static_cast<std::size_t>(id)].slot_variables.push_back({orig->second, s.slot_name, it->second});
    }
  }
  return g;
}

Tensor snapshot_source(const Variable& variable) {
  if (const DistributedVariable* distributed = as_distributed(variable)) return distributed->checkpoint_value();
  return variable.impl()->value();
}

namespace {

// The sharded view of `variable` when it has more than one shard (then its value is saved and
// restored shard by shard), else nullptr.
const ShardedVariable* multi_shard(const Variable& variable) {
  const ShardedVariable* s = as_sharded(variable);
  return s && s->layout().num_shards > 1 ? s : nullptr;
}

}  // namespace

void append_save_items(const Variable& variable, const std::string& key, bool sharded, std::vector<SaveItem>& out) {
  const ShardedVariable* s = sharded ? multi_shard(variable) : nullptr;
  if (!s) {
    out.push_back({key, snapshot_source(variable), false, {}, 0});
    return;
  }
  const int first = first_local_shard(*s);
  const std::vector<Variable>& shards = s->components();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::int64_t begin = s->layout().begin(first + static_cast<int>(i));
    out.push_back({key, shards[i].impl()->value(), true, s->shape(), begin});
  }
}

std::vector<Tensor> read_for_restore(const BundleReader& reader, const Variable& variable, const std::string& key) {
  const ShardedVariable* s = multi_shard(variable);
  if (!s) return {reader.read(key)};
  const int first = first_local_shard(*s);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (std::size_t i = 0; i < s->components().size(); ++i) {
    const int g = first + static_cast<int>(i);
    ranges.emplace_back(s->layout().begin(g), s->layout().length(g));
  }
  return reader.read_flat_ranges(key, ranges);
}

void assign_read(const Variable& variable, std::vector<Tensor> values) {
  const ShardedVariable* s = multi_shard(variable);
  if (!s) return assign_restored(variable, std::move(values.at(0)));
  const std::vector<Variable>& shards = s->components();
  CHORUS_ENFORCE(values.size() == shards.size(), "restore of '", variable.name(), "': ", values.size(),
                 " shards read for ", shards.size());
  // Each shard takes its values' storage when it can (a host replica), else copies them to its device.
  for (std::size_t i = 0; i < shards.size(); ++i) Variable(shards[i]).impl()->assign_taking(std::move(values[i]));
}

HeldSnapshot::HeldSnapshot(const std::vector<Tensor>& sources) : values_(sources.size()), held_(sources.size(), false) {
  std::set<Stream*> streams;
  for (const Tensor& t : sources) streams.insert(&t.device_context().stream());
  for (Stream* s : streams) s->synchronize();  // pending writes land before the snapshot
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].device_context().is_gpu()) {
      values_[i] = sources[i].to(kHostDevice);  // device-to-host, synchronized
      continue;
    }
    values_[i] = sources[i];
    values_[i].buffer()->hold_writes();
    held_[i] = true;
  }
}

HeldSnapshot::~HeldSnapshot() {
  for (std::size_t i = 0; i < values_.size(); ++i)
    if (held_[i]) values_[i].buffer()->end_hold();
}

std::vector<Tensor> HeldSnapshot::take() {
  timeline::Span span("checkpoint", "snapshot copy");  // until then, a write into a held variable waits
  std::vector<Tensor> out(values_.size());
  for (std::size_t i = 0; i < values_.size(); ++i) {
    if (!held_[i]) {
      out[i] = values_[i];
      continue;
    }
    const Tensor& t = values_[i];
    out[i] = Tensor::empty(t.shape(), t.dtype(), kHostDevice);
    // The source's stream was drained and every write into it waits for the hold: a plain copy
    // (for strings, of the std::string objects, read from the storage without waiting on the
    // stream again: queued work may be a writer waiting for this very hold).
    if (t.is_string()) {
      const auto* src = static_cast<const std::string*>(t.buffer()->data());
      std::copy_n(src, t.num_elements(), out[i].mutable_strings().begin());
    } else {
      std::memcpy(out[i].data(), t.data(), t.nbytes());
    }
    t.buffer()->end_hold();
    held_[i] = false;
  }
  return out;
}

void assign_restored(const Variable& variable, Tensor value) {
  if (DistributedVariable* distributed = as_distributed(variable)) {
    distributed->restore(value);  // every component, on its own device
    return;
  }
  Variable(variable).impl()->assign_taking(std::move(value));  // no copy of what was just read
}

}  // namespace chorus::train::internal
