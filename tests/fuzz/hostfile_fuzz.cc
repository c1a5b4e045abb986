// libFuzzer target: chorus-run --hostfile's text (launch/hostfile.h, parse_hostfile), the Open MPI /
// Horovod hostfile format. Input: the file's bytes.
//
// Contract: InvalidArgumentError only (chorus-run prints it and exits 2). An accepted file names at
// least one host, each once, with a name that follows kHostNameRule (never starting with '-': it
// would reach ssh as an option) and that parse_host_spec accepts and slots 1..kMaxProcesses,
// kMaxProcesses in all; format_host_spec then parse_host_spec gives the same hosts and slots.
#include <cstdint>
#include <set>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/launch/hostfile.h>
#include <chorus/launch/mpirun_command.h>

using chorus::fuzz::check;
namespace launch = chorus::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<launch::HostSlots> hosts;
  try {
    hosts = launch::parse_hostfile(chorus::fuzz::as_view(data, size), "fuzz");
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    return 0;
  }
  check(!hosts.empty(), "at least one host");
  std::set<std::string> names;
  long long total = 0;
  for (const auto& h : hosts) {
    check(!h.host.empty() && names.insert(h.host).second, "names non-empty and unique");
    for (char c : h.host) check(c > 0x20 && c < 0x7f, "names of printable ASCII");
    check(launch::host_name_problem(h.host).empty() && h.host[0] != '-', "names follow the host-name rule");
    check(h.slots >= 1 && h.slots <= launch::kMaxProcesses, "slots in range");
    total += h.slots;
  }
  check(total <= launch::kMaxProcesses, "total slots in range");
  std::vector<launch::HostSlots> again;
  try {
    again = launch::parse_host_spec(launch::format_host_spec(hosts));
  } catch (const chorus::Error&) {
    check(false, "-H accepts the hosts of an accepted hostfile");
  }
  check(again.size() == hosts.size(), "the same number of hosts through -H");
  for (std::size_t i = 0; i < hosts.size(); ++i)
    check(again[i].host == hosts[i].host && again[i].slots == hosts[i].slots, "the same hosts and slots through -H");
  return 0;
}
