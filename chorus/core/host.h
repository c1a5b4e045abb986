// This machine's host name, read in one place: for event file names (summary/), for grouping
// processes by host (distribute/'s cluster resolver, collective/'s NCCL bootstrap) and for
// messages that name a peer (collective/'s peer monitor).
//
// Each call asks the OS again (gethostname(2)); nothing is cached. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace chorus {

// The host name, or std::nullopt when gethostname fails or gives an empty name (errno is then
// the OS's reason, or 0 for an empty name). Never throws but std::bad_alloc.
std::optional<std::string> host_name();

// The host name, or `fallback` when there is none (summary/ names event files with "localhost",
// the rest of chorus says "unknown-host").
std::string host_name_or(std::string_view fallback);

}  // namespace chorus
