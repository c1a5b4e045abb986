// Uses the installed chorus: two logical CPU devices, a tensor on each, a copy between them.
#include <chorus/chorus.h>

#include <iostream>

int main() {
  namespace cx = chorus;
  auto cpu = cx::config::list_physical_devices("CPU").at(0);
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  cx::Tensor a = cx::Tensor::full({4}, 2.5, cx::DType::kFloat32, "/cpu:1");
  cx::Tensor b = a.to("CPU:0");
  float sum = 0;
  for (float v : b.to_vector<float>()) sum += v;
  std::cout << "consumer: sum on " << b.device_name() << " = " << sum << "\n";
  return sum == 10.0f ? 0 : 1;
}
