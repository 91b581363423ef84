#!/usr/bin/env bash
# Sanitizer run of the unit tests (AddressSanitizer+UBSan or ThreadSanitizer).
#
#   scripts/sanitize.sh address [ctest args...]   # ASan + UBSan into build-asan/
#   scripts/sanitize.sh thread  [ctest args...]   # TSan into build-tsan/
#
# Configures the build with -DSWITCHML_SANITIZE=<kind> (benchmarks off), builds it, and runs
# `ctest -L unit` plus any extra ctest arguments (e.g. -R aggregator). Exits non-zero on a
# build failure, a failing test or a sanitizer report (every report aborts its test).
#
# Thread: Debian's libgrpc is not built with TSan, so its internal synchronisation is invisible
# and the gtests that run a real gRPC server/channel (SessionService*, Controller*, StandaloneController*,
# SessionClient*, JobService*, JobClient*, ShardsTest*, RendezvousTest*, SwitchServiceTest*,
# SwitchRejoinTest*, SwitchMetricsTest*: a SwitchService with its gRPC server; TlsTest*,
# PlaintextRuleTest*: gRPC over TLS) report races
# inside libgrpc. They are excluded
# (TSAN_EXCLUDE, a ctest -E regex; set it to '' to run them anyway). Everything else,
# including our own threads (switch server, client engines, transports), runs under TSan.
#
# Only the unit-test executables are built (every *_test executable of the build; tools,
# benchmarks and end-to-end programs are not), unless TARGETS names ninja targets.
#
# Environment: BUILD_DIR (default build-asan / build-tsan), JOBS (default nproc),
# BUILD_TYPE (default RelWithDebInfo), TARGETS (ninja targets to build).
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
case "$kind" in
  address) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *)
    echo "usage: $0 address|thread [ctest args...]" >&2
    exit 2
    ;;
esac
shift

BUILD_DIR=${BUILD_DIR:-$default_dir}
JOBS=${JOBS:-$(nproc)}
# gtest names of the controller's gRPC service tests (SessionService*, Controller*, ...): they
# run grpc++ in-process; see the header comment.
TSAN_EXCLUDE=${TSAN_EXCLUDE-'^(SessionService|Controller|StandaloneController|StandaloneAuth|SessionClient|JobService|JobClient|JobAuth|AgreedParams|Bootstrap|Grpc|ShardsTest|RendezvousTest|SwitchService|SwitchRejoinTest|SwitchMetricsTest|TlsTest|PlaintextRuleTest)'}

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DSWITCHML_SANITIZE="$kind" -DSWITCHML_BUILD_BENCH=OFF
if [[ -z "${TARGETS:-}" ]]; then
  # The GoogleTest executables registered by switchml_unit_test and the RTO simulator, which
  # the unit-labelled rto_sim_* test runs (everything with label `unit`).
  TARGETS=$(ninja -C "$BUILD_DIR" -t targets all |
            sed -n -e 's/^\([^:]*_test\): CXX_EXECUTABLE_LINKER.*/\1/p' \
                  -e 's#^\([^:]*/rto_sim\): CXX_EXECUTABLE_LINKER.*#\1#p' | tr '\n' ' ')
fi
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS

# Make every report fatal and readable. halt_on_error also covers UBSan (-fno-sanitize-recover
# is set by CMake for address builds).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

ctest_args=(--test-dir "$BUILD_DIR" -L unit --output-on-failure --timeout 300 -j "$JOBS")
if [[ "$kind" == thread && -n "$TSAN_EXCLUDE" ]]; then
  ctest_args+=(-E "$TSAN_EXCLUDE")
fi
exec ctest "${ctest_args[@]}" "$@"
