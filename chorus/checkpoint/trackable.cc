#include <chorus/checkpoint/trackable.h>

#include <cstring>

#include <chorus/checkpoint/restore_coordinator.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/data/dataset.h>
#include <chorus/ops/random.h>

namespace chorus::train {

using ::chorus::internal::str_cat;

namespace {

namespace wire = wire;

constexpr const char* kIteratorState = "ITERATOR_STATE";
constexpr const char* kIteratorTensorPrefix = "ITERATOR_TENSOR:";

// An iterator's position as attributes: its named integers serialized into one uint8 tensor
// (protobuf wire: repeated {1: key, 2: value}), its named tensors one attribute each.
class IteratorTrackable final : public Trackable {
 public:
  explicit IteratorTrackable(data::Iterator& iterator) : iterator_(iterator) {}
  std::vector<TrackableChild> trackable_children() const override { return {}; }

  std::map<std::string, Tensor> serialize_to_tensors() const override {
    const data::IteratorState state = iterator_.save();
    wire::ProtoWriter w;
    for (const auto& [key, value] : state.ints()) {
      wire::ProtoWriter entry;
      entry.add_bytes(1, key);
      entry.add_int64(2, value);
      w.add_message(1, entry);
    }
    const std::string& bytes = w.data();
    std::map<std::string, Tensor> out;
    out[kIteratorState] =
        Tensor::from_host(bytes.data(), Shape{static_cast<std::int64_t>(bytes.size())}, DType::kUInt8, "/CPU:0");
    for (const auto& [key, tensor] : state.tensors()) out[kIteratorTensorPrefix + key] = tensor;
    return out;
  }

  void restore_from_tensors(const std::map<std::string, Tensor>& tensors) override {
    auto it = tensors.find(kIteratorState);
    CHORUS_REQUIRE(it != tensors.end() && it->second.dtype() == DType::kUInt8 && it->second.shape().rank() == 1,
                   InvalidArgumentError, "checkpoint: the iterator's saved state has no uint8 ", kIteratorState,
                   " attribute (not an iterator checkpointed by chorus?)");
    const std::vector<std::uint8_t> raw = it->second.to_vector<std::uint8_t>();
    const std::string bytes(raw.begin(), raw.end());
    data::IteratorState state;
    wire::ProtoReader r(bytes, "iterator state");
    while (r.next()) {
      if (r.field() != 1) {
        r.skip();
        continue;
      }
      std::string key;
      std::int64_t value = 0;
      wire::ProtoReader e(r.read_bytes(), "iterator state entry");
      while (e.next()) {
        if (e.field() == 1)
          key = std::string(e.read_bytes());
        else if (e.field() == 2)
          value = e.read_int64();
        else
          e.skip();
      }
      state.set_int(key, value);
    }
    const std::string prefix = kIteratorTensorPrefix;
    for (const auto& [name, tensor] : tensors) {
      if (name.rfind(prefix, 0) == 0) state.set_tensor(name.substr(prefix.size()), tensor);
    }
    iterator_.restore(state);
  }

 private:
  data::Iterator& iterator_;
};

// A generator's Philox state as one int64 [3] attribute "state": counter low, counter high, key
// (the words of TF's Philox state tensor).
class GeneratorTrackable final : public Trackable {
 public:
  explicit GeneratorTrackable(ops::Generator& generator) : generator_(generator) {}
  std::vector<TrackableChild> trackable_children() const override { return {}; }

  std::map<std::string, Tensor> serialize_to_tensors() const override {
    const ops::GeneratorState s = generator_.state();
    const std::vector<std::int64_t> words = {static_cast<std::int64_t>(s.counter_low),
                                             static_cast<std::int64_t>(s.counter_high),
                                             static_cast<std::int64_t>(s.key)};
    return {{"state", Tensor::from_vector<std::int64_t>(words, Shape{3}, "/CPU:0")}};
  }

  void restore_from_tensors(const std::map<std::string, Tensor>& tensors) override {
    auto it = tensors.find("state");
    CHORUS_REQUIRE(it != tensors.end() && it->second.dtype() == DType::kInt64 && it->second.num_elements() == 3,
                   InvalidArgumentError, "checkpoint: a random generator's state must be an int64 tensor of 3 words");
    const auto w = it->second.to_vector<std::int64_t>();
    ops::GeneratorState s;
    s.counter_low = static_cast<std::uint64_t>(w[0]);
    s.counter_high = static_cast<std::uint64_t>(w[1]);
    s.key = static_cast<std::uint64_t>(w[2]);
    generator_.set_state(s);
  }

 private:
  ops::Generator& generator_;
};

}  // namespace

TrackableRef::TrackableRef(Trackable& object) : object_(&object) {}
TrackableRef::TrackableRef(std::shared_ptr<Trackable> object) : owned_(std::move(object)), object_(owned_.get()) {
  CHORUS_REQUIRE(object_ != nullptr, InvalidArgumentError, "checkpoint: a null object cannot be tracked");
}
TrackableRef::TrackableRef(Variable variable) : variable_(std::move(variable)) {
  CHORUS_REQUIRE(variable_.defined(), InvalidArgumentError, "checkpoint: an undefined Variable cannot be tracked");
}
TrackableRef::TrackableRef(data::Iterator& iterator)
    : owned_(std::make_shared<IteratorTrackable>(iterator)), object_(owned_.get()) {}
TrackableRef::TrackableRef(ops::Generator& generator)
    : owned_(std::make_shared<GeneratorTrackable>(generator)), object_(owned_.get()) {}

Trackable::Trackable() : pending_(std::make_shared<internal::PendingRestores>()) {}
Trackable::~Trackable() = default;
Trackable::Trackable(Trackable&&) noexcept = default;
Trackable& Trackable::operator=(Trackable&&) noexcept = default;

void Trackable::child_created(const std::string& name, const TrackableRef& child) const {
  internal::PendingRestores::Entry entry;
  {
    std::lock_guard<std::mutex> lock(pending_->mu);
    auto it = pending_->children.find(name);
    if (it == pending_->children.end()) return;
    entry = std::move(it->second);
    pending_->children.erase(it);
  }
  entry.coordinator->restore_deferred(entry.node_id, child);
}

void Trackable::slot_created(const Variable& original, const std::string& slot_name, const Variable& slot) const {
  internal::PendingRestores::Entry entry;
  {
    std::lock_guard<std::mutex> lock(pending_->mu);
    auto it = pending_->slots.find({original.impl().get(), slot_name});
    if (it == pending_->slots.end()) return;
    entry = std::move(it->second);
    pending_->slots.erase(it);
  }
  entry.coordinator->restore_deferred(entry.node_id, TrackableRef(slot));
}

std::string escape_local_name(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '.')
      out += "..";
    else if (c == '/')
      out += ".S";
    else
      out += c;
  }
  return out;
}

}  // namespace chorus::train
