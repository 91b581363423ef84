#!/usr/bin/env bash
# A switch with two I/O threads (`switchml switch --io-threads 2`, docs/design.md "Several I/O
# threads"): its ready file lists both UDP ports; two `switchml allreduce` ranks with --threads
# 2 and then 4, int32 exact and float32 within its bound, in the reference session, in a
# JobService job and through a standalone controller; at exit both I/O threads received datagrams and none reached the wrong one.
source "$(dirname "$0")/lib.sh"
start_switch --io-threads 2
CTL=127.0.0.1:$CTL_PORT
ports=$(json_get "$SW_READY" "' '.join(str(p) for p in j['udp_ports'])")
[ "$(wc -w <<< "$ports")" = 2 ] || fail "ready file: udp_ports is '$ports', expected two ports"
[ "${ports%% *}" = "$UDP_PORT" ] || fail "ready file: udp_port $UDP_PORT is not udp_ports[0] ($ports)"
pass "ready file: udp_port $UDP_PORT, udp_ports $ports"

# Always started in the background (&): exec makes the background job the switchml process.
run_rank() {  # NAME RANK THREADS TYPE [allreduce flags...]
  local name=$1 rank=$2 threads=$3 type=$4
  shift 4
  exec timeout 60 "$SWITCHML" allreduce --controller "$CTL" --rank "$rank" --workers 2 \
      --threads "$threads" --window $((threads * 32)) --type "$type" --counts 1,65,300000 \
      --call-timeout-ms 5000 --json "$WORK/$name.json" "$@" > "$WORK/$name.log" 2>&1
}
pair() {  # NAME THREADS TYPE [allreduce flags...]
  local name=$1
  run_rank "$name-r0" 0 "${@:2}" & local p0=$!; sml_track $p0
  run_rank "$name-r1" 1 "${@:2}" & local p1=$!; sml_track $p1
  wait $p0 && wait $p1 || { tail -n 5 "$WORK/$name"-r*.log; fail "$name: a rank failed"; }
  for r in 0 1; do
    [ "$(json_get "$WORK/$name-r$r.json" "j['ok']")" = True ] || fail "$name: rank $r not ok"
  done
}
for threads in 2 4; do
  for type in int32 float32; do
    pair "session-t$threads-$type" $threads $type
    pass "reference session, --threads $threads, $type: every element right"
  done
done
eval "$("$SWITCHML" jobs create --controller "$CTL" --workers 2 --slots 256 --name io)"
pair "job-t4-int32" 4 int32 --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN"
pass "job $SWITCHML_JOB_ID, --threads 4, int32: every element right"

# Through a standalone `switchml controller`: it forwards the per-thread ports it is given.
SW_CTL=$CTL
sml_start_controller --deadline 10 -- --switch "$SW_CTL" --rpc-timeout-ms 3000 ||
    fail "standalone controller did not start"
CTL=127.0.0.1:$C_PORT
pair "standalone-t2-float32" 2 float32
pass "through a standalone controller, --threads 2, float32: every element right"
sml_stop "$C_PID" 10 controller || true

stop_switch
C=$WORK/switch-counters.json
rx0=$(json_get "$C" "j['per_io_thread'][0]['datagrams_received']")
rx1=$(json_get "$C" "j['per_io_thread'][1]['datagrams_received']")
wrong=$(json_get "$C" "j['wrong_io_thread']")
total=$(json_get "$C" "j['datagrams_received']")
((rx0 > 0 && rx1 > 0)) || fail "an I/O thread received nothing: $rx0 and $rx1"
((wrong == 0)) || fail "$wrong datagrams reached the wrong I/O thread"
((rx0 + rx1 == total)) || fail "per-thread datagrams_received $rx0 + $rx1 != total $total"
pass "both I/O threads served: $rx0 and $rx1 datagrams received (total $total), none misrouted"
