// chorus-run: starts a chorus program on several processes with Open MPI's mpirun, with the flags
// a chorus job needs (process binding, forwarded environment, root and oversubscription flags);
// `--dry-run` prints the command, `--check-build` prints what this build contains.
// Usage: launch/run_command_line.cc (run_usage); guide: docs/launch.md.
//
// Exit status: mpirun's when it runs (chorus-run replaces itself with mpirun); 0 for --dry-run,
// --check-build and --help; 2 for a bad command line; 127 when mpirun (or a local program given
// with a path) is not found.
#include <cstdlib>
#include <iostream>
#include <thread>

#include "core/error.h"
#include "launch/build_info.h"
#include "launch/mpirun_command.h"
#include "launch/process.h"
#include "launch/run_command_line.h"

namespace cx = chorus;
namespace launch = chorus::launch;

namespace {

constexpr int kUsageError = 2;
constexpr int kNotFound = 127;

int run(const std::vector<std::string>& args) {
  launch::RunCommandLine cl;
  launch::MpirunOptions o;
  try {
    cl = launch::parse_run_command_line(args);
    if (cl.help) {
      std::cout << launch::run_usage();
      return 0;
    }
    if (cl.check_build) {
      for (const auto& c : launch::query_build_info()) std::cout << launch::format_component(c) << "\n";
      return 0;
    }
    if (cl.hosts) o.hosts = launch::parse_host_spec(*cl.hosts);
    if (cl.num_processes) {
      o.num_processes = *cl.num_processes;
    } else {
      for (const auto& h : o.hosts) o.num_processes += h.slots;
    }
    o.bind_to = cl.bind_to;
    o.oversubscribe = cl.oversubscribe;
    o.local_cores = static_cast<int>(std::thread::hardware_concurrency());
    o.run_as_root = launch::running_as_root();
    o.environment = launch::environment_names();
    o.extra_environment = cl.extra_environment;
    o.program = cl.program;
    const auto argv = launch::build_mpirun_argv(o);  // validates with the name "mpirun"
    if (cl.dry_run) {
      std::cout << launch::shell_join(argv) << "\n";
      return 0;
    }
  } catch (const cx::InvalidArgumentError& e) {
    std::cerr << "chorus-run: " << e.message() << "\nRun 'chorus-run --help' for usage.\n";
    return kUsageError;
  }

  const char* path = std::getenv("PATH");
  const auto mpirun = launch::find_executable("mpirun", path ? path : "");
  if (!mpirun) {
    std::cerr << "chorus-run: mpirun was not found on PATH (" << (path ? path : "unset")
              << "); install Open MPI: apt-get install openmpi-bin (and libopenmpi-dev to build chorus with MPI)\n";
    return kNotFound;
  }
  // A program named with a path must exist here (mpirun's own error for it is obscure); a bare
  // name is looked up by mpirun on every host.
  if (o.program[0].find('/') != std::string::npos && !launch::find_executable(o.program[0], "")) {
    std::cerr << "chorus-run: program " << o.program[0] << " was not found or is not executable\n";
    return kNotFound;
  }
  o.mpirun = *mpirun;
  launch::exec_program(launch::build_mpirun_argv(o));  // returns only by throwing
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cx::Error& e) {
    std::cerr << "chorus-run: " << e.what() << "\n";
    return 1;
  }
}
