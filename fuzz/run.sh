#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a bounded time.
#
#   fuzz/run.sh [seconds-per-target]      # default 60; CI passes a short time, e.g. 10
#
# Each target starts from its committed seed corpus (fuzz/corpus/<target>/, real engine
# traffic) and writes what it finds to build-fuzz/corpus/<target>/ (the seeds are not
# modified). A crash, a failed invariant (FUZZ_CHECK), an ASan/UBSan report, a leak or a
# timeout makes the script exit non-zero; the reproducer is saved as
# build-fuzz/artifacts/<target>/crash-* (rerun it with: build-fuzz/fuzz/<target> <file>).
#
# Environment: BUILD_DIR (default build-fuzz), JOBS (default nproc), FUZZ_TARGETS (default
# "fuzz_wire_decode fuzz_switch_core"), FUZZ_ARGS (extra libFuzzer flags).
# Needs clang and libclang-rt-<version>-dev (libFuzzer and the sanitizer runtimes).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

seconds=${1:-60}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
FUZZ_TARGETS=${FUZZ_TARGETS:-"fuzz_wire_decode fuzz_switch_core"}

command -v clang++ >/dev/null || die "clang++ not found (apt-get install clang)"

# Coverage instrumentation and ASan+UBSan for everything compiled; libFuzzer's main is linked
# into the fuzz targets only (fuzz/CMakeLists.txt).
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSWITCHML_FUZZ=ON -DSWITCHML_BUILD_TESTS=OFF -DSWITCHML_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/tmp/switchml-fuzz-configure.$$.log 2>&1 ||
  { cat /tmp/switchml-fuzz-configure.$$.log >&2; exit 1; }
rm -f /tmp/switchml-fuzz-configure.$$.log
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$JOBS" --target $FUZZ_TARGETS

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for target in $FUZZ_TARGETS; do
  corpus="$BUILD_DIR/corpus/$target"
  artifacts="$BUILD_DIR/artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  echo "== $target: ${seconds}s"
  log="$BUILD_DIR/$target.log"
  set +e
  # shellcheck disable=SC2086
  "$BUILD_DIR/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} \
    "$corpus" "fuzz/corpus/$target" >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::number_of_executed_units|ERROR|invariant failed|SUMMARY' \
    "$log" || true
  if [[ $rc -ne 0 ]]; then
    echo "== $target: FAILED (exit $rc; see $log, reproducers in $artifacts/)" >&2
    status=1
  else
    echo "== $target: ok"
  fi
done
exit $status
