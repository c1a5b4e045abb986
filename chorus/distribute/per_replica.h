// PerReplica<T>: one value per replica (tf.distribute's PerReplica), what Strategy::run returns
// and what a distributed dataset yields. Passing a PerReplica to run() hands replica r its
// component r; any other argument is passed to every replica unchanged.
#pragma once

#include <vector>

#include <chorus/core/error.h>

namespace chorus::distribute {

template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  int num_replicas() const { return static_cast<int>(values_.size()); }
  // Replica r's value; r out of range → OutOfRangeError.
  const T& operator[](int r) const {
    CHORUS_REQUIRE(r >= 0 && r < num_replicas(), OutOfRangeError, "PerReplica: replica ", r, " of ", num_replicas());
    return values_[static_cast<std::size_t>(r)];
  }
  const std::vector<T>& values() const { return values_; }

 private:
  std::vector<T> values_;
};

namespace detail {
template <typename T>
struct is_per_replica : std::false_type {};
template <typename T>
struct is_per_replica<PerReplica<T>> : std::true_type {};

// Replica r's view of a run() argument.
template <typename A>
decltype(auto) component(const A& arg, int r) {
  if constexpr (is_per_replica<A>::value)
    return arg[r];
  else
    return (arg);
}
template <typename A>
using component_t = std::remove_cvref_t<decltype(component(std::declval<const A&>(), 0))>;
}  // namespace detail

}  // namespace chorus::distribute
