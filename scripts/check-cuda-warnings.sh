#!/usr/bin/env bash
# Compiles every .cu file of the repository (build*/ and hidden folders left out) with nvcc for
# sm_90, device and host warnings as errors, object files into a temporary folder. No GPU needed.
# CTest runs it as static_cuda_warnings (tests/static/CMakeLists.txt) with the build's own settings.
#
#   scripts/check-cuda-warnings.sh [options] [-DNAME[=VALUE]...] [-IDIR...]
#     --nvcc PATH        nvcc to use (default: $NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#     --arch N           compute capability to compile for (default 90: sm_90)
#     --host-flags CSV   host compiler warnings, comma-separated (default: CHORUS_WARNINGS of
#                        cmake/ChorusTargets.cmake without -Wpedantic, plus -Werror)
#     --jobs N           compiles at a time (default: the number of cores)
#   -DNAME[=VALUE] goes to nvcc as it is; -IDIR (a library's include folder: cuDNN, NCCL) as
#   -isystem, as the build has it, so warnings inside the library's headers are not reported.
#   Without -D: CHORUS_WITH_CUDA=1, and CHORUS_WITH_CUDNN=1 / CHORUS_WITH_NCCL=1 when cudnn.h /
#   nccl.h is in nvcc's include folder. The repository root and nvcc's include folder are always on
#   the include path.
#
# Device side: nvcc's `--Werror all-warnings`. Host side: the flags above through -Xcompiler.
# -Wpedantic is left out because the host code nvcc generates uses GCC's `# 1 "file"` line markers,
# which -Wpedantic rejects in every file; the project's own .cc files keep it.
#
# Exit status: 0 all compile cleanly; 1 a file has a warning or error (nvcc's output is printed);
# 2 usage error; 77 skipped: no nvcc.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvcc="${NVCC:-}"
arch=90
host_flags="-Wall,-Wextra,-Wno-unused-parameter,-Wno-missing-field-initializers,-Werror"
jobs="$(nproc 2>/dev/null || echo 2)"
defines=() includes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nvcc) nvcc="$2"; shift ;;
    --arch) arch="$2"; shift ;;
    --host-flags) host_flags="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    -D*) defines+=("$1") ;;
    -I*) includes+=("${1#-I}") ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-cuda-warnings: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$nvcc" ]; then
  nvcc="$(command -v nvcc || true)"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
fi
if [ -z "$nvcc" ] || ! [ -x "$(command -v "$nvcc" 2>/dev/null)" ]; then
  echo "SKIPPED: no nvcc (set NVCC or --nvcc, or install the CUDA toolkit in /usr/local/cuda)"
  exit 77
fi
cuda_include="$(cd "$(dirname "$(command -v "$nvcc")")/../include" 2>/dev/null && pwd)"
if [ ${#defines[@]} -eq 0 ]; then
  defines=(-DCHORUS_WITH_CUDA=1)
  [ -f "$cuda_include/cudnn.h" ] && defines+=(-DCHORUS_WITH_CUDNN=1)
  [ -f "$cuda_include/nccl.h" ] && defines+=(-DCHORUS_WITH_NCCL=1)
fi

mapfile -t files < <(cd "$ROOT" && find . -mindepth 1 \( -type d \( -name 'build*' -o -name '.*' \) -prune \) \
                       -o -type f -name '*.cu' -print | sed 's|^\./||' | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "check-cuda-warnings: no .cu files under $ROOT"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/chorus-cuda-warnings.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The build's flags for .cu files (cmake/ChorusDependencies.cmake: C++17, Release), plus warnings.
flags=(-c -std=c++17 -O3 -DNDEBUG "--generate-code=arch=compute_${arch},code=sm_${arch}"
       --Werror all-warnings "-Xcompiler=-fPIC,${host_flags}"
       "${defines[@]}" "-I$ROOT")  # <chorus/...>: the sources are under chorus/
for dir in "$cuda_include" "${includes[@]}"; do
  [ -n "$dir" ] && [[ " ${flags[*]} " != *" -isystem=$dir "* ]] && flags+=("-isystem=$dir")
done
echo "check-cuda-warnings: ${#files[@]} .cu file(s), $("$nvcc" --version | tail -1 | sed 's/^Build //')"
echo "  nvcc ${flags[*]} FILE -o OBJ"

compile() {  # compile <index> <file>: writes $work/<index>.log and .rc
  local start=$SECONDS
  (cd "$ROOT" && "$nvcc" "${flags[@]}" "$2" -o "$work/$1.o") > "$work/$1.log" 2>&1
  echo "$? $((SECONDS - start))" > "$work/$1.rc"
}

running=0
for i in "${!files[@]}"; do
  compile "$i" "${files[$i]}" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
for i in "${!files[@]}"; do
  read -r rc secs < "$work/$i.rc"
  # nvcc can print a warning yet exit 0 (a host warning -Werror missed): any output is a failure.
  if [ "$rc" -ne 0 ] || [ -s "$work/$i.log" ]; then
    failed=$((failed + 1))
    echo "FAIL ${files[$i]} (exit $rc, ${secs} s):"
    sed 's/^/    /' "$work/$i.log"
  else
    echo "ok   ${files[$i]} (${secs} s)"
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "check-cuda-warnings: $failed of ${#files[@]} file(s) have warnings or errors"
  exit 1
fi
echo "check-cuda-warnings: all ${#files[@]} file(s) compile without warnings"
