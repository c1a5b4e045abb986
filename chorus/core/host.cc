#include <chorus/core/host.h>

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace chorus {

std::optional<std::string> host_name() {
  char name[256] = {};  // HOST_NAME_MAX is 64 on Linux; the last byte stays NUL either way
  if (::gethostname(name, sizeof name - 1) != 0) return std::nullopt;
  if (name[0] == '\0') {
    errno = 0;
    return std::nullopt;
  }
  return std::string(name);
}

std::string host_name_or(std::string_view fallback) {
  auto name = host_name();
  return name ? std::move(*name) : std::string(fallback);
}

}  // namespace chorus
