#!/usr/bin/env bash
# Makes (once) and prints the path of a clean Debian 12 (bookworm) minbase root as a tarball, made by
# debootstrap and cached: the fresh machine of scripts/fresh-machine-check.sh and the container base
# of scripts/container-check.sh. Run as root.
#
#   scripts/debian-base.sh [--refresh]    prints the tarball's path on stdout (progress on stderr)
#
# CHORUS_FRESH_CACHE: the cache folder (default /var/cache/chorus-fresh-machine);
# CHORUS_DEBIAN_MIRROR: the mirror (default http://deb.debian.org/debian). debootstrap is
# installed with apt when missing.
set -euo pipefail
refresh=0
[ "${1:-}" = "--refresh" ] && refresh=1
[ "$(id -u)" -eq 0 ] || { echo "debian-base: run as root (debootstrap)" >&2; exit 2; }
mirror="${CHORUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${CHORUS_FRESH_CACHE:-/var/cache/chorus-fresh-machine}"
base="$cache/bookworm-minbase.tar"
mkdir -p "$cache"
if [ "$refresh" = 1 ] || [ ! -s "$base" ]; then
  if ! command -v debootstrap >/dev/null; then
    echo "debian-base: installing debootstrap" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
  fi
  work="$(mktemp -d /var/tmp/chorus-base.XXXXXX)"
  trap 'rm -rf --one-file-system "$work"' EXIT
  echo "debian-base: debootstrap --variant=minbase bookworm from $mirror" >&2
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$work/base" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; echo "debian-base: debootstrap failed" >&2; exit 1; }
  tar -C "$work/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  echo "debian-base: cached in $base ($(( $(date +%s) - t0 )) s)" >&2
fi
echo "$base"
