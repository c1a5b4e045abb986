#include <chorus/distribute/overlapped_reduction.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>
#include <chorus/core/timeline.h>

namespace chorus::distribute::internal {

OverlappedReduction::OverlappedReduction(const std::vector<Tensor>& expected, std::int64_t pack_bytes,
                                         std::function<DType(DType)> wire, std::string device, Launch launch, Wait wait)
    : OverlappedReduction(expected, {}, {}, std::move(wire), std::move(device), std::move(launch), ScatterOps{},
                          std::move(wait)) {
  // The plan reads only definedness, dtypes and sizes: the expected sources stand in for their
  // gradients (a gradient has its source's shape and dtype).
  add_buckets(plan_all_reduce_packs(expected, pack_bytes), {});
}

OverlappedReduction::OverlappedReduction(const std::vector<Tensor>& expected,
                                         std::vector<std::vector<std::size_t>> whole, std::vector<ShardPiece> pieces,
                                         std::function<DType(DType)> wire, std::string device, Launch launch,
                                         ScatterOps scatter, Wait wait)
    : grads_(expected.size()),
      expected_(expected.size(), 0),
      final_(expected.size(), 0),
      bucket_of_(expected.size(), -1),
      remaining_(expected.size()),
      wire_(std::move(wire)),
      device_(std::move(device)),
      launch_(std::move(launch)),
      scatter_(std::move(scatter)),
      wait_(std::move(wait)) {
  expected_shapes_.resize(expected.size());
  expected_dtypes_.resize(expected.size(), DType::kFloat32);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expected_[i] = expected[i].defined() ? 1 : 0;
    if (!expected[i].defined()) continue;
    expected_shapes_[i] = expected[i].shape();
    expected_dtypes_[i] = expected[i].dtype();
  }
  add_buckets(std::move(whole), std::move(pieces));
}

void OverlappedReduction::add_buckets(std::vector<std::vector<std::size_t>> whole, std::vector<ShardPiece> pieces) {
  CHORUS_ENFORCE(buckets_.empty(), "OverlappedReduction: buckets planned twice");
  for (std::vector<std::size_t>& members : whole) {
    Bucket b;
    b.members = std::move(members);
    buckets_.push_back(std::move(b));
  }
  for (ShardPiece& piece : pieces) {
    Bucket b;
    b.members = piece.members;
    b.piece = std::make_shared<ShardPiece>(std::move(piece));
    buckets_.push_back(std::move(b));
  }
  // Launched from the back: by each bucket's last member (members are disjoint and ascending), so
  // that the last layers' buckets go first, in one order on every replica.
  std::sort(buckets_.begin(), buckets_.end(),
            [](const Bucket& a, const Bucket& b) { return a.members.back() < b.members.back(); });
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    buckets_[k].remaining = buckets_[k].members.size();
    for (const std::size_t m : buckets_[k].members) {
      CHORUS_ENFORCE(m < bucket_of_.size() && expected_[m] && bucket_of_[m] < 0, "bucket member ", m,
                     " out of range, not expected, or in two buckets");
      bucket_of_[m] = static_cast<int>(k);
    }
  }
  next_ = static_cast<int>(buckets_.size()) - 1;
}

OverlappedReduction::~OverlappedReduction() {
  for (const Bucket& b : buckets_) {
    if (b.ticket == 0) continue;
    try {
      wait_(b.ticket);
    } catch (...) {  // a failed collective: the step reports it where it waits (end_step, comm())
    }
  }
}

void OverlappedReduction::abandon() {
  abandoned_ = true;
  grads_.clear();
}

void OverlappedReduction::ready(std::size_t index, const Tensor& grad) {
  CHORUS_ENFORCE(index < final_.size() && !final_[index], "gradient ", index, " handed over twice or out of range");
  final_[index] = 1;
  --remaining_;
  if (abandoned_) return;
  if (grad.defined() != (expected_[index] != 0)) {
    // Not the gradient the plan was made for: no further bucket (the same decision on every
    // replica, since the replicas' tapes are alike); apply_gradients reduces as without overlap.
    abandon();
    return;
  }
  if (!grad.defined() || bucket_of_[index] < 0) return;  // none, or not reduced here
  grads_[index] = grad;
  Bucket& b = buckets_[static_cast<std::size_t>(bucket_of_[index])];
  --b.remaining;
  launch_ready_buckets();
}

void OverlappedReduction::launch_ready_buckets() {
  while (next_ >= 0 && buckets_[static_cast<std::size_t>(next_)].remaining == 0) {
    Bucket& b = buckets_[static_cast<std::size_t>(next_)];
    if (b.piece != nullptr) {  // a reduce-scatter piece: packed here, reduced there
      {
        timeline::Span span("collective", "bucket");
        scatter_.pack(*b.piece, grads_);  // releases its references to the members' gradients
      }
      b.ticket = scatter_.launch(b.piece);
      --next_;
      continue;
    }
    const DType dtype = grads_[b.members.front()].dtype();
    {
      // On the replica's track, inside its backward pass (core/timeline.h): the bucket handed over.
      timeline::Span span("collective", "bucket");
      b.pack = std::make_shared<Pack>(make_pack(grads_, b.members, wire_(dtype), device_));
      // On a GPU the collective runs on the side stream, after the pack is complete on this one.
      if (b.pack->send.device_context().is_gpu()) b.pack->ready = b.pack->send.device_context().stream().record_event();
      if (timeline::enabled())
        span.set_args(
            chorus::internal::str_cat("\"bytes\": ", b.pack->send.nbytes(), ", \"gradients\": ", b.members.size()));
    }
    for (const std::size_t m : b.members) grads_[m] = Tensor();  // the caller keeps its own references
    b.ticket = launch_(b.pack);
    --next_;
  }
}

bool OverlappedReduction::fits(const std::vector<Tensor>& values) const {
  if (values.size() != expected_.size()) return false;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].defined() != (expected_[i] != 0)) return false;
    if (values[i].defined() && (values[i].shape() != expected_shapes_[i] || values[i].dtype() != expected_dtypes_[i]))
      return false;
  }
  return true;
}

bool OverlappedReduction::complete() const { return !abandoned_ && remaining_ == 0 && next_ < 0 && !taken_; }

std::vector<Tensor> OverlappedReduction::take() {
  CHORUS_ENFORCE(complete(), "OverlappedReduction::take before every bucket left, or twice");
  taken_ = true;
  std::vector<Tensor> reduced(expected_.size());
  for (Bucket& b : buckets_) {
    wait_(b.ticket);
    b.ticket = 0;
    if (b.piece != nullptr) {
      scatter_.unpack(*b.piece, reduced);
      b.piece.reset();
      continue;
    }
    // A GPU pack: what follows on this replica's stream waits for the collective's stream.
    if (b.pack->done) b.pack->out.device_context().stream().wait_event(b.pack->done);
    unpack(*b.pack, reduced);
    b.pack.reset();
  }
  return reduced;
}

}  // namespace chorus::distribute::internal
