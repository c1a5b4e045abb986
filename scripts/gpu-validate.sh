#!/usr/bin/env bash
# scripts/gpu-validate.sh: build chorus for sm_90 and run every GPU path in one command, writing one
# report (markdown + JSON) for docs/gpu-validation.md. Made for the device machine that the device
# tool lends (no Debian packages, no Open MPI, no internet; nvcc and CMake there; cuDNN and NCCL in
# PyTorch's NVIDIA wheels under site-packages/nvidia/), and runnable anywhere: without a GPU it
# configures, builds and says plainly that no GPU ran.
#
#   scripts/gpu-validate.sh [--build-dir DIR] [--report-dir DIR] [--gtest-src DIR] [--jobs N]
#                           [--deadline SECONDS] [--suite] [--no-build] [--only-tests REGEX]
#                           [--targets 'T1 T2 ...'] [--test-timeout SECONDS] [--bench-train-args 'ARGS']
#
#   --build-dir   build tree (default build-gpu)
#   --report-dir  where report.md, report.json and logs.tar.gz go (default $OUT if set, else
#                 <build-dir>/gpu-report)
#   --gtest-src   GoogleTest sources to build when find_package(GTest) finds none (default: the
#                 first of .gpu-carry/googletest, /usr/src/googletest)
#   --deadline    seconds from the start after which no new phase begins (default 540: a device
#                 call is limited to 600 s); a skipped phase is reported as such
#   --suite       after the GPU phases, also run the rest of the test suite (ctest -LE gpu)
#   --no-build    reuse an existing build tree (configure and build are reported as skipped)
#   --only-tests  ctest -R filter for the gpu-labelled tests (default: all of them)
#   --targets     build only these targets (space- or comma-separated; default: everything). The
#                 phases whose programs were not built fail, so name what they need: the gpu
#                 tests' executables, chorus-devices, mnist_mirrored and the bench_* programs.
#                 `--targets gpu` names exactly those (every tests/**/*_gpu_test.cc's program, the
#                 NCCL-over-MPI test, and the programs of the phases).
#   --test-timeout  ctest's limit per gpu test (default 300)
#   --bench-train-args  extra arguments for bench_train_gpu (e.g. '--steps 30 --batches 128,2048')
#
# Phases, each timed: probe (GPU, driver, toolkit), deps (CUDA, cuDNN, NCCL, GoogleTest), configure,
# build, devices (chorus-devices), main-job (mnist_mirrored on two virtual GPUs), bench-train-gpu
# (issue 42: the seed CNN against PyTorch eager on the same GPU; first of the measurements, as the
# scarce device time goes to it), gpu-tests (ctest -L gpu), bench-allocator, bench-allreduce,
# bench-ops, suite. Exit status: 0 when every
# phase that ran passed, 1 otherwise, 2 on bad arguments.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=build-gpu
report_dir=
gtest_src=
jobs=$(nproc)
deadline=540
run_suite=0
do_build=1
only_tests=
targets=
test_timeout=300
bench_train_args=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --report-dir) report_dir=$2; shift 2 ;;
    --gtest-src) gtest_src=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --suite) run_suite=1; shift ;;
    --no-build) do_build=0; shift ;;
    --only-tests) only_tests=$2; shift 2 ;;
    --targets) targets=${2//,/ }; shift 2 ;;
    --test-timeout) test_timeout=$2; shift 2 ;;
    --bench-train-args) bench_train_args=$2; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "gpu-validate: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $deadline =~ ^[0-9]+$ ]] || { echo "gpu-validate: --deadline needs whole seconds, got '$deadline'" >&2; exit 2; }
[[ $test_timeout =~ ^[0-9]+$ && $test_timeout -gt 0 ]] || { echo "gpu-validate: --test-timeout needs whole seconds, got '$test_timeout'" >&2; exit 2; }
[[ $jobs =~ ^[0-9]+$ && $jobs -gt 0 ]] || { echo "gpu-validate: --jobs needs a positive count, got '$jobs'" >&2; exit 2; }
cd "$root"
[[ $build_dir = /* ]] || build_dir="$root/$build_dir"
[[ -n $report_dir ]] || report_dir=${OUT:-$build_dir/gpu-report}
mkdir -p "$report_dir" "$build_dir"
logs="$build_dir/gpu-validate-logs"
rm -rf "$logs"; mkdir -p "$logs"
phases="$logs/phases.tsv"
: >"$phases"
start=$(date +%s)
failed=0
gpu_present=0

# run_phase NAME TIMEOUT COMMAND...: runs COMMAND with its output in $logs/NAME.log, records
# NAME, status (passed/failed/skipped), exit code and seconds in phases.tsv.
run_phase() {
  local name=$1 limit=$2; shift 2
  local now; now=$(date +%s)
  if (( now - start >= deadline )); then
    printf '%s\tskipped\t-\t0\tdeadline (%ss) reached\n' "$name" "$deadline" >>"$phases"
    echo "== $name: skipped (deadline)"; return 0
  fi
  local left=$(( deadline + 50 - (now - start) ))
  (( limit > left )) && limit=$left
  echo "== $name (at most ${limit}s)"
  local t0 rc; t0=$(date +%s.%N)
  # Shell functions (probe, deps) run in a child bash that inherits them (export -f below).
  timeout --kill-after=10 "$limit" bash -c '"$@"' phase "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local secs; secs=$(python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  local status=passed note=
  if (( rc == 124 || rc == 137 )); then status=failed; note="timed out after ${limit}s"
  elif (( rc != 0 )); then status=failed; note="exit $rc"; fi
  [[ $status = failed ]] && failed=1
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" "$note" >>"$phases"
  echo "   $status in ${secs}s${note:+ ($note)}"; tail -n 5 "$logs/$name.log" | sed 's/^/   | /'
  return $rc
}
skip_phase() { printf '%s\tskipped\t-\t0\t%s\n' "$1" "$2" >>"$phases"; echo "== $1: skipped ($2)"; }

finish() {
  python3 "$root/scripts/gpu_report.py" --logs "$logs" --out "$report_dir" --gpu-present "$gpu_present" \
    --commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo +changes)"
  tar -C "$logs" -czf "$report_dir/logs.tar.gz" . 2>/dev/null
  echo "gpu-validate: report in $report_dir/report.md (logs: $report_dir/logs.tar.gz)"
  exit $failed
}
trap finish EXIT

# --- probe ---------------------------------------------------------------------------------------
probe() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "host: $(uname -srm), $(nproc) cores"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || true
  else echo "nvidia-smi: not found"; fi
  command -v nvcc >/dev/null && nvcc --version | tail -n 2 || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo "nvcc: not found"
  cmake --version | head -n 1; ninja --version 2>/dev/null | sed 's/^/ninja /' || echo "ninja: not found"
}
export -f probe
run_phase probe 60 probe
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then gpu_present=1; fi

# --- deps: cuDNN and NCCL from the toolkit, $CUDNN_HOME/$NCCL_HOME, or PyTorch's NVIDIA wheels;
# GoogleTest installed, or built from sources into the build tree. -----------------------------
deps_dir="$build_dir/deps"
cmake_extra=()
# wheel_home PACKAGE HEADER LIB: prints a folder with include/HEADER and lib/lib<LIB>.so linking to
# the wheel's versioned library (the wheels ship only libcudnn.so.9 / libnccl.so.2, which
# find_library does not take), or nothing.
wheel_home() {
  local pkg=$1 header=$2 lib=$3 dir
  dir=$(python3 -c "import importlib, sys; m = importlib.import_module('nvidia.$pkg'); print(list(m.__path__)[0])" 2>/dev/null) || return 0
  [[ -f $dir/include/$header ]] || return 0
  local so; so=$(ls "$dir"/lib/lib"$lib".so.* 2>/dev/null | sort | head -n 1)
  [[ -n $so ]] || return 0
  local home="$deps_dir/$pkg"; mkdir -p "$home/lib"
  ln -sfn "$dir/include" "$home/include"; ln -sf "$so" "$home/lib/lib$lib.so"
  echo "$home"
}
deps() {
  mkdir -p "$deps_dir"
  local cuda_inc=/usr/local/cuda/include
  if [[ -z ${CUDNN_HOME:-} && ! -f $cuda_inc/cudnn.h ]]; then
    CUDNN_HOME=$(wheel_home cudnn cudnn.h cudnn); export CUDNN_HOME
    echo "cuDNN: ${CUDNN_HOME:-none found (cuDNN kernels will be off)}"
  else echo "cuDNN: ${CUDNN_HOME:-$cuda_inc}"; fi
  if [[ -z ${NCCL_HOME:-} && ! -f $cuda_inc/nccl.h ]]; then
    NCCL_HOME=$(wheel_home nccl nccl.h nccl); export NCCL_HOME
    echo "NCCL: ${NCCL_HOME:-none found (NCCL collectives will be off)}"
  else echo "NCCL: ${NCCL_HOME:-$cuda_inc}"; fi
  # GoogleTest: a config package if one is installed, else sources built here.
  if [[ ! -f /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake && ! -f /usr/local/lib/cmake/GTest/GTestConfig.cmake ]]; then
    local src=$gtest_src
    if [[ -z $src ]]; then
      for c in "$root/.gpu-carry/googletest" /usr/src/googletest; do [[ -f $c/CMakeLists.txt ]] && { src=$c; break; }; done
    fi
    [[ -n $src ]] || { echo "GoogleTest: not installed and no sources (pass --gtest-src, or carry .gpu-carry/googletest)"; return 1; }
    if [[ ! -f $deps_dir/gtest/lib/cmake/GTest/GTestConfig.cmake ]]; then
      cmake -S "$src" -B "$deps_dir/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
        -DCMAKE_INSTALL_PREFIX="$deps_dir/gtest" -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_GMOCK=ON \
        && cmake --build "$deps_dir/gtest-build" -j"$jobs" && cmake --install "$deps_dir/gtest-build" || return 1
    fi
    echo "GoogleTest: built from $src into $deps_dir/gtest"
  else echo "GoogleTest: installed"; fi
  # nlohmann-json (header only): an installed config package, else a copy carried in
  # .gpu-carry/nlohmann (include/nlohmann + share/cmake/nlohmann_json, copied from Debian's
  # nlohmann-json3-dev; docs/gpu-validation.md shows the command).
  local json_prefix=
  if ! ls /usr/share/cmake/nlohmann_json /usr/lib/cmake/nlohmann_json /usr/local/share/cmake/nlohmann_json \
        /usr/local/lib/cmake/nlohmann_json >/dev/null 2>&1; then
    json_prefix="$root/.gpu-carry/nlohmann"
    [[ -f $json_prefix/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake ]] \
      || { echo "nlohmann-json: not installed and not carried (.gpu-carry/nlohmann)"; return 1; }
    echo "nlohmann-json: carried ($json_prefix)"
  else echo "nlohmann-json: installed"; fi
  # The wheels' real library folders go on LD_LIBRARY_PATH: libcudnn.so.9 loads its sub-libraries
  # (libcudnn_ops, _cnn, ...) by name at run time.
  local ld_extra= h
  for h in ${CUDNN_HOME:-} ${NCCL_HOME:-}; do
    [[ -L $h/lib/libcudnn.so || -L $h/lib/libnccl.so ]] && ld_extra="$ld_extra:$(dirname "$(readlink -f "$h"/lib/lib*.so)")"
  done
  { echo "CUDNN_HOME=${CUDNN_HOME:-}"; echo "NCCL_HOME=${NCCL_HOME:-}"; echo "LD_EXTRA=$ld_extra"
    echo "JSON_PREFIX=$json_prefix"; } >"$deps_dir/env"
}
export -f deps wheel_home
export deps_dir gtest_src root jobs
if (( do_build )); then
  run_phase deps 300 deps
  [[ -f $deps_dir/env ]] && { set -a; . "$deps_dir/env"; set +a; }
  [[ -n ${LD_EXTRA:-} ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}${LD_EXTRA}"
  prefixes=()
  [[ -d $deps_dir/gtest ]] && prefixes+=("$deps_dir/gtest")
  [[ -n ${JSON_PREFIX:-} ]] && prefixes+=("$JSON_PREFIX")
  (( ${#prefixes[@]} )) && cmake_extra+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${prefixes[*]}")")
  run_phase configure 180 cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 "${cmake_extra[@]}" || exit
  if [[ $targets == gpu ]]; then
    # A test program is named after its path under tests/ (tests/ops/nan_gpu_test.cc: ops_nan_gpu_test).
    targets="chorus-devices mnist_mirrored bench_train_gpu bench_allocator bench_virtual_gpu_allreduce bench_ops"
    targets="$targets bench_gpu_launch collective_nccl_mpi_test"
    while IFS= read -r f; do
      rel=${f#"$root"/tests/}; rel=${rel%.cc}; targets="$targets ${rel//\//_}"
    done < <(find "$root/tests" -name '*_gpu_test.cc' | sort)
  fi
  if [[ -n $targets && -f $build_dir/build.ninja ]]; then
    # Targets this configuration does not define (no MPI there, say) are named and dropped: one
    # unknown target would fail the whole build.
    known=
    for t in $targets; do
      if grep -q "^build $t: phony" "$build_dir/build.ninja"; then known="$known $t"
      else echo "gpu-validate: no target '$t' in this configuration; not built" | tee -a "$logs/targets.log"; fi
    done
    targets=${known# }
  fi
  # shellcheck disable=SC2086  # $targets is a word list on purpose
  run_phase build 900 cmake --build "$build_dir" -j"$jobs" ${targets:+--target $targets} || exit
else
  skip_phase deps "--no-build"; skip_phase configure "--no-build"; skip_phase build "--no-build"
  [[ -f $deps_dir/env ]] && { set -a; . "$deps_dir/env"; set +a; }
  [[ -n ${LD_EXTRA:-} ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}${LD_EXTRA}"
fi
bin="$build_dir/bin"

if (( ! gpu_present )); then
  for p in devices main-job bench-train-gpu gpu-tests bench-allocator bench-allreduce bench-ops; do skip_phase "$p" "no GPU on this machine: nothing ran on a GPU"; done
  (( run_suite )) && { run_phase suite 3600 ctest --test-dir "$build_dir" -LE gpu -j"$jobs" --output-on-failure || true; }
  exit
fi

run_phase devices 60 "$bin/chorus-devices" || true
run_phase main-job 300 "$bin/mnist_mirrored" --logdir "$build_dir/gpu-validate-logdir" || true
# shellcheck disable=SC2086  # $bench_train_args is a word list on purpose
run_phase bench-train-gpu 420 "$bin/bench_train_gpu" $bench_train_args || true
run_phase gpu-tests 420 ctest --test-dir "$build_dir" -L gpu ${only_tests:+-R "$only_tests"} --output-on-failure \
  --timeout "$test_timeout" --output-junit "$logs/gpu-tests.xml" || true
run_phase bench-allocator 120 "$bin/bench_allocator" || true
run_phase bench-allreduce 180 "$bin/bench_virtual_gpu_allreduce" || true
run_phase bench-ops 180 "$bin/bench_ops" || true
(( run_suite )) && { run_phase suite 3600 ctest --test-dir "$build_dir" -LE gpu -j"$jobs" --timeout 300 \
  --output-on-failure --output-junit "$logs/suite.xml" || true; }
exit
