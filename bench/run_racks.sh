#!/usr/bin/env bash
# bench/run_racks.sh — the `racks` benchmark scenario (docs/benchmarks.md#racks-scenario): workers
# spread over racks whose uplinks to the core may be oversubscribed. For each configuration
# (R racks x r workers, oversubscription o:1) it brings up an emulated cluster
# (scripts/cluster.sh up --racks R --per-rack r --rate W --uplink-rate r*W/o: every worker link at
# W, every rack's uplink at r*W/o, both directions) and runs float32 all-reduces of S bytes
# (allreduce_perf, every element of every iteration verified) with each method:
#   flat       SwitchML with one switch, on rack 0's leaf switch host: every other rack's
#              workers reach it across their uplink and rack 0's;
#   gloo       Gloo's ring (ranks rack-major, so the ring crosses each uplink once each way);
#   two-level  a leaf switch per rack under a parent switch, placed by a standalone controller
#              (`switchml jobs create --leaf k:r ... --parent R`; needs 2 racks or more); when
#              the build has no --leaf it says "two-level: not available in this build" and
#              records nothing.
# Per run: the median time per all-reduce, the method's bound (bench/racks_report.py explains
# each), the bytes that crossed the busiest uplink per all-reduce (its interface counters, both
# directions, before and after the run), the tensor's bytes and the wrong elements. It prints a
# table and writes JSON (one record per run) and a PNG.
#
# Exit status: 0 only if every run finished and every element was right; 77 when this machine
# cannot run it (not root, no network namespaces); 2 for a bad option. Each cluster is removed
# when its configuration is done, and at exit whatever happens.
#
#   bench/run_racks.sh                     # {2x4, 4x2} x {4:1, 1:1}, 64 MiB, 500 Mbit/s worker links
#   bench/run_racks.sh --configs 2x4 --oversub 4 --bytes 16MiB
#   bench/run_racks.sh --quick             # 2 racks x 2, 4:1, 1 MiB, 3 iterations: a smoke run
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=bench/scenario_options.sh
source "$here/scenario_options.sh"  # scenario_option: the shared command-line options
SML_PROG=run_racks.sh
CONFIGS="" OVERSUB="" BYTES="" ITERS="" WARMUP=""
RATE=500mbit SWITCH_RATE="" LOSS=0 METHODS="flat,gloo,two-level" TIMEOUT=600 QUICK=0

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF

Options:
  --configs "2x4 4x2"   racks x workers per rack (space or comma separated; default 2x4 4x2)
  --oversub "4 1"       oversubscription ratios o: each uplink runs at r x rate / o (default 4 1)
  --rate R              tbf rate of every worker link, tc units (default $RATE)
  --loss P              drop each UDP datagram arriving at any host (worker, leaf, parent) with
                        probability P (iptables statistic; default 0): loss at every hop, both
                        levels of a two-level job included; results must stay exact
  --switch-rate R       tbf rate of the leaf and parent switch hosts' links (default: unlimited,
                        a switch host stands for the rack's switch)
  --bytes S             tensor size (default 64MiB; suffixes K, M, G, KiB, MiB, GiB)
  --iters N --warmup N  timed and warm-up iterations (default 5 and 1); tat is the median
  --methods LIST        of flat, gloo, two-level (default $METHODS)
  --no-gloo             same as leaving gloo out of --methods (allreduce_perf built without Gloo)
  --quick               2 racks x 2, 4:1, 1 MiB, 3 iterations + 1 warm-up: a smoke run
                        (--configs, --oversub, --bytes, --iters, --warmup given as well win)
  --timeout S           kill a run's ranks after S seconds (default $TIMEOUT)
  --perf BIN --switchml BIN --cluster-sh BIN   binaries
  --out DIR             JSON, logs and the plot go here (default: a new directory under /tmp)
  --json FILE           the runs as JSON (default OUT/racks.json)
  --plot FILE           PNG of the times against the bounds (default OUT/racks.png; needs
                        python3-matplotlib)
  --perf-arg ARG        extra flag for every allreduce_perf rank (repeatable; also --perf-arg=ARG)
  --switch-arg ARG      extra flag for every switch (repeatable; also --switch-arg=ARG)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --configs) sml_need_value "$@"; CONFIGS="${2//,/ }"; shift ;;
    --oversub) sml_need_value "$@"; OVERSUB="${2//,/ }"; shift ;;
    --switch-rate) sml_need_value "$@"; SWITCH_RATE="$2"; shift ;;
    --loss) sml_need_value "$@"; LOSS="$2"; shift ;;
    --bytes) sml_need_value "$@"; BYTES="$2"; shift ;;
    --methods) sml_need_value "$@"; METHODS="$2"; shift ;;
    --no-gloo) NO_GLOO=1 ;;
    --quick) QUICK=1 ;;
    *) scenario_option "rate iters warmup timeout perf switchml cluster-sh out json plot perf-arg switch-arg" "$@" || die "unknown argument '$1' (see --help)"
       shift $((SCENARIO_SHIFT - 1)) ;;
  esac
  shift
done
if [ "$QUICK" = 1 ]; then
  : "${CONFIGS:=2x2}" "${OVERSUB:=4}" "${BYTES:=1MiB}" "${ITERS:=3}" "${WARMUP:=1}"
fi
: "${CONFIGS:=2x4 4x2}" "${OVERSUB:=4 1}" "${BYTES:=64MiB}" "${ITERS:=5}" "${WARMUP:=1}"

# The methods, in this order; --no-gloo drops gloo.
DO_FLAT=0 DO_GLOO=0 DO_TWO=0
for m in ${METHODS//,/ }; do
  case "$m" in
    flat) DO_FLAT=1 ;;
    gloo) DO_GLOO=1 ;;
    two-level) DO_TWO=1 ;;
    *) die "--methods: unknown method '$m' (flat, gloo, two-level)" ;;
  esac
done
[ -z "${NO_GLOO:-}" ] || DO_GLOO=0
[ $((DO_FLAT + DO_GLOO + DO_TWO)) -gt 0 ] || die "--methods: no method left to run"

is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
[[ "$LOSS" =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || die "--loss must be a probability in [0, 1], got '$LOSS'"
is_rate() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?[kKmMgG]?(bit|bps)$ ]]; }
is_rate "$RATE" || die "--rate must be a tc rate such as 500mbit or 1gbit, got '$RATE'"
[ -z "$SWITCH_RATE" ] || is_rate "$SWITCH_RATE" ||
  die "--switch-rate must be a tc rate such as 500mbit or 1gbit, got '$SWITCH_RATE'"
is_count "$ITERS" 1 100000 || die "--iters must be a count >= 1, got '$ITERS'"
is_count "$WARMUP" 0 100000 || die "--warmup must be a count >= 0, got '$WARMUP'"
is_count "$TIMEOUT" 1 86400 || die "--timeout must be seconds in 1..86400, got '$TIMEOUT'"
[[ "$BYTES" =~ ^[0-9]+([KMG](iB)?)?$ ]] || die "--bytes must be a size such as 64MiB or 1048576, got '$BYTES'"
[ -n "$CONFIGS" ] || die "--configs: no configuration given"
for c in $CONFIGS; do
  [[ "$c" =~ ^([0-9]+)x([0-9]+)$ ]] || die "--configs: '$c' is not RACKSxPER_RACK (e.g. 2x4)"
  cr=${BASH_REMATCH[1]} cp=${BASH_REMATCH[2]}
  is_count "$cr" 1 16 || die "--configs: '$c': racks must be in 1..16"
  is_count "$cp" 1 64 || die "--configs: '$c': workers per rack must be in 1..64"
  [ $((cr * cp)) -ge 2 ] || die "--configs: '$c': an all-reduce needs 2 workers or more"
done
[ -n "$OVERSUB" ] || die "--oversub: no ratio given"
for o in $OVERSUB; do
  [[ "$o" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v o="$o" 'BEGIN { exit !(o > 0 && o <= 1000) }' ||
    die "--oversub: '$o' is not a ratio in (0, 1000] (4 means 4:1)"
done

# Exit status 77 (CTest's "skipped"): this machine cannot run the scenario.
[ "$(id -u)" -eq 0 ] || skip "run_racks.sh needs root (network namespaces); run as root"
ip netns list >/dev/null 2>&1 || skip "run_racks.sh: 'ip netns' is not available here"
[ -x "$PERF" ] || die "allreduce_perf not found at '$PERF' (build it or pass --perf)"
[ -x "$SWITCHML" ] || die "switchml CLI not found at '$SWITCHML' (build it or pass --switchml)"
[ -x "$CLUSTER" ] || die "cluster script not found at '$CLUSTER' (pass --cluster-sh)"

# The two-level method: only when the controller places two-level jobs (`switchml jobs create
# --leaf`, issue #23); otherwise it says so and records nothing.
TWO_LEVEL_MSG=""
if [ "$DO_TWO" = 1 ] && ! "$SWITCHML" jobs create --help 2>&1 | grep -q -- '--leaf'; then
  TWO_LEVEL_MSG="two-level: not available in this build"
  DO_TWO=0
fi

[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-bench-racks.XXXXXX)"
mkdir -p "$OUT/logs" || die "cannot create --out directory '$OUT'"
BASE="$(cd "$OUT" && pwd)"
[ -n "$JSON" ] || JSON="$BASE/racks.json"
[ -n "$PLOT" ] || PLOT="$BASE/racks.png"
RUNS="$BASE/runs.tsv"
rm -rf "$BASE"/cfg-* && : >"$RUNS"  # a reused --out must not mix in old runs

# shellcheck source=bench/scenario_lib.sh
source "$here/scenario_lib.sh"  # wait_ranks, show_logs, run_switchml, run_gloo; installs the exit trap
SCENARIO=racks

# The operator credential the two-level run's switches, controller and `jobs create` share (a
# file, mode 600).
[ "$DO_TWO" = 0 ] || operator_token_file "$BASE/logs/operator-token"

# The clusters: a unique name per configuration, removed when it is done and at exit whatever
# happens; first the clusters of an earlier run that was killed before its cleanup.
sml_netns_sweep smlbrk
OWNER=$(sml_netns_owner smlbrk)
NAME=""
# shellcheck disable=SC2016  # expanded at exit
sml_at_exit '[ -z "$NAME" ] || "$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true'

# Hooks of scenario_lib.sh (the launchers must exec: sml_start_server).
SW_HOST=leaf0
# shellcheck disable=SC2317  # called through sml_start_server
on_switch_host() { exec "$CLUSTER" exec --name "$NAME" --host "$SW_HOST" -- "$@"; }
on_worker_host() { local r=$1; shift; exec "$CLUSTER" exec --name "$NAME" --host "w$r" -- "$@"; }
rank_args() {  # every rank binds to its host's address; counters from its eth0
  printf '%s\n' --bind-ip "${WORKER_IPS[$1]}" --host "${WORKER_IPS[$1]}" --iface eth0
}
drops_snapshot() { "$CLUSTER" drops --name "$NAME"; }
common=(-b "$BYTES" -e "$BYTES" -n "$ITERS" -w "$WARMUP" -d float32 ${EXTRA[@]+"${EXTRA[@]}"})

# uplink_snapshot FILE: one line per rack, "tx_bytes rx_bytes" of the rack side of its uplink.
uplink_snapshot() {
  "$CLUSTER" uplinks --name "$NAME" |
    awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["tx_bytes"], v["rx_bytes"] }' >"$1"
}
# uplink_delta BEFORE AFTER: per rack, the bytes that crossed its uplink (both directions), comma
# separated, rack 0 first.
uplink_delta() {
  # %.0f, not %d: Debian's awk (mawk) clamps %d at 2^31 - 1, and a 64 MiB run moves more.
  paste -d' ' "$1" "$2" | awk '{ printf "%s%.0f", (NR > 1 ? "," : ""), ($3 - $1) + ($4 - $2) } END { print "" }'
}

# record METHOD STATUS PERF_JSON UPLINK_BYTES: one line of runs.tsv for bench/racks_report.py.
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$R" "$PER" "$O" "$RATE" "$UPLINK_RATE" \
    "${SWITCH_RATE:--}" "$((ITERS + WARMUP))" "$3" "${4:--}" "$2" >>"$RUNS"
}

# run_method METHOD: one run on the current cluster, between two snapshots of the uplinks.
run_method() {
  local m=$1 n=$((R * PER)) rc=0 before after json
  before="$OUT/logs/$m.uplinks.before" after="$OUT/logs/$m.uplinks.after"
  uplink_snapshot "$before" || { echo "$SCENARIO: cannot read the uplink counters" >&2; return 1; }
  case "$m" in
    flat)
      # One switch for every worker, on rack 0's leaf switch host.
      SW_HOST=leaf0 SWITCH_IP=${LEAF_IPS[0]}
      run_switchml "$n" ${SWITCH_FLAGS[@]+"${SWITCH_FLAGS[@]}"} || rc=1
      json="$OUT/switchml-n$n.json" ;;
    gloo)
      run_gloo "$n" || rc=1
      json="$OUT/gloo-n$n.json" ;;
  esac
  uplink_snapshot "$after" || { echo "$SCENARIO: cannot read the uplink counters" >&2; return 1; }
  record "$m" "$([ $rc = 0 ] && echo ok || echo failed)" "$json" "$(uplink_delta "$before" "$after")"
  return $rc
}

# run_two_level: the two-level method (docs/scaling.md "Two-level aggregation"): a switch on each
# leaf<k> host and on the parent host, a standalone controller on the parent host driving all of
# them (leaf k = its switch k, the parent its switch R), one job created with
# `switchml jobs create --leaf k:r ... --parent R` (rack k: ranks k*r .. k*r+r-1, cluster.sh's
# w<i> with i = k*r + j), and every rank's allreduce_perf against the controller with the job's
# id and token (as run_scaleout.sh runs K shards), between two snapshots of the uplinks. Its
# bound (bench/racks_report.py): the slowest level's link time. Every worker link carries P each
# way, each uplink only its leaf's partial up and the total down (P each way, whatever r), each
# leaf host's link (r + 1) P and the parent's R x P each way; so at 4:1 it is the worker link
# (P / W) unless the uplink is slower than one worker link (U < W) or the switch hosts' links are
# limited.
TL_THREADS=1 TL_WINDOW=256  # every rank's --threads and --window; the job is sized for them
SERVER_PIDS=()
stop_servers() {  # the controller first, then the switches (SIGTERM: they print their counters)
  local p
  for p in "${SERVER_PIDS[@]}"; do sml_stop "$p" 10 "server $p" || true; done
  SERVER_PIDS=()
}
run_two_level() {
  local n=$((R * PER)) tag k ctl r rc=0 ranks=() args id token before after switch_args=() leaf_args=()
  tag="two-level-n$n"
  before="$OUT/logs/two-level.uplinks.before" after="$OUT/logs/two-level.uplinks.after"
  for ((k = 0; k <= R; k++)); do  # the leaves 0..R-1, then the parent (switch R)
    local ip=${LEAF_IPS[$k]:-} what="leaf$k"
    if [ "$k" = "$R" ]; then ip=$PARENT_IP what=parent; fi
    SW_HOST=$what
    sml_start_switch --bind "$ip" --via on_switch_host --ready "$OUT/logs/$tag.$what.ready" \
        --log "$OUT/logs/$tag.$what.log" --deadline 20 -- --operator-token-file "$TOKEN_FILE" \
        --counters-json "$OUT/logs/$tag.$what.counters.json" ${SWITCH_FLAGS[@]+"${SWITCH_FLAGS[@]}"} ||
      { echo "$SCENARIO: the $what switch did not start" >&2; stop_servers; return 1; }
    SERVER_PIDS+=("$SW_PID")
    switch_args+=(--switch "$ip:$CTL_PORT")
    [ "$k" = "$R" ] || leaf_args+=(--leaf "$k:$PER")
  done
  SW_HOST=parent
  sml_start_server controller "$OUT/logs/$tag.controller.ready" "$OUT/logs/$tag.controller.log" 20 on_switch_host \
      "$SWITCHML" controller --listen "$PARENT_IP:0" "${switch_args[@]}" --operator-token-file "$TOKEN_FILE" ||
    { echo "$SCENARIO: the controller did not start" >&2; stop_servers; return 1; }
  SERVER_PIDS=("$SML_PID" "${SERVER_PIDS[@]}")  # stopped first
  ctl="$PARENT_IP:$(json_get "$OUT/logs/$tag.controller.ready" "j['controller_port']")"
  "$CLUSTER" exec --name "$NAME" --host parent -- timeout 30 "$SWITCHML" jobs create --controller "$ctl" \
      --operator-token-file "$TOKEN_FILE" --workers "$n" --window "$TL_WINDOW" --threads "$TL_THREADS" \
      "${leaf_args[@]}" --parent "$R" --name "racks-two-level-${R}x$PER" >"$OUT/logs/$tag.job" 2>&1 ||
    { echo "$SCENARIO: switchml jobs create failed: $(tail -3 "$OUT/logs/$tag.job")" >&2; stop_servers; return 1; }
  id=$(sed -n 's/^SWITCHML_JOB_ID=//p' "$OUT/logs/$tag.job")
  token=$(sed -n 's/^SWITCHML_JOB_TOKEN=//p' "$OUT/logs/$tag.job")
  if [ -z "$id" ] || [ -z "$token" ]; then
    echo "$SCENARIO: no job id and token in the output of jobs create ($OUT/logs/$tag.job)" >&2
    stop_servers
    return 1
  fi
  echo "# controller $ctl driving $R leaves and the parent, job $id (${leaf_args[*]} --parent $R)"
  uplink_snapshot "$before" || { echo "$SCENARIO: cannot read the uplink counters" >&2; stop_servers; return 1; }
  for ((r = 0; r < n; r++)); do
    mapfile -t args < <(rank_args "$r")
    on_worker_host "$r" timeout "$TIMEOUT" "$PERF" --backend switchml --rank "$r" --workers "$n" \
        --controller "$ctl" --job-id "$id" --job-token "$token" --threads "$TL_THREADS" --window "$TL_WINDOW" \
        --label two-level --json "$OUT/$tag.json" "${common[@]}" "${args[@]}" >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "${ranks[@]}" || rc=1
  uplink_snapshot "$after" || { echo "$SCENARIO: cannot read the uplink counters" >&2; rc=1; }
  stop_servers
  show_logs "$tag" "$n" "$rc"
  # Every leaf sent its rounds up and the parent aggregated (their counters, written at exit).
  local sent resent counts="" resends=""
  for ((k = 0; k < R; k++)); do
    sent=$(json_get "$OUT/logs/$tag.leaf$k.counters.json" "j['uplink_sent']" 2>/dev/null) || sent=""
    resent=$(json_get "$OUT/logs/$tag.leaf$k.counters.json" "j['uplink_resent']" 2>/dev/null) || resent=""
    counts+=" leaf$k=${sent:-?}"
    resends+=" leaf$k=${resent:-?}"
    [[ "$sent" =~ ^[1-9][0-9]*$ ]] ||
      { echo "$SCENARIO: leaf $k sent ${sent:-an unknown number of} rounds up: it did not serve as a leaf" >&2; rc=1; }
  done
  echo "# rounds sent up per leaf:$counts; sent up again (a worker's retransmission while the parent's total was outstanding):$resends"
  record two-level "$([ $rc = 0 ] && echo ok || echo failed)" "$OUT/$tag.json" "$(uplink_delta "$before" "$after")"
  return $rc
}

elapsed() { printf '%d:%02d' $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)); }
T0=$SECONDS
ncfg=$(($(wc -w <<<"$CONFIGS") * $(wc -w <<<"$OVERSUB")))
echo "# racks scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $ncfg configuration(s): $CONFIGS x oversubscription $OVERSUB:1; worker links $RATE, switch host links" \
     "${SWITCH_RATE:-unlimited}; loss $LOSS at every host; $BYTES float32, $ITERS timed + $WARMUP warm-up" \
     "iterations; output in $BASE"
[ -z "$TWO_LEVEL_MSG" ] || echo "# $TWO_LEVEL_MSG"
i=0
for c in $CONFIGS; do
  R=${c%x*} PER=${c#*x}
  for O in $OVERSUB; do
    i=$((i + 1))
    # The uplink's rate: r x W / o, in kbit/s (tc units: 1 kbit = 1000 bit/s).
    rate_bits=$(awk -v r="$RATE" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u); m = substr(u, 1, 1)
                                          f = (m == "k") ? 1e3 : (m == "m") ? 1e6 : (m == "g") ? 1e9 : 1
                                          if (u ~ /bps$/) f *= 8; printf "%.0f", n * f }')
    UPLINK_RATE="$(awk -v w="$rate_bits" -v r="$PER" -v o="$O" 'BEGIN { printf "%.0f", r * w / o / 1000 }')kbit"
    [ "${UPLINK_RATE%kbit}" -gt 0 ] || die "configuration $c at $O:1: the uplink rate rounds to 0"
    OUT="$BASE/cfg-${c}-o$O"
    mkdir -p "$OUT/logs"
    echo
    echo "## [$i/$ncfg] $R racks x $PER workers, oversubscription $O:1 (uplinks $UPLINK_RATE) (elapsed $(elapsed))"
    NAME="${OWNER}_$i"
    switch_rate=()
    [ -z "$SWITCH_RATE" ] || switch_rate=(--switch-rate "$SWITCH_RATE")
    if ! "$CLUSTER" up --name "$NAME" --racks "$R" --per-rack "$PER" --rate "$RATE" --uplink-rate "$UPLINK_RATE" \
        --loss-to-switch "$LOSS" --loss-from-switch "$LOSS" \
        ${switch_rate[@]+"${switch_rate[@]}"} >"$OUT/logs/cluster-up.log" 2>&1; then
      cat "$OUT/logs/cluster-up.log" >&2
      failed+=("cluster $c o=$O")
      echo "## FAILED: could not create the emulated cluster for $c at $O:1"
      NAME=""
      continue
    fi
    sed 's/^/# /' "$OUT/logs/cluster-up.log"
    # shellcheck disable=SC1090
    source "/tmp/switchml-cluster-$NAME.env"
    read -r -a WORKER_IPS <<<"$CLUSTER_WORKER_IPS"
    read -r -a LEAF_IPS <<<"$CLUSTER_LEAF_IPS"
    PARENT_IP=$CLUSTER_PARENT_IP
    for m in flat gloo; do
      if [ "$m" = flat ] && [ "$DO_FLAT" != 1 ]; then continue; fi
      if [ "$m" = gloo ] && [ "$DO_GLOO" != 1 ]; then continue; fi
      echo
      echo "### $m, $R x $PER, $O:1 (elapsed $(elapsed))"
      s0=$SECONDS
      run_method "$m" || { failed+=("$m $c o=$O"); echo "### FAILED: $m, $c, $O:1 (logs in $OUT/logs)"; }
      echo "### $m: $((SECONDS - s0)) s; bytes across each uplink: $(tail -1 "$RUNS" | cut -f10)"
    done
    if [ "$DO_TWO" = 1 ]; then
      echo
      echo "### two-level, $R x $PER, $O:1 (elapsed $(elapsed))"
      s0=$SECONDS
      if [ "$R" -lt 2 ]; then
        echo "# two-level: skipped for 1 rack (a two-level job needs two racks or more)"
      else
        run_two_level || { failed+=("two-level $c o=$O"); echo "### FAILED: two-level, $c, $O:1 (logs in $OUT/logs)"; }
        echo "### two-level: $((SECONDS - s0)) s; bytes across each uplink: $(tail -1 "$RUNS" | cut -f10)"
      fi
    fi
    "$CLUSTER" down --name "$NAME" >"$OUT/logs/cluster-down.log" 2>&1 || failed+=("cluster down $c o=$O")
    NAME=""
  done
done
OUT=$BASE

# The table, the JSON and the plot (report_python: a python3 with matplotlib, if any).
report_python
echo
echo "# all runs done (elapsed $(elapsed))"
"$REPORT_PY" "$here/racks_report.py" --json "$JSON" "${plot_args[@]}" ${TWO_LEVEL_MSG:+--note "$TWO_LEVEL_MSG"} "$RUNS" ||
  failed+=("report")
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "# racks: PASS ($(wc -l <"$RUNS") runs, every element verified; JSON in $JSON)"
  exit 0
fi
echo "# racks: FAIL: ${failed[*]} (logs in $BASE/cfg-*/logs)"
exit 1
