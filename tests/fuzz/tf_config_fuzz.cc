// libFuzzer target: TF_CONFIG, the JSON a non-MPI launcher hands every worker
// (distribute/cluster_resolver.h, ClusterResolver::from_tf_config, which runs the JSON parser
// chorus::internal::parse_json (nlohmann-json) and then checks the cluster and task). Input: the value.
//
// Contract: InvalidArgumentError (bad JSON with its position, or bad content). An accepted config
// describes a consistent position: worker_index in [-1, num_workers), local_rank < local_size,
// task_id inside its job, and from_environment with the same TF_CONFIG agrees.
#include <cstdint>
#include <optional>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/distribute/cluster_resolver.h>

using chorus::distribute::ClusterResolver;
using chorus::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string json(chorus::fuzz::as_view(data, size));
  ClusterResolver r;
  try {
    r = ClusterResolver::from_tf_config(json);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    return 0;
  }
  check(r.num_workers() >= 1, "at least one worker");
  check(r.worker_index() >= -1 && r.worker_index() < r.num_workers(), "worker_index in range");
  check(r.local_size() >= 1 && r.local_rank() >= 0 && r.local_rank() < r.local_size() &&
            (r.worker_index() < 0 || r.local_size() <= r.num_workers()),
        "local rank and size consistent");
  check(r.task_id() >= 0 && r.task_id() < r.cluster_spec().num_tasks(r.task_type()), "task_id inside its job");
  check(r.is_chief() == (r.worker_index() == 0), "is_chief");
  (void)r.to_string();
  (void)r.cluster_spec().to_string();
  if (!json.empty()) {
    const ClusterResolver env = ClusterResolver::from_environment([&](const char* name) -> std::optional<std::string> {
      if (std::string_view(name) == "TF_CONFIG") return json;
      return std::nullopt;
    });
    check(env.to_string() == r.to_string(), "from_environment(TF_CONFIG) == from_tf_config");
  }
  return 0;
}
