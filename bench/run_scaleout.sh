#!/usr/bin/env bash
# bench/run_scaleout.sh — the `scale-out` benchmark scenario (docs/benchmarks.md#scale-out): one
# job's switch spread over K switch hosts (shards), each shard serving a contiguous share of the
# job's worker threads. On ONE emulated cluster (scripts/cluster.sh: max n worker hosts, max K
# switch hosts, every worker link and every switch host link rate-limited with tbf to R in both
# directions, default 500 Mbit/s) it runs, for each worker count n and each K <= n: one
# `switchml switch` per switch host 0..K-1, a standalone `switchml controller` on switch host 0
# driving those K switches, `switchml jobs create --switches K`, and allreduce_perf --backend
# switchml on the n worker hosts (--threads max(K, --threads): every shard gets worker threads;
# every element verified); then Gloo's ring once per n on the same worker links. It prints a
# table (time against the in-network bound and against Gloo) and writes JSON and a PNG.
#
# The in-network bound: one link carries the tensor's packets each way in
# packets x (4E + 52 bytes: payload, SwitchML 10, UDP 8, IP 20, Ethernet 14 — what tbf counts;
# no FCS, preamble or inter-frame gap) x 8 / R seconds; with K switch hosts each switch host
# link carries n/K workers' shares, so bound = max(1, n/K) x that (bench/scaleout_report.py).
#
# Exit status: 0 only if every run finished and every element was right; 77 when this machine
# cannot run it (not root, no network namespaces); 2 for a bad option. The cluster is removed
# at exit, also on failure.
#
#   bench/run_scaleout.sh                            # n = 4, 8; K = 1, 2, 4 (and 8 for n = 8); 64 MiB
#   bench/run_scaleout.sh --workers 4 --switches "1 2" --bytes 4MiB
#   bench/run_scaleout.sh --quick                    # n = 2, K = 1 and 2, 1 MiB, 2 iterations
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=bench/scenario_options.sh
source "$here/scenario_options.sh"  # scenario_option: the shared command-line options
SML_PROG=run_scaleout.sh
WORKERS="" SWITCHES="" BYTES="" ITERS="" WARMUP=1
RATE=500mbit THREADS=1 IO_THREADS=1 WINDOW=256 TIMEOUT=600 GLOO=1 QUICK=0

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF

Options:
  --workers "4 8"       worker counts n (space or comma separated; the cluster has the largest)
  --switches "1 2 4"    switch host counts K (default 1, 2, 4 and 8, each only where K <= n)
  --rate R              tbf rate of every worker and switch host link, tc units (default $RATE)
  --bytes S             tensor size (default 64MiB; suffixes K, M, G, KiB, MiB, GiB)
  --iters N --warmup N  timed and warm-up iterations (default 5 and 1)
  --threads T           worker threads per rank; each run uses max(K, T) (default $THREADS)
  --io-threads T        I/O threads of every switch (switchml switch --io-threads; default $IO_THREADS)
  --window W            packets in flight per rank, a multiple of every run's threads (default $WINDOW);
                        the job is sized for it (jobs create --window W --threads T)
  --no-gloo             skip the Gloo ring runs (e.g. allreduce_perf built without Gloo)
  --quick               n = 2, K = 1 and 2, 1 MiB, 2 iterations: a smoke run of the whole scenario
                        (--workers, --switches, --bytes, --iters given as well win)
  --timeout S           kill a run's ranks after S seconds (default $TIMEOUT)
  --perf BIN --switchml BIN --cluster-sh BIN   binaries
  --out DIR             JSON, logs and the plot go here (default: a new directory under /tmp)
  --json FILE           the runs as JSON (default OUT/scaleout.json)
  --plot FILE           PNG of time against K (default OUT/scaleout.png; needs python3-matplotlib)
  --perf-arg ARG        extra flag for every allreduce_perf rank (repeatable; also --perf-arg=ARG)
  --switch-arg ARG      extra flag for every switch (repeatable; also --switch-arg=ARG),
                        e.g. --switch-arg=--io-threads=2
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --workers) sml_need_value "$@"; WORKERS="${2//,/ }"; shift ;;
    --switches) sml_need_value "$@"; SWITCHES="${2//,/ }"; shift ;;
    --bytes) sml_need_value "$@"; BYTES="$2"; shift ;;
    --threads) sml_need_value "$@"; THREADS="$2"; shift ;;
    --io-threads) sml_need_value "$@"; IO_THREADS="$2"; shift ;;
    --window) sml_need_value "$@"; WINDOW="$2"; shift ;;
    --no-gloo) GLOO=0 ;;
    --quick) QUICK=1 ;;
    *) scenario_option "rate iters warmup timeout perf switchml cluster-sh out json plot perf-arg switch-arg" "$@" || die "unknown argument '$1' (see --help)"
       shift $((SCENARIO_SHIFT - 1)) ;;
  esac
  shift
done
if [ "$QUICK" = 1 ]; then
  : "${WORKERS:=2}" "${SWITCHES:=1 2}" "${BYTES:=1MiB}" "${ITERS:=2}"
fi
: "${WORKERS:=4 8}" "${BYTES:=64MiB}" "${ITERS:=5}"

# Exit status 77 (CTest's "skipped"): this machine cannot run the scenario.
[ "$(id -u)" -eq 0 ] || skip "run_scaleout.sh needs root (network namespaces); run as root"
ip netns list >/dev/null 2>&1 || skip "run_scaleout.sh: 'ip netns' is not available here"
[ -x "$PERF" ] || die "allreduce_perf not found at '$PERF' (build it or pass --perf)"
[ -x "$SWITCHML" ] || die "switchml CLI not found at '$SWITCHML' (build it or pass --switchml)"
[ -x "$CLUSTER" ] || die "cluster script not found at '$CLUSTER' (pass --cluster-sh)"
is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
[[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?[kKmMgG]?(bit|bps)$ ]] || die "--rate must be a tc rate such as 500mbit or 1gbit, got '$RATE'"
is_count "$ITERS" 1 100000 || die "--iters must be a count >= 1, got '$ITERS'"
is_count "$WARMUP" 0 100000 || die "--warmup must be a count >= 0, got '$WARMUP'"
is_count "$THREADS" 1 64 || die "--threads must be in 1..64, got '$THREADS'"
is_count "$IO_THREADS" 1 16 || die "--io-threads must be in 1..16, got '$IO_THREADS'"
is_count "$WINDOW" 1 65536 || die "--window must be a count >= 1, got '$WINDOW'"
is_count "$TIMEOUT" 1 86400 || die "--timeout must be seconds in 1..86400, got '$TIMEOUT'"
[ -n "$WORKERS" ] || die "--workers: no worker count given"
for n in $WORKERS; do is_count "$n" 1 64 || die "--workers: '$n' is not a count in 1..64"; done
for k in $SWITCHES; do is_count "$k" 1 8 || die "--switches: '$k' is not a count in 1..8 (cluster.sh's limit)"; done

# The runs: "n K" pairs, K <= n; each run's worker threads max(K, --threads) must divide the window.
runs=()
for n in $WORKERS; do
  ks=$SWITCHES
  [ -n "$ks" ] || ks="1 2 4 8"
  for k in $ks; do
    if [ "$k" -gt "$n" ]; then
      [ -z "$SWITCHES" ] || echo "# skipping K = $k for n = $n: more switch hosts than workers"
      continue
    fi
    t=$((k > THREADS ? k : THREADS))
    [ $((WINDOW % t)) -eq 0 ] ||
      die "--window $WINDOW is not a multiple of the $t worker threads of the run n = $n, K = $k (threads = max(K, --threads))"
    [ $((t % k)) -eq 0 ] ||
      echo "# note: n = $n, K = $k: $t worker threads do not split evenly over $k switch hosts; the bound assumes they do"
    runs+=("$n $k")
  done
done
[ ${#runs[@]} -gt 0 ] || die "no run left: every --switches value exceeds every --workers value"
# shellcheck disable=SC2086  # split on purpose: one count per line
max_n=$(printf '%s\n' $WORKERS | sort -n | tail -1)
max_k=$(for r in "${runs[@]}"; do echo "${r#* }"; done | sort -n | tail -1)

[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-bench-scaleout.XXXXXX)"
mkdir -p "$OUT/logs" || die "cannot create --out directory '$OUT'"
OUT="$(cd "$OUT" && pwd)"
[ -n "$JSON" ] || JSON="$OUT/scaleout.json"
[ -n "$PLOT" ] || PLOT="$OUT/scaleout.png"
rm -f "$OUT"/switchml-n*-k*.json "$OUT"/gloo-n*.json  # a reused --out must not mix in old runs

# shellcheck source=bench/scenario_lib.sh
source "$here/scenario_lib.sh"  # wait_ranks, show_logs, run_gloo; installs the exit trap
SCENARIO=scale-out

# The operator credential every switch, the controller and `jobs create` share (a file, mode 600).
operator_token_file "$OUT/logs/operator-token"

# The cluster: a unique name, removed at exit whatever happens (after the runs' processes stop);
# first the cluster of an earlier run that was killed before its cleanup.
sml_netns_sweep smlbso
NAME=$(sml_netns_owner smlbso)
# shellcheck disable=SC2016  # expanded at exit
sml_at_exit '"$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true'
T0=$SECONDS
echo "# scale-out scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# cluster $NAME: $max_n worker hosts + $max_k switch hosts, rate $RATE per worker and switch host link (both directions)"
"$CLUSTER" up --name "$NAME" --workers "$max_n" --switches "$max_k" --rate "$RATE" --switch-rate "$RATE" \
    >"$OUT/logs/cluster-up.log" 2>&1 ||
  { cat "$OUT/logs/cluster-up.log" >&2; die "could not create the emulated cluster"; }
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
read -r -a WORKER_IPS <<<"$CLUSTER_WORKER_IPS"
read -r -a SWITCH_IPS <<<"$CLUSTER_SWITCH_IPS"

# Hooks of scenario_lib.sh, and the launcher of the servers (it must exec: sml_start_server).
SW_HOST=sw
# shellcheck disable=SC2317  # called through sml_start_server
on_switch_host() { exec "$CLUSTER" exec --name "$NAME" --host "$SW_HOST" -- "$@"; }
on_worker_host() { local r=$1; shift; exec "$CLUSTER" exec --name "$NAME" --host "w$r" -- "$@"; }
rank_args() {  # every rank binds to its host's address; counters from its eth0
  printf '%s\n' --bind-ip "${WORKER_IPS[$1]}" --host "${WORKER_IPS[$1]}" --iface eth0
}
common=(-b "$BYTES" -e "$BYTES" -n "$ITERS" -w "$WARMUP" -d float32 "${EXTRA[@]}")

host_of() { if [ "$1" -eq 0 ]; then echo sw; else echo "sw$1"; fi; }

# Stops the run's controller and switches (SIGTERM: the switches print their counters).
SERVER_PIDS=()
stop_servers() {
  local p
  for p in "${SERVER_PIDS[@]}"; do sml_stop "$p" 10 "server $p" || true; done
  SERVER_PIDS=()
}

run_sharded() {  # n K
  local n=$1 k=$2 tag="switchml-n$1-k$2" t j ctl switch_args=() job_args=() r rc=0 ranks=() args id token
  t=$((k > THREADS ? k : THREADS))
  for ((j = 0; j < k; j++)); do
    SW_HOST=$(host_of "$j")
    sml_start_switch --bind "${SWITCH_IPS[$j]}" --via on_switch_host --ready "$OUT/logs/$tag.switch$j.ready" \
        --log "$OUT/logs/$tag.switch$j.log" --deadline 20 -- --operator-token-file "$TOKEN_FILE" \
        --counters-json "$OUT/logs/$tag.switch$j.counters.json" --io-threads "$IO_THREADS" "${SWITCH_FLAGS[@]}" ||
      { echo "$SCENARIO: switch $j (host $SW_HOST) did not start" >&2; stop_servers; return 1; }
    SERVER_PIDS+=("$SW_PID")
    switch_args+=(--switch "${SWITCH_IPS[$j]}:$CTL_PORT")
  done
  SW_HOST=sw
  sml_start_server controller "$OUT/logs/$tag.controller.ready" "$OUT/logs/$tag.controller.log" 20 on_switch_host \
      "$SWITCHML" controller --listen "${SWITCH_IPS[0]}:0" "${switch_args[@]}" --operator-token-file "$TOKEN_FILE" ||
    { echo "$SCENARIO: the controller did not start" >&2; stop_servers; return 1; }
  SERVER_PIDS=("$SML_PID" "${SERVER_PIDS[@]}")  # stopped first
  ctl="${SWITCH_IPS[0]}:$(json_get "$OUT/logs/$tag.controller.ready" "j['controller_port']")"
  job_args=(--switches "$k")
  "$CLUSTER" exec --name "$NAME" --host sw -- timeout 30 "$SWITCHML" jobs create --controller "$ctl" \
      --operator-token-file "$TOKEN_FILE" --workers "$n" --window "$WINDOW" --threads "$t" "${job_args[@]}" --name "scaleout-n$n-k$k" \
      >"$OUT/logs/$tag.job" 2>&1 ||
    { echo "$SCENARIO: switchml jobs create failed: $(tail -3 "$OUT/logs/$tag.job")" >&2; stop_servers; return 1; }
  id=$(sed -n 's/^SWITCHML_JOB_ID=//p' "$OUT/logs/$tag.job")
  token=$(sed -n 's/^SWITCHML_JOB_TOKEN=//p' "$OUT/logs/$tag.job")
  if [ -z "$id" ] || [ -z "$token" ]; then
    echo "$SCENARIO: no job id and token in the output of jobs create ($OUT/logs/$tag.job)" >&2
    stop_servers
    return 1
  fi
  echo "# controller $ctl driving $k switch(es), job $id; $t worker thread(s) per rank, window $WINDOW"
  for ((r = 0; r < n; r++)); do
    mapfile -t args < <(rank_args "$r")
    on_worker_host "$r" timeout "$TIMEOUT" "$PERF" --backend switchml --rank "$r" --workers "$n" \
        --controller "$ctl" --job-id "$id" --job-token "$token" --threads "$t" --window "$WINDOW" \
        --label switchml --json "$OUT/$tag.json" "${common[@]}" "${args[@]}" >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "${ranks[@]}" || rc=1
  stop_servers
  show_logs "$tag" "$n" "$rc"
  # Every shard must have served: each switch received datagrams (its counters, written at exit).
  local rx counts=""
  for ((j = 0; j < k; j++)); do
    rx=$(json_get "$OUT/logs/$tag.switch$j.counters.json" "j['datagrams_received']" 2>/dev/null) || rx=""
    counts+=" ${rx:-?}"
    [[ "$rx" =~ ^[1-9][0-9]*$ ]] ||
      { echo "$SCENARIO: switch host $j received ${rx:-an unknown number of} datagrams: the job did not use every shard" >&2; rc=1; }
  done
  echo "# datagrams received per switch host:$counts"
  return $rc
}

elapsed() { printf '%d:%02d' $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)); }
total=${#runs[@]}
[ "$GLOO" = 1 ] && total=$((total + $(wc -w <<<"$WORKERS")))
echo "# runs: $total (switchml n:K ${runs[*]/ /:}$([ "$GLOO" = 1 ] && echo "; gloo n = $WORKERS")); $BYTES float32, $ITERS timed + $WARMUP warm-up iterations; output in $OUT"
i=0
sw_list="" gloo_list=""
for n in $WORKERS; do
  for r in "${runs[@]}"; do
    [ "${r% *}" = "$n" ] || continue
    k=${r#* }
    i=$((i + 1))
    echo
    echo "## [$i/$total] switchml, n = $n, K = $k (elapsed $(elapsed))"
    s0=$SECONDS
    run_sharded "$n" "$k" || { failed+=("switchml n=$n K=$k"); echo "## FAILED: switchml, n = $n, K = $k (logs in $OUT/logs)"; }
    echo "## switchml, n = $n, K = $k: $((SECONDS - s0)) s"
    sw_list+="${sw_list:+,}$n:$k"
  done
  if [ "$GLOO" = 1 ]; then
    i=$((i + 1))
    echo
    echo "## [$i/$total] gloo ring, n = $n (elapsed $(elapsed))"
    s0=$SECONDS
    run_gloo "$n" || { failed+=("gloo n=$n"); echo "## FAILED: gloo, n = $n (logs in $OUT/logs)"; }
    echo "## gloo, n = $n: $((SECONDS - s0)) s"
    gloo_list+="${gloo_list:+,}$n"
  fi
done

# The table, the JSON and the plot (report_python: a python3 with matplotlib, if any).
report_python
echo
echo "# all runs done (elapsed $(elapsed))"
"$REPORT_PY" "$here/scaleout_report.py" --rate "$RATE" --io-threads "$IO_THREADS" --switchml-runs "$sw_list" --gloo-runs "$gloo_list" \
    --json "$JSON" "${plot_args[@]}" "$OUT" || failed+=("report")
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "# scale-out: PASS (${#runs[@]} SwitchML runs, every element verified; JSON in $JSON)"
  exit 0
fi
echo "# scale-out: FAIL: ${failed[*]} (logs in $OUT/logs)"
exit 1
