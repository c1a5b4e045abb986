// Whole-file writes that are atomic and durable, and whole-file reads, with the OS's errors as
// chorus's typed errors (core/file_io.h's mapping: ENOENT → NotFoundError, ENOSPC →
// ResourceExhaustedError, EACCES → PermissionDeniedError, ...). Used for the CheckpointManager's
// `checkpoint` state file and the bundle writer's commit.
//
// Thread-safety: the functions share no state; two threads writing the same path concurrently
// each commit a complete file, the later rename wins.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::train {

// Replaces `path` with `contents` so that a crash at any moment leaves either the old file or the
// complete new one: writes `<path>.tempstate<random>` in the same directory, fsyncs it, renames
// it over `path`, then fsyncs the directory. On error the temporary file is removed, `path` is
// untouched and the error is thrown. The directory must exist (NotFoundError otherwise).
void write_file_atomically(const std::string& path, std::string_view contents);

// The whole contents of `path`. NotFoundError when it does not exist.
// The whole of a regular file, at most `max_bytes` (DataLossError naming the file and its size
// past that, checked before anything is allocated). The default suits a bundle's .index: entries
// are ~100 bytes, so 1 GiB is millions of tensors.
inline constexpr std::uint64_t kMaxMetadataFileBytes = std::uint64_t{1} << 30;
std::string read_file(const std::string& path, std::uint64_t max_bytes = kMaxMetadataFileBytes);

// A fresh temporary name for `final_path` in its directory: `<final_path>.tempstate<16 hex>`
// (TF's pattern; remove_stray_temporaries in checkpoint/bundle.h recognizes it).
std::string temporary_filename(const std::string& final_path);

// rename(2), errors typed; then nothing else (see sync_directory in checkpoint/bundle.h).
void rename_file(const std::string& from, const std::string& to);

// unlink(2); a missing file is not an error. Returns whether a file was removed.
bool remove_file_if_exists(const std::string& path);

// The directory part of `path` ("." when it has none).
std::string directory_of(const std::string& path);

}  // namespace chorus::train
