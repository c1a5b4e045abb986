#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine: a clean Debian 12 (bookworm) root made with
# debootstrap, a clean clone of HEAD with ../shared beside it, this machine's CUDA toolkit mounted
# read-only at /usr/local/cuda (as machines of this kind have it), and each README command run
# verbatim, as root, in its own untouched copy of that root (a new user runs one or the other; CI
# runs only the second). Prints each command's exit status and wall time; exits non-zero if any
# failed. Run as root.
#
#   scripts/fresh-machine-check.sh [--cpu-only] [--only 1|2] [--refresh-base] [--keep]
#
#   --cpu-only      no CUDA toolkit in the root: the CPU-only build must pass too
#   --only N        run only the README's N-th command
#   --refresh-base  bootstrap the cached base again (it lives in $CHORUS_FRESH_CACHE,
#                   default /var/cache/chorus-fresh-machine; the base is a tarball and every
#                   check unpacks it anew, so nothing a check did survives into the next)
#   --keep          keep the root after the check (for a look inside; prints where)
#
# What the root shares with this machine, and why: the network (apt and PyPI, as a fresh machine
# of this kind has them), the local CA certificates in /usr/local/share/ca-certificates and the
# PIP_* variables (this workplace reaches PyPI through a TLS proxy that a fresh machine of this
# kind trusts), /usr/local/cuda read-only (unless --cpu-only). Nothing else: CMake, compilers and
# every library come from the README command's own install step, so Debian's stock CMake 3.25
# (not this machine's patched FindCUDAToolkit) is what configures.
#
# Isolation and clean-up: everything runs in a private mount and PID namespace (unshare), so the
# root's mounts are invisible outside it and vanish with it, and every process the commands left
# (mpirun daemons, ...) is killed when it ends; the temporary root is then removed, also on
# Ctrl-C or SIGTERM. Logs stay in /var/tmp/chorus-fresh-logs-<time>/ (printed at the end).
set -euo pipefail

cpu_only=0; only=""; refresh=0; keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-only) cpu_only=1 ;;
    --only) only="${2:?--only takes 1 or 2}"; shift ;;
    --refresh-base) refresh=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "fresh-machine-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$only" in ""|1|2) ;; *) echo "fresh-machine-check: --only takes 1 or 2, not '$only'" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine-check: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(cd "$repo/.." && pwd)/shared"
[ -d "$shared" ] || { echo "fresh-machine-check: $shared missing (the checkout's ../shared)" >&2; exit 2; }
stamp="$(date +%Y%m%d-%H%M%S)"
logs="/var/tmp/chorus-fresh-logs-$stamp"
mkdir -p "$logs"

# --- the README's two commands, verbatim: the first two ```bash blocks --------------------------
mapfile -t commands < <(awk '/^```bash$/ {inblock=1; next} /^```/ {inblock=0} inblock && NF {print; n++} n==2 {exit}' "$repo/README.md")
[ ${#commands[@]} -eq 2 ] || { echo "fresh-machine-check: README.md does not open with two \`\`\`bash commands" >&2; exit 1; }

# --- tools on this machine ----------------------------------------------------------------------
command -v unshare >/dev/null || { echo "fresh-machine-check: unshare (util-linux) missing" >&2; exit 1; }

# --- clean-up, also when interrupted ------------------------------------------------------------
work=""; child=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  if [ -n "$work" ] && [ -d "$work" ]; then
    if [ "$keep" = 1 ]; then echo "fresh-machine-check: kept $work"; else rm -rf --one-file-system "$work"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "fresh-machine-check: interrupted" >&2; exit 130' INT TERM

# --- the base: debootstrap once, cached as a tarball (scripts/debian-base.sh) ----------------------
base="$("$repo/scripts/debian-base.sh" $([ "$refresh" = 1 ] && echo --refresh))"

# --- the clean clone of HEAD --------------------------------------------------------------------
head="$(git -C "$repo" rev-parse --short HEAD)"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-machine-check: note: uncommitted changes in $repo are NOT checked (HEAD $head is)"
fi

# Runs command number $1 in a fresh root; sets rc and secs.
run_one() {
  local n="$1" cmd="${commands[$(( $1 - 1 ))]}"
  work="$(mktemp -d /var/tmp/chorus-fresh.XXXXXX)"
  local root="$work/root"
  mkdir -p "$root"
  tar -C "$root" -xf "$base"
  git clone -q --no-hardlinks "$repo" "$root/work/main"
  cp -a "$shared" "$root/work/shared"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  local cuda_mount=""
  if [ "$cpu_only" = 0 ]; then
    [ -d /usr/local/cuda ] || { echo "fresh-machine-check: /usr/local/cuda missing (use --cpu-only)" >&2; return 1; }
    mkdir -p "$root/usr/local/cuda"
    cuda_mount="mount --bind /usr/local/cuda '$root/usr/local/cuda' && mount -o remount,bind,ro '$root/usr/local/cuda' &&"
  fi
  # The environment of a root login plus what this workplace's machines carry (PIP_*), and CI=true
  # as CI runs the test command (an interop test that skips is then a failure).
  local envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 CI=true)
  local v
  for v in $(compgen -e | grep -E '^PIP_(CERT|DEFAULT_TIMEOUT|DISABLE_PIP_VERSION_CHECK|INDEX_URL|EXTRA_INDEX_URL|TRUSTED_HOST)$' || true); do
    envs+=("$v=${!v}")
  done
  local inner
  inner="set -e; mount -t proc proc '$root/proc'; mount -t sysfs sysfs '$root/sys';
         mount --rbind /dev '$root/dev'; mount -t tmpfs tmpfs '$root/dev/shm'; mount -t tmpfs tmpfs '$root/tmp';
         $cuda_mount
         exec chroot '$root' /usr/bin/env -i $(printf "%q " "${envs[@]}") /bin/bash -c $(printf %q "cd /work/main && $cmd")"
  echo "fresh-machine-check: [$n] $cmd"
  echo "fresh-machine-check: [$n] root $root, log $logs/command-$n.log"
  local t0; t0=$(date +%s)
  set +e
  unshare --mount --pid --fork --kill-child --propagation private /bin/bash -c "$inner" > "$logs/command-$n.log" 2>&1 &
  child=$!
  wait "$child"; rc=$?
  child=""
  set -e
  secs=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ]; then
    echo "fresh-machine-check: [$n] FAILED (exit $rc) after ${secs} s; last lines of the log:"
    tail -n 40 "$logs/command-$n.log" | sed 's/^/    /'
  fi
  if [ "$keep" = 1 ]; then echo "fresh-machine-check: kept $work"; else rm -rf --one-file-system "$work"; fi
  work=""
}

mode="with CUDA toolkit $(readlink -f /usr/local/cuda 2>/dev/null)"
[ "$cpu_only" = 1 ] && mode="CPU only (no CUDA toolkit)"
echo "fresh-machine-check: HEAD $head, Debian bookworm minbase, $mode, $(nproc) cores"
summary=(); failed=0
for n in 1 2; do
  [ -n "$only" ] && [ "$only" != "$n" ] && continue
  run_one "$n"
  summary+=("[$n] exit $rc, $(( secs / 60 )) min $(( secs % 60 )) s: ${commands[$(( n - 1 ))]}")
  [ "$rc" -eq 0 ] || failed=1
done
echo "fresh-machine-check: summary (HEAD $head, $mode)"
printf '  %s\n' "${summary[@]}"
echo "fresh-machine-check: logs in $logs"
exit "$failed"
