#!/usr/bin/env bash
# scripts/gpu-profile.sh: the GPU time of one training step of the seed CNN, kernel by kernel,
# chorus against PyTorch eager on the same GPU (issue 42: where a GPU-bound step spends its time).
# Runs each configuration under Nsight Compute (ncu) with one metric, gpu__time_duration.sum, over
# P steps that the program brackets with cudaProfilerStart/Stop (bench_train_gpu --profile-steps,
# torch_seed_cnn_gpu.py --profile-steps), and summarises each with scripts/ncu_summary.py.
#
#   scripts/gpu-profile.sh [--build-dir DIR] [--out DIR] [--steps P] [--batch B] [--dtypes 'float32 bfloat16']
#                          [--configs 'one_device:resident mirrored_2vgpu:resident'] [--no-torch]
#
# --build-dir  the build tree with bin/bench_train_gpu (default build-gpu, scripts/gpu-validate.sh's)
# --out        where the .csv files and summary.txt go (default $OUT if set, else <build-dir>/gpu-profile)
# Needs a GPU and ncu (the device machine's image has it); the clocks are left alone
# (--clock-control none). Kernel times under ncu are one kernel at a time: the sum is the GPU's
# busy time per step, not the wall time of an overlapped step. Exit status: 0 when every run
# produced a summary, 1 otherwise, 2 on bad arguments.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build-gpu
out=
steps=3
batch=2048
dtypes="float32 bfloat16"
configs="one_device:resident"
torch=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "gpu-profile: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[0-9]+$ && $steps -gt 0 ]] || { echo "gpu-profile: --steps needs a positive count" >&2; exit 2; }
[[ $batch =~ ^[0-9]+$ && $batch -gt 0 ]] || { echo "gpu-profile: --batch needs a positive count" >&2; exit 2; }
out=${out:-${OUT:-$build_dir/gpu-profile}}
mkdir -p "$out"
bench=$build_dir/bin/bench_train_gpu
command -v ncu >/dev/null || { echo "gpu-profile: ncu not found" >&2; exit 1; }
[[ -x $bench ]] || { echo "gpu-profile: $bench not built" >&2; exit 1; }
# The wheels' cuDNN/NCCL (scripts/gpu-validate.sh's deps phase writes where they are).
if [[ -f $build_dir/deps/env ]]; then set -a; . "$build_dir/deps/env"; set +a; export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}${LD_EXTRA:-}"; fi

failed=0
summary=$out/summary.txt
: >"$summary"
# profile NAME STEPS COMMAND...: ncu over COMMAND's profiled range into NAME.csv, summarised.
profile() {
  local name=$1 n=$2; shift 2
  echo "== $name: $*" | tee -a "$summary"
  timeout --kill-after=10 300 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
    -f -o "$out/$name" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if (( rc != 0 )) || [[ ! -f $out/$name.ncu-rep ]]; then
    echo "   failed (exit $rc); the end of its log:" | tee -a "$summary"; tail -n 8 "$out/$name.log" | tee -a "$summary"
    failed=1; return
  fi
  ncu --import "$out/$name.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum >"$out/$name.csv" 2>>"$out/$name.log"
  python3 "$root/scripts/ncu_summary.py" "$out/$name.csv" --steps "$n" --label "$name" | tee -a "$summary" || failed=1
  rm -f "$out/$name.ncu-rep"  # the csv holds what the summary used; reports are large
}

for dtype in $dtypes; do
  for c in $configs; do
    strategy=${c%%:*} input=${c#*:}
    profile "chorus_${strategy}_${input}_b${batch}_${dtype}" "$steps" \
      "$bench" --child "$strategy" "$input" "$batch" "$dtype" --quick --steps 5 --windows 1 --tf32 on --profile-steps "$steps"
  done
  if (( torch )); then
    profile "pytorch_b${batch}_${dtype}" "$steps" python3 "$root/bench/train/torch_seed_cnn_gpu.py" --batch "$batch" \
      --dtype "$dtype" --steps 5 --warmup 5 --repeats 1 --tf32 on --profile-steps "$steps"
  fi
done
echo "gpu-profile: summary in $summary"
exit $failed
