#!/usr/bin/env bash
# Soak run of one switch with several concurrent jobs under loss. See --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: tests/soak/soak.sh [OPTIONS]

Bounded soak of one software switch on 127.0.0.1 (loopback, no root needed):
  * LANES concurrent jobs (JobService: `switchml jobs create`), each lane running job after job:
    2 or 3 workers, element type int32 or float32, 1 to 3 tensors per job of random sizes
    (1 element .. 1.5 M elements), chosen at random per job;
  * loss: the switch's drop simulator, --ingress-drop 0.01 --egress-drop 0.01 by default (1% of
    requests dropped before aggregation, 1% of triggering packets lose all their responses),
    applied to every job;
  * every rank verifies every element of every result itself (int32: exact; float32: within the
    quantizer's bound); this script then checks that all ranks of a job got the same bytes
    (FNV-1a checksum) and that a tensor of the same type, size and worker count always gave the
    same bytes over the whole soak, whatever was lost;
  * worker restarts: a little after 40% of the run, and then every 4 minutes, lane 0 starts a
    2-worker int32 job that takes several seconds, SIGKILLs rank 1 while the job streams, and
    checks that rank 0 fails with DEADLINE_EXCEEDED naming its job timeout (3 s; how long it
    took is reported, not bounded), that the switch tears the idle job down (idle timeout 2 s) and that a new job then gets the freed slots
    (the switch has exactly LANES x 256 slots, so it cannot get them any other way) and runs
    exact;
  * memory: the switch's RSS (/proc/PID/status VmRSS) is sampled every 2 s; the run fails if,
    after the warm-up (the first 25% of the run, at least 20 s), any sample exceeds the largest
    warm-up sample by more than --rss-growth-mib (default 16 MiB).
Progress is printed every 15 s. At the end a summary (and --out JSON) with jobs and tensors
verified, wrong results (must be 0), failures, worker restarts, the switch's drop counters and
RSS start/warm-up/peak/end. Exit status 0 only if nothing was wrong.

Options:
  --minutes M          duration of the load phase (default 10; fractions allowed, e.g. 0.5)
  --lanes N            concurrent jobs (default 3)
  --loss P             drop-simulator probability, ingress and egress (default 0.01; 0 = none)
  --rss-growth-mib M   allowed RSS growth after warm-up (default 16)
  --seed S             seed of the random choices (default: random; printed)
  --switchml PATH      the switchml binary (default: build/switchml under the repository)
  --out FILE           write the summary as JSON to FILE
  --keep               keep the work directory (logs of every job)
  -h, --help           this text

CTest: `ctest -C soak -L soak` runs it for one minute, plus a short run of rto_sim and a long
seeded run of the client's randomized differential test (label soak; the tests exist only in the
`soak` configuration, so a plain `ctest` never runs them).
EOF
}

source "$(dirname "$0")/../../scripts/lib.sh"
MINUTES=10 LANES=3 LOSS=0.01 RSS_GROWTH_MIB=16 SEED="" SWITCHML="$SML_ROOT/build/switchml" OUT="" KEEP=0
PYTHON=${PYTHON:-python3}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) sml_need_value "$@"; MINUTES=$2; shift 2 ;;
    --lanes) sml_need_value "$@"; LANES=$2; shift 2 ;;
    --loss) sml_need_value "$@"; LOSS=$2; shift 2 ;;
    --rss-growth-mib) sml_need_value "$@"; RSS_GROWTH_MIB=$2; shift 2 ;;
    --seed) sml_need_value "$@"; SEED=$2; shift 2 ;;
    --switchml) sml_need_value "$@"; SWITCHML=$2; shift 2 ;;
    --out) sml_need_value "$@"; OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
"$PYTHON" -c "import sys; m=float(sys.argv[1]); sys.exit(0 if 0 < m <= 600 else 1)" "$MINUTES" 2>/dev/null ||
    die "--minutes must be a number in (0, 600], got '$MINUTES'"
[[ $LANES =~ ^[0-9]+$ ]] && ((LANES >= 1 && LANES <= 16)) || die "--lanes must be 1..16, got '$LANES'"
"$PYTHON" -c "import sys; p=float(sys.argv[1]); sys.exit(0 if 0 <= p < 0.5 else 1)" "$LOSS" 2>/dev/null ||
    die "--loss must be a probability in [0, 0.5), got '$LOSS'"
[[ $RSS_GROWTH_MIB =~ ^[0-9]+$ ]] || die "--rss-growth-mib must be a whole number of MiB, got '$RSS_GROWTH_MIB'"
[[ -z "$SEED" || $SEED =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, got '$SEED'"
[[ -x "$SWITCHML" ]] || die "--switchml: '$SWITCHML' is not an executable (build it: ninja -C build switchml_cli)"
if [[ -n "$OUT" ]]; then
  touch "$OUT" 2>/dev/null || die "--out: cannot write '$OUT'"
  OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
fi
[[ -n "$SEED" ]] || SEED=$(( $(date +%s%N) % 1000000007 ))
RANDOM=$SEED

DURATION_S=$("$PYTHON" -c "import sys; print(max(1, round(float(sys.argv[1]) * 60)))" "$MINUTES")
WARMUP_S=$(( DURATION_S / 4 > 20 ? DURATION_S / 4 : 20 ))
CALL_TIMEOUT_MS=10000      # normal jobs: a call fails after 10 s without progress
KILL_CALL_TIMEOUT_MS=3000  # the job whose worker is killed
SLOTS_PER_JOB=256

# The work directory (logs of every job) is kept on failure and with --keep. At exit the switch
# and the lane subshells are stopped with all their descendants (the workers and their `timeout`
# processes), whatever happens.
sml_work_dir switchml-soak
FAILED=0
now() { date +%s; }

# The operator credential of the switch and of every `switchml jobs` call (docs/operations.md).
sml_operator_token

# ---- the switch: exactly LANES x 256 slots, so a job only starts when another one freed slots.
sml_start_switch --deadline 10 -- --slots $((LANES * SLOTS_PER_JOB)) --ingress-drop "$LOSS" --egress-drop "$LOSS" \
    --drop-seed "$SEED" --counters-json "$WORK/switch-counters.json" || die "the switch did not start"
CTL=127.0.0.1:$CTL_PORT
jobs_cmd() { "$SWITCHML" jobs "$@"; }

START=$(now)
END=$((START + DURATION_S))
echo "soak: $MINUTES min ($DURATION_S s, warm-up $WARMUP_S s), $LANES concurrent jobs, drop simulator" \
     "ingress $LOSS + egress $LOSS, seed $SEED, switch pid $SW_PID ($CTL), rss bound +$RSS_GROWTH_MIB MiB"

# Per-job record, one JSON line per job in $WORK/laneL.jsonl (read by the summary):
#   {"lane","job","kind":"normal"|"kill"|"after_kill","type","workers","counts","ok","error",
#    "results":[[count, checksum]...], "retx", "sent", "secs", ...}
# record_job LANE JOBNO KIND TYPE WORKERS COUNTS SECS RC... : verifies the ranks' reports.
record_job() {
  "$PYTHON" - "$WORK" "$@" <<'EOF' >> "$WORK/lane$1.jsonl"
import json, os, sys
work, lane, job, kind, typ, workers, counts, secs = sys.argv[1:9]
rcs = [int(x) for x in sys.argv[9:]]
workers = int(workers)
rec = {"lane": int(lane), "job": int(job), "kind": kind, "type": typ, "workers": workers,
       "counts": [int(c) for c in counts.split(",")], "secs": float(secs), "ok": True, "error": "",
       "results": [], "retx": 0, "sent": 0, "wrong": 0}
reps = []
for r in range(workers):
    p = f"{work}/l{lane}-j{job}-r{r}.json"
    reps.append(json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None)
errs = []
for r, rep in enumerate(reps):
    if rcs[r] != 0 or rep is None or not rep.get("ok"):
        errs.append(f"rank {r} exit {rcs[r]}: " + ((rep or {}).get("error") or "no report"))
    if rep:
        rec["wrong"] += sum(int(x.get("wrong") or 0) for x in rep.get("results", []))
        rec["retx"] += int(rep.get("stats", {}).get("retransmissions", 0))
        rec["sent"] += int(rep.get("stats", {}).get("packets_sent", 0))
if not errs:
    for i, c in enumerate(rec["counts"]):
        sums = {rep["results"][i]["checksum"] for rep in reps}
        if len(sums) != 1:
            errs.append(f"tensor {i} ({c} elements): ranks got different bytes ({len(sums)} checksums)")
        rec["results"].append([c, sorted(sums)[0]])
rec["ok"] = not errs
rec["error"] = "; ".join(errs)
print(json.dumps(rec))
EOF
}

# run_job LANE JOBNO KIND TYPE WORKERS COUNTS CALL_TIMEOUT_MS ITERS [KILL]: creates a job, runs its
# ranks, records them. With KILL=1 (the worker-restart check), rank 1 is SIGKILLed while the job
# streams and the outcome is checked and recorded as a "kill" record instead.
run_job() {
  local lane=$1 job=$2 kind=$3 type=$4 workers=$5 counts=$6 jto=$7 iters=$8 kill=${9:-0}
  local idle=30
  ((kill)) && idle=2
  local out
  if ! out=$(jobs_cmd create --controller "$CTL" --workers "$workers" --slots $SLOTS_PER_JOB --type "$type" \
      --idle-timeout-s "$idle" --name "soak-l$lane-j$job" 2>&1); then
    echo "{\"lane\": $lane, \"job\": $job, \"kind\": \"$kind\", \"ok\": false, \"create_failed\": true," \
         "\"error\": $("$PYTHON" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "jobs create: $out")}" >> "$WORK/lane$lane.jsonl"
    return 0
  fi
  local SWITCHML_JOB_ID SWITCHML_JOB_TOKEN
  eval "$out"
  local id=$SWITCHML_JOB_ID token=$SWITCHML_JOB_TOKEN r pids=() t0
  t0=$(date +%s.%N)
  for ((r = 0; r < workers; r++)); do
    # `timeout` bounds a rank (a hang becomes exit 124); exec: $! is the worker itself.
    (exec timeout -k 5 300 "$SWITCHML" allreduce --controller "$CTL" --job-id "$id" --job-token "$token" \
        --rank "$r" --workers "$workers" --type "$type" --counts "$counts" --iters "$iters" \
        --call-timeout-ms "$jto" --rpc-timeout-ms 20000 --json "$WORK/l$lane-j$job-r$r.json" \
        > "$WORK/l$lane-j$job-r$r.log" 2>&1) &
    pids+=($!)
  done
  if ((kill)); then
    # Wait (10 s at most) until the job streams, then SIGKILL rank 1 (timeout's child: kill both).
    local i state=""
    for ((i = 0; i < 100; i++)); do
      if jobs_cmd show --controller "$CTL" "$id" > "$WORK/show-$lane.json" 2>/dev/null; then
        state=$(json_get "$WORK/show-$lane.json" "j['state']")
        [[ $state == running ]] && break
      fi
      sleep 0.1
    done
    sleep 1
    # SIGKILL the worker and its `timeout` process.
    sml_kill_tree -KILL "${pids[1]}"
    local tk; tk=$(date +%s.%N)
    local rc0=0; wait "${pids[0]}" || rc0=$?
    wait "${pids[1]}" 2>/dev/null || true  # the killed rank: reap it
    local fail_s; fail_s=$("$PYTHON" -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 2))" "$tk")
    # The switch tears the idle job down (idle timeout 2 s); 20 s at most.
    local ended=0 end_reason=""
    for ((i = 0; i < 200; i++)); do
      if jobs_cmd show --controller "$CTL" "$id" > "$WORK/show-$lane.json" 2>/dev/null &&
         [[ $(json_get "$WORK/show-$lane.json" "j['state']") == ended ]]; then
        ended=1
        end_reason=$(json_get "$WORK/show-$lane.json" "j.get('end_reason', '')")
        break
      fi
      sleep 0.1
    done
    local teardown_s; teardown_s=$("$PYTHON" -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 2))" "$tk")
    "$PYTHON" - "$lane" "$job" "$state" "$rc0" "$WORK/l$lane-j$job-r0.log" "$fail_s" "$ended" "$end_reason" \
        "$teardown_s" "$jto" <<'EOF' >> "$WORK/lane$lane.jsonl"
import json, sys
lane, job, state, rc0, log0, fail_s, ended, reason, teardown_s, jto = sys.argv[1:11]
text = open(log0).read()
err = next((l for l in text.splitlines() if "error" in l), text.strip()[-300:])
errs = []
if state != "running":
    errs.append(f"the job never reached state running (last state '{state}')")
if int(rc0) != 1:
    errs.append(f"survivor rank 0 exited {rc0}, expected 1")
if "DEADLINE_EXCEEDED" not in text:
    errs.append("survivor's error is not DEADLINE_EXCEEDED")
# Ended by its job timeout, not by a longer wait: the error names the timeout. Read from the
# error, not the clock (survivor_fail_s is reported only: a loaded machine may be slow).
elif f" for {jto} ms" not in text:
    errs.append(f"survivor's DEADLINE_EXCEEDED does not name its {jto} ms job timeout")
if ended != "1":
    errs.append("the job was not torn down within 20 s")
print(json.dumps({"lane": int(lane), "job": int(job), "kind": "kill", "ok": not errs, "error": "; ".join(errs),
                  "survivor_error": err.strip()[:300], "survivor_fail_s": float(fail_s),
                  "teardown_s": float(teardown_s), "end_reason": reason}))
EOF
    return 0
  fi
  local rcs=()
  for ((r = 0; r < workers; r++)); do
    local rc=0
    wait "${pids[r]}" || rc=$?
    rcs+=("$rc")
  done
  local secs; secs=$("$PYTHON" -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 3))" "$t0")
  jobs_cmd delete --controller "$CTL" "$id" --token "$token" > /dev/null 2>&1 || true
  record_job "$lane" "$job" "$kind" "$type" "$workers" "$counts" "$secs" "${rcs[@]}"
  # Keep the work directory small: the logs of good jobs are not needed.
  if tail -n 1 "$WORK/lane$lane.jsonl" | grep -q '"ok": true'; then rm -f "$WORK/l$lane-j$job-"*; fi
}

# Sizes: log-uniform between 1 and 1.5 M elements, from a fixed menu (so that equal tensors
# recur and can be compared across the soak) plus the packet/window edges.
SIZES=(1 7 64 255 256 257 1000 4096 65535 65536 65537 100000 300000 777777 1500000)
random_counts() {
  local k=$((1 + RANDOM % 3)) c="" i
  for ((i = 0; i < k; i++)); do c+="${c:+,}${SIZES[RANDOM % ${#SIZES[@]}]}"; done
  echo "$c"
}

# lane L: jobs until END. Lane 0 also runs the worker-restart check when $WORK/kill-now exists.
lane() {
  local L=$1 n=0
  RANDOM=$((SEED + 7919 * (L + 1)))
  while (($(now) < END)); do
    n=$((n + 1))
    if ((L == 0)) && [[ -e "$WORK/kill-now" ]]; then
      rm -f "$WORK/kill-now"
      run_job 0 "$n" kill int32 2 4000000 "$KILL_CALL_TIMEOUT_MS" 100 1
      n=$((n + 1))
      # The next job must get the killed job's slots (the pool is exactly full otherwise).
      run_job 0 "$n" after_kill float32 2 "$(random_counts)" "$CALL_TIMEOUT_MS" 1
      continue
    fi
    local type=int32
    ((RANDOM % 2)) && type=float32
    run_job "$L" "$n" normal "$type" $((2 + RANDOM % 2)) "$(random_counts)" "$CALL_TIMEOUT_MS" 1
  done
}

for ((L = 0; L < LANES; L++)); do
  lane "$L" > "$WORK/lane$L.out" 2>&1 &
  sml_track $!
  LANE_PIDS+=($!)
done

# ---- main loop: RSS samples, kill requests, progress.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SW_PID/status" 2>/dev/null || echo 0; }
next_kill=$((START + DURATION_S * 2 / 5))
next_progress=$((START + 15))
while (($(now) < END)); do
  kill -0 "$SW_PID" 2>/dev/null || { tail -n 20 "$WORK/switch.log"; die "the switch died"; }
  echo "$(($(now) - START)) $(rss_kib)" >> "$WORK/rss.txt"
  if (($(now) >= next_kill)); then
    touch "$WORK/kill-now"
    next_kill=$((next_kill + 240))
  fi
  if (($(now) >= next_progress)); then
    next_progress=$((next_progress + 15))
    "$PYTHON" - "$WORK" "$(($(now) - START))" "$DURATION_S" <<'EOF'
import glob, json, sys
work, t, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = [json.loads(l) for f in glob.glob(f"{work}/lane*.jsonl") for l in open(f) if l.strip()]
norm = [r for r in recs if r["kind"] != "kill"]
rss = [int(l.split()[1]) for l in open(f"{work}/rss.txt") if l.strip()]
print(f"[{t:4d}/{d} s] jobs ok {sum(r['ok'] for r in norm)}, failed {sum(not r['ok'] for r in norm)}, "
      f"tensors verified {sum(len(r.get('results', [])) for r in norm if r['ok'])}, "
      f"wrong elements {sum(r.get('wrong', 0) for r in norm)}, worker kills {sum(r['kind'] == 'kill' for r in recs)}, "
      f"switch RSS {rss[-1] / 1024:.1f} MiB (peak {max(rss) / 1024:.1f})", flush=True)
EOF
  fi
  sleep 2
done

echo "soak: load phase over after $(($(now) - START)) s; waiting for the running jobs (120 s at most)"
for p in "${LANE_PIDS[@]}"; do
  sml_wait_gone "$p" 120 "a lane to finish its job" ||
      { echo "soak: a lane is still running after 120 s (hang?)"; FAILED=1; }
done
echo "$(($(now) - START)) $(rss_kib)" >> "$WORK/rss.txt"
jobs_cmd list --controller "$CTL" > "$WORK/jobs-list.txt" 2>&1 || true
sw_rc=0
sml_stop_switch 10 || sw_rc=$?
((sw_rc != 124)) || { echo "soak: the switch ignored SIGTERM for 10 s"; FAILED=1; }

"$PYTHON" - "$WORK" "$OUT" "$DURATION_S" "$WARMUP_S" "$RSS_GROWTH_MIB" "$LANES" "$LOSS" "$SEED" "$sw_rc" "$FAILED" <<'EOF'
import glob, json, os, sys
work, out, dur, warm, bound_mib, lanes, loss, seed, sw_rc, failed = sys.argv[1:11]
dur, warm, bound_kib = int(dur), int(warm), int(bound_mib) * 1024
recs = [json.loads(l) for f in sorted(glob.glob(f"{work}/lane*.jsonl")) for l in open(f) if l.strip()]
norm = [r for r in recs if r["kind"] != "kill"]
kills = [r for r in recs if r["kind"] == "kill"]
after = [r for r in recs if r["kind"] == "after_kill"]
problems = []
if int(failed):
    problems.append("a lane did not finish, or the switch did not stop on SIGTERM")
if int(sw_rc) != 0:
    problems.append(f"the switch exited with status {sw_rc}")
for r in norm:
    if not r["ok"]:
        problems.append(f"lane {r['lane']} job {r['job']} ({r['kind']}): {r['error']}"[:400])
    if r.get("wrong"):
        problems.append(f"lane {r['lane']} job {r['job']}: {r['wrong']} wrong elements")
for r in kills:
    if not r["ok"]:
        problems.append(f"worker restart (lane {r['lane']} job {r['job']}): {r['error']}")
# The same tensor (type, workers, count) must give the same bytes every time, whatever was lost.
seen, mismatches = {}, 0
for r in norm:
    for c, h in r.get("results", []):
        key = (r["type"], r["workers"], c)
        if seen.setdefault(key, h) != h:
            mismatches += 1
            problems.append(f"{r['type']} x {r['workers']} workers x {c} elements: different bytes than an earlier run")
repeats = sum(len(r.get("results", [])) for r in norm) - len(seen)
if not [r for r in norm if r["ok"]]:
    problems.append("no job completed")
if not kills:
    problems.append("no worker restart happened (run longer: it starts after 40% of the run)")
elif not after or not all(r["ok"] for r in after):
    problems.append("no job ran exact on the slots freed by the killed job")
rss = [tuple(map(int, l.split())) for l in open(f"{work}/rss.txt") if l.strip()]
rss = [(t, k) for t, k in rss if k > 0]
warm_s = [k for t, k in rss if t < warm] or [rss[0][1]]
post = [k for t, k in rss if t >= warm]
warm_peak = max(warm_s)
if post and max(post) > warm_peak + bound_kib:
    problems.append(f"switch RSS grew after warm-up: peak {max(post) / 1024:.1f} MiB > warm-up peak "
                    f"{warm_peak / 1024:.1f} MiB + {bound_mib} MiB")
counters = json.load(open(f"{work}/switch-counters.json")) if os.path.exists(f"{work}/switch-counters.json") else {}
if float(loss) > 0 and counters and counters.get("sim_ingress_drops", 0) + counters.get("sim_egress_drops", 0) == 0:
    problems.append("the drop simulator dropped nothing")
if counters.get("aggregator_invalid", 0):
    problems.append("the switch counted aggregator_invalid")
sent = sum(r.get("sent", 0) for r in norm)
retx = sum(r.get("retx", 0) for r in norm)
summary = {
    "duration_s": dur, "warmup_s": warm, "lanes": int(lanes), "loss": float(loss), "seed": int(seed),
    "jobs_ok": sum(r["ok"] for r in norm), "jobs_failed": sum(not r["ok"] for r in norm),
    "jobs_int32": sum(r.get("type") == "int32" for r in norm), "jobs_float32": sum(r.get("type") == "float32" for r in norm),
    "tensors_verified": sum(len(r.get("results", [])) for r in norm if r["ok"]),
    "elements_verified": sum(c for r in norm if r["ok"] for c, _ in r.get("results", [])),
    "repeated_tensors_compared": repeats, "cross_run_mismatches": mismatches,
    "wrong_elements": sum(r.get("wrong", 0) for r in norm),
    "packets_sent": sent, "retransmissions": retx, "retx_pct": 100.0 * retx / sent if sent else 0.0,
    "worker_restarts": kills,
    "rss_mib": {"start": rss[0][1] / 1024, "warmup_peak": warm_peak / 1024, "peak": max(k for _, k in rss) / 1024,
                "end": rss[-1][1] / 1024, "post_warmup_peak": (max(post) / 1024) if post else None,
                "bound_mib": int(bound_mib), "samples": len(rss)},
    "switch_counters": counters, "ok": not problems, "problems": problems[:50],
}
m = summary["rss_mib"]
print(f"\nsoak summary ({dur} s, {lanes} concurrent jobs, drop simulator {loss} ingress + {loss} egress, seed {seed}):")
print(f"  jobs ok {summary['jobs_ok']} ({summary['jobs_int32']} int32, {summary['jobs_float32']} float32), failed {summary['jobs_failed']}")
print(f"  tensors verified {summary['tensors_verified']} ({summary['elements_verified']} elements), wrong elements {summary['wrong_elements']}, "
      f"repeated tensors compared byte-for-byte {repeats}, mismatches {mismatches}")
print(f"  packets sent {sent}, retransmitted {retx} ({summary['retx_pct']:.2f}%)")
for k in kills:
    print(f"  worker restart: survivor failed after {k.get('survivor_fail_s')} s with: {k.get('survivor_error', '')[:160]}")
    print(f"                  job torn down after {k.get('teardown_s')} s ({k.get('end_reason', '')}); "
          f"{'ok' if k['ok'] else 'FAILED: ' + k['error']}")
print(f"  after-restart jobs on the freed slots: {sum(r['ok'] for r in after)} ok of {len(after)}")
print(f"  switch RSS MiB: start {m['start']:.1f}, warm-up peak {m['warmup_peak']:.1f}, peak {m['peak']:.1f}, end {m['end']:.1f} "
      f"(bound: warm-up peak + {bound_mib} MiB; {m['samples']} samples)")
if counters:
    keys = ["datagrams_received", "sim_ingress_drops", "sim_egress_drops", "consumed", "multicast_rounds",
            "unicast_replies", "duplicates_dropped", "job_ended", "unknown_sender", "aggregator_invalid"]
    print("  switch counters: " + ", ".join(f"{k} {counters.get(k, 0)}" for k in keys))
if out:
    json.dump(summary, open(out, "w"), indent=1)
    print(f"  JSON summary: {out}")
if problems:
    print("FAILED:\n  " + "\n  ".join(problems[:50]))
    sys.exit(1)
print("ok: zero wrong results, every worker restart handled, switch memory stable")
EOF
