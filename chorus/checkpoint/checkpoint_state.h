// The `checkpoint` state file of a checkpoint directory: TF's CheckpointState proto in protobuf
// text format (tensorflow/python/training/checkpoint_state.proto; docs/formats.md B1):
//
//   model_checkpoint_path: "ckpt-3"
//   all_model_checkpoint_paths: "ckpt-2"
//   all_model_checkpoint_paths: "ckpt-3"
//   all_model_checkpoint_timestamps: 1763712000.5
//   all_model_checkpoint_timestamps: 1763712060.25
//   last_preserved_timestamp: 1763711999.0
//
// Paths are written relative to the directory (CheckpointManager's save_relative_paths) and
// returned joined onto it; absolute paths in files written by others are kept as they are.
// The file is replaced atomically and durably (checkpoint/atomic_file.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace chorus::train {

struct CheckpointState {
  std::string model_checkpoint_path;
  std::vector<std::string> all_model_checkpoint_paths;  // oldest first
  std::vector<double> all_model_checkpoint_timestamps;  // seconds since the epoch; may be empty
  double last_preserved_timestamp = 0;
};

// The state of `directory`, or nullopt when it has no `checkpoint` file. A malformed file →
// DataLossError naming the file and line.
std::optional<CheckpointState> read_checkpoint_state(const std::string& directory);
// Writes `state` with paths made relative to `directory` where they lie inside it.
void write_checkpoint_state(const std::string& directory, const CheckpointState& state);

// The text form and its parser (unknown fields are skipped, as protobuf's text parser would not:
// TF never writes others).
std::string checkpoint_state_to_text(const CheckpointState& state);
CheckpointState parse_checkpoint_state(const std::string& text, const std::string& file);

// tf.train.latest_checkpoint: the state's model_checkpoint_path (joined onto `directory`) if its
// `.index` exists; nullopt when there is no state file or the files are gone (logged, as TF's
// "Couldn't match files for checkpoint").
std::optional<std::string> latest_checkpoint(const std::string& directory);

}  // namespace chorus::train
