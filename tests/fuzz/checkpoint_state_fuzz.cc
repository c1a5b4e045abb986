// libFuzzer target: the `checkpoint` state file parser (checkpoint/checkpoint_state.h,
// parse_checkpoint_state), which CheckpointManager and latest_checkpoint run on a file anyone
// with write access to the directory may have edited. Input: the file's text. Contract:
// DataLossError naming the file and line for anything malformed; an accepted state, written back
// with checkpoint_state_to_text, parses to the same state (what write_checkpoint_state writes,
// read_checkpoint_state must read).
#include <cmath>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/core/logging.h>

using chorus::fuzz::check;
using chorus::train::CheckpointState;

namespace {

bool same_number(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

bool same(const CheckpointState& a, const CheckpointState& b) {
  if (a.model_checkpoint_path != b.model_checkpoint_path ||
      a.all_model_checkpoint_paths != b.all_model_checkpoint_paths ||
      a.all_model_checkpoint_timestamps.size() != b.all_model_checkpoint_timestamps.size() ||
      !same_number(a.last_preserved_timestamp, b.last_preserved_timestamp))
    return false;
  for (std::size_t i = 0; i < a.all_model_checkpoint_timestamps.size(); ++i)
    if (!same_number(a.all_model_checkpoint_timestamps[i], b.all_model_checkpoint_timestamps[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Unknown fields are logged as warnings: keep the fuzzer's output readable.
  chorus::set_log_level(chorus::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(chorus::fuzz::as_view(data, size));
  CheckpointState state;
  try {
    state = chorus::train::parse_checkpoint_state(text, "fuzz/checkpoint");
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    return 0;
  }
  const std::string again = chorus::train::checkpoint_state_to_text(state);
  CheckpointState reparsed;
  try {
    reparsed = chorus::train::parse_checkpoint_state(again, "fuzz/checkpoint.rewritten");
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "the parser rejects what the writer wrote for an accepted state: %s\n", e.what());
    __builtin_trap();
  }
  check(same(reparsed, state), "parse(to_text(state)) == state");
  return 0;
}
