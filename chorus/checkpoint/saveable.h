// Internal to checkpoint/: the live object graph (what save() writes and name-based restore
// matches) and how a variable's value is read for saving and written back on restore.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/object_graph.h>
#include <chorus/checkpoint/trackable.h>

namespace chorus::train::internal {

struct LiveNode {
  TrackableRef ref;
  std::string path;                          // escaped object path; "" for the root
  std::map<std::string, Tensor> attributes;  // objects: serialize_to_tensors() (when asked for)
};

struct LiveGraph {
  std::vector<LiveNode> nodes;  // breadth first from the root; slot variables last
  ObjectGraph proto;            // the same nodes, with children, attribute keys and slots
};

// Walks the objects from `root` breadth first (children in their listed order; an object or
// variable reached twice is one node, named by the first path), then adds optimizer slots of
// variables in the graph. `with_values`: objects' serialize_to_tensors() are called and stored.
LiveGraph build_live_graph(const Trackable& root, bool with_values);

// "<path>/.ATTRIBUTES/<escaped attribute>".
std::string attribute_key(const std::string& path, const std::string& attribute);

// The value to save (not yet copied: it may alias the variable): a distributed variable's
// checkpoint_value() (core/distributed_variable.h; mirrored: ON_WRITE → the primary component,
// ON_READ → the aggregate, SUM or MEAN over all replicas of all workers — the strategy's reduce,
// a collective in multi-worker strategies; the first component otherwise), a plain variable's
// value.
Tensor snapshot_source(const Variable& variable);
// One value a save writes: a whole tensor, or one local shard of a sharded variable (written as
// TF slices, BundleWriter::add_flat_slice: docs/checkpoints.md "Sharded checkpoints").
struct SaveItem {
  std::string key;
  Tensor value;  // the whole value (not copied: it may alias the variable), or the shard
  bool shard = false;
  Shape full_shape;        // shard: the variable's shape
  std::int64_t begin = 0;  // shard: its first element in the row-major flattening
};
// Appends what a save writes of `variable` under `key`: with `sharded`, a sharded variable
// (core/sharded_variable.h) of more than one shard gives its local shards — no collective, no
// copy, no whole tensor; otherwise the one item of snapshot_source (a collective for some).
void append_save_items(const Variable& variable, const std::string& key, bool sharded, std::vector<SaveItem>& out);

// The checkpoint value under `key` read as `variable` will hold it: for a sharded variable of
// more than one shard its local shards, each read from the entries that overlap it
// (BundleReader::read_flat_ranges: never the whole tensor, whatever layout or replica count
// wrote it); for any other variable the whole value (BundleReader::read). CRC-checked.
std::vector<Tensor> read_for_restore(const BundleReader& reader, const Variable& variable, const std::string& key);
// Writes what read_for_restore read: shards into the local components, a whole value by
// assign_restored.
void assign_read(const Variable& variable, std::vector<Tensor> values);

// An async save's snapshot of `sources`, taken without blocking the caller on a copy. The
// constructor (on the caller's thread) waits for the work queued on each source's stream, copies
// GPU sources to the host at once (device-to-host), and puts a write hold (core/tensor.h
// Buffer::hold_writes) on every host source: training goes on, reading them freely, and a write
// into one of them waits until it is copied. take() (on the writer thread) copies the held
// sources into new host tensors one after another, ending each one's hold right after its copy,
// and returns the copies. The destructor ends the holds take() did not (an error before it ran).
class HeldSnapshot {
 public:
  explicit HeldSnapshot(const std::vector<Tensor>& sources);
  ~HeldSnapshot();
  HeldSnapshot(const HeldSnapshot&) = delete;
  HeldSnapshot& operator=(const HeldSnapshot&) = delete;
  std::vector<Tensor> take();

 private:
  std::vector<Tensor> values_;  // host copies of GPU sources; the held host sources themselves
  std::vector<bool> held_;
};
// Writes a restored host value into the variable: a distributed one's restore() (every component
// on its own device; mirrored ON_READ SUM: value / replicas in sync — of all workers — so the
// aggregate over all replicas reads back as `value`), a plain one's assign_taking (which takes the
// value's storage when it can instead of copying it). Shape and dtype must already match.
void assign_restored(const Variable& variable, Tensor value);

}  // namespace chorus::train::internal
