#!/usr/bin/env bash
# Proves a static chorus (-DBUILD_SHARED_LIBS=OFF) the whole way, as a user builds it: configures and
# builds chorus's libraries and installed programs static (no tests, no benchmarks), then runs
# tests/install/install_test.cmake on that build — install, move the prefix, check headers and CMake
# files, build and run tests/install/consumer against it with nothing hidden, run the installed
# chorus-devices and mnist_mirrored --version — and finally trains the installed mnist_mirrored for
# one short epoch (oneDNN and OpenMP at work in a static program). Exit 0 when all pass.
#
#   scripts/static-install-check.sh [--keep] [-j N] [-- extra cmake configure arguments]
#
# The build goes to build-static-check/ (removed at the end unless --keep or a failure). About 3.5 min
# on the 2-core dev VM with CUDA, nearly all of it the build. The suite's install_static_package test
# does the same checks on every CI run in ~8 s, from the shared build's object files; this script is
# what proves the static build itself (its compile, its installed programs), run by hand after
# changes to CMake files (docs/development.md, "The installed package").
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
keep=0
jobs="$(nproc)"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    -j) jobs="$2"; shift ;;
    -j*) jobs="${1#-j}" ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--keep] [-j N] [-- cmake arguments]" >&2; exit 2 ;;
  esac
  shift
done
build="$repo/build-static-check"
work="$build/install-check"
cuda=()
[ -x /usr/local/cuda/bin/nvcc ] && cuda=(-DCUDA_COMPILER=/usr/local/cuda/bin/nvcc)

step() {  # step NAME COMMAND...: runs it, prints the result line with its time
  local name="$1"; shift
  local t0; t0=$(date +%s)
  if "$@" > "$build/$name.log" 2>&1; then
    echo "static-install-check: $name: ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "static-install-check: $name: FAILED ($(( $(date +%s) - t0 )) s); last lines of $build/$name.log:"
    tail -30 "$build/$name.log"
    exit 1
  fi
}

rm -rf "$build"
mkdir -p "$build"
step configure cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DCHORUS_BUILD_TESTS=OFF -DCHORUS_BUILD_BENCH=OFF "${extra[@]}"
step build cmake --build "$build" -j"$jobs"
step install-test cmake -DBUILD_DIR="$build" -DSOURCE_DIR="$repo" -DCONSUMER_DIR="$repo/tests/install/consumer" \
  -DWORK_DIR="$work" -DGENERATOR=Ninja "${cuda[@]}" -P "$repo/tests/install/install_test.cmake"
step train env CUDA_VISIBLE_DEVICES= "$work/moved/prefix/bin/mnist_mirrored" --epochs 1 --train 3000 --test 500 \
  --min-accuracy 0.5 --logdir "$work/logs"
if [ "$keep" -eq 0 ]; then
  rm -rf "$build"
else
  echo "static-install-check: kept $build (installed prefix: $work/moved/prefix)"
fi
echo "static-install-check: PASSED"
