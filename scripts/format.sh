#!/usr/bin/env bash
# Formats chorus's C++ and CUDA sources with .clang-format (clang-format 14, Debian bookworm's: other
# versions format some constructs differently, so only 14 is used).
#
#   scripts/format.sh            rewrites every tracked .h/.cc/.cu/.cuh file in place
#   scripts/format.sh --check    changes nothing; exit 1 naming each file that is not formatted
#                                (CTest: static_format), exit 77 without clang-format 14
set -euo pipefail
cd "$(dirname "$0")/.."
mode=fix
[ "${1:-}" = "--check" ] && mode=check

# shellcheck source=scripts/find-llvm14.sh
. scripts/find-llvm14.sh
tool=$(find_llvm14 clang-format || true)
if [ -z "$tool" ]; then
  echo "format: skipped: clang-format 14 not found (apt-get install clang-format-14)"
  exit 77
fi

mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null || true)
if [ "${#files[@]}" -eq 0 ]; then  # not a git checkout (a source tarball): every source file
  mapfile -t files < <(find . -path ./build\* -prune -o -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi

if [ "$mode" = fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$tool" --style=file -i
  echo "format: ${#files[@]} files formatted with $tool"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$tool" --style=file "$f" | cmp -s - "$f"; then
    echo "format: $f is not formatted (scripts/format.sh rewrites it)"
    bad=$((bad + 1))
  fi
done
echo "format: $bad of ${#files[@]} files not formatted"
[ "$bad" -eq 0 ]
