#include <chorus/distribute/gather_prefetch.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/strategy.h>
#include <chorus/distribute/zero_variable.h>

namespace chorus::distribute::internal {

namespace {

std::vector<const VariableBase*> ids_of(const std::vector<Variable>& vars) {
  std::vector<const VariableBase*> ids;
  ids.reserve(vars.size());
  for (const Variable& v : vars) ids.push_back(v.impl().get());
  return ids;
}

// Fresh whole values of `zero` on the replica's device.
std::vector<Tensor> fresh_wholes(StrategyReplicaContext& ctx, const std::vector<ZeroVariable*>& zero) {
  const std::string device = ctx.owner().replica_devices()[static_cast<std::size_t>(ctx.local_replica_id())];
  std::vector<Tensor> wholes;
  wholes.reserve(zero.size());
  for (ZeroVariable* v : zero) wholes.push_back(Tensor::empty(v->shape(), v->dtype(), device));
  return wholes;
}

}  // namespace

GatherPrefetcher::GatherPrefetcher(StrategyReplicaContext& ctx, int limit)
    : ctx_(ctx), limit_(static_cast<std::size_t>(limit)) {}

GatherPrefetcher::~GatherPrefetcher() {
  try {
    settle();
  } catch (...) {  // the step that failed reports it
  }
}

void GatherPrefetcher::settle() {
  while (!in_flight_.empty()) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    ctx_.finish_gather(*f.pending);  // rethrows the collective's error
  }
  // Dropped entries are issued again when their turn comes.
  if (forward_at_ != kStopped) forward_next_ = forward_at_;
  if (backward_at_ != kStopped) backward_next_ = backward_at_;
}

void GatherPrefetcher::forward(const std::shared_ptr<GatherUnit>& unit) {
  const std::vector<const VariableBase*> ids = ids_of(unit->vars);
  unit->position = calls_.size();
  calls_.push_back(unit);
  observed_forward_.push_back({ids, {}});
  for (const Variable& v : unit->vars) observed_forward_.back().vars.push_back(v.impl());
  if (!in_flight_.empty() && in_flight_.front().backward) settle();  // a backward pass's, not taken
  const bool expected =
      forward_at_ != kStopped && forward_at_ < recorded_forward_.size() && recorded_forward_[forward_at_].ids == ids;
  if (!expected) settle();
  if (expected && !in_flight_.empty() && in_flight_.front().index == forward_at_) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    ctx_.finish_gather(*f.pending);
    unit->wholes = f.pending->wholes;
    ++stats_.taken;
  } else {  // not prefetched (the first call, or one not issued): gathered here, as without prefetch
    unit->wholes = fresh_wholes(ctx_, unit->zero);
    ctx_.all_gather_shards(unit->shards, unit->wholes, unit->layouts);
  }
  forward_at_ = expected ? forward_at_ + 1 : kStopped;
  issue_forward();
}

void GatherPrefetcher::issue_forward() {
  if (forward_at_ == kStopped) return;
  forward_next_ = std::max(forward_next_, forward_at_);
  while (in_flight_.size() < limit_ && forward_next_ < recorded_forward_.size()) {
    const Call& call = recorded_forward_[forward_next_];
    InFlight f;
    f.index = forward_next_;
    f.ids = call.ids;
    std::vector<ZeroVariable*> zero;
    std::vector<Tensor> shards;
    std::vector<ShardLayout> layouts;
    for (const std::weak_ptr<VariableBase>& weak : call.vars) {
      std::shared_ptr<VariableBase> v = weak.lock();
      auto* z = dynamic_cast<ZeroVariable*>(v.get());
      if (z == nullptr || !z->gathers_parameters() || &z->strategy() != &ctx_.owner()) {
        forward_next_ = recorded_forward_.size();  // a variable of the recorded order is gone: stop here
        return;
      }
      f.vars.push_back(Variable(v));
      zero.push_back(z);
      shards.push_back(z->local_shard());
      layouts.push_back(z->layout());
    }
    f.pending = ctx_.begin_all_gather_shards(shards, fresh_wholes(ctx_, zero), layouts);
    in_flight_.push_back(std::move(f));
    ++stats_.issued;
    ++forward_next_;
  }
}

void GatherPrefetcher::backward(const std::shared_ptr<GatherUnit>& unit) {
  observed_backward_.push_back(unit->position);
  if (!in_flight_.empty() && !in_flight_.front().backward) settle();  // a forward pass's, not taken
  const bool expected = backward_at_ != kStopped && backward_at_ < recorded_backward_.size() &&
                        recorded_backward_[backward_at_] == unit->position && unit->position < calls_.size() &&
                        calls_[unit->position].lock() == unit;
  if (!expected) settle();
  if (expected && !in_flight_.empty() && in_flight_.front().index == backward_at_) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    ctx_.finish_gather(*f.pending);
    ++stats_.taken;
  } else {
    for (const Tensor& w : unit->wholes) w.buffer()->restore();
    ctx_.all_gather_shards(unit->shards, unit->wholes, unit->layouts);
  }
  backward_at_ = expected ? backward_at_ + 1 : kStopped;
  issue_backward(unit.get());
}

void GatherPrefetcher::issue_backward(const GatherUnit* running) {
  if (backward_at_ == kStopped) return;
  backward_next_ = std::max(backward_next_, backward_at_);
  while (in_flight_.size() < limit_ && backward_next_ < recorded_backward_.size()) {
    const std::size_t position = recorded_backward_[backward_next_];
    if (position >= calls_.size()) {  // not a call of this step: stop here
      backward_next_ = recorded_backward_.size();
      return;
    }
    const std::shared_ptr<GatherUnit> u = calls_[position].lock();
    if (u == nullptr) {  // no node holds it: nothing will regather it
      ++backward_next_;
      continue;
    }
    const bool released =
        std::all_of(u->wholes.begin(), u->wholes.end(), [](const Tensor& w) { return w.buffer()->released(); });
    // A call whose storage is live (running, or kept because its output aliases a weight) is
    // gathered by its own node, as without prefetch: nobody may write storage someone reads.
    if (u.get() != running && released && !u->wholes.empty()) {
      for (const Tensor& w : u->wholes) w.buffer()->restore();
      InFlight f;
      f.backward = true;
      f.index = backward_next_;
      f.unit = u;
      f.pending = ctx_.begin_all_gather_shards(u->shards, u->wholes, u->layouts);
      in_flight_.push_back(std::move(f));
      ++stats_.issued;
    }
    ++backward_next_;
  }
}

void GatherPrefetcher::end_step() {
  settle();
  auto same_calls = [](const std::vector<Call>& a, const std::vector<Call>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](const Call& x, const Call& y) { return x.ids == y.ids; });
  };
  if (!observed_forward_.empty() && !same_calls(observed_forward_, recorded_forward_))
    recorded_forward_ = std::move(observed_forward_);
  if (!observed_backward_.empty() && observed_backward_ != recorded_backward_)
    recorded_backward_ = std::move(observed_backward_);
  observed_forward_.clear();
  observed_backward_.clear();
  calls_.clear();
  forward_next_ = backward_next_ = forward_at_ = backward_at_ = 0;
}

}  // namespace chorus::distribute::internal
