// Placement: which logical device an op runs on (TensorFlow's `with tf.device(...)`).
//
//   {
//     chorus::DeviceScope scope("/GPU:1");            // tf.device("/GPU:1")
//     auto t = chorus::Tensor::zeros({2, 2});          // placed on GPU:1
//   }
//
// Rules, in order:
//   1. An explicit device given to the op, merged with the innermost DeviceScope of the calling
//      thread (scopes nest: inner fields win, unset fields come from outer scopes, as in TF).
//   2. With no device type anywhere: the first logical GPU if the op has a GPU kernel and a GPU
//      exists, else CPU:0. A type without an index means index 0.
//   3. The requested device does not exist, or the op has no kernel for its type:
//      soft placement on  (TF2's default) → the same type's device 0 if it exists, else CPU:0,
//                                          with a WARNING naming both (once per request);
//      soft placement off → InvalidArgumentError naming the op, the request and the devices.
// With set_log_device_placement(true) each placement logs
//   "Executing op Fill in device /job:localhost/replica:0/task:0/device:GPU:0".
//
// DeviceScope is thread-local: each replica thread has its own stack. Not copyable or movable;
// scopes must be destroyed in reverse order of creation (C++ scoping guarantees this).
// Placing initializes devices (see core/config.h).
#pragma once

#include <memory>
#include <string_view>

#include <chorus/core/device_spec.h>
#include <chorus/core/runtime.h>

namespace chorus {

class DeviceScope {
 public:
  // Throws InvalidArgumentError for a string DeviceSpec cannot parse. The device need not exist
  // yet: that is checked when an op is placed (soft placement may apply).
  explicit DeviceScope(std::string_view device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceSpec saved_;
  bool saved_set_;
};

// The merged spec of the calling thread's DeviceScopes (all fields unset outside any scope).
DeviceSpec current_device_spec();

// Chooses the device for op `op_name` by the rules above and logs it when placement logging is on.
// `device` is an explicit request ("" for none).
std::shared_ptr<DeviceContext> place_op(std::string_view op_name, std::string_view device = "",
                                        bool has_gpu_kernel = true);

}  // namespace chorus
