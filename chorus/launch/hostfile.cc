#include <chorus/launch/hostfile.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <set>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::launch {
namespace {

using internal::printable;
using internal::str_cat;

// "slots=4" → 4, with the same bounds as -H's slots.
int parse_slot_count(std::string_view token, std::string_view key, const std::string& where) {
  const std::string_view value = token.substr(key.size() + 1);
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  CHORUS_REQUIRE(
      !value.empty() && ec == std::errc() && end == value.data() + value.size() && n >= 1 && n <= kMaxProcesses,
      InvalidArgumentError, where, ": '", printable(token), "' needs a whole number from 1 to ", kMaxProcesses);
  return n;
}
}  // namespace

std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view where) {
  std::vector<HostSlots> hosts;
  std::set<std::string, std::less<>> seen;
  long long total = 0;
  std::size_t line_no = 0;
  for (std::size_t start = 0; start < text.size(); ++line_no) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    line = line.substr(0, line.find('#'));
    const std::vector<std::string_view> tokens = internal::split_whitespace(line);
    if (tokens.empty()) continue;
    const std::string at = str_cat(where, " line ", line_no + 1);
    HostSlots h;
    h.host = std::string(tokens[0]);
    CHORUS_REQUIRE(h.host.find_first_of(":,=") == std::string::npos, InvalidArgumentError, at, ": host name '",
                   printable(h.host), "' contains ':', ',' or '='; expected \"host\" or \"host slots=N\"");
    CHORUS_REQUIRE(std::all_of(h.host.begin(), h.host.end(), [](char c) { return c > 0x20 && c < 0x7f; }),
                   InvalidArgumentError, at, ": host name '", printable(h.host),
                   "' has a byte that is not printable ASCII; is this a hostfile?");
    // "-F/path/evil.cfg slots=1" would reach ssh as an option (mpirun_command.h, host names).
    const std::string problem = host_name_problem(h.host);
    CHORUS_REQUIRE(problem.empty(), InvalidArgumentError, at, ": host name '", printable(h.host), "' ", problem, "; ",
                   kHostNameRule);
    int max_slots = 0;
    for (std::size_t t = 1; t < tokens.size(); ++t) {
      const std::string_view token = tokens[t];
      if (token.rfind("slots=", 0) == 0) {
        h.slots = parse_slot_count(token, "slots", at);
        h.slots_given = true;
      } else if (token.rfind("max_slots=", 0) == 0 || token.rfind("max-slots=", 0) == 0) {
        max_slots = parse_slot_count(token, "max_slots", at);
      } else {
        throw InvalidArgumentError(str_cat(at, ": unknown entry '", printable(token), "' after host ",
                                           printable(h.host), "; expected slots=N (and optionally max_slots=M)"));
      }
    }
    CHORUS_REQUIRE(max_slots == 0 || max_slots >= h.slots, InvalidArgumentError, at, ": max_slots=", max_slots,
                   " is below slots=", h.slots);
    CHORUS_REQUIRE(seen.insert(h.host).second, InvalidArgumentError, at, ": host '", printable(h.host),
                   "' is listed a second time; list each host once with its total slots");
    total += h.slots;
    CHORUS_REQUIRE(total <= kMaxProcesses, InvalidArgumentError, where, " has more than ", kMaxProcesses,
                   " slots in all (chorus-run's limit on processes)");
    hosts.push_back(std::move(h));
  }
  CHORUS_REQUIRE(!hosts.empty(), InvalidArgumentError, where,
                 " names no host; expected lines such as \"node1 slots=4\"");
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  const auto fail = [&](const std::string& why) -> InvalidArgumentError {
    return InvalidArgumentError(str_cat("--hostfile ", path, ": ", why));
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not regular.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) throw fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw fail("not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > kMaxHostfileBytes)
    throw fail(str_cat("is ", st.st_size, " bytes, more than a hostfile's ", kMaxHostfileBytes));
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {  // a file that shrank meanwhile: what is there
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return parse_hostfile(text, str_cat("--hostfile ", path));
}

}  // namespace chorus::launch
