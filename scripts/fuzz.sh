#!/usr/bin/env bash
# Builds chorus's libFuzzer targets (one per reader and parser: tests/fuzz/README.md) with
# clang++ -fsanitize=fuzzer,address,undefined and runs each for SECONDS on its seed corpus, printing
# per target the executions, the coverage (libFuzzer's cov = edges, ft = features) when the seeds
# are loaded and at the end, and any finding.
#
#   scripts/fuzz.sh [options] [SECONDS] [TARGET...]     SECONDS default 60; TARGETs default all
#     --build-only   build (or bring up to date) and stop
#     --no-build     run what is built (CTest, after the fuzz_build test)
#     --fresh        empty each target's scratch corpus first (else it grows from run to run)
#     --seeds        rewrite tests/fuzz/corpus/ with tests/fuzz/make_seeds.cc, then stop
#     --list         print the target names and stop
#   FUZZ_OUT (default <repo>/build-fuzz): binaries, objects, scratch corpora, logs, artifacts
#   CXX: the clang++ to use (default clang++, else clang++-14); FUZZ_JOBS: make -j (default 2)
#
# Exit status: 0 no finding; 1 a finding (its input is under $FUZZ_OUT/artifacts/<target>/) or a
# build failure; 77 skipped: clang++ or its libFuzzer runtime is missing, or lld for every target
# asked for (the reason is printed; clang and libclang-rt-14-dev come with scripts/install-deps.sh,
# lld is `apt-get install lld`). Targets that need lld are skipped alone when it is missing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${FUZZ_OUT:-$ROOT/build-fuzz}"
JOBS="${FUZZ_JOBS:-2}"
ALL=(bundle_reader object_graph checkpoint_state tfrecord tf_example example idx cache_file png jpeg event_file graph_def tf_config
     run_command_line hostfile train_options text_line csv store_protocol gloo_wire)

build=1 run=1 fresh=0 seconds=60 targets=()
for arg in "$@"; do
  case "$arg" in
    --build-only) run=0 ;;
    --no-build) build=0 ;;
    --fresh) fresh=1 ;;
    --seeds) build=seeds ;;
    --list) printf '%s\n' "${ALL[@]}"; exit 0 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) seconds="$arg" ;;
    -*) echo "fuzz.sh: unknown option $arg" >&2; exit 2 ;;
    *) t="${arg%_fuzz}"
       if [[ " ${ALL[*]} " != *" $t "* ]]; then echo "fuzz.sh: no target '$arg' (--list)" >&2; exit 2; fi
       targets+=("$t") ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=("${ALL[@]}")

# Seed corpora (read only) of each target; the first directory given to libFuzzer is the scratch
# corpus it writes new inputs to. regressions/<target>/ holds inputs that once failed.
seed_dirs() {
  case "$1" in
    bundle_reader) echo "$ROOT/tests/checkpoint/fuzz/corpus $ROOT/tests/checkpoint/testdata" ;;
    *) echo "$ROOT/tests/fuzz/corpus/${1}_fuzz" ;;
  esac
  [ -d "$ROOT/tests/fuzz/regressions/${1}_fuzz" ] && echo "$ROOT/tests/fuzz/regressions/${1}_fuzz"
}

skip() { echo "SKIPPED: $*"; exit 77; }

# Targets that take a reader's .cc without the library behind its other functions: they link with
# lld --gc-sections (tests/fuzz/Makefile), which GNU ld cannot replace (it reports the references
# of discarded functions). Without lld the others still build and run.
NEEDS_LLD=" checkpoint_state tfrecord tf_example example idx cache_file text_line csv "

if [ "$build" != 0 ]; then
  CXX="${CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
  [ -n "$CXX" ] && command -v "$CXX" >/dev/null 2>&1 || skip "no clang++ found (install clang and libclang-rt-14-dev: scripts/install-deps.sh; and lld)"
  mkdir -p "$OUT"
  probe="$OUT/probe.cc"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe"
  if ! "$CXX" -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" 2>"$OUT/probe.log"; then
    echo "SKIPPED: $CXX cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing: install libclang-rt-14-dev):"
    cat "$OUT/probe.log"; exit 77
  fi
  use_lld=1
  if ! "$CXX" -fsanitize=fuzzer,address,undefined -fuse-ld=lld "$probe" -o "$OUT/probe" 2>"$OUT/probe.log"; then
    use_lld=0
    echo "note: no lld for $CXX (apt-get install lld): building only the targets that do not need it"
  fi
  if [ "$build" = seeds ]; then
    [ $use_lld = 1 ] || skip "the seed writer links with lld (apt-get install lld)"
    make -s -f "$ROOT/tests/fuzz/Makefile" SRC="$ROOT" OUT="$OUT" CXX="$CXX" seeds || exit 1
    rm -rf "$ROOT/tests/fuzz/corpus"
    "$OUT/bin/make_seeds" "$ROOT/tests/fuzz/corpus"; exit $?
  fi
  bins=()
  for t in "${targets[@]}"; do
    if [ $use_lld = 0 ] && [[ "$NEEDS_LLD" == *" $t "* ]]; then
      rm -f "$OUT/bin/${t}_fuzz"  # a binary from an earlier build would run stale
      echo "  skipping $t: it links with lld"
      continue
    fi
    bins+=("$OUT/bin/${t}_fuzz")
  done
  [ ${#bins[@]} -eq 0 ] && skip "every target asked for needs lld (apt-get install lld)"
  start=$(date +%s)
  echo "building ${#bins[@]} target(s) under $OUT with $CXX (make -j$JOBS)"
  if ! make -f "$ROOT/tests/fuzz/Makefile" SRC="$ROOT" OUT="$OUT" CXX="$CXX" USE_LLD=$use_lld -j"$JOBS" "${bins[@]}" \
       >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; echo "fuzz.sh: build failed (log: $OUT/build.log)"; exit 1
  fi
  echo "built in $(( $(date +%s) - start )) s"
fi
[ "$run" = 0 ] && exit 0

# The value of "name: N" on libFuzzer's line `tag` (INITED, DONE, or the last status line).
field() { sed -n "s/.*[[:space:]]$2: \([0-9][0-9]*\).*/\1/p" <<<"$1"; }
stat() { sed -n "s/^stat::$2:[[:space:]]*\([0-9][0-9]*\).*/\1/p" "$1" | tail -1; }

findings=0 skipped=0
printf '\n%-17s %6s %10s %8s %15s %15s %6s  %s\n' target seeds execs exec/s "cov start→end" "ft start→end" new result
for t in "${targets[@]}"; do
  bin="$OUT/bin/${t}_fuzz"
  if [ ! -x "$bin" ]; then
    printf '%-17s %s\n' "$t" "SKIPPED: not built (clang++ with libFuzzer missing, or lld for this target)"
    skipped=$((skipped + 1)); continue
  fi
  scratch="$OUT/corpus/${t}_fuzz" art="$OUT/artifacts/${t}_fuzz/" log="$OUT/logs/${t}_fuzz.log"
  [ "$fresh" = 1 ] && rm -rf "$scratch"
  mkdir -p "$scratch" "$art" "$(dirname "$log")"
  dict=()
  [ -f "$ROOT/tests/fuzz/dict/${t}_fuzz.dict" ] && dict=(-dict="$ROOT/tests/fuzz/dict/${t}_fuzz.dict")
  read -r -a seeds <<<"$(seed_dirs "$t" | tr '\n' ' ')"
  nseeds=$(find "${seeds[@]}" -type f ! -name '*.md' | wc -l)
  # -timeout: one input over 10 s is a finding; -malloc_limit_mb: so is one allocation over 256 MiB
  # (a length field trusted before it is checked). The hard timeout only guards against a hang of
  # libFuzzer itself.
  timeout -k 10 $((seconds + 120)) "$bin" "$scratch" "${seeds[@]}" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -error_exitcode=1 -artifact_prefix="$art" \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  inited=$(grep -m1 -E '^#[0-9]+[[:space:]]+INITED' "$log")
  last=$(grep -E '^#[0-9]+[[:space:]]+(INITED|NEW|REDUCE|pulse|DONE|RELOAD)' "$log" | tail -1)
  execs=$(stat "$log" number_of_executed_units) rate=$(stat "$log" average_exec_per_sec) new=$(stat "$log" new_units_added)
  [ -z "$execs" ] && execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  if [ $rc = 0 ]; then result=ok; else result="FINDING (exit $rc)"; findings=$((findings + 1)); fi
  printf '%-17s %6s %10s %8s %15s %15s %6s  %s\n' "$t" "$nseeds" "${execs:-?}" "${rate:-?}" \
    "$(field "$inited" cov)→$(field "$last" cov)" "$(field "$inited" ft)→$(field "$last" ft)" "${new:-?}" "$result"
  if [ $rc != 0 ]; then
    # The report's first lines and the first stack (the failing access), without libFuzzer's frames.
    awk '/ERROR: |runtime error|fuzz invariant|undocumented error|uncaught|terminate called|what\(\)/ && n < 3 { print; n++ }
         /^[[:space:]]+#[0-9]+ 0x/ { s = 1; if ($0 !~ /fuzzer::|__sanitizer|libc\.so|_start|crtstuff| main /) print; next }
         s { exit }' "$log" | head -12 | sed 's/^/    /'
    grep -E 'Test unit written to|written to ' "$log" | sed 's/^/    /'
    echo "    log: $log"
  fi
done
echo
if [ $findings -gt 0 ]; then
  echo "$findings target(s) with a finding: reproduce with <binary> <artifact>; add the input under"
  echo "tests/fuzz/regressions/<target>/ and fix the reader (tests/fuzz/README.md)."
  exit 1
fi
if [ $skipped = ${#targets[@]} ]; then echo "SKIPPED: nothing to run"; exit 77; fi
echo "no finding (logs: $OUT/logs/)"
