#include <chorus/launch/agent_options.h>

#include <algorithm>
#include <charconv>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/launch/mpirun_command.h>
#include <chorus/launch/run_command_line.h>

namespace chorus::launch {
namespace {

using internal::str_cat;

bool is_variable_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string_view name_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }

// Set by an enclosing mpirun: distribute/cluster_resolver.h would take them over ours.
bool is_mpi_launcher_variable(std::string_view name) {
  return name.rfind("OMPI_COMM_WORLD_", 0) == 0 || name == "PMI_RANK" || name == "PMI_SIZE";
}

}  // namespace

RdzvEndpoint parse_rdzv_endpoint(std::string_view text) {
  CHORUS_REQUIRE(text.find('[') == std::string_view::npos, InvalidArgumentError, "--rdzv-endpoint '", text,
                 "': IPv6 literals are not supported; give a host name or an IPv4 address, e.g. node0:29500");
  const std::size_t colon = text.rfind(':');
  CHORUS_REQUIRE(colon != std::string_view::npos, InvalidArgumentError, "--rdzv-endpoint '", text,
                 "' has no port: give HOST:PORT, e.g. node0:29500");
  RdzvEndpoint out;
  out.host = std::string(text.substr(0, colon));
  const std::string_view port = text.substr(colon + 1);
  CHORUS_REQUIRE(!out.host.empty(), InvalidArgumentError, "--rdzv-endpoint '", text,
                 "' has no host: give HOST:PORT, e.g. node0:29500");
  const std::string problem = host_name_problem(out.host);
  CHORUS_REQUIRE(problem.empty() && out.host.find('@') == std::string::npos, InvalidArgumentError, "--rdzv-endpoint '",
                 text, "': host name '", out.host, "' ",
                 problem.empty() ? std::string("has the character '@'") : problem, "; ", kHostNameRule,
                 ", without user@");
  int n = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
  CHORUS_REQUIRE(!port.empty() && ec == std::errc() && end == port.data() + port.size() && n >= 1 && n <= 65535,
                 InvalidArgumentError, "--rdzv-endpoint '", text, "': port '", port,
                 "' is not a TCP port (valid: 1..65535)");
  out.port = n;
  return out;
}

void validate_agent_options(const AgentOptions& o) {
  CHORUS_REQUIRE(o.nnodes >= 1 && o.nnodes <= kMaxProcesses, InvalidArgumentError, "--nnodes must be from 1 to ",
                 kMaxProcesses, ", got ", o.nnodes);
  CHORUS_REQUIRE(o.nproc_per_node >= 1 && o.nproc_per_node <= kMaxProcesses, InvalidArgumentError,
                 "--nproc-per-node must be from 1 to ", kMaxProcesses, ", got ", o.nproc_per_node);
  CHORUS_REQUIRE(static_cast<long long>(o.nnodes) * o.nproc_per_node <= kMaxProcesses, InvalidArgumentError,
                 "--nnodes ", o.nnodes, " x --nproc-per-node ", o.nproc_per_node, " is more than ", kMaxProcesses,
                 " processes");
  CHORUS_REQUIRE(o.node_rank >= 0 && o.node_rank < o.nnodes, InvalidArgumentError, "--node-rank ", o.node_rank,
                 " is not a node of --nnodes ", o.nnodes, " (valid: 0..", o.nnodes - 1, ")");
  CHORUS_REQUIRE(o.nnodes == 1 || o.endpoint, InvalidArgumentError, "--nnodes ", o.nnodes,
                 " needs --rdzv-endpoint HOST:PORT: the address of node 0, where the agents and the workers meet "
                 "(e.g. --rdzv-endpoint node0:29500)");
  if (o.endpoint) {
    const std::string text = str_cat(o.endpoint->host, ":", o.endpoint->port);
    CHORUS_REQUIRE(parse_rdzv_endpoint(text) == *o.endpoint, InvalidArgumentError, "--rdzv-endpoint '", text,
                   "' is not HOST:PORT");
    CHORUS_REQUIRE(o.nnodes == 1 || o.endpoint->port < 65535, InvalidArgumentError, "--rdzv-endpoint '", text,
                   "': with --nnodes ", o.nnodes,
                   " the agents' store is served on the port after it, and 65536 is not a TCP port; "
                   "give a port up to 65534");
  }
  CHORUS_REQUIRE(o.max_restarts >= 0 && o.max_restarts <= kMaxRestarts, InvalidArgumentError,
                 "--max-restarts must be from 0 to ", kMaxRestarts, ", got ", o.max_restarts);
  CHORUS_REQUIRE(o.failure_grace.count() >= 1, InvalidArgumentError, "--failure-grace must be at least 1 s, got ",
                 o.failure_grace.count());
  CHORUS_REQUIRE(o.rdzv_timeout.count() >= 1, InvalidArgumentError, "--rdzv-timeout must be at least 1 s, got ",
                 o.rdzv_timeout.count());
  CHORUS_REQUIRE(o.min_nodes >= 0 && o.min_nodes <= o.nnodes, InvalidArgumentError, "--nnodes MIN:MAX: MIN ",
                 o.min_nodes, " is not from 1 to MAX ", o.nnodes);
  CHORUS_REQUIRE(o.rdzv_last_call.count() >= 0, InvalidArgumentError, "--rdzv-last-call must be at least 0 s, got ",
                 o.rdzv_last_call.count());
  for (const auto& e : o.extra_environment)
    CHORUS_REQUIRE(is_variable_name(name_of(e)), InvalidArgumentError, "-x '", e,
                   "': a variable is NAME or NAME=VALUE with NAME made of letters, digits and '_', not starting "
                   "with a digit");
  CHORUS_REQUIRE(!o.program.empty() && !o.program[0].empty(), InvalidArgumentError,
                 "no program to run: put it after the options, e.g. chorus-run --nproc-per-node 2 -- ./train");
}

int agent_store_port(const RdzvEndpoint& endpoint) { return endpoint.port + 1; }

std::vector<std::string> worker_environment(const std::vector<std::string>& base, const AgentOptions& o,
                                            const RdzvEndpoint& endpoint, int local_rank, int attempt,
                                            std::optional<NodeGroup> group) {
  const NodeGroup g = group.value_or(NodeGroup{o.node_rank, o.nnodes});
  std::vector<std::pair<std::string, std::string>> ours = {
      {"MASTER_ADDR", endpoint.host},
      {"MASTER_PORT", std::to_string(endpoint.port)},
      {"RANK", std::to_string(g.rank * o.nproc_per_node + local_rank)},
      {"WORLD_SIZE", std::to_string(g.size * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(g.rank)},
      {"GROUP_WORLD_SIZE", std::to_string(g.size)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"CHORUS_RESTART_COUNT", std::to_string(attempt)},
      // Across nodes the agent of node 0 serves the workers' store (agent.h): it outlives rank 0.
      {"TORCHELASTIC_USE_AGENT_STORE", o.nnodes > 1 ? "True" : "False"},
  };
  // -x NAME=VALUE wins over the list above; a bare -x NAME changes nothing (inherited anyway).
  std::vector<std::string> extras;
  for (const auto& e : o.extra_environment) {
    if (e.find('=') == std::string::npos) continue;
    const std::string_view name = name_of(e);
    const auto it = std::find_if(ours.begin(), ours.end(), [&](const auto& v) { return v.first == name; });
    if (it != ours.end())
      it->second = e.substr(name.size() + 1);
    else
      extras.push_back(e);
  }
  std::vector<std::string> out;
  for (const auto& e : base) {
    const std::string_view name = name_of(e);
    const bool set_here = std::any_of(ours.begin(), ours.end(), [&](const auto& v) { return v.first == name; }) ||
                          std::any_of(extras.begin(), extras.end(), [&](const auto& x) { return name_of(x) == name; });
    if (!set_here && !is_mpi_launcher_variable(name)) out.push_back(e);
  }
  for (const auto& [name, value] : ours) out.push_back(name + "=" + value);
  out.insert(out.end(), extras.begin(), extras.end());
  return out;
}

}  // namespace chorus::launch
