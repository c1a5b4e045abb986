#include <chorus/distribute/uneven_all_gather.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <chorus/core/profile.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute::internal {

namespace {

void gather(collective::Communicator& comm, const Tensor& in, const Tensor& out, std::chrono::milliseconds timeout) {
  if (profile::profiling_enabled()) in.device_context().stream().synchronize();
  profile::ScopedTimer timer(profile::TimeCategory::kCollective);
  comm.all_gather(in, out, {.timeout = timeout})->wait(timeout);
}

}  // namespace

Tensor all_gather_uneven(collective::Communicator& comm, const Tensor& value, int axis, const std::string& device,
                         std::chrono::milliseconds timeout) {
  const int rank = value.shape().rank();
  const int n = comm.size();
  std::vector<int> perm{axis};
  for (int i = 0; i < rank; ++i)
    if (i != axis) perm.push_back(i);
  std::vector<int> inverse(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) inverse[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])] = i;
  Tensor on_device = value.device_name() == device ? value : value.to(device);
  Tensor front = axis == 0 ? on_device : ops::transpose(on_device, perm);
  const std::int64_t mine = front.shape().dims()[0];
  Tensor lens = Tensor::empty({n}, DType::kInt64, device);
  gather(comm, Tensor::from_vector<std::int64_t>({mine}, {1}, device), lens, timeout);
  const std::vector<std::int64_t> len = lens.to_vector<std::int64_t>();
  const std::int64_t longest = *std::max_element(len.begin(), len.end());
  if (mine < longest) {
    std::vector<std::pair<std::int64_t, std::int64_t>> pads(static_cast<std::size_t>(rank), {0, 0});
    pads[0].second = longest - mine;
    front = ops::pad(front, pads);
  }
  std::vector<std::int64_t> dims = front.shape().dims();
  dims[0] = longest * n;
  Tensor all = Tensor::empty(Shape(dims), front.dtype(), device);
  gather(comm, front, all, timeout);
  // Even (every replica sent `longest`): `all` is the result as it is; slicing and joining would
  // hold two more copies of it at once.
  if (std::all_of(len.begin(), len.end(), [longest](std::int64_t l) { return l == longest; }))
    return axis == 0 ? all : ops::transpose(all, inverse);
  std::vector<Tensor> parts;
  for (int r = 0; r < n; ++r) {
    std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0), size = front.shape().dims();
    begin[0] = r * longest;
    size[0] = len[static_cast<std::size_t>(r)];
    parts.push_back(ops::slice(all, begin, size));
  }
  Tensor joined = ops::concat(parts, 0);
  return axis == 0 ? joined : ops::transpose(joined, inverse);
}

}  // namespace chorus::distribute::internal
