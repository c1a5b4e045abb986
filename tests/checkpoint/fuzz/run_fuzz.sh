#!/usr/bin/env bash
# Builds tests/checkpoint/fuzz/bundle_reader_fuzz.cc with clang++ -fsanitize=fuzzer,address,
# undefined (only the reader's sources) and runs it for a fixed time on the seed corpus.
# Used by the CTest test checkpoint_bundle_fuzz; also by hand:
#   tests/checkpoint/fuzz/run_fuzz.sh clang++ . /tmp/fuzz-build 300
# Exit: 0 no finding, 1 a finding (the crashing input is saved under <build>/artifacts/), 77 skipped
# (no clang++ with libFuzzer here; the reason is printed).
set -euo pipefail
CXX="${1:-}"; SRC="$2"; OUT="$3"; SECONDS_TO_RUN="${4:-25}"
if [ -z "$CXX" ] || ! command -v "$CXX" >/dev/null 2>&1; then
  echo "SKIPPED: no clang++ found (install clang and libclang-rt-14-dev: scripts/install-deps.sh)"; exit 77
fi
mkdir -p "$OUT/artifacts" "$OUT/corpus"
probe="$OUT/probe.cc"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe"
if ! "$CXX" -fsanitize=fuzzer "$probe" -o "$OUT/probe" 2>"$OUT/probe.log"; then
  echo "SKIPPED: $CXX cannot link -fsanitize=fuzzer (libFuzzer runtime missing: install libclang-rt-14-dev):"
  cat "$OUT/probe.log"; exit 77
fi
srcs=(chorus/core/error.cc chorus/core/crc32c.cc chorus/core/shape.cc chorus/core/dtype.cc chorus/core/proto_wire.cc
      chorus/checkpoint/table.cc chorus/checkpoint/bundle_format.cc chorus/checkpoint/shard_metadata.cc
      tests/checkpoint/fuzz/bundle_reader_fuzz.cc)
bin="$OUT/bundle_reader_fuzz"
need_build=0
[ -x "$bin" ] || need_build=1
for s in "${srcs[@]}" chorus/checkpoint/*.h chorus/core/*.h; do
  [ "$SRC/$s" -nt "$bin" ] && need_build=1
done
if [ $need_build = 1 ]; then
  echo "building $bin with $CXX"
  # chorus's headers are <chorus/...>, real paths from the source root (chorus/core/...).
  "$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$SRC" "${srcs[@]/#/$SRC/}" -o "$bin"
fi
# New inputs go to the scratch corpus (first directory); the seeds are only read.
exec "$bin" "$OUT/corpus" "$SRC/tests/checkpoint/fuzz/corpus" "$SRC/tests/checkpoint/testdata" \
  -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
  -error_exitcode=1 -artifact_prefix="$OUT/artifacts/" -print_final_stats=1
