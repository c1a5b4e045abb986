// Internal to checkpoint/: one restore() in progress — the open bundle, its object graph, what
// has been matched and assigned, and the values still waiting for objects to be created
// (TF's _CheckpointRestoreCoordinator and the deferred "restore-on-create" queues).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/object_graph.h>
#include <chorus/checkpoint/trackable.h>

namespace chorus::train::internal {

class RestoreCoordinator;

// Restores waiting on one Trackable for a child or slot that does not exist yet.
struct PendingRestores {
  struct Entry {
    std::shared_ptr<RestoreCoordinator> coordinator;
    int node_id = 0;
  };
  std::mutex mu;
  std::map<std::string, Entry> children;                               // by local name
  std::map<std::pair<const VariableBase*, std::string>, Entry> slots;  // by (variable, slot name)
};

class RestoreCoordinator : public std::enable_shared_from_this<RestoreCoordinator> {
 public:
  // `ignored_keys`: values that are neither restored nor reported unused (read(): save_counter).
  RestoreCoordinator(std::string path, const Trackable& root, std::set<std::string> ignored_keys);

  // Matches the checkpoint against the live graph from the root, checks every shape and dtype,
  // reads every value (CRC-checked), then assigns them and queues what waits for creation.
  // Throws before assigning anything (InvalidArgumentError listing every mismatch, DataLossError).
  void restore_root();
  // A child or slot that was waited for now exists as `live`.
  void restore_deferred(int node_id, const TrackableRef& live);

  std::vector<std::string> unused_keys() const;
  std::vector<std::string> unmatched_objects() const;
  bool nontrivial_match() const;
  // LoadStatus::expect_partial: no warning about unused values when this coordinator goes away.
  void expect_partial() { expect_partial_ = true; }
  // Logs how many values were never restored, unless expect_partial (the Checkpoint's destructor
  // calls it, as TF warns when the checkpoint object goes away).
  void warn_if_unused() const;
  bool has_key(const std::string& key) const;
  // The Checkpoint is going away: unmatched_objects() can no longer walk it.
  void detach_root();
  const std::string& path() const { return path_; }

 private:
  struct Plan {
    std::vector<std::pair<Variable, std::string>> variables;                         // (variable, key)
    std::vector<std::pair<Trackable*, std::map<std::string, std::string>>> objects;  // attr → key
    std::vector<std::tuple<Trackable*, std::string, int>> pending_children;          // (object, name, node)
    std::vector<std::tuple<Trackable*, Variable, std::string, int>> pending_slots;   // (optimizer, var, slot, node)
    std::vector<std::pair<int, Variable>> matched_variables;                         // (node, variable)
    std::vector<std::pair<int, Trackable*>> optimizers;                              // nodes with slots
    std::vector<std::string> mismatches;
    std::vector<std::string> unsupported;  // values of a TF dtype no chorus Variable can hold
    std::set<std::string> mismatched_keys;
  };

  void match(int node_id, const TrackableRef& live, const std::string& live_path, Plan& plan, std::set<int>& visited);
  void match_slots(Plan& plan);
  void match_by_name(Plan& plan);
  void check_variable(const Variable& v, const std::string& key, const std::string& where, Plan& plan);
  void execute(Plan& plan);
  std::string describe_problems(const Plan& plan) const;

  std::string path_;
  const Trackable* root_;
  BundleReader reader_;
  std::optional<ObjectGraph> graph_;
  std::set<std::string> ignored_;
  std::set<std::string> keys_;  // every value key of the bundle (object graph and ignored excluded)

  mutable std::mutex mu_;
  std::set<std::string> consumed_;
  std::set<const void*> matched_live_;         // VariableBase* and Trackable* that got values
  std::map<int, Variable> matched_variables_;  // saved node → live variable
  std::map<int, Trackable*> optimizers_;       // saved optimizer node → live optimizer
  bool nontrivial_ = false;
  std::atomic<bool> expect_partial_{false};
};

}  // namespace chorus::train::internal
