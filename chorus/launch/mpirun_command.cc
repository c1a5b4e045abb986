#include <chorus/launch/mpirun_command.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::launch {
namespace {

using internal::str_cat;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

bool is_alnum(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

HostSlots parse_one_host(std::string_view entry, std::size_t index, std::string_view spec) {
  const std::string where = str_cat("host entry ", index + 1, " of -H '", spec, "'");
  CHORUS_REQUIRE(!entry.empty(), InvalidArgumentError, where,
                 " is empty; expected host[:slots] entries separated by single commas, e.g. node1:4,node2:4");
  HostSlots out;
  const std::size_t colon = entry.find(':');
  const std::string_view host = entry.substr(0, colon);
  CHORUS_REQUIRE(!host.empty(), InvalidArgumentError, where, " ('", entry, "') has no host name before ':'");
  CHORUS_REQUIRE(std::none_of(host.begin(), host.end(), is_space), InvalidArgumentError, where, " ('", entry,
                 "'): a host name cannot contain whitespace");
  const std::string problem = host_name_problem(host);
  CHORUS_REQUIRE(problem.empty(), InvalidArgumentError, where, ": host name '", internal::printable(host), "' ",
                 problem, "; ", kHostNameRule);
  out.host = std::string(host);
  if (colon == std::string_view::npos) return out;  // one slot by default, as Open MPI's -H

  const std::string_view slots = entry.substr(colon + 1);
  CHORUS_REQUIRE(slots.find(':') == std::string_view::npos, InvalidArgumentError, where, " ('", entry,
                 "') has more than one ':'; expected host[:slots] (IPv6 literals are not supported)");
  int value = 0;
  const auto [end, ec] = std::from_chars(slots.data(), slots.data() + slots.size(), value);
  CHORUS_REQUIRE(!slots.empty() && ec == std::errc() && end == slots.data() + slots.size(), InvalidArgumentError, where,
                 " ('", entry, "'): slots '", slots, "' is not a whole number; expected host[:slots], e.g. ", host,
                 ":4");
  CHORUS_REQUIRE(value >= 1, InvalidArgumentError, where, " ('", entry, "'): slots must be >= 1, got ", value);
  CHORUS_REQUIRE(value <= kMaxProcesses, InvalidArgumentError, where, " ('", entry, "'): slots must be at most ",
                 kMaxProcesses, " (chorus-run's limit on processes), got ", value);
  out.slots = value;
  out.slots_given = true;
  return out;
}

bool valid_variable_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string describe_hosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ", ";
    out += str_cat(h.host, ":", h.slots, h.slots_given ? "" : " (default)");
  }
  return out;
}

}  // namespace

std::string host_name_problem(std::string_view host) {
  if (const auto at = host.find('@'); at != std::string_view::npos) {
    // user@host, as Open MPI's hostfiles and ssh take it: a portable user name (POSIX), then a host.
    const std::string_view user = host.substr(0, at);
    if (user.empty()) return "has an empty user name before '@'";
    if (user.size() > kMaxUserNameLength) return str_cat("has a user name of ", user.size(), " characters");
    if (user[0] == '-') return "has a user name that starts with '-'";
    for (char c : user)
      if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
        return str_cat("has the character '", std::string(1, c), "' in its user name");
    host = host.substr(at + 1);
  }
  if (host.empty()) return "is empty";
  if (host.size() > kMaxHostNameLength) return str_cat("is ", host.size(), " characters long");
  if (host[0] == '-') return "starts with '-' (it would be taken for an option of ssh or mpirun)";
  for (char c : host) {
    if (is_alnum(c) || c == '-' || c == '_' || c == '.') continue;
    const unsigned char u = static_cast<unsigned char>(c);
    if (u > 0x20 && u < 0x7f) return str_cat("has the character '", std::string(1, c), "'");
    return "has a byte that is not printable ASCII";
  }
  for (std::size_t start = 0;;) {
    const std::size_t dot = host.find('.', start);
    const std::string_view label = host.substr(start, dot == std::string_view::npos ? host.npos : dot - start);
    if (label.empty()) return "has an empty label (a leading, trailing or doubled '.')";
    if (label.size() > kMaxHostLabelLength)
      return str_cat("has a label of ", label.size(), " characters ('", label.substr(0, 16), "...')");
    if (label.front() == '-' || label.back() == '-')
      return str_cat("has a label that starts or ends with '-' ('", label, "')");
    if (dot == std::string_view::npos) return "";
    start = dot + 1;
  }
}

std::vector<HostSlots> parse_host_spec(std::string_view spec) {
  CHORUS_REQUIRE(!spec.empty(), InvalidArgumentError,
                 "-H is empty; expected host[:slots] entries separated by commas, e.g. node1:4,node2:4");
  std::vector<HostSlots> hosts;
  std::set<std::string, std::less<>> seen;
  long long total = 0;  // every host's slots are <= kMaxProcesses: no sum below can overflow
  std::size_t start = 0;
  for (std::size_t index = 0;; ++index) {
    const std::size_t comma = spec.find(',', start);
    const std::string_view entry =
        spec.substr(start, comma == std::string_view::npos ? spec.size() - start : comma - start);
    HostSlots h = parse_one_host(entry, index, spec);
    CHORUS_REQUIRE(seen.insert(h.host).second, InvalidArgumentError, "host '", h.host, "' is listed twice in -H '",
                   spec, "'; list each host once with its total slots (host:N)");
    total += h.slots;
    CHORUS_REQUIRE(total <= kMaxProcesses, InvalidArgumentError, "-H '", spec, "' has more than ", kMaxProcesses,
                   " slots in all (chorus-run's limit on processes)");
    hosts.push_back(std::move(h));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::string format_host_spec(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += str_cat(h.host, ":", h.slots);
  }
  return out;
}

bool is_forwarded_variable(std::string_view name) {
  for (std::string_view p : kForwardedPrefixes)
    if (name.size() > p.size() && name.substr(0, p.size()) == p) return true;
  return std::find(std::begin(kForwardedNames), std::end(kForwardedNames), name) != std::end(kForwardedNames);
}

std::vector<std::string> build_mpirun_argv(const MpirunOptions& o) {
  CHORUS_REQUIRE(!o.mpirun.empty(), InvalidArgumentError, "the mpirun executable name is empty");
  CHORUS_REQUIRE(o.num_processes > 0, InvalidArgumentError, "-np must be a positive number of processes, got ",
                 o.num_processes);
  CHORUS_REQUIRE(
      !o.program.empty() && !o.program[0].empty(), InvalidArgumentError,
      "no program to run: put it after '--', e.g. chorus-run -np 2 -- ./chorus-train --strategy multi_worker");
  CHORUS_REQUIRE(!o.bind_to.empty(), InvalidArgumentError,
                 "--bind-to is empty; use none (the default), socket, numa, core, ...");
  for (const auto& h : o.hosts) {
    CHORUS_REQUIRE(!h.host.empty() && h.slots >= 1, InvalidArgumentError, "host entry '", internal::printable(h.host),
                   ":", h.slots, "' is invalid: a host needs a name and slots >= 1");
    const std::string problem = host_name_problem(h.host);
    CHORUS_REQUIRE(problem.empty(), InvalidArgumentError, "host name '", internal::printable(h.host), "' ", problem,
                   "; ", kHostNameRule);
  }

  CHORUS_REQUIRE(o.num_processes <= kMaxProcesses, InvalidArgumentError, "-np ", o.num_processes, " is more than ",
                 kMaxProcesses, " processes, the most chorus-run starts in one job");
  std::vector<std::string> argv{o.mpirun, "-np", std::to_string(o.num_processes)};
  bool oversubscribe = o.oversubscribe;
  if (!o.hosts.empty()) {
    long long total = 0;
    for (const auto& h : o.hosts) total += h.slots;
    CHORUS_REQUIRE(total == o.num_processes, InvalidArgumentError, "-np ", o.num_processes, " does not match the ",
                   total, " slot", total == 1 ? "" : "s", " of -H (", describe_hosts(o.hosts),
                   "; a host without :slots has 1): use -np ", total, " or give the hosts ", o.num_processes,
                   " slots in all, e.g. -H ", o.hosts[0].host, ":", o.num_processes);
    argv.insert(argv.end(), {"-H", format_host_spec(o.hosts)});
  } else if (o.local_cores > 0 && o.num_processes > o.local_cores) {
    // Open MPI gives this machine one slot per core. More processes only when asked, and never
    // so many that the machine drowns (-np 100000 would fork until it dies).
    CHORUS_REQUIRE(oversubscribe, InvalidArgumentError, "-np ", o.num_processes, " is more than this machine's ",
                   o.local_cores, " cores (mpirun's slots); add --oversubscribe to start them anyway, or give -H");
    const long long cap = std::max<long long>(kMaxLocalProcessesPerCore * static_cast<long long>(o.local_cores),
                                              kMaxLocalProcessesPerCore);
    CHORUS_REQUIRE(o.num_processes <= cap, InvalidArgumentError, "-np ", o.num_processes, " is more than ", cap,
                   " processes on this machine's ", o.local_cores, " cores (", kMaxLocalProcessesPerCore,
                   " per core at most, even with --oversubscribe)");
  }
  argv.insert(argv.end(), {"--bind-to", o.bind_to});
  if (oversubscribe) argv.push_back("--oversubscribe");
  if (o.run_as_root) argv.push_back("--allow-run-as-root");
  if (o.enable_recovery) argv.push_back("--enable-recovery");
  if (!o.rsh_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.rsh_agent});
  if (!o.network_interfaces.empty()) {
    std::string list;
    for (const auto& nic : o.network_interfaces) {
      CHORUS_REQUIRE(!nic.empty() && nic.find_first_of(", \t\n") == std::string::npos, InvalidArgumentError,
                     "--network-interface '", nic,
                     "': expected interface names or subnets separated by single commas, e.g. eth1 or 10.0.0.0/24");
      list += (list.empty() ? "" : ",") + nic;
    }
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", list, "--mca", "oob_tcp_if_include", list});
  }
  for (const auto& [name, value] : o.mca) {
    CHORUS_REQUIRE(!name.empty() &&
                       std::all_of(name.begin(), name.end(),
                                   [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }),
                   InvalidArgumentError, "--mca '", name, "': an MCA parameter name is made of a-z, 0-9 and '_'");
    CHORUS_REQUIRE(!value.empty(), InvalidArgumentError, "--mca ", name, " has an empty value");
    argv.insert(argv.end(), {"--mca", name, value});
  }

  // name → the -x argument; an explicit NAME=VALUE wins over forwarding NAME from the environment.
  std::map<std::string, std::string> exported;
  for (const auto& name : o.environment)
    if (is_forwarded_variable(name)) exported[name] = name;
  for (const auto& entry : o.extra_environment) {
    const std::string name = entry.substr(0, entry.find('='));
    CHORUS_REQUIRE(
        valid_variable_name(name), InvalidArgumentError, "-x '", entry,
        "': expected NAME or NAME=VALUE with NAME made of letters, digits and '_' (not starting with a digit)");
    if (entry.find('=') != std::string::npos || !exported.count(name)) exported[name] = entry;
  }
  for (const auto& [name, arg] : exported) argv.insert(argv.end(), {"-x", arg});

  argv.push_back("--");
  argv.insert(argv.end(), o.rank_wrapper.begin(), o.rank_wrapper.end());
  argv.insert(argv.end(), o.program.begin(), o.program.end());
  return argv;
}

std::string shell_quote(std::string_view word) {
  const auto plain = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace chorus::launch
