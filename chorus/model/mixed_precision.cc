#include <chorus/model/mixed_precision.h>

#include <mutex>

#include <chorus/core/error.h>

namespace chorus::mixed_precision {

Policy::Policy(std::string_view name) : name_(name) {
  if (name == "float32") {
    compute_ = variable_ = DType::kFloat32;
  } else if (name == "float64") {
    compute_ = variable_ = DType::kFloat64;
  } else if (name == "mixed_bfloat16") {
    compute_ = DType::kBFloat16;
  } else if (name == "mixed_float16") {
    compute_ = DType::kFloat16;
  } else if (name == "bfloat16" || name == "float16") {
    throw InvalidArgumentError(internal::str_cat(
        "Policy '", name, "': 16-bit variables are not supported (the optimizers keep float32 state and ",
        "16-bit weights lose small updates); use \"mixed_", name, "\": ", name, " compute, float32 variables"));
  } else {
    throw InvalidArgumentError(internal::str_cat("Policy '", name,
                                                 "': unknown policy; use one of \"float32\", \"float64\", "
                                                 "\"mixed_bfloat16\", \"mixed_float16\""));
  }
}

namespace {

// The global policy, read and written under a mutex (a Policy holds a string).
std::mutex& policy_mutex() {
  static std::mutex mu;
  return mu;
}
Policy& policy_slot() {
  static Policy p;
  return p;
}

}  // namespace

void set_global_policy(const Policy& policy) {
  std::lock_guard<std::mutex> lock(policy_mutex());
  policy_slot() = policy;
}

void set_global_policy(std::string_view name) { set_global_policy(Policy(name)); }

Policy global_policy() {
  std::lock_guard<std::mutex> lock(policy_mutex());
  return policy_slot();
}

}  // namespace chorus::mixed_precision
