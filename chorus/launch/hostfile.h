// Hostfiles: the hosts of a multi-host job as a file, in the format Open MPI's mpirun
// (--hostfile) and Horovod's horovodrun (-hostfile) read — chorus-run --hostfile FILE.
//
//   # node1 has 4 GPUs
//   node1 slots=4
//   node2 slots=4 max_slots=4
//
// Thread-safety: pure functions (read_hostfile reads one file).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/launch/mpirun_command.h>

namespace chorus::launch {

// Parses a hostfile's text (Open MPI's and Horovod's format): one host per line, "host" (1 slot)
// or "host slots=N", optionally "max_slots=M" (accepted, M >= N, not passed on: chorus-run never
// oversubscribes a remote host); '#' starts a comment; blank lines are skipped. The host rules
// are parse_host_spec's (a name follows kHostNameRule: no leading '-', no ':', ',', whitespace or
// shell characters; slots 1..kMaxProcesses, each host once, kMaxProcesses in all), and a file must name at least one
// host. Throws InvalidArgumentError naming `where` (the file) and the line.
std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view where);

// The hosts of the hostfile at `path`: a regular file (a FIFO, device or directory is refused
// without blocking), at most kMaxHostfileBytes, parsed. Any failure — missing, unreadable, not a
// regular file, too large, malformed — is InvalidArgumentError naming the path: a hostfile is part
// of the command line.
inline constexpr std::size_t kMaxHostfileBytes = std::size_t{1} << 20;
std::vector<HostSlots> read_hostfile(const std::string& path);

}  // namespace chorus::launch
