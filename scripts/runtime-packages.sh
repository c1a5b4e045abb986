#!/usr/bin/env bash
# Prints, on one line, the Debian/Ubuntu packages that the ELF files under PREFIX (an installed
# chorus) load at run time, as dpkg knows them, plus openmpi-bin (mpirun). docker/Dockerfile's
# runtime stage installs exactly these. Libraries inside PREFIX and libraries no package owns are
# left out (the runtime base must bring those, as NVIDIA's CUDA runtime image brings CUDA's).
#
#   scripts/runtime-packages.sh PREFIX
set -euo pipefail
prefix="${1:?usage: runtime-packages.sh PREFIX}"
[ -d "$prefix" ] || { echo "runtime-packages: $prefix is not a directory" >&2; exit 2; }
prefix="$(cd "$prefix" && pwd)"
declare -A pkgs=([openmpi-bin]=1)
while IFS= read -r -d '' f; do
  head -c 4 "$f" 2>/dev/null | grep -q $'\x7fELF' || continue
  # ldd lines: "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
  while read -r lib; do
    case "$lib" in "$prefix"/*) continue ;; esac
    owner=""
    for candidate in "$lib" "$(readlink -f "$lib")" "/usr$lib" "${lib#/usr}"; do
      owner="$(dpkg -S "$candidate" 2>/dev/null | head -n 1 | cut -d: -f1)" && [ -n "$owner" ] && break
    done
    [ -n "$owner" ] && pkgs[$owner]=1
  done < <(LD_LIBRARY_PATH="$prefix/lib" ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
done < <(find "$prefix" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
printf '%s\n' "${!pkgs[@]}" | sort | tr '\n' ' ' | sed 's/ $/\n/'
