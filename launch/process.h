// The operating-system side of chorus-run: finding executables on PATH, reading the environment,
// and replacing this process with mpirun. Kept apart from mpirun_command.h so that the command
// builder stays a pure, testable function.
//
// Thread-safety: environment_names() reads `environ`; do not call it while another thread calls
// setenv. exec_program() replaces the whole process (every thread) when it succeeds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::launch {

// The path `name` resolves to, as execvp would find it: a name containing '/' is checked as it is;
// otherwise each directory of `search_path` (a PATH value; empty entries mean ".") is tried in
// order. Only regular files executable by this user count. nullopt when none is found.
std::optional<std::string> find_executable(std::string_view name, std::string_view search_path);

// The names of every variable in this process's environment, in environ's order.
std::vector<std::string> environment_names();

// True when the effective user id is 0 (Open MPI then needs --allow-run-as-root).
bool running_as_root();

// Replaces this process with argv[0] (a path, not searched) run with `argv`, keeping the
// environment. Returns only on failure, by throwing: a missing file → NotFoundError, no permission
// → PermissionDeniedError, anything else → UnknownError, each naming the path and strerror.
[[noreturn]] void exec_program(const std::vector<std::string>& argv);

}  // namespace chorus::launch
