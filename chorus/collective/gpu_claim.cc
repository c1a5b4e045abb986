#include <chorus/collective/gpu_claim.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void check_distinct_gpus(const std::vector<GpuClaim>& claims, std::string_view how) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> users;  // (host, bus id) → distinct ranks
  for (const auto& c : claims) {
    if (c.pci_bus_id.empty()) continue;
    std::vector<int>& ranks = users[{c.host, lower(c.pci_bus_id)}];
    if (std::find(ranks.begin(), ranks.end(), c.rank) == ranks.end()) ranks.push_back(c.rank);
  }
  std::string conflicts;
  for (auto& [key, ranks] : users) {
    if (ranks.size() < 2) continue;
    std::sort(ranks.begin(), ranks.end());
    // The bus id as the lowest rank spelled it.
    const auto first = std::find_if(claims.begin(), claims.end(), [&](const GpuClaim& c) {
      return c.rank == ranks[0] && c.host == key.first && lower(c.pci_bus_id) == key.second;
    });
    conflicts +=
        internal::str_cat(conflicts.empty() ? "" : "; ", "ranks ", internal::join(ranks, {.last_separator = " and "}),
                          ranks.size() == 2 ? " both" : " all", " use GPU ", first->pci_bus_id, " on host ", key.first);
  }
  CHORUS_REQUIRE(conflicts.empty(), InvalidArgumentError, conflicts,
                 ": NCCL needs one GPU per rank; give each "
                 "process its own GPU (e.g. ",
                 how, ") or use virtual GPUs in one process");
}

}  // namespace chorus::collective
