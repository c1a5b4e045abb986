#include <chorus/core/variable.h>

#include <vector>

#include <chorus/core/error.h>
#include <chorus/core/placement.h>

namespace chorus {
namespace {

thread_local std::vector<VariableCreator> t_creators;

class ResourceVariable final : public VariableBase {
 public:
  ResourceVariable(const VariableArgs& args, Tensor value)
      : name_(args.name),
        trainable_(args.trainable),
        synchronization_(args.synchronization),
        aggregation_(args.aggregation),
        value_(std::move(value)) {}

  const std::string& name() const override { return name_; }
  bool trainable() const override { return trainable_; }
  VariableSynchronization synchronization() const override { return synchronization_; }
  VariableAggregation aggregation() const override { return aggregation_; }
  const Shape& shape() const override { return value_.shape(); }
  DType dtype() const override { return value_.dtype(); }
  const std::string& device() const override { return value_.device_name(); }
  Tensor value() const override { return value_; }
  Tensor read_value() const override { return value_.clone(); }
  void assign(const Tensor& value) override {
    check(value, "assign");
    value_.copy_from(value);
  }
  void assign_add(const Tensor& delta) override {
    check(delta, "assign_add");
    value_.add_inplace(delta);
  }
  void assign_taking(Tensor value) override {
    check(value, "assign");
    Buffer& mine = *value_.buffer();
    const std::shared_ptr<Buffer>& theirs = value.buffer();
    if (theirs.use_count() == 1 && &mine.device() == &theirs->device() && mine.bytes() == theirs->bytes() &&
        !mine.released() && !theirs->released()) {
      mine.exchange(*theirs);
      return;
    }
    value_.copy_from(value);
  }

 private:
  void check(const Tensor& t, const char* what) const {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "variable '", name_, "': ", what, " of an undefined tensor");
    CHORUS_REQUIRE(t.shape() == value_.shape() && t.dtype() == value_.dtype(), InvalidArgumentError, "variable '",
                   name_, "': ", what, " of a ", dtype_name(t.dtype()), t.shape().to_string(),
                   " tensor; the variable is ", dtype_name(value_.dtype()), value_.shape().to_string());
  }

  std::string name_;
  bool trainable_;
  VariableSynchronization synchronization_;
  VariableAggregation aggregation_;
  Tensor value_;
};

Variable call_chain(const VariableArgs& args, std::size_t depth) {
  // depth counts creators still to call, from the innermost (back of the stack) outwards.
  if (depth == 0) return default_variable_creator(args);
  // A copy: the creator may open a VariableCreatorScope itself, and push_back would free the
  // std::function we are running.
  const VariableCreator creator = t_creators[depth - 1];
  NextCreator next = [depth](const VariableArgs& a) { return call_chain(a, depth - 1); };
  return creator(args, next);
}

}  // namespace

VariableBase& Variable::get() const {
  if (!impl_) throw FailedPreconditionError("use of an undefined (default-constructed) Variable");
  return *impl_;
}

Variable default_variable_creator(const VariableArgs& args) {
  CHORUS_REQUIRE(args.initial_value.defined(), InvalidArgumentError, "variable '", args.name,
                 "': initial_value is undefined");
  // Placement: an explicit device, else a DeviceScope, else where the initial value lives.
  std::string device = args.device;
  if (device.empty() && !current_device_spec().type) device = args.initial_value.device_name();
  Tensor value = args.initial_value.to(place_op("VarHandleOp", device)->name());
  if (args.trainable) value = internal_mark_trainable_variable(std::move(value));
  return Variable(std::make_shared<ResourceVariable>(args, std::move(value)));
}

Variable make_variable(const VariableArgs& args) {
  CHORUS_REQUIRE(args.initial_value.defined(), InvalidArgumentError, "variable '", args.name,
                 "': initial_value is undefined");
  return call_chain(args, t_creators.size());
}

VariableCreatorScope::VariableCreatorScope(VariableCreator creator) {
  CHORUS_REQUIRE(creator != nullptr, InvalidArgumentError, "VariableCreatorScope: creator is empty");
  t_creators.push_back(std::move(creator));
}

VariableCreatorScope::~VariableCreatorScope() { t_creators.pop_back(); }

}  // namespace chorus
