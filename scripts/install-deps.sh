#!/usr/bin/env bash
# Installs what chorus builds with: the Debian packages, only those missing (as root; sudo if not).
# CUDA is optional and not installed here: with /usr/local/cuda present chorus builds its GPU part.
#
#   scripts/install-deps.sh          build dependencies (with what the tests build: GoogleTest,
#                                    Google Benchmark, clang/lld for the fuzz targets)
#   scripts/install-deps.sh --build-only
#                                    only what the library and its tools need (docker/Dockerfile:
#                                    a build without tests or benchmarks)
#   scripts/install-deps.sh --test   also what the test suite needs: Python with venv, iproute2
#                                    (the test hosts), clang-format 14 (static_format), and the pinned TensorFlow/TensorBoard test
#                                    environment
#                                    (scripts/test-python-env.sh, reused when already there)
#
# Every package is named here, Recommends included: apt runs with --no-install-recommends, so a
# package that another one only recommends (oneDNN's CMake config needs OpenCL's headers and
# library) must be listed, or a fresh machine fails where a used one passes.
# scripts/fresh-machine-check.sh proves this list on a clean Debian root. clang, libclang-rt-14-dev
# and lld build the libFuzzer targets (tests/fuzz/; lld links four of them).
set -euo pipefail
with_test=0 build_only=0
for a in "$@"; do
  case "$a" in
    --test) with_test=1 ;;
    --build-only) build_only=1 ;;
    *) echo "install-deps: unknown argument '$a' (valid: --test, --build-only)" >&2; exit 2 ;;
  esac
done
[ "$with_test$build_only" = 11 ] && { echo "install-deps: --test and --build-only exclude each other" >&2; exit 2; }
pkgs=(cmake ninja-build g++ make zlib1g-dev libpng-dev libjpeg62-turbo-dev nlohmann-json3-dev
      libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin libgloo-dev libboost-program-options-dev)
if [ "$build_only" = 0 ]; then
  pkgs+=(libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev lld)
fi
if [ "$with_test" = 1 ]; then
  # iproute2: the test hosts of tests/hosts (network namespaces, veth, tc; issue 18).
  # clang-format-14: static_format (scripts/format.sh uses clang-format 14 only; Debian bookworm's).
  pkgs+=(python3 python3-venv ca-certificates iproute2 clang-format-14)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ "$with_test" = 1 ]; then
  "$(dirname "$0")/test-python-env.sh"
fi
