#!/usr/bin/env bash
# Prometheus metrics (--metrics-listen, docs/operations.md "Monitoring"): a switch with two I/O
# threads serves /metrics on a free port (logged, in the ready file); scraped while a job
# streams, its counters move and the page is valid exposition text (metrics_check.py); once
# the job is done, the last scrape equals what the switch writes to --counters-json at exit,
# counter by counter and per I/O thread (a drop reason made non-zero by garbage datagrams). A
# standalone controller with --metrics-listen reports the switch up, the job it placed (waiting,
# placement 1), then the switch down once it is stopped. Bad --metrics-listen values and a port
# already taken are refused naming the flag.
source "$(dirname "$0")/lib.sh"
CHECK=(python3 "$(dirname "$0")/metrics_check.py")
scrape() {  # PORT FILE: GET /metrics into FILE (python's urllib: no curl on a clean machine)
  python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' \
      "http://127.0.0.1:$1/metrics" "$2" || fail "scraping 127.0.0.1:$1 failed"
}
metric() { "${CHECK[@]}" "$@"; }  # FILE NAME [LABEL=VALUE...]: the sum of those samples

# Bad values: clear errors naming the flag, for both commands.
for bad in 127.0.0.1 nohost:9464 127.0.0.1:70000; do
  for cmd in switch controller; do
    extra=(); [ $cmd = controller ] && extra=(--switch 127.0.0.1:1)
    rc=0; "$SWITCHML" $cmd "${extra[@]}" --metrics-listen "$bad" > "$WORK/bad.log" 2>&1 || rc=$?
    [ $rc -ne 0 ] && grep -q -- "--metrics-listen must be HOST:PORT.*got '$bad'" "$WORK/bad.log" ||
      { cat "$WORK/bad.log"; fail "switchml $cmd --metrics-listen $bad: exit $rc without the error"; }
  done
done
pass "bad --metrics-listen refused: $(head -1 "$WORK/bad.log" | cut -c1-140)"

start_switch --io-threads 2 --metrics-listen 127.0.0.1:0
MPORT=$(json_get "$SW_READY" "j['metrics_port']")
grep -q "Prometheus metrics on http://127.0.0.1:$MPORT/metrics" "$SW_LOG" || fail "the log does not name the metrics URL"
scrape "$MPORT" "$WORK/m0.txt"
"${CHECK[@]}" "$WORK/m0.txt" > /dev/null || fail "first scrape is not valid exposition text"
[ "$(metric "$WORK/m0.txt" switchml_switch_io_threads)" = 2 ] || fail "switchml_switch_io_threads is not 2"
pass "switch serves /metrics on free port $MPORT: $("${CHECK[@]}" "$WORK/m0.txt")"

# A port already taken: the second switch fails naming it.
rc=0; "$SWITCHML" switch --bind 127.0.0.1 --port 0 --controller-port 0 --metrics-listen "127.0.0.1:$MPORT" \
  > "$WORK/taken.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q -- "--metrics-listen 127.0.0.1:$MPORT: cannot listen" "$WORK/taken.log" ||
  { cat "$WORK/taken.log"; fail "a second switch on metrics port $MPORT: exit $rc without the error"; }
pass "metrics port taken: $(grep -o 'cannot listen.*' "$WORK/taken.log" | cut -c1-80)"

# A job that streams until released.
CTL=127.0.0.1:$CTL_PORT
out=$("$SWITCHML" jobs create --controller "$CTL" --workers 2 --slots 256 --type int32 --name metricsjob) ||
  fail "jobs create failed: $out"
eval "$out"
JOB=$SWITCHML_JOB_ID
PIDS=()
for r in 0 1; do
  "$SWITCHML" allreduce --controller "$CTL" --job-id "$JOB" --job-token "$SWITCHML_JOB_TOKEN" --rank $r \
      --workers 2 --threads 2 --window 64 --type int32 --counts 1000,100000 --hold-file "$WORK/release" --file-timeout-s 120 \
      --json "$WORK/r$r.json" > "$WORK/r$r.log" 2>&1 &
  PIDS+=($!); sml_track $!
done
streaming() {
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { tail -n 3 "$WORK"/r*.log; fail "a worker exited early"; }; done
  scrape "$MPORT" "$WORK/m1.txt"
  (($(metric "$WORK/m1.txt" switchml_job_aggregations_total job="$JOB" 2>/dev/null || echo 0) >= 1000))
}
sml_wait_for 60 "job $JOB to aggregate 1000 rounds" streaming || fail "job $JOB did not stream (metrics)"
"${CHECK[@]}" "$WORK/m1.txt" > /dev/null || fail "the scrape during the run is not valid exposition text"
[ "$(metric "$WORK/m1.txt" switchml_job_info job="$JOB" name=metricsjob state=running)" = 1 ] ||
  fail "job $JOB is not listed running"
[ "$(metric "$WORK/m1.txt" switchml_job_workers_registered job="$JOB")" = 2 ] || fail "job $JOB: workers_registered != 2"
[ "$(metric "$WORK/m1.txt" switchml_job_slots job="$JOB")" = 256 ] || fail "job $JOB: slots != 256"
[ "$(metric "$WORK/m1.txt" switchml_switch_jobs state=running)" = 1 ] || fail "switchml_switch_jobs{state=running} != 1"
[ "$(metric "$WORK/m1.txt" switchml_switch_slots_in_use)" = 256 ] || fail "switchml_switch_slots_in_use != 256"
for t in 0 1; do  # both I/O threads serve a share of the job's slots
  (($(metric "$WORK/m1.txt" switchml_switch_datagrams_received_total io_thread=$t) > 0)) ||
    fail "I/O thread $t received nothing"
done
rx1=$(metric "$WORK/m1.txt" switchml_switch_datagrams_received_total)
moved() { scrape "$MPORT" "$WORK/m2.txt"; (($(metric "$WORK/m2.txt" switchml_switch_datagrams_received_total) > rx1)); }
sml_wait_for 30 "datagrams_received to move between scrapes" moved || fail "datagrams_received did not move between scrapes"
pass "while job $JOB streams: counters move ($rx1 -> $(metric "$WORK/m2.txt" switchml_switch_datagrams_received_total) received), job running with 2 workers, 256 slots"

touch "$WORK/release"
for p in "${PIDS[@]}"; do
  sml_wait_gone "$p" 60 "worker $p to exit" || fail "worker $p still running after release"
  wait "$p" || { tail -n 5 "$WORK"/r*.log; fail "a worker failed"; }
done
# Garbage (too short to decode) to each I/O thread's port: drop reason decode_truncated.
python3 - "$(json_get "$SW_READY" "' '.join(map(str, j['udp_ports']))")" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for port in sys.argv[1].split():
    for _ in range(5):
        s.sendto(b"xy", ("127.0.0.1", int(port)))
EOF
garbage() { scrape "$MPORT" "$WORK/m3.txt"; [ "$(metric "$WORK/m3.txt" switchml_switch_drops_total reason=decode_truncated)" = 10 ]; }
sml_wait_for 30 "10 decode_truncated drops" garbage || fail "decode_truncated did not reach 10: $(metric "$WORK/m3.txt" switchml_switch_drops_total reason=decode_truncated)"
"${CHECK[@]}" "$WORK/m3.txt" --dump > "$WORK/m3.json"

# A standalone controller driving this switch.
sml_start_controller --deadline 10 -- --switch "$CTL" --health-interval-ms 200 --metrics-listen 127.0.0.1:0 ||
  fail "controller did not start"
CMPORT=$(json_get "$WORK/controller-ready" "j['metrics_port']")
grep -q "Prometheus metrics on http://127.0.0.1:$CMPORT/metrics" "$WORK/controller.log" || fail "controller log does not name the metrics URL"
out=$("$SWITCHML" jobs create --controller 127.0.0.1:$C_PORT --workers 2 --slots 16 --name ctljob) || fail "jobs create via the controller: $out"
eval "$out"
scrape "$CMPORT" "$WORK/c1.txt"
"${CHECK[@]}" "$WORK/c1.txt" > /dev/null || fail "controller scrape is not valid exposition text"
[ "$(metric "$WORK/c1.txt" switchml_controller_switch_up switch="$CTL")" = 1 ] || fail "controller: switch $CTL not up"
[ "$(metric "$WORK/c1.txt" switchml_controller_switches)" = 1 ] || fail "controller: switches != 1"
[ "$(metric "$WORK/c1.txt" switchml_controller_jobs state=waiting_for_workers)" = 1 ] || fail "controller: jobs waiting != 1"
[ "$(metric "$WORK/c1.txt" switchml_job_info job="$SWITCHML_JOB_ID" name=ctljob state=waiting_for_workers)" = 1 ] ||
  fail "controller: job $SWITCHML_JOB_ID not listed"
[ "$(metric "$WORK/c1.txt" switchml_job_placement job="$SWITCHML_JOB_ID")" = 1 ] || fail "controller: placement != 1"
pass "controller /metrics on port $CMPORT: switch up, job $SWITCHML_JOB_ID waiting, placement 1"
"$SWITCHML" jobs delete "$SWITCHML_JOB_ID" --token "$SWITCHML_JOB_TOKEN" --controller 127.0.0.1:$C_PORT > /dev/null ||
  fail "jobs delete via the controller failed"

# The last scrape against --counters-json (no datagram since: the controller speaks gRPC), every
# counter but sessions_adopted (job tables taken up by the I/O threads, a control-path event).
scrape "$MPORT" "$WORK/m4.txt"
"${CHECK[@]}" "$WORK/m4.txt" --dump > "$WORK/m4.json"
stop_switch
python3 - "$WORK/m4.json" "$WORK/switch-counters.json" <<'EOF' || fail "the last scrape differs from --counters-json"
import json, sys
samples = json.load(open(sys.argv[1]))
final = json.load(open(sys.argv[2]))
def get(name, **want):
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in want.items()))
bad, n = [], 0
for t, per in enumerate(final["per_io_thread"]):
    for k, v in per.items():
        # sessions_adopted counts job tables the I/O threads took up (the deleted job's, maybe
        # after the scrape), not datagrams.
        if k == "sessions_adopted": continue
        n += 1
        got = get("switchml_switch_counter_total", io_thread=str(t), counter=k)
        if got != v: bad.append(f"io_thread {t} {k}: metrics {got}, json {v}")
for k in per:
    if k != "sessions_adopted" and get("switchml_switch_counter_total", counter=k) != final[k]: bad.append(f"{k} total")
checks = {"switchml_switch_datagrams_received_total": "datagrams_received",
          "switchml_switch_datagrams_sent_total": "datagrams_sent",
          "switchml_switch_aggregations_total": "multicast_rounds"}
for m, k in checks.items():
    if get(m) != final[k]: bad.append(f"{m}: {get(m)} vs {k} {final[k]}")
if get("switchml_switch_drops_total", reason="decode_truncated") != final["decode_truncated"]: bad.append("decode_truncated")
if final["decode_truncated"] != 10 or final["multicast_rounds"] < 1000: bad.append(f"unexpected final counters {final}")
if bad: sys.exit("\n".join(bad))
print(f"{n} per-thread counters equal; received {final['datagrams_received']}, rounds {final['multicast_rounds']}, decode_truncated {final['decode_truncated']}")
EOF
pass "last scrape equals --counters-json"

down() { scrape "$CMPORT" "$WORK/c2.txt"; [ "$(metric "$WORK/c2.txt" switchml_controller_switch_up switch="$CTL")" = 0 ]; }
sml_wait_for 30 "the controller to see the switch down" down || fail "controller still reports switch $CTL up after it stopped"
pass "controller reports switch $CTL down once stopped"
sml_stop "$C_PID" 10 controller || fail "controller did not exit cleanly"
