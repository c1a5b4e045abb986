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
  # halt_on_error: the first report fails the test; detect_leaks: LeakSanitizer as part of ASan.
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp"
  set +e
  ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 900 "${filter[@]}" 2>&1 | tee "$dir/sanitize.log" | tail -25
  rc=${PIPESTATUS[0]}
  set -e
  echo "sanitize: $san: exit $rc in $(( $(date +%s) - start )) s at $(git rev-parse --short HEAD) ($(date -u +%F))"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
