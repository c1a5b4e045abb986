#include "launch/process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace chorus::launch {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> find_executable(std::string_view name, std::string_view search_path) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::string path(name);
    return is_executable_file(path) ? std::optional<std::string>(path) : std::nullopt;
  }
  std::size_t start = 0;
  while (start <= search_path.size()) {
    const std::size_t colon = std::min(search_path.find(':', start), search_path.size());
    // An empty PATH entry means the current directory.
    std::string candidate(colon > start ? search_path.substr(start, colon - start) : std::string_view("."));
    start = colon + 1;
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    names.emplace_back(*e, eq ? static_cast<std::size_t>(eq - *e) : std::strlen(*e));
  }
  return names;
}

bool running_as_root() { return ::geteuid() == 0; }

void exec_program(const std::vector<std::string>& argv) {
  CHORUS_REQUIRE(!argv.empty() && !argv[0].empty(), InvalidArgumentError, "exec_program: empty argv");
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execv(raw[0], raw.data());
  const int err = errno;
  const std::string what = internal::str_cat("cannot execute ", argv[0], ": ", std::strerror(err));
  if (err == ENOENT) throw NotFoundError(what);
  if (err == EACCES || err == EPERM) throw PermissionDeniedError(what);
  throw UnknownError(what);
}

}  // namespace chorus::launch
