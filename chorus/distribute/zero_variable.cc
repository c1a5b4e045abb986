#include <chorus/distribute/zero_variable.h>

#include <chorus/core/error.h>
#include <chorus/distribute/parameter_gather.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {

namespace {
// Checkpoints gather onto the host, so that a GPU replica 0 never holds a second whole copy.
constexpr const char* kHostDevice = "/cpu:0";
}  // namespace

ZeroVariable::ZeroVariable(Strategy& strategy, std::vector<Variable> shards, const VariableArgs& args, Shape shape,
                           DType dtype, ShardLayout layout, bool parameter)
    : PerReplicaVariable("ZeroVariable", strategy, std::move(shards), args, args.trainable),
      shape_(std::move(shape)),
      dtype_(dtype),
      layout_(layout),
      parameter_(parameter),
      gathered_(components_.size()) {
  CHORUS_ENFORCE(static_cast<int>(components_.size()) == strategy_.num_local_replicas() &&
                     layout_.num_shards == strategy_.num_replicas_in_sync(),
                 "ZeroVariable '", name(), "': ", components_.size(), " local shards of a layout of ",
                 layout_.num_shards, " for ", strategy_.num_local_replicas(), " local of ",
                 strategy_.num_replicas_in_sync(), " replicas");
  for (std::size_t r = 0; r < components_.size(); ++r) {
    const int global = strategy_.worker_offset() + static_cast<int>(r);
    CHORUS_ENFORCE(components_[r].shape().num_elements() == layout_.length(global), "ZeroVariable '", name(),
                   "': shard ", global, " has ", components_[r].shape().num_elements(), " elements, the layout ",
                   layout_.length(global));
  }
}

Tensor ZeroVariable::whole(const std::string& device) const {
  if (strategy_.num_replicas_in_sync() > strategy_.num_local_replicas()) {
    // Several workers: every worker's shards, by the strategy's gather (a collective).
    std::vector<Tensor> mine;
    for (const Variable& c : components_) mine.push_back(c.value());
    Tensor all = strategy_.gather(PerReplica<Tensor>(std::move(mine)), 0);
    CHORUS_ENFORCE(all.num_elements() == layout_.num_elements, "ZeroVariable '", name(), "': gathered ",
                   all.num_elements(), " elements of ", layout_.num_elements);
    all = ops::reshape(all, shape_.dims());
    return all.device_name() == device ? all : all.to(device);
  }
  std::vector<Tensor> parts;
  for (const Variable& c : components_) {
    if (c.shape().num_elements() == 0) continue;
    Tensor t = c.value();
    parts.push_back(t.device_name() == device ? t : t.to(device));
  }
  if (parts.empty()) return Tensor::zeros(shape_, dtype_, device);
  // One part on `device` still aliases its component: copy it, the result is a new tensor.
  Tensor flat = parts.size() == 1 ? parts[0].clone() : ops::concat(parts, 0);
  return ops::reshape(flat, shape_.dims());
}

Tensor ZeroVariable::slice_of(const Tensor& whole_value, int r) const {
  const int global = strategy_.worker_offset() + r;
  return ops::slice(ops::reshape(whole_value, {-1}), {layout_.begin(global)}, {layout_.length(global)});
}

Tensor ZeroVariable::value() const {
  const int r = replica_or_cross("read");
  if (r < 0) return whole(components_[0].device());
  if (!parameter_) return components_[static_cast<std::size_t>(r)].value();
  if (const Tensor& g = gathered(r); g.defined()) return g;
  // Read outside a layer call: gathered for this read (a collective, recorded for the tape).
  return gather_whole_values(*strategy_.current_replica_context(), {const_cast<ZeroVariable*>(this)},
                             /*keep=*/nullptr)[0];
}

Tensor ZeroVariable::read_value() const {
  const int r = replica_or_cross("read");
  if (r < 0) return whole(components_[0].device());
  if (parameter_) return value();
  return components_[static_cast<std::size_t>(r)].read_value();
}

Tensor ZeroVariable::local_shard() const {
  const int r = replica_or_cross("read");
  if (r >= 0) return components_[static_cast<std::size_t>(r)].value();
  CHORUS_REQUIRE(strategy_.num_replicas_in_sync() == 1, FailedPreconditionError, "local_shard of sharded variable '",
                 name(), "' in cross-replica context of ", strategy_.name(), " (", strategy_.num_replicas_in_sync(),
                 " replicas): each replica has its own shard; call it inside strategy.run");
  return components_[0].value();
}

void ZeroVariable::check_whole(const Tensor& value, const char* what) const {
  check_defined(value, what);
  CHORUS_REQUIRE(value.shape() == shape_ && value.dtype() == dtype_, InvalidArgumentError, "variable '", name(),
                 "': ", what, " of a tensor with shape ", value.shape().to_string(), " and dtype ",
                 dtype_name(value.dtype()), "; the sharded variable has shape ", shape_.to_string(), " and dtype ",
                 dtype_name(dtype_), " (values are whole; each replica keeps its shard)");
}

void ZeroVariable::write(const Tensor& value, bool add) {
  check_whole(value, add ? "assign_add" : "assign");
  const int r = replica_or_cross("written");
  if (r < 0) {
    for (std::size_t i = 0; i < components_.size(); ++i)
      write_component(components_[i], slice_of(value, static_cast<int>(i)), add);
    return;
  }
  const Tensor combined = combine_across_replicas(value, "a sharded variable");
  write_component(components_[static_cast<std::size_t>(r)], slice_of(combined, r), add);
}

void ZeroVariable::assign(const Tensor& value) { write(value, false); }
void ZeroVariable::assign_add(const Tensor& delta) { write(delta, true); }

Tensor ZeroVariable::checkpoint_value() const { return whole(kHostDevice); }

void ZeroVariable::restore(const Tensor& value) {
  check_whole(value, "restore");
  for (std::size_t r = 0; r < components_.size(); ++r)
    components_[r].impl()->assign(slice_of(value, static_cast<int>(r)));  // → the shard's own device
}

}  // namespace chorus::distribute
