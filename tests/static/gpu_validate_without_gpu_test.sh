#!/usr/bin/env bash
# scripts/gpu-validate.sh on a machine without a GPU (the CI machine): it must say plainly that
# nothing ran on a GPU, skip every GPU phase with that reason, exit 0, and refuse bad arguments
# with exit 2. Uses the existing build tree (--no-build). Skipped (77) where a GPU is present:
# there the script would run the GPU tests from inside this test.
#   gpu_validate_without_gpu_test.sh <source root> <build dir> <scratch dir>
set -uo pipefail
root=$1 build=$2 scratch=$3
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "a GPU is present: the no-GPU mode is not what this machine shows"; exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$scratch"; mkdir -p "$scratch"
"$root/scripts/gpu-validate.sh" --bogus >"$scratch/bogus.log" 2>&1
[[ $? -eq 2 ]] || fail "an unknown argument did not exit 2"
grep -q "unknown argument '--bogus'" "$scratch/bogus.log" || fail "the unknown argument was not named"
"$root/scripts/gpu-validate.sh" --deadline soon >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "a non-numeric --deadline did not exit 2"

"$root/scripts/gpu-validate.sh" --no-build --build-dir "$build" --report-dir "$scratch/report" --deadline 120 \
  >"$scratch/run.log" 2>&1
rc=$?
cat "$scratch/run.log"
[[ $rc -eq 0 ]] || fail "exit $rc without a GPU (want 0)"
md="$scratch/report/report.md" json="$scratch/report/report.json"
[[ -s $md && -s $json && -s $scratch/report/logs.tar.gz ]] || fail "report.md, report.json or logs.tar.gz missing"
grep -q "No GPU on this machine: nothing ran on a GPU" "$md" || fail "report.md does not say that no GPU ran"
python3 - "$json" <<'PY' || fail "report.json is not what the no-GPU mode writes"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["gpu_present"] is False, r["gpu_present"]
ph = {p["phase"]: p for p in r["phases"]}
for name in ("gpu-tests", "devices", "main-job", "bench-allocator", "bench-allreduce", "bench-ops"):
    assert ph[name]["status"] == "skipped" and "no GPU" in ph[name]["note"], (name, ph.get(name))
assert ph["probe"]["status"] == "passed", ph["probe"]
assert ph["build"]["status"] == "skipped", ph["build"]
PY
echo "gpu-validate without a GPU: exit 0, every GPU phase skipped with the reason, report written"
