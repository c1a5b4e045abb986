#include <chorus/checkpoint/restore_coordinator.h>

#include <algorithm>

#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/saveable.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::train::internal {

using ::chorus::internal::str_cat;

namespace {

std::string child_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? escape_local_name(name) : parent + "/" + escape_local_name(name);
}

std::string describe_entry(const BundleEntry& e) {
  if (!e.supported()) return tf_dtype_name(e.tf_dtype) + " " + e.shape.to_string();
  return std::string(dtype_name(e.dtype)) + e.shape.to_string();
}

const Variable* find_variable(const std::vector<std::pair<int, Variable>>& list, int node) {
  for (const auto& [n, v] : list) {
    if (n == node) return &v;
  }
  return nullptr;
}

}  // namespace

RestoreCoordinator::RestoreCoordinator(std::string path, const Trackable& root, std::set<std::string> ignored_keys)
    : path_(std::move(path)), root_(&root), reader_(path_), ignored_(std::move(ignored_keys)) {
  for (const std::string& key : reader_.keys()) {
    if (key == kObjectGraphKey) {
      const auto values = reader_.read_strings(key);
      CHORUS_REQUIRE(values.size() == 1, DataLossError, "checkpoint '", path_, "': ", kObjectGraphKey,
                     " must hold one string, it holds ", values.size());
      try {
        graph_ = parse_object_graph(values[0], path_);
      } catch (const DataLossError& e) {
        throw DataLossError(str_cat("checkpoint '", path_, "': the object graph is malformed: ", e.what()));
      }
    } else if (!ignored_.count(key)) {
      keys_.insert(key);
    }
  }
}

void RestoreCoordinator::warn_if_unused() const {
  if (expect_partial_) return;
  std::size_t unused = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& key : keys_) unused += consumed_.count(key) ? 0 : 1;
  }
  if (unused > 0) {
    CHORUS_LOG(WARNING) << "checkpoint '" << path_ << "': " << unused
                        << " value(s) were never restored (LoadStatus::unused_keys() lists them; call "
                           "expect_partial() on the status if a partial restore is intended)";
  }
}

void RestoreCoordinator::detach_root() {
  std::lock_guard<std::mutex> lock(mu_);
  root_ = nullptr;
}

void RestoreCoordinator::check_variable(const Variable& v, const std::string& key, const std::string& where,
                                        Plan& plan) {
  if (!reader_.contains(key)) {
    plan.mismatches.push_back(str_cat(where, ": the object graph names key '", key, "', which the bundle lacks"));
    return;
  }
  const BundleEntry& e = reader_.entry(key);
  if (!e.supported()) {
    plan.unsupported.push_back(str_cat("'", key, "' has TF dtype ", tf_dtype_name(e.tf_dtype), " ", e.shape.to_string(),
                                       ", which chorus has no DType for (variable '", v.name(), "' is ",
                                       dtype_name(v.dtype()), v.shape().to_string(), ")"));
    plan.mismatched_keys.insert(key);
    return;
  }
  if (e.dtype != v.dtype() || !(e.shape == v.shape())) {
    plan.mismatches.push_back(str_cat(key, ": checkpoint ", describe_entry(e), ", variable '", v.name(), "' ",
                                      dtype_name(v.dtype()), v.shape().to_string()));
    plan.mismatched_keys.insert(key);
    return;
  }
  plan.variables.emplace_back(v, key);
}

void RestoreCoordinator::match(int node_id, const TrackableRef& live, const std::string& live_path, Plan& plan,
                               std::set<int>& visited) {
  if (!visited.insert(node_id).second) return;
  const ObjectGraphNode& node = graph_->nodes[static_cast<std::size_t>(node_id)];
  const ObjectGraphNode::Attribute* value = node.attribute(kVariableValue);
  const std::string where = live_path.empty() ? "(root)" : live_path;
  if (live.is_variable()) {
    if (!value) {
      plan.mismatches.push_back(str_cat(where, ": the checkpoint has an object here, the program the variable '",
                                        live.variable().name(), "'"));
      return;
    }
    if (ignored_.count(value->checkpoint_key)) return;
    check_variable(live.variable(), value->checkpoint_key, where, plan);
    plan.matched_variables.emplace_back(node_id, live.variable());
    return;
  }
  Trackable* object = live.object();
  if (value) {
    plan.mismatches.push_back(
        str_cat(where, ": the checkpoint has a variable here (", value->checkpoint_key, "), the program an object"));
    return;
  }
  if (!node.attributes.empty()) {
    std::map<std::string, std::string> attrs;
    for (const auto& a : node.attributes) {
      if (!reader_.contains(a.checkpoint_key)) {
        plan.mismatches.push_back(
            str_cat(where, ": the object graph names key '", a.checkpoint_key, "', which the bundle lacks"));
        continue;
      }
      attrs[a.name] = a.checkpoint_key;
    }
    plan.objects.emplace_back(object, std::move(attrs));
  }
  if (!node.slot_variables.empty()) plan.optimizers.emplace_back(node_id, object);
  std::map<std::string, TrackableRef> children;
  for (TrackableChild& c : object->trackable_children()) children.emplace(c.name, c.ref);
  for (const auto& c : node.children) {
    auto it = children.find(c.local_name);
    if (it != children.end()) {
      match(c.node_id, it->second, child_path(live_path, c.local_name), plan, visited);
    } else if (!visited.count(c.node_id)) {
      plan.pending_children.emplace_back(object, c.local_name, c.node_id);
    }
  }
}

void RestoreCoordinator::match_slots(Plan& plan) {
  std::vector<std::pair<int, Trackable*>> optimizers(optimizers_.begin(), optimizers_.end());
  for (const auto& o : plan.optimizers) optimizers.push_back(o);
  for (const auto& [opt_node, optimizer] : optimizers) {
    const bool opt_new = std::find(plan.optimizers.begin(), plan.optimizers.end(),
                                   std::make_pair(opt_node, optimizer)) != plan.optimizers.end();
    std::vector<SlotVariableRef> live_slots;
    bool listed = false;
    for (const auto& s : graph_->nodes[static_cast<std::size_t>(opt_node)].slot_variables) {
      const Variable* original = find_variable(plan.matched_variables, s.original_variable_node_id);
      const bool orig_new = original != nullptr;
      if (!original) {
        auto it = matched_variables_.find(s.original_variable_node_id);
        if (it != matched_variables_.end()) original = &it->second;
      }
      if (!original || (!opt_new && !orig_new)) continue;  // later, or done before
      if (!listed) {
        live_slots = optimizer->slot_variables();
        listed = true;
      }
      const ObjectGraphNode& slot_node = graph_->nodes[static_cast<std::size_t>(s.slot_variable_node_id)];
      const ObjectGraphNode::Attribute* value = slot_node.attribute(kVariableValue);
      if (!value) {
        plan.mismatches.push_back(
            str_cat("slot '", s.slot_name, "' of '", original->name(), "': the checkpoint's slot node has no value"));
        continue;
      }
      auto live = std::find_if(live_slots.begin(), live_slots.end(), [&](const SlotVariableRef& r) {
        return r.original.is(*original) && r.slot_name == s.slot_name;
      });
      if (live != live_slots.end()) {
        check_variable(live->slot, value->checkpoint_key, value->checkpoint_key, plan);
        plan.matched_variables.emplace_back(s.slot_variable_node_id, live->slot);
      } else {
        plan.pending_slots.emplace_back(optimizer, *original, s.slot_name, s.slot_variable_node_id);
      }
    }
  }
}

void RestoreCoordinator::match_by_name(Plan& plan) {
  const LiveGraph g = build_live_graph(*root_, /*with_values=*/true);
  for (const LiveNode& n : g.nodes) {
    if (n.ref.is_variable()) {
      const std::string key = attribute_key(n.path, kVariableValue);
      if (reader_.contains(key) && !ignored_.count(key)) check_variable(n.ref.variable(), key, n.path, plan);
    } else if (!n.attributes.empty()) {
      std::map<std::string, std::string> attrs;
      for (const auto& [name, tensor] : n.attributes) {
        const std::string key = attribute_key(n.path, name);
        if (reader_.contains(key)) attrs[name] = key;
      }
      if (!attrs.empty()) plan.objects.emplace_back(n.ref.object(), std::move(attrs));
    }
  }
}

std::string RestoreCoordinator::describe_problems(const Plan& plan) const {
  std::string msg = plan.unsupported.empty() ? str_cat("restore from '", path_, "': ", plan.mismatches.size(),
                                                       " value(s) do not fit the program, nothing was restored:")
                                             : str_cat("restore from '", path_, "': ", plan.unsupported.size(),
                                                       " value(s) have a TF dtype chorus has no DType for (chorus has ",
                                                       supported_dtype_names(), "), nothing was restored:");
  for (const std::string& u : plan.unsupported) msg += "\n  unsupported dtype: " + u;
  for (const std::string& m : plan.mismatches) msg += "\n  mismatch: " + m;
  std::set<std::string> planned = plan.mismatched_keys;
  for (const auto& [v, key] : plan.variables) planned.insert(key);
  for (const auto& [o, attrs] : plan.objects) {
    for (const auto& [a, key] : attrs) planned.insert(key);
  }
  std::size_t unused = 0;
  std::string unused_list;
  for (const std::string& key : keys_) {
    if (planned.count(key) || consumed_.count(key)) continue;
    if (++unused <= 20) unused_list += "\n  in the checkpoint only: " + key;
  }
  msg += unused_list;
  if (unused > 20) msg += str_cat("\n  ... and ", unused - 20, " more values in the checkpoint only");
  return msg;
}

void RestoreCoordinator::execute(Plan& plan) {
  if (!plan.unsupported.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    throw UnimplementedError(describe_problems(plan));
  }
  if (!plan.mismatches.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    throw InvalidArgumentError(describe_problems(plan));
  }
  // Read (and CRC-check) everything before assigning anything.
  std::vector<std::vector<Tensor>> values;  // per variable: its whole value, or its local shards
  values.reserve(plan.variables.size());
  for (const auto& [v, key] : plan.variables) values.push_back(read_for_restore(reader_, v, key));
  std::vector<std::map<std::string, Tensor>> attributes;
  for (const auto& [object, attrs] : plan.objects) {
    std::map<std::string, Tensor> tensors;
    for (const auto& [name, key] : attrs) tensors[name] = reader_.read(key);
    attributes.push_back(std::move(tensors));
  }
  for (std::size_t i = 0; i < values.size(); ++i) assign_read(plan.variables[i].first, std::move(values[i]));
  for (std::size_t i = 0; i < plan.objects.size(); ++i) plan.objects[i].first->restore_from_tensors(attributes[i]);

  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [v, key] : plan.variables) {
    consumed_.insert(key);
    matched_live_.insert(v.impl().get());
  }
  for (const auto& [object, attrs] : plan.objects) {
    matched_live_.insert(object);
    for (const auto& [name, key] : attrs) consumed_.insert(key);
  }
  for (const auto& [node, v] : plan.matched_variables) matched_variables_.emplace(node, v);
  for (const auto& o : plan.optimizers) optimizers_.insert(o);
  if (!plan.variables.empty() || !plan.objects.empty()) nontrivial_ = true;
  auto self = shared_from_this();
  for (const auto& [object, name, node] : plan.pending_children) {
    PendingRestores& p = object->pending_restores();
    std::lock_guard<std::mutex> plock(p.mu);
    p.children[name] = {self, node};
  }
  for (const auto& [optimizer, original, slot, node] : plan.pending_slots) {
    PendingRestores& p = optimizer->pending_restores();
    std::lock_guard<std::mutex> plock(p.mu);
    p.slots[{original.impl().get(), slot}] = {self, node};
  }
}

bool RestoreCoordinator::has_key(const std::string& key) const { return reader_.contains(key); }

void RestoreCoordinator::restore_root() {
  Plan plan;
  if (graph_) {
    std::set<int> visited;
    match(0, TrackableRef(const_cast<Trackable&>(*root_)), "", plan, visited);
    match_slots(plan);
  } else {
    CHORUS_LOG(INFO) << "checkpoint '" << path_ << "' has no object graph: restoring by name";
    match_by_name(plan);
  }
  execute(plan);
}

void RestoreCoordinator::restore_deferred(int node_id, const TrackableRef& live) {
  Plan plan;
  std::set<int> visited;
  match(node_id, live, live.is_variable() ? live.variable().name() : "", plan, visited);
  match_slots(plan);
  execute(plan);
}

std::vector<std::string> RestoreCoordinator::unused_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const std::string& key : keys_) {
    if (!consumed_.count(key)) out.push_back(key);
  }
  return out;
}

std::vector<std::string> RestoreCoordinator::unmatched_objects() const {
  const Trackable* root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    root = root_;
  }
  CHORUS_REQUIRE(root != nullptr, FailedPreconditionError, "restore status of '", path_,
                 "': its Checkpoint no longer exists");
  const LiveGraph g = build_live_graph(*root, /*with_values=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const LiveNode& n : g.nodes) {
    if (n.ref.is_variable()) {
      if (ignored_.count(attribute_key(n.path, kVariableValue))) continue;
      if (!matched_live_.count(n.ref.variable().impl().get())) out.push_back(n.path);
    } else if (!n.attributes.empty() && !matched_live_.count(n.ref.object())) {
      out.push_back(n.path);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool RestoreCoordinator::nontrivial_match() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nontrivial_;
}

}  // namespace chorus::train::internal
