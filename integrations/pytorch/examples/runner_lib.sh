# shellcheck shell=bash disable=SC2034
# examples/runner_lib.sh — what run_ddp_bench.sh and run_fashion_mnist.sh share: N ranks of a
# torch.distributed script on loopback or on the emulated cluster (scripts/cluster.sh), a fresh
# switch for the "switchml" runs, and the checks of the options they have in common. Sourced
# after scripts/lib.sh:
#
#   source "$HERE/runner_lib.sh"
#   need_int --workers "$WORKERS"; need_rate "$RATE"
#   runner_check_build "import torch"        # BUILD made absolute; dies unless it is built
#   runner_setup switchml-x x "$WORK_LABEL"  # WORK, NAME, SWITCH_IP, MODE; cluster up if RATE
#   runner_start_switch                      # SW_PID, CONTROLLER
#   RANK_ENV=("SWITCHML_CONTROLLER=$CONTROLLER" ...)
#   run_ranks "$WORK/rank" "$PYTHON" script.py --world-size "$WORKERS" ...   # RANKS_FAILED
#   runner_stop_switch
#   [[ -z "$RANKS_FAILED" ]] || runner_fail_ranks "" "$WORK/rank" 1
#
# Sets PROG (the script's name) and REPO (the repository). The caller sets WORKERS, BUILD,
# PYTHON, RATE ("" = loopback), TIMEOUT (seconds, each rank's limit) and KEEP (1 = keep the
# work directory).

PROG=$(basename "$0")
REPO=$SML_ROOT
RUNNER_CLUSTER_SH="$REPO/scripts/cluster.sh"

need_int() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"; }
need_num() { [[ "$2" =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] || die "$1 must be a positive number, got '$2'"; }
# need_rate RATE: --cluster's value, a tc rate.
need_rate() {
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die "--cluster needs a tc rate such as 500mbit, got '$1'"
}

# runner_check_build PYTHON_CODE: BUILD made absolute; dies unless BUILD holds the switch binary
# and the Python package, PYTHON runs PYTHON_CODE (its imports), and, with --cluster, this is
# root and scripts/cluster.sh is there.
runner_check_build() {
  [[ -d "$BUILD" ]] || die "--build: directory '$BUILD' does not exist"
  BUILD=$(cd "$BUILD" && pwd)
  [[ -d "$BUILD/python/switchml" ]] || die "$BUILD/python/switchml does not exist: build it first (ninja -C $BUILD switchml_torch_ext switchml_cli), or pass --build DIR"
  [[ -x "$BUILD/switchml" ]] || die "$BUILD/switchml does not exist: build it first (ninja -C $BUILD switchml_cli), or pass --build DIR"
  "$PYTHON" -c "$1" 2>/dev/null || die "--python $PYTHON cannot $1 (scripts/python-env.sh makes the project venv that can)"
  if [[ -n "$RATE" ]]; then
    [[ $(id -u) == 0 ]] || die "--cluster needs root (network namespaces)"
    [[ -x "$RUNNER_CLUSTER_SH" ]] || die "$RUNNER_CLUSTER_SH not found"
  fi
}

# on_host HOST: the command prefix that runs a command in cluster host HOST (nothing on loopback).
on_host() { if [[ -n "$NAME" ]]; then echo "$RUNNER_CLUSTER_SH exec --name $NAME --host $1 --"; fi; }
# in_sw CMD...: execs CMD in the switch host (on loopback: here).
# shellcheck disable=SC2046
in_sw() { exec $(on_host sw) "$@"; }

# runner_setup WORK_PREFIX CLUSTER_PREFIX CLUSTER_MODE: the work directory (kept on failure and
# with KEEP=1) and, with RATE, the emulated cluster CLUSTER_PREFIX<pid> (WORKERS worker hosts +
# a switch host, RATE on every worker link), torn down at exit even after a failure, after the
# switch and the ranks (with their `timeout` processes) stopped. Sets WORK, NAME (the cluster,
# "" on loopback), SWITCHML, SWITCH_IP and MODE (CLUSTER_MODE, or "loopback").
runner_setup() {
  sml_work_dir "$1"
  NAME=""
  SWITCHML="$BUILD/switchml"
  # shellcheck disable=SC2016  # expanded at exit, by eval
  sml_at_exit 'if [[ -n "$NAME" ]]; then "$RUNNER_CLUSTER_SH" down --name "$NAME" >/dev/null 2>&1 || echo "$PROG: could not tear down cluster $NAME (run: $RUNNER_CLUSTER_SH down --name $NAME)" >&2; fi'
  if [[ -n "$RATE" ]]; then
    NAME="$2$$"
    echo "== emulated cluster $NAME: $WORKERS worker hosts + switch host, $RATE per worker link"
    "$RUNNER_CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --rate "$RATE" > "$WORK/cluster.log" 2>&1 \
      || { cat "$WORK/cluster.log" >&2; die "scripts/cluster.sh up failed"; }
    # shellcheck disable=SC1090
    source "/tmp/switchml-cluster-$NAME.env"
    SWITCH_IP=$CLUSTER_SWITCH_IP
    MODE=$3
  else
    SWITCH_IP=127.0.0.1
    MODE="loopback"
  fi
}

# runner_start_switch: a fresh switch on free ports, in the switch host on the cluster; sets
# SW_PID and CONTROLLER.
runner_start_switch() {
  sml_start_switch --bind "$SWITCH_IP" --via in_sw --ready "$WORK/switch-ready.json" --deadline 30 -- \
      --counters-json "$WORK/switch-counters.json" || die "the switch did not start"
  CONTROLLER="$SWITCH_IP:$CTL_PORT"
}

# runner_stop_switch: stops the switch, after writing the CPU seconds (user + system) it used
# so far to $WORK/switch-cpu-s (it shares the cores with the ranks).
runner_stop_switch() {
  [[ -n "${SW_PID:-}" ]] || return 0
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($14 + $15) / hz}' "/proc/$SW_PID/stat" \
      > "$WORK/switch-cpu-s" 2>/dev/null || true
  sml_stop_switch 10 || true
  SW_PID=""
}

# run_ranks [--soft RC] LOG_PREFIX CMD...: WORKERS ranks of `CMD... --rank I` (rank I in worker
# host wI on the cluster), each under `timeout -k 10 $TIMEOUT` with OMP_NUM_THREADS=1,
# PYTHONPATH=$BUILD/python and the assignments of the array RANK_ENV; output to
# LOG_PREFIX<I>.log; rank 0's shown live. Waits for all; sets RANKS_FAILED (" I(why)" for each
# rank that timed out or exited non-zero, but RC) and RANKS_SOFT (" I" for each that exited RC).
run_ranks() {
  local soft=-1 prefix i rc tail_pid pids=()
  if [[ $1 == --soft ]]; then soft=$2; shift 2; fi
  prefix=$1
  shift
  for ((i = 0; i < WORKERS; i++)); do : > "$prefix$i.log"; done
  for ((i = 0; i < WORKERS; i++)); do
    # shellcheck disable=SC2046
    $(on_host "w$i") timeout -k 10 "$TIMEOUT" env OMP_NUM_THREADS=1 \
        PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" ${RANK_ENV[@]+"${RANK_ENV[@]}"} \
        "$@" --rank "$i" > "$prefix$i.log" 2>&1 &
    pids+=($!)
    sml_track $!
  done
  # Rank 0's progress lines, live, until rank 0 exits.
  tail -n +1 -f --pid="${pids[0]}" "${prefix}0.log" &
  tail_pid=$!
  RANKS_FAILED="" RANKS_SOFT=""
  for ((i = 0; i < WORKERS; i++)); do
    rc=0; wait "${pids[i]}" || rc=$?
    if ((rc == 124)); then RANKS_FAILED+=" $i(timed out after ${TIMEOUT}s)"
    elif ((rc == soft)); then RANKS_SOFT+=" $i"
    elif ((rc != 0)); then RANKS_FAILED+=" $i(exit $rc)"; fi
  done
  wait "$tail_pid" 2>/dev/null || true
  sml_untrack "${pids[@]}"
}

# runner_fail_ranks WHAT LOG_PREFIX SHOW_SWITCH: the last lines of every rank's log (and of the
# switch's, if SHOW_SWITCH is 1), "PROG: WHAT: ranks ... failed", exit 1.
runner_fail_ranks() {
  local i what=$1 prefix=$2
  for ((i = 0; i < WORKERS; i++)); do echo "--- ${what:+$what }rank $i (last lines)"; tail -8 "$prefix$i.log"; done >&2
  [[ $3 != 1 ]] || { echo "--- switch"; tail -8 "$WORK/switch.log"; } >&2 2>/dev/null || true
  echo "$PROG: ${what:+$what: }ranks$RANKS_FAILED failed" >&2
  exit 1
}

# report_udp_drops HEADING: on the cluster, drops per host since it was created
# (`scripts/cluster.sh drops`: UDP receive-buffer overflows and receive errors, tbf drops on the
# host's and the bridge's side of each link; includes a few rendezvous packets); printed and
# written to $WORK/udp-drops.txt.
report_udp_drops() {
  [[ -n "$NAME" ]] || return 0
  { echo "drops per host$1 (scripts/cluster.sh drops):"; "$RUNNER_CLUSTER_SH" drops --name "$NAME"; } |
    tee "$WORK/udp-drops.txt"
}
