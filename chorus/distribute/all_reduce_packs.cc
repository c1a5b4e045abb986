#include <chorus/distribute/all_reduce_packs.h>

#include <algorithm>

#include <chorus/ops/elementwise.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute::internal {

std::vector<std::vector<std::size_t>> plan_all_reduce_packs(const std::vector<Tensor>& values,
                                                            std::int64_t pack_bytes) {
  // From the end of the list (the last layers' gradients are final first), as DDP assigns buckets:
  // the first pack formed holds at most kFirstPackBytes, the others pack_bytes.
  std::vector<std::vector<std::size_t>> packs;
  std::int64_t cap = std::min(pack_bytes, kFirstPackBytes);
  std::size_t end = values.size();  // values[end..] are planned
  while (end > 0) {
    std::size_t i = end - 1;
    if (!values[i].defined()) {
      end = i;
      continue;
    }
    std::int64_t bytes = static_cast<std::int64_t>(values[i].nbytes());
    std::size_t first = i;
    while (first > 0 && values[first - 1].defined() && values[first - 1].dtype() == values[i].dtype() &&
           bytes + static_cast<std::int64_t>(values[first - 1].nbytes()) <= cap) {
      --first;
      bytes += static_cast<std::int64_t>(values[first].nbytes());
    }
    std::vector<std::size_t> members;
    for (std::size_t m = first; m <= i; ++m) members.push_back(m);
    packs.push_back(std::move(members));
    cap = pack_bytes;
    end = first;
  }
  std::reverse(packs.begin(), packs.end());
  return packs;
}

Pack make_pack(const std::vector<Tensor>& values, std::vector<std::size_t> members, DType wire,
               const std::string& device) {
  auto local = [&](const Tensor& t) { return t.device_name() == device ? t : t.to(device); };
  Pack pack;
  pack.dtype = values[members.front()].dtype();
  Tensor in;
  if (members.size() == 1) {
    in = local(values[members.front()]);
  } else {
    std::vector<Tensor> flat;
    flat.reserve(members.size());
    for (const std::size_t m : members) flat.push_back(ops::reshape(local(values[m]), {-1}));
    in = ops::concat(flat, 0);
  }
  for (const std::size_t m : members) pack.shapes.push_back(values[m].shape());
  pack.members = std::move(members);
  pack.value_bytes = static_cast<std::int64_t>(in.nbytes());
  // Compressed: the cast is a fresh buffer, reduced in place; otherwise a separate output.
  const bool compress = wire != in.dtype();
  pack.send = compress ? ops::cast(in, wire) : in;
  pack.out = compress ? pack.send : Tensor::empty(in.shape(), in.dtype(), device);
  return pack;
}

void unpack(const Pack& pack, std::vector<Tensor>& reduced) {
  const Tensor whole = pack.out.dtype() != pack.dtype ? ops::cast(pack.out, pack.dtype) : pack.out;
  if (pack.members.size() == 1) {
    reduced[pack.members.front()] = whole;
    return;
  }
  std::vector<std::int64_t> sizes;
  sizes.reserve(pack.shapes.size());
  for (const Shape& s : pack.shapes) sizes.push_back(s.num_elements());
  std::vector<Tensor> parts = ops::split(whole, sizes, 0);
  for (std::size_t k = 0; k < pack.members.size(); ++k)
    reduced[pack.members[k]] = ops::reshape(parts[k], pack.shapes[k].dims());
}

}  // namespace chorus::distribute::internal
