#!/usr/bin/env bash
# Builds chorus with ASan+UBSan and with TSan (CHORUS_SANITIZE=address / thread, CPU only: the
# sanitizers cannot see into GPU code, and this machine has no GPU) and runs the test suite under
# each. Exit status 0 only when both are clean.
#
#   scripts/sanitize.sh                 the whole suite under both
#   scripts/sanitize.sh -R 'checkpoint|hostile' [-L label]   a subset (ctest's -R / -L)
#   SANITIZERS=address scripts/sanitize.sh                  one of them
#
# Build trees: build-asan/, build-tsan/ (reused). Logs: build-<san>/sanitize.log. The figures of
# the last clean run go into docs/reliability.md (date, commit, tests, time).
set -euo pipefail
cd "$(dirname "$0")/.."
filter=("$@")
sanitizers=${SANITIZERS:-"address thread"}
status=0
for san in $sanitizers; do
  case "$san" in address) dir=build-asan ;; thread) dir=build-tsan ;; *) echo "sanitize: unknown '$san'" >&2; exit 2 ;; esac
  start=$(date +%s)
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_SANITIZE="$san" \
        -DCHORUS_ENABLE_CUDA=OFF -DCHORUS_BUILD_BENCH=OFF > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" -j"$(nproc)" > "$dir/build.log" 2>&1 || { tail -50 "$dir/build.log"; exit 1; }
  # Each test gets the sanitizer options and suppression files from CMake (CHORUS_SANITIZER_TEST_ENV
  # in cmake/ChorusTargets.cmake), so a plain `ctest --test-dir build-asan` runs the same way.
  set +e
  ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" 2>&1 | tee "$dir/sanitize.log" | tail -25
  rc=${PIPESTATUS[0]}
  set -e
  echo "sanitize: $san: exit $rc in $(( $(date +%s) - start )) s at $(git rev-parse --short HEAD) ($(date -u +%F))"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
