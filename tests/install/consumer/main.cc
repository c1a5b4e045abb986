// Uses the installed chorus: two logical CPU devices, a tensor on each, a copy between them. The
// consumer's own core/error.h and model/model.h sit on its include path before chorus's folder:
// chorus's headers must still find their own (they include each other as <chorus/...>).
// It also prints chorus's build information: that code calls into every library chorus may use
// privately (CUDA runtime, cuBLAS, cuDNN, NCCL, MPI, oneDNN), so against a static chorus the
// consumer links only when the package puts each of them on its link line, and runs only when
// each is found at run time.
#include <iostream>

#include <chorus/chorus.h>

#include "core/error.h"
#include "model/model.h"

int main() {
  namespace cx = chorus;
  auto cpu = cx::config::list_physical_devices("CPU").at(0);
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  cx::Tensor a = cx::Tensor::full({4}, 2.5, cx::DType::kFloat32, "/cpu:1");
  cx::Tensor b = a.to("CPU:0");
  float sum = 0;
  for (float v : b.to_vector<float>()) sum += v;
  std::cout << "consumer: sum on " << b.device_name() << " = " << sum << "\n";
  for (const cx::launch::ComponentInfo& c : cx::launch::query_build_info())
    std::cout << "consumer: " << cx::launch::format_component(c) << "\n";
  // Both error headers are in: the consumer's and chorus's (chorus::Error is a complete type).
  static_assert(sizeof(cx::Error) > 0);
  const bool own = consumer::error_code() == 7 && consumer::Model{}.layers == 3;
  return sum == 10.0f && own ? 0 : 1;
}
