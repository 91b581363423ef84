#!/usr/bin/env bash
# CTest bench_detects_wrong_elements: the harness must fail a run in which one rank's output
# has a wrong element (allreduce_perf --corrupt-rank), for SwitchML and for the Gloo baseline:
# exit status non-zero, the FAILED footer, and the wrong count in the table.
# Usage: test_detects_wrong.sh PERF SWITCHML OUTDIR BACKENDS
set -u
source "$(dirname "$0")/../scripts/lib.sh"
perf=$1 switchml=$2 out=$3 backends=$4
log="$out.log"
bash "$(dirname "$0")/run_loopback.sh" --workers 3 --backends "$backends" --min-bytes 4KiB --max-bytes 16KiB \
    --iters 2 --timeout 60 --perf "$perf" --switchml "$switchml" --out "$out" --perf-arg=--corrupt-rank=1 >"$log" 2>&1
rc=$?
cat "$log"
[ $rc -ne 0 ] || fail "run_loopback.sh exited 0 although rank 1 corrupted its output"
IFS=',' read -r -a list <<<"$backends"
want=${#list[@]}
got=$(grep -c '^# Out of bounds values : [1-9][0-9]* FAILED' "$log")
[ "$got" -eq "$want" ] || fail "expected $want FAILED footers, got $got"
grep -q '^# loopback: FAIL' "$log" || fail "no loopback FAIL verdict"
pass "every corrupted run was reported as failed"
