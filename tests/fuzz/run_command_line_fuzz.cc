// libFuzzer target: chorus-run's command line, through everything the tool does before it
// executes mpirun (launch/tools/chorus_run.cc): parse_run_command_line, parse_host_spec on -H,
// build_mpirun_argv, shell_join (--dry-run). Input: argv[1..] split on NUL bytes (argv_split.h).
//
// Contract: only InvalidArgumentError, the one error class the tool catches (it prints it and
// exits 2); anything else would escape main. An accepted line gives an mpirun argv that starts
// with "mpirun", ends with "--" and the program unchanged, and whose -np is in 1..kMaxProcesses.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/argv_split.h"
#include "tests/fuzz/fuzz_util.h"
#include <chorus/launch/mpirun_command.h>
#include <chorus/launch/run_command_line.h>

using chorus::fuzz::check;
namespace launch = chorus::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> args = chorus::fuzz::split_argv(chorus::fuzz::as_view(data, size));
  try {
    const launch::RunCommandLine cl = launch::parse_run_command_line(args);
    if (cl.help || cl.check_build || cl.version) return 0;
    check(!cl.program.empty(), "a program to run");
    launch::MpirunOptions o;
    if (cl.hosts) o.hosts = launch::parse_host_spec(*cl.hosts);
    for (const auto& h : o.hosts)
      check(!h.host.empty() && h.host[0] != '-' && launch::host_name_problem(h.host).empty(),
            "host names follow the host-name rule (none can be an ssh option)");
    if (cl.num_processes) {
      o.num_processes = *cl.num_processes;
    } else {
      for (const auto& h : o.hosts) o.num_processes += h.slots;  // as the tool does
    }
    o.bind_to = cl.bind_to;
    o.oversubscribe = cl.oversubscribe;
    o.local_cores = 2;
    o.environment = {"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "TF_CONFIG", "CHORUS_LOG_LEVEL"};
    o.extra_environment = cl.extra_environment;
    o.program = cl.program;
    const std::vector<std::string> argv = launch::build_mpirun_argv(o);
    check(!argv.empty() && argv[0] == "mpirun", "argv[0] is mpirun");
    check(argv.size() > cl.program.size() &&
              std::equal(cl.program.begin(), cl.program.end(),
                         argv.end() - static_cast<std::ptrdiff_t>(cl.program.size())) &&
              argv[argv.size() - cl.program.size() - 1] == "--",
          "the program follows --, unchanged");
    check(o.num_processes >= 1 && o.num_processes <= launch::kMaxProcesses, "-np in range");
    (void)launch::shell_join(argv);
    if (!o.hosts.empty()) {
      // What is passed to mpirun -H names the same hosts and slots (written out: slots_given).
      const auto again = launch::parse_host_spec(launch::format_host_spec(o.hosts));
      check(again.size() == o.hosts.size(), "host spec round trip");
      for (std::size_t i = 0; i < again.size(); ++i)
        check(again[i].host == o.hosts[i].host && again[i].slots == o.hosts[i].slots && again[i].slots_given,
              "host spec round trip");
    }
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
  }
  return 0;
}
