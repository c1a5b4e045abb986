# Sourced by the scripts that run an LLVM 14 tool (format.sh: clang-format; check-function-size.sh:
# clang-tidy). Only version 14, Debian bookworm's, is used: other versions format and check some
# constructs differently.
#
# find_llvm14 NAME: prints NAME-14, or NAME when that is version 14; prints nothing and returns 1
# when neither is on PATH.
find_llvm14() {
  local candidate
  for candidate in "$1-14" "$1"; do
    if command -v "$candidate" > /dev/null && "$candidate" --version | grep -q "version 14\."; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
