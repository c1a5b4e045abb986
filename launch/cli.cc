#include <chorus/launch/cli.h>

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

}  // namespace chorus::launch
