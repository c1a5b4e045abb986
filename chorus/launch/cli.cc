#include <chorus/launch/cli.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launch/version_info.h"
#include <chorus/launch/build_info.h>

namespace chorus::launch {

VersionInfo version_info() {
  return VersionInfo{internal::kChorusVersion, internal::kChorusCommit, internal::kChorusBuildType};
}

std::string version_text(std::string_view program) {
  const VersionInfo v = version_info();
  std::string out(program);
  out += " (chorus " + v.version + ", commit " + v.commit + ", " +
         (v.build_type.empty() ? std::string("no build type") : v.build_type) + " build)\n";
  for (const ComponentInfo& c : query_build_info()) out += "  " + format_component(c) + "\n";
  return out;
}

std::optional<int> answer_help_or_version(int argc, char** argv, std::string_view program, std::string_view usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fwrite(usage.data(), 1, usage.size(), stdout);
      if (usage.empty() || usage.back() != '\n') std::fputc('\n', stdout);
      return 0;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      const std::string text = version_text(program);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
  }
  return std::nullopt;
}

int usage_error(std::string_view program, std::string_view flag, std::string_view usage) {
  std::fprintf(stderr, "%.*s: unknown flag '%.*s'\n%.*s", static_cast<int>(program.size()), program.data(),
               static_cast<int>(flag.size()), flag.data(), static_cast<int>(usage.size()), usage.data());
  if (usage.empty() || usage.back() != '\n') std::fputc('\n', stderr);
  return 2;
}

void print_error(std::string_view program, std::string_view message, std::string_view more) {
  std::string text;
  text.reserve(program.size() + message.size() + more.size() + 4);
  text.append(program).append(": ").append(message);
  if (text.empty() || text.back() != '\n') text += '\n';
  if (!more.empty()) {
    text.append(more);
    if (text.back() != '\n') text += '\n';
  }
  std::fflush(stderr);  // whatever stdio holds goes first
  // One write for the whole text; a pipe takes up to PIPE_BUF (4096) bytes atomically, and a longer
  // text is still written in as few pieces as the kernel allows.
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace chorus::launch
