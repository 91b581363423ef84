#!/usr/bin/env bash
# bench/run_chaos.sh — the chaos scenario (issue #22, docs/benchmarks.md "Chaos scenario"):
# DDP training over the "switchml" backend on the emulated cluster while the switches fail,
# compared with an undisturbed Gloo run of the same steps. Needs root (network namespaces).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
source "$here/../scripts/lib.sh"
# The emulated hosts' links never leave this machine: tokens may cross them in plaintext gRPC
# (docs/operations.md "Securing"); also for the direct `ip netns exec` calls below.
export SWITCHML_INSECURE=${SWITCHML_INSECURE-1}
PROG=run_chaos.sh
SML_PROG=$PROG  # die (scripts/lib.sh)
REPO=$SML_ROOT
CLUSTER="$REPO/scripts/cluster.sh"
TRAIN_PY="$here/chaos_train.py"
REPORT_PY="$here/chaos_report.py"

usage() {
  cat <<EOF
Usage: bench/run_chaos.sh [OPTIONS]    (as root)

The chaos scenario, one command, on its own emulated cluster (scripts/cluster.sh): N worker
hosts and 3 switch hosts, tbf RATE on every link.

  1. The reference: N ranks train a small MLP with torch DistributedDataParallel over plain
     "gloo" for S steps from --seed, undisturbed.
  2. The disturbed run: the same training over the "switchml" backend, in a job of two shards
     (\`switchml jobs create --switches 2\`, 2 worker threads per rank) that a standalone
     controller (\`switchml controller\`, health checks every 500 ms) placed on 2 of the 3
     switches; random loss on every UDP datagram arriving at a switch or a worker host
     throughout (--loss; Gloo's TCP is not affected), and the --faults, each at a step drawn
     from --seed, a seeded fraction of a step time after that step began:
       switch      kill -9 a switch that holds a shard of the job, restart it at once (same
                   ports); the controller finds it restarted and re-places the job
       shard       kill -9 the switch of another shard; it stays down --shard-down-s seconds
                   (the controller re-places the job on the spare switch), then restarts
       controller  kill -9 the standalone controller, restart it at once (same port)
  3. The report (stdout, and chaos.md / chaos.json in --out): steps completed, per fault its
     step (planned and actual), the time lost (over its window, the fault's step up to
     --window steps and before the next fault: the sum of what each step took beyond the pace
     before the fault, the median of the 5 steps before it), the pace after, the calls on each
     path in that window (the backend's stats() after every step: switch, recovered, host
     path, failovers, returns), and whether the final model equals the Gloo run's.
     bench/chaos_report.py --help says how each is computed.

The comparison (--grad-mode): int32 (default) all-reduces each gradient bucket as int32 fixed
point (units of 2^-F, F = --fixed-point-bits), an exact sum on every path, so every step's
average gradient and the final model must be bit-identical to the Gloo run's; float32 uses DDP's
float32 all-reduce, which the switch quantizes per packet (within its bound of the float sum),
so the models drift apart: reported as the max |difference| and the distance relative to the
training distance, checked only with --param-tolerance.

A fault that ends the training (a rank's step fails) is reported as a failed run with the
error: nothing retries behind the backend's back.

Options:
  --steps S           training steps (default 60; --quick: 25)
  --seed S            seed of the model, the data and the fault schedule (default 1)
  --workers N         ranks, one per worker host (default 2)
  --loss P            probability of dropping each UDP datagram arriving at a switch or worker
                      host during the disturbed run (default 0.01; 0 = none)
  --faults LIST       comma-separated, each of switch, shard, controller, in the order they
                      fire (default switch,shard,controller; "none" = no fault)
  --grad-mode M       int32 (default) or float32, see above
  --fixed-point-bits F  F of the int32 mode (default 20)
  --param-tolerance T float32 mode: fail when ||p - p_gloo|| / ||p_gloo - p_init|| > T
                      (default 0: reported only)
  --rate RATE         tbf rate of every link, tc units (default 500mbit)
  --call-timeout-ms T SWITCHML_CALL_TIMEOUT_MS of the ranks (default 3000): how long a call
                      waits for the switch before it fails
  --shard-down-s S    seconds the killed shard's switch stays down (default 5)
  --window W          steps in a fault's window (default 10)
  --gap G             minimum steps between two faults (default 5; --quick: 4)
  --warmup W          undisturbed steps before the first fault (default 5; --quick: 4)
  --hidden H          hidden width of the MLP (default 1024: 1.1 M parameters, 4.5 MB of
                      gradients per step)
  --quick             --steps 25 --gap 4 --warmup 4: a smoke run
  --out DIR           results and logs (default: a new /tmp/switchml-chaos.XXXXXX, kept); an
                      earlier run's results and logs there are replaced
  --build DIR         build directory (default: $REPO/build)
  --python PATH       interpreter that imports torch (default: \$SWITCHML_VENV or REPO/.venv)
  --timeout S         limit of each run, seconds (default 900)
  -h, --help          this text

Environment: SWITCHML_* settings pass through to the ranks (e.g. SWITCHML_FAILOVER=0: the
backend does not fall back to its host path, so a switch fault ends the run), but for those the
script sets: SWITCHML_CONTROLLER, _JOB_ID, _JOB_TOKEN, _WORKER_THREADS, _WINDOW_PACKETS,
_CALL_TIMEOUT_MS.

Builds nothing: needs BUILD/switchml and BUILD/python/switchml (ninja -C BUILD switchml_cli
switchml_torch_ext). Exit status: 0 when the disturbed run finished every step and its final
model passed the comparison; 1 when it did not (the report says why) or a run failed; 2 for bad
arguments or a missing prerequisite.
EOF
}

need_int() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"; }
need_num() { [[ "$2" =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] || die "$1 must be a non-negative number, got '$2'"; }

STEPS="" SEED=1 WORKERS=2 LOSS=0.01 FAULTS="switch,shard,controller" GRAD_MODE=int32 FP_BITS=20 PARAM_TOL=0
RATE=500mbit CALL_TIMEOUT_MS=3000 SHARD_DOWN_S=5 WINDOW=10 GAP="" WARMUP="" HIDDEN="" QUICK=0 OUT=""
BUILD="$REPO/build" PYTHON="${SWITCHML_VENV:-$REPO/.venv}/bin/python" TIMEOUT=900
while (($#)); do
  case "$1" in
    --steps) sml_need_value "$@"; STEPS=$2; need_int "$1" "$2"; shift 2 ;;
    --seed) sml_need_value "$@"; SEED=$2; need_int "$1" "$2"; shift 2 ;;
    --workers) sml_need_value "$@"; WORKERS=$2; need_int "$1" "$2"; shift 2 ;;
    --loss) sml_need_value "$@"; LOSS=$2; need_num "$1" "$2"; shift 2 ;;
    --faults) sml_need_value "$@"; FAULTS=$2; shift 2 ;;
    --grad-mode) sml_need_value "$@"; GRAD_MODE=$2; shift 2 ;;
    --fixed-point-bits) sml_need_value "$@"; FP_BITS=$2; need_int "$1" "$2"; shift 2 ;;
    --param-tolerance) sml_need_value "$@"; PARAM_TOL=$2; need_num "$1" "$2"; shift 2 ;;
    --rate) sml_need_value "$@"; RATE=$2; shift 2 ;;
    --call-timeout-ms) sml_need_value "$@"; CALL_TIMEOUT_MS=$2; need_int "$1" "$2"; shift 2 ;;
    --shard-down-s) sml_need_value "$@"; SHARD_DOWN_S=$2; need_num "$1" "$2"; shift 2 ;;
    --window) sml_need_value "$@"; WINDOW=$2; need_int "$1" "$2"; shift 2 ;;
    --gap) sml_need_value "$@"; GAP=$2; need_int "$1" "$2"; shift 2 ;;
    --warmup) sml_need_value "$@"; WARMUP=$2; need_int "$1" "$2"; shift 2 ;;
    --hidden) sml_need_value "$@"; HIDDEN=$2; need_int "$1" "$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) sml_need_value "$@"; OUT=$2; shift 2 ;;
    --build) sml_need_value "$@"; BUILD=$2; shift 2 ;;
    --python) sml_need_value "$@"; PYTHON=$2; shift 2 ;;
    --timeout) sml_need_value "$@"; TIMEOUT=$2; need_int "$1" "$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
if ((QUICK)); then
  STEPS=${STEPS:-25} GAP=${GAP:-4} WARMUP=${WARMUP:-4}
fi
STEPS=${STEPS:-60} GAP=${GAP:-5} WARMUP=${WARMUP:-5} HIDDEN=${HIDDEN:-1024}
((STEPS >= 1)) || die "--steps must be >= 1"
((WORKERS >= 2 && WORKERS <= 16)) || die "--workers must be in [2, 16], got $WORKERS"
((GAP >= 1)) || die "--gap must be >= 1"
((WINDOW >= 1)) || die "--window must be >= 1"
((CALL_TIMEOUT_MS >= 100)) || die "--call-timeout-ms must be >= 100, got $CALL_TIMEOUT_MS"
((TIMEOUT >= 10)) || die "--timeout must be >= 10 s, got $TIMEOUT"
((FP_BITS >= 1 && FP_BITS <= 28)) || die "--fixed-point-bits must be in [1, 28], got $FP_BITS"
[[ "$GRAD_MODE" == int32 || "$GRAD_MODE" == float32 ]] || die "--grad-mode must be int32 or float32, got '$GRAD_MODE'"
[[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die "--rate needs a tc rate such as 500mbit, got '$RATE'"
awk -v p="$LOSS" 'BEGIN { exit !(p >= 0 && p < 1) }' || die "--loss must be a probability in [0, 1), got '$LOSS'"
[[ "$FAULTS" == none ]] && FAULTS=""
IFS=',' read -r -a fault_kinds <<<"$FAULTS"
for k in ${fault_kinds[@]+"${fault_kinds[@]}"}; do
  case "$k" in switch|shard|controller) ;; *) die "--faults: unknown fault '$k' (switch, shard, controller, or none)" ;; esac
done

# Prerequisites: root first (everything below needs it), then the build.
[[ $EUID == 0 ]] || die "needs root: the scenario builds an emulated cluster of network namespaces (scripts/cluster.sh); run it with sudo"
[[ -d "$BUILD" ]] || die "--build: directory '$BUILD' does not exist"
BUILD=$(cd "$BUILD" && pwd)
SWITCHML="$BUILD/switchml"
[[ -x "$SWITCHML" ]] || die "$SWITCHML does not exist: build it first (ninja -C $BUILD switchml_cli)"
[[ -d "$BUILD/python/switchml" ]] || die "$BUILD/python/switchml does not exist: build it first (ninja -C $BUILD switchml_torch_ext)"
[[ -x "$PYTHON" ]] || die "--python: '$PYTHON' is not an executable (scripts/python-env.sh makes the project venv)"
PYTHONPATH="$BUILD/python" "$PYTHON" -c "import torch, switchml.torch" 2>/dev/null ||
  die "$PYTHON cannot import torch and switchml.torch (from $BUILD/python): build switchml_torch_ext for this interpreter"
command -v iptables >/dev/null || die "iptables not found (the loss rules need it)"
export PYTHON  # json_get (scripts/lib.sh)

# The fault schedule, from the seed (fails when the steps cannot hold it).
plan=$("$PYTHON" "$REPORT_PY" plan --steps "$STEPS" --seed "$SEED" --faults "$FAULTS" --warmup "$WARMUP" --gap "$GAP") ||
  die "no fault schedule for these options (above)"
mapfile -t plan_lines <<<"$plan"
[[ -n "$plan" ]] || plan_lines=()

# Output directory (kept: it is the result), and the exit trap of scripts/lib.sh: every process
# this script started is stopped, then the cluster removed, whatever happens.
if [[ -z "$OUT" ]]; then OUT=$(mktemp -d /tmp/switchml-chaos.XXXXXX); fi
mkdir -p "$OUT" || die "cannot create --out directory '$OUT'"
OUT=$(cd "$OUT" && pwd)
# A reused --out must not mix in an earlier run's results.
rm -rf "$OUT/ref" "$OUT/chaos" "$OUT/logs" "$OUT/faults.jsonl" "$OUT/chaos.json" "$OUT/chaos.md" \
    "$OUT/meta.json" "$OUT"/progress.*
mkdir -p "$OUT/ref" "$OUT/chaos" "$OUT/logs" || die "cannot write to --out directory '$OUT'"
sml_exit_trap
sml_netns_sweep smlchaos
NAME=$(sml_netns_owner smlchaos)
# shellcheck disable=SC2016  # expanded at exit
sml_at_exit 'if [[ -n "${NAME:-}" ]]; then "$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || echo "$PROG: could not remove cluster $NAME (run: $CLUSTER down --name $NAME)" >&2; fi'
sml_operator_token
TOKEN_FILE="$OUT/logs/operator-token"
(umask 077 && printf '%s\n' "$SWITCHML_OPERATOR_TOKEN" >"$TOKEN_FILE") || die "cannot write $TOKEN_FILE"
# shellcheck disable=SC2016
sml_at_exit 'rm -f "$TOKEN_FILE"'

T0=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*"; }
say "chaos scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
say "$WORKERS ranks, $STEPS steps, seed $SEED, gradients $GRAD_MODE, loss $LOSS, faults: ${FAULTS:-none}; output in $OUT"
for l in ${plan_lines[@]+"${plan_lines[@]}"}; do
  read -r k s f <<<"$l"
  say "  planned: $k at step $s (+$f of a step)"
done

SWITCHES=3
"$CLUSTER" up --name "$NAME" --workers "$WORKERS" --switches "$SWITCHES" --rate "$RATE" --switch-rate "$RATE" \
    >"$OUT/logs/cluster-up.log" 2>&1 || { cat "$OUT/logs/cluster-up.log" >&2; die "could not create the emulated cluster"; }
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
read -r -a SWITCH_IPS <<<"$CLUSTER_SWITCH_IPS"
say "cluster $NAME: $WORKERS worker hosts + $SWITCHES switch hosts, $RATE per link"

host_of() { if (($1 == 0)); then echo sw; else echo "sw$1"; fi; }
SW_HOST=sw
# The launcher of the servers (sml_start_server: it must exec, so the pid is the server's).
# shellcheck disable=SC2317
on_switch_host() { exec "$CLUSTER" exec --name "$NAME" --host "$SW_HOST" -- "$@"; }

# start_ranks BACKEND DIR EXTRA_ENV...: starts the WORKERS ranks of chaos_train.py in the
# background (rank i in worker host wi), sets RANK_PIDS.
RANK_PIDS=()
start_ranks() {
  local backend=$1 dir=$2 i
  shift 2
  RANK_PIDS=() RANK_RC=() FIRST_FAIL_US=0
  for ((i = 0; i < WORKERS; i++)); do
    "$CLUSTER" exec --name "$NAME" --host "w$i" -- timeout -k 10 "$TIMEOUT" env OMP_NUM_THREADS=1 \
        PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" GLOO_SOCKET_IFNAME=eth0 "$@" \
        "$PYTHON" "$TRAIN_PY" --rank "$i" --world-size "$WORKERS" --init-method "file://$dir/store" \
        --backend "$backend" --steps "$STEPS" --seed "$SEED" --grad-mode "$GRAD_MODE" \
        --fixed-point-bits "$FP_BITS" --hidden "$HIDDEN" --timeout "$TIMEOUT" --out-dir "$dir" \
        --progress "$OUT/progress.$backend" --label "$backend" >"$OUT/logs/$backend.rank$i.log" 2>&1 &
    RANK_PIDS+=($!)
    sml_track $!
  done
}
# reap_ranks: collects the exit status of every rank that has ended (RANK_RC[i], "" while it
# runs); sets FIRST_FAIL_US when a rank first ended with an error.
declare -a RANK_RC
FIRST_FAIL_US=0
reap_ranks() {
  local i rc
  for ((i = 0; i < ${#RANK_PIDS[@]}; i++)); do
    [[ -z "${RANK_RC[i]:-}" ]] || continue
    sml_alive "${RANK_PIDS[i]}" && continue
    rc=0; wait "${RANK_PIDS[i]}" || rc=$?
    RANK_RC[i]=$rc
    sml_untrack "${RANK_PIDS[i]}"
    ((rc == 0 || FIRST_FAIL_US != 0)) || FIRST_FAIL_US=$(now_us)
  done
  return 0
}
ranks_alive() {
  local i
  for ((i = 0; i < ${#RANK_PIDS[@]}; i++)); do [[ -n "${RANK_RC[i]:-}" ]] || return 0; done
  return 1
}
# stop_ranks WHY: stops the ranks still running (with their process trees); their status says WHY.
stop_ranks() {
  local i
  for ((i = 0; i < ${#RANK_PIDS[@]}; i++)); do
    [[ -z "${RANK_RC[i]:-}" ]] || continue
    sml_kill_tree "${RANK_PIDS[i]}"
    wait "${RANK_PIDS[i]}" 2>/dev/null || true
    sml_untrack "${RANK_PIDS[i]}"
    RANK_RC[i]="stopped: $1"
  done
}
# wait_ranks: waits for every rank; sets RANKS_FAILED (" i(why)" per failed rank).
wait_ranks() {
  local i rc
  while ranks_alive; do reap_ranks; sleep 0.05; done
  RANKS_FAILED=""
  for ((i = 0; i < ${#RANK_PIDS[@]}; i++)); do
    rc=${RANK_RC[i]}
    if [[ $rc == 124 ]]; then RANKS_FAILED+=" $i(timed out after ${TIMEOUT}s)"
    elif [[ $rc == stopped* ]]; then RANKS_FAILED+=" $i(${rc})"
    elif [[ $rc != 0 ]]; then RANKS_FAILED+=" $i(exit $rc)"; fi
  done
}
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }

# --- 1. the reference run: plain gloo, no loss, no fault
say "reference run: gloo, $STEPS steps"
: >"$OUT/progress.gloo"
start_ranks gloo "$OUT/ref"
wait_ranks
if [[ -n "$RANKS_FAILED" ]]; then
  for ((i = 0; i < WORKERS; i++)); do echo "--- gloo rank $i (last lines)"; tail -5 "$OUT/logs/gloo.rank$i.log"; done >&2
  echo "$PROG: the reference (gloo) run failed: ranks$RANKS_FAILED; logs in $OUT/logs" >&2
  exit 1
fi
say "reference run done: $STEPS steps in $(tail -n 1 "$OUT/progress.gloo" | cut -d' ' -f2) s after the group was up"

# --- 2. the servers: 3 switches, the standalone controller, a job of 2 shards
declare -a SW_PID_OF SW_UDP_OF SW_CTL_OF SW_STARTS
start_switch() {  # J: (re)starts switch J on its ports (0 the first time: free ports)
  local j=$1 n
  n=$((${SW_STARTS[j]:-0} + 1))
  SW_STARTS[j]=$n
  SW_HOST=$(host_of "$j")
  sml_start_switch --bind "${SWITCH_IPS[j]}" --port "${SW_UDP_OF[j]:-0}" --controller-port "${SW_CTL_OF[j]:-0}" \
      --via on_switch_host --ready "$OUT/logs/switch$j.ready" --log "$OUT/logs/switch$j.start$n.log" --deadline 30 -- \
      --operator-token-file "$TOKEN_FILE" || return 1
  SW_PID_OF[j]=$SW_PID SW_UDP_OF[j]=$UDP_PORT SW_CTL_OF[j]=$CTL_PORT
  SW_HOST=sw
}
C_STARTS=0 C_LISTEN_PORT=0
start_controller() {
  local args=() j
  C_STARTS=$((C_STARTS + 1))
  for ((j = 0; j < SWITCHES; j++)); do args+=(--switch "${SWITCH_IPS[j]}:${SW_CTL_OF[j]}"); done
  SW_HOST=sw
  sml_start_server controller "$OUT/logs/controller.ready" "$OUT/logs/controller.start$C_STARTS.log" 30 on_switch_host \
      "$SWITCHML" controller --listen "${SWITCH_IPS[0]}:$C_LISTEN_PORT" "${args[@]}" --health-interval-ms 500 \
      --operator-token-file "$TOKEN_FILE" || return 1
  C_PID=$SML_PID
  C_LISTEN_PORT=$(json_get "$OUT/logs/controller.ready" "j['controller_port']")
  CONTROLLER="${SWITCH_IPS[0]}:$C_LISTEN_PORT"
}
for ((j = 0; j < SWITCHES; j++)); do start_switch "$j" || die "switch $j did not start"; done
start_controller || die "the controller did not start"
THREADS=2 WINDOW_PACKETS=64
"$CLUSTER" exec --name "$NAME" --host sw -- timeout 30 "$SWITCHML" jobs create --controller "$CONTROLLER" \
    --operator-token-file "$TOKEN_FILE" --workers "$WORKERS" --switches 2 --threads "$THREADS" \
    --window "$WINDOW_PACKETS" --name chaos >"$OUT/logs/job" 2>&1 ||
  die "switchml jobs create failed: $(tail -3 "$OUT/logs/job")"
JOB_ID=$(sed -n 's/^SWITCHML_JOB_ID=//p' "$OUT/logs/job")
JOB_TOKEN=$(sed -n 's/^SWITCHML_JOB_TOKEN=//p' "$OUT/logs/job")
[[ -n "$JOB_ID" && -n "$JOB_TOKEN" ]] || die "no job id and token in the output of jobs create ($OUT/logs/job)"
say "controller $CONTROLLER drives switches ${SWITCH_IPS[*]}; job $JOB_ID on 2 of them ($THREADS threads x $WINDOW_PACKETS packets per rank)"

# switches_holding_job: the switches (indices) that hold a live shard of the job now, from each
# switch's own job list (the scenario's job is the only one there besides job 0). The questions
# go from switch host 0 (ip netns exec: cluster.sh exec costs more than a step).
switches_holding_job() {
  local j out=() pids=()
  for ((j = 0; j < SWITCHES; j++)); do  # in parallel: a switch being re-placed may answer slowly
    rm -f "$OUT/logs/holds.$j"
    [[ -n "${SW_PID_OF[j]:-}" ]] || continue
    { ip netns exec "$CLUSTER_SWITCH_NS" timeout 3 "$SWITCHML" jobs list --rpc-timeout-ms 1000 \
          --controller "${SWITCH_IPS[j]}:${SW_CTL_OF[j]}" --operator-token-file "$TOKEN_FILE" 2>/dev/null |
        awk '$1 ~ /^[1-9][0-9]*$/ && $2 != "ended" { f = 1 } END { exit !f }' && : >"$OUT/logs/holds.$j"; } &
    pids+=($!)
  done
  wait ${pids[@]+"${pids[@]}"} 2>/dev/null || true
  for ((j = 0; j < SWITCHES; j++)); do
    [[ -e "$OUT/logs/holds.$j" ]] && out+=("$j")
    rm -f "$OUT/logs/holds.$j"
  done
  echo "${out[*]}"
}
# placement: "PLACEMENT/STATE" of the job at the controller (`jobs show`), "?" if it does not answer
# within a second.
placement() {
  local out
  out=$(ip netns exec "$CLUSTER_SWITCH_NS" timeout 3 "$SWITCHML" jobs show "$JOB_ID" --rpc-timeout-ms 1000 \
      --controller "$CONTROLLER" --operator-token-file "$TOKEN_FILE" 2>/dev/null) || { echo "?"; return 0; }
  awk -F'[:,]' '/"placement"/ { gsub(/[ "]/, "", $2); p = $2 } /"state"/ { gsub(/[ "]/, "", $2); s = $2 }
                END { print (p == "" ? "?" : p) "/" (s == "" ? "?" : s) }' <<<"$out"
}
kill9() {  # PID: kill -9, reaped
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  sml_untrack "$1"
}

# --- 3. the disturbed run
"$CLUSTER" loss --name "$NAME" --to-switch "$LOSS" --from-switch "$LOSS" >"$OUT/logs/loss.log" 2>&1 ||
  die "could not set the loss rules: $(cat "$OUT/logs/loss.log")"
say "disturbed run: switchml, loss $LOSS on every UDP datagram into a switch or worker host"
: >"$OUT/progress.switchml"
: >"$OUT/faults.jsonl"
start_ranks switchml "$OUT/chaos" SWITCHML_CONTROLLER="$CONTROLLER" SWITCHML_JOB_ID="$JOB_ID" \
    SWITCHML_JOB_TOKEN="$JOB_TOKEN" SWITCHML_WORKER_THREADS="$THREADS" SWITCHML_WINDOW_PACKETS="$WINDOW_PACKETS" \
    SWITCHML_CALL_TIMEOUT_MS="$CALL_TIMEOUT_MS"

# progress: sets DONE (steps rank 0 finished) and STEP_US (recent mean step time, us; 0 unknown).
progress() {
  local lines n t_last t_first
  mapfile -t lines < <(tail -n 6 "$OUT/progress.switchml" 2>/dev/null)
  n=${#lines[@]}
  DONE=0 STEP_US=0
  ((n)) || return 0
  DONE=${lines[n-1]%% *}
  if ((n >= 3)); then  # skip line 0 (group setup) when it is among them
    t_last=${lines[n-1]#* } t_first=${lines[1]#* }
    STEP_US=$(awk -v a="$t_first" -v b="$t_last" -v k=$((n - 2)) 'BEGIN { printf "%d", (b - a) / k * 1e6 }')
  fi
}
log_fault() {  # JSON fields (already encoded), one line of faults.jsonl
  echo "{$1}" >>"$OUT/faults.jsonl"
}
json_str() { "$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

SHARD_RESTART_AT=0 SHARD_DOWN=""
restart_shard_switch() {
  local j=$SHARD_DOWN
  SHARD_DOWN="" SHARD_RESTART_AT=0
  if start_switch "$j"; then say "  switch $j restarted after ${SHARD_DOWN_S} s down (placement $(placement))"
  else say "  switch $j did NOT restart (see $OUT/logs)"; fi
}
# prepare KIND: what a fault needs to know before it fires (asked ahead, since the questions may
# take longer than a step): VICTIM (the switch to kill: for "switch" the first switch
# holding a shard of the job, for "shard" the last), P0 (the job's placement), PREP_ERR.
prepare() {
  local holders hs
  VICTIM="" P0="" PREP_ERR=""
  [[ -z "$SHARD_DOWN" ]] || restart_shard_switch  # one fault at a time: the killed shard returns first
  [[ $1 == controller ]] && return 0
  local ppid
  placement >"$OUT/logs/placement" &
  ppid=$!
  holders=$(switches_holding_job)
  wait "$ppid" 2>/dev/null || true
  P0=$(cat "$OUT/logs/placement" 2>/dev/null || echo "?")
  if [[ -z "$holders" ]]; then
    PREP_ERR="no switch holds a live shard of job $JOB_ID (placement/state $P0)"
    return 0
  fi
  read -r -a hs <<<"$holders"
  if [[ $1 == switch ]]; then VICTIM=${hs[0]}; else VICTIM=${hs[${#hs[@]}-1]}; fi
}
fire() {  # KIND PLANNED_STEP: injects one fault now (after prepare KIND), logs it
  local kind=$1 planned=$2 step detail="" err="$PREP_ERR" t0 t1
  t0=$(now_us)
  progress
  step=$((DONE + 1))  # the step that runs as the fault fires
  if ((DONE >= STEPS)); then
    say "fault $kind (planned at step $planned) not injected: the training had finished its $STEPS steps"
    log_fault "\"kind\": \"$kind\", \"planned_step\": $planned, \"step\": $step, \"fired\": false, \"why\": \"the training had finished its $STEPS steps\""
    return 0
  fi
  if [[ -z "$err" ]]; then
    case "$kind" in
      switch|shard)
        kill9 "${SW_PID_OF[VICTIM]}"
        SW_PID_OF[VICTIM]=""
        t1=$(now_us)
        if [[ $kind == switch ]]; then
          if start_switch "$VICTIM"; then
            detail="switch $VICTIM (${SWITCH_IPS[VICTIM]}) killed, restarted in $((($(now_us) - t1) / 1000)) ms; placement/state before: $P0"
          else
            err="switch $VICTIM killed but did not restart"
          fi
        else
          SHARD_DOWN=$VICTIM
          SHARD_RESTART_AT=$(($(now_us) + $(awk -v s="$SHARD_DOWN_S" 'BEGIN { printf "%d", s * 1e6 }')))
          detail="switch $VICTIM (${SWITCH_IPS[VICTIM]}) killed, down for ${SHARD_DOWN_S} s; placement/state before: $P0"
        fi ;;
      controller)
        kill9 "$C_PID"
        t1=$(now_us)
        if start_controller; then detail="controller killed, restarted in $((($(now_us) - t1) / 1000)) ms"
        else err="the controller was killed and did not restart"; fi ;;
    esac
  fi
  say "fault $kind at step $step (planned $planned): ${err:-$detail}"
  if [[ -n "$PREP_ERR" ]]; then  # nothing was injected
    log_fault "\"kind\": \"$kind\", \"planned_step\": $planned, \"step\": $step, \"fired\": false, \"why\": $(json_str "$PREP_ERR")"
    return 0
  fi
  log_fault "\"kind\": \"$kind\", \"planned_step\": $planned, \"step\": $step, \"fired\": true, \"t_us\": $t0, \"detail\": $(json_str "$detail")${err:+, \"error\": $(json_str "$err")}"
}

fi_next=0 armed_at=0 prepared=-1 LAST_FIRE_US=0 PREP_LEAD_US=2000000
deadline=$(($(now_us) + TIMEOUT * 1000000))
# Once a rank failed, the others get GRACE_S to end on their own (their calls fail within the
# call timeout, Gloo's within --timeout); then they are stopped and reported so.
GRACE_S=$((3 * CALL_TIMEOUT_MS / 1000 + 30))
while reap_ranks; ranks_alive; do
  if ((FIRST_FAIL_US != 0 && $(now_us) > FIRST_FAIL_US + GRACE_S * 1000000)); then
    say "a rank failed ${GRACE_S} s ago; stopping the ranks still running"
    stop_ranks "still running ${GRACE_S} s after another rank failed"
    break
  fi
  progress
  if ((fi_next < ${#plan_lines[@]})); then
    read -r kind fstep frac <<<"${plan_lines[fi_next]}"
    # Prepared two steps ahead, or earlier when those steps would take less than PREP_LEAD_US (the
    # questions may take a second while the controller re-places the job), but never sooner
    # than PREP_LEAD_US after the previous fault (the job's shards have moved by then).
    if ((prepared != fi_next && (DONE + 3 >= fstep || (STEP_US > 0 && (fstep - DONE - 1) * STEP_US <= PREP_LEAD_US &&
                                   $(now_us) >= LAST_FIRE_US + PREP_LEAD_US)))); then
      prepare "$kind"
      prepared=$fi_next
      progress
    fi
    if ((prepared == fi_next && armed_at == 0 && DONE + 1 >= fstep)); then
      # Step fstep runs: fire FRACTION of a step time after it began (seen).
      armed_at=$(($(now_us) + $(awk -v f="$frac" -v s="$STEP_US" 'BEGIN { printf "%d", f * s }')))
    fi
    if ((armed_at != 0 && $(now_us) >= armed_at)); then
      fire "$kind" "$fstep"
      fi_next=$((fi_next + 1)) armed_at=0 LAST_FIRE_US=$(now_us)
    fi
  fi
  if [[ -n "$SHARD_DOWN" ]] && (($(now_us) >= SHARD_RESTART_AT)); then restart_shard_switch; fi
  if (($(now_us) >= deadline)); then stop_ranks "--timeout ${TIMEOUT} s passed"; break; fi
  sleep 0.02
done
wait_ranks
[[ -z "$SHARD_DOWN" ]] || restart_shard_switch
progress
while ((fi_next < ${#plan_lines[@]})); do
  read -r kind fstep frac <<<"${plan_lines[fi_next]}"
  log_fault "\"kind\": \"$kind\", \"planned_step\": $fstep, \"step\": $fstep, \"fired\": false, \"why\": \"training had ended at step $DONE\""
  fi_next=$((fi_next + 1))
done
say "disturbed run ended: rank 0 finished $DONE of $STEPS steps${RANKS_FAILED:+; ranks$RANKS_FAILED failed}"
if [[ -n "$RANKS_FAILED" ]]; then
  for ((i = 0; i < WORKERS; i++)); do echo "--- switchml rank $i (last lines)"; tail -4 "$OUT/logs/switchml.rank$i.log"; done
fi
"$CLUSTER" drops --name "$NAME" >"$OUT/logs/drops.txt" 2>&1 || true

# --- 4. the report
"$PYTHON" - "$OUT/meta.json" <<EOF
import json, sys
json.dump({"date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "cpus": $(nproc), "workers": $WORKERS, "steps": $STEPS,
           "seed": $SEED, "loss": $LOSS, "rate": "$RATE", "faults": "${FAULTS:-none}",
           "call_timeout_ms": $CALL_TIMEOUT_MS, "job": "2 shards on 3 switches, $THREADS threads"},
          open(sys.argv[1], "w"))
EOF
echo
rc=0
"$PYTHON" "$REPORT_PY" report --ref "$OUT/ref" --chaos "$OUT/chaos" --faults "$OUT/faults.jsonl" --out "$OUT" \
    --meta "$OUT/meta.json" --workers "$WORKERS" --window "$WINDOW" --param-tolerance "$PARAM_TOL" || rc=$?
say "report: $OUT/chaos.md, $OUT/chaos.json; logs in $OUT/logs"
exit "$rc"
