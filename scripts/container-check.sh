#!/usr/bin/env bash
# Proves docker/Dockerfile with podman on this machine, which reaches no container registry: the
# clean Debian 12 root of scripts/debian-base.sh is imported as the image localhost/chorus-base:bookworm
# and is both stages' base (a CPU build: no CUDA in that root), the image is built from this working
# tree, and in it run
#   1. the default command (mnist_mirrored: the seed CNN under MirroredStrategy on two logical
#      devices, which fails below 97% held-out accuracy),
#   2. mnist_mirrored --version (the commit it was built from),
#   3. mpirun -np 2 chorus-train --strategy multi_worker (two processes inside one container).
# Prints each step's exit status and time; exit 0 when all pass, 1 when one fails, 77 (skipped, with
# the reason) without root, podman or runc. Run as root:
#
#   scripts/container-check.sh [--keep-image]
#
# Flags this machine needs (issue 23, item 11): podman's global --runtime runc --cgroup-manager
# cgroupfs (crun fails on its hybrid cgroups), and --ulimit nofile=1024:1024 --ulimit nproc=1024:1024
# on build and run (the default rlimits are refused); --network host for apt in the build (as the
# fresh-machine check shares the network). Debian: apt-get install podman runc.
set -euo pipefail
keep=0
[ "${1:-}" = "--keep-image" ] && keep=1
skip() { echo "container-check: SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root (podman builds as root here)"
command -v podman >/dev/null || skip "podman missing (apt-get install podman runc)"
command -v runc >/dev/null || skip "runc missing (apt-get install runc)"

repo="$(cd "$(dirname "$0")/.." && pwd)"
podman=(podman --runtime runc --cgroup-manager cgroupfs)
limits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
base_image=localhost/chorus-base:bookworm
image=localhost/chorus:check
commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit-dirty"
logs="$(mktemp -d /var/tmp/chorus-container-logs.XXXXXX)"
status=0

step() {  # step NAME COMMAND...: runs it, logs to $logs/NAME.log, prints the result line
  local name="$1"; shift
  local t0; t0=$(date +%s)
  if "$@" > "$logs/$name.log" 2>&1; then
    echo "container-check: $name: ok ($(( $(date +%s) - t0 )) s)"
  else
    local rc=$?
    echo "container-check: $name: FAILED (exit $rc, $(( $(date +%s) - t0 )) s); last lines of $logs/$name.log:"
    tail -n 25 "$logs/$name.log" | sed 's/^/  /'
    status=1
    return 1
  fi
}

tarball="$("$repo/scripts/debian-base.sh")"
# The base image, made again when the tarball is newer than it.
made="$("${podman[@]}" image inspect --format '{{.Created.Unix}}' "$base_image" 2>/dev/null || echo 0)"
if [ "$made" -lt "$(stat -c %Y "$tarball")" ]; then
  step import "${podman[@]}" import --change 'CMD ["/bin/bash"]' "$tarball" "$base_image" || exit 1
fi
step build "${podman[@]}" build "${limits[@]}" --network host -f "$repo/docker/Dockerfile" \
  --build-arg BASE="$base_image" --build-arg RUNTIME_BASE="$base_image" --build-arg COMMIT="$commit" \
  -t "$image" "$repo" || exit 1
run=("${podman[@]}" run --rm "${limits[@]}" --network host "$image")
step default-command "${run[@]}" || true
step version "${run[@]}" mnist_mirrored --version || true
grep -q "$commit" "$logs/version.log" || { echo "container-check: version: does not name commit $commit"; status=1; }
step mpirun "${run[@]}" mpirun --oversubscribe -np 2 chorus-train --strategy multi_worker --epochs 1 --train 2000 \
  --test 500 --quiet || true
echo "container-check: image size $("${podman[@]}" image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
[ "$keep" = 1 ] || "${podman[@]}" rmi -f "$image" > /dev/null 2>&1 || true
"${podman[@]}" image prune -f > /dev/null 2>&1 || true  # the build's intermediate layers
echo "container-check: logs in $logs"
[ "$status" = 0 ] && echo "container-check: all passed" || echo "container-check: FAILED"
exit "$status"
