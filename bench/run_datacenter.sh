#!/usr/bin/env bash
# bench/run_datacenter.sh — the `datacenter` benchmark scenario (docs/benchmarks.md): an emulated
# cluster (scripts/cluster.sh) with one network namespace per worker host and one for the switch
# host, every worker link rate-limited with tbf to R in both directions (default 500 Mbit/s), the
# switch link unshaped. For each worker count (default 2, 4, 8) and each data type it runs
# allreduce_perf for every backend on the same hosts, links and inputs, prints each table, a
# side-by-side summary (SwitchML vs Gloo ring vs Open MPI), goodput against the link's payload
# capacity, and writes JSON. Exit status: 0 only if every run finished and every element was
# right; 77 when this machine cannot run it (not root, no network namespaces). The cluster is
# removed at exit, also on failure.
#
#   bench/run_datacenter.sh                          # 64 MiB, float32 and int32, n = 2, 4, 8
#   bench/run_datacenter.sh --rate 1gbit --workers 4 --types float32
#   bench/run_datacenter.sh --mtu 9000 --perf-arg=--elements-per-packet=1024   # jumbo frames
#
# Backends: switchml (the switch in the switch host), gloo (ring over TCP between worker hosts),
# mpi (Open MPI over TCP, defaults) and mpi-tuned (the tuned flags of
# docs/benchmarks.md#measured-on-the-development-machine); mpirun runs in the switch host and
# starts its daemons in the worker hosts through an rsh agent that enters their namespaces.
# Wire bytes per worker come from each worker host's eth0 counters.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=bench/scenario_options.sh
source "$here/scenario_options.sh"  # scenario_option: the shared command-line options
WORKERS="2 4 8"
TYPES="float32 int32"
BACKENDS="switchml,gloo,mpi,mpi-tuned"
RATE=500mbit MTU=1500
MIN=64MiB MAX=64MiB FACTOR=4 ITERS=5 WARMUP=1 TIMEOUT=600

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF
Options:
  --rate R              tbf rate of every worker link, tc units (default $RATE; 'none' = unlimited)
  --mtu 1500|9000       MTU of every link (default $MTU)
  --workers "2 4 8"     worker counts (space or comma separated; the cluster has the largest)
  --types "float32 int32"
  --backends LIST       comma separated: switchml,gloo,mpi,mpi-tuned (default: all four)
  --min-bytes S --max-bytes S --step-factor F --iters N --warmup N   (default 64MiB, 5 + 1)
  --quick               1 MiB, 2 iterations, n = 2: a smoke run of the whole scenario
  --timeout S           kill a run after S seconds (default $TIMEOUT)
  --perf BIN --switchml BIN --mpirun BIN --cluster-sh BIN   binaries
  --out DIR             JSON, logs and summaries go here (default: a new directory under /tmp)
  --perf-arg ARG        extra flag for every allreduce_perf rank (repeatable; also --perf-arg=ARG)
  --switch-arg ARG      extra flag for the switch (repeatable; also --switch-arg=ARG)
  --plot FILE           PNG of aggregated elements/s against workers (default: OUT/datacenter.png;
                        docs/img/datacenter.png is made with --plot docs/img/datacenter.png)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --mtu) MTU="$2"; shift ;;
    --workers) WORKERS="${2//,/ }"; shift ;;
    --types) TYPES="${2//,/ }"; shift ;;
    --backends) BACKENDS="$2"; shift ;;
    --min-bytes) MIN="$2"; shift ;;
    --max-bytes) MAX="$2"; shift ;;
    --step-factor) FACTOR="$2"; shift ;;
    --quick) MIN=1MiB MAX=1MiB ITERS=2 WARMUP=1 WORKERS=2 TIMEOUT=120 ;;
    *) scenario_option "rate iters warmup timeout perf switchml mpirun cluster-sh out plot perf-arg switch-arg" "$@" || die "unknown argument '$1' (see --help)"
       shift $((SCENARIO_SHIFT - 1)) ;;
  esac
  shift
done

# Exit status 77 (CTest's "skipped"): this machine cannot run the scenario.
[ "$(id -u)" -eq 0 ] || skip "run_datacenter.sh needs root (network namespaces); run as root"
ip netns list >/dev/null 2>&1 || skip "run_datacenter.sh: 'ip netns' is not available here"
[ -x "$PERF" ] || die "allreduce_perf not found at '$PERF' (build it or pass --perf)"
[ -x "$CLUSTER" ] || die "cluster script not found at '$CLUSTER' (pass --cluster-sh)"
case "$MTU" in 1500|9000) ;; *) die "--mtu must be 1500 or 9000, got '$MTU'" ;; esac
for n in $WORKERS; do
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "--workers: '$n' is not a count in 1..64"
done
for t in $TYPES; do
  case "$t" in float32|int32) ;; *) die "--types: '$t' is not float32 or int32" ;; esac
done
max_n=$(printf '%s\n' $WORKERS | sort -n | tail -1)
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-bench-datacenter.XXXXXX)"
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
TOP="$OUT"

# The cluster: a unique name, removed whatever happens; first the cluster of an earlier run that
# was killed before its cleanup. Under CTest (SML_DEADLINE_S, below the test's TIMEOUT) the run
# fails on its own deadline, which removes the cluster: CTest's kill would not.
sml_netns_sweep smlbdc
NAME=$(sml_netns_owner smlbdc)
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"
rate_args=()
[ "$RATE" = none ] || rate_args=(--rate "$RATE")
echo "# datacenter scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# cluster $NAME: $max_n worker hosts + switch host, rate ${RATE} per worker link (both directions), MTU $MTU"
"$CLUSTER" up --name "$NAME" --workers "$max_n" "${rate_args[@]}" --mtu "$MTU" >"$OUT/logs/cluster-up.log" 2>&1 ||
  { cat "$OUT/logs/cluster-up.log" >&2; die "could not create the emulated cluster"; }
# Removed at exit whatever happens (after the processes of the runs are stopped).
sml_exit_trap
sml_at_exit '"$CLUSTER" down --name "$NAME" >/dev/null 2>&1 || true'
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
read -r -a WORKER_IPS <<<"$CLUSTER_WORKER_IPS"

SCENARIO=datacenter
SWITCH_IP="$CLUSTER_SWITCH_IP"
on_switch_host() { exec "$CLUSTER" exec --name "$NAME" --host sw -- "$@"; }
on_worker_host() { local r=$1; shift; exec "$CLUSTER" exec --name "$NAME" --host "w$r" -- "$@"; }
drops_snapshot() { "$CLUSTER" drops --name "$NAME"; }
rank_args() {  # every rank binds to its host's address; counters from its eth0
  printf '%s\n' --bind-ip "${WORKER_IPS[$1]}" --host "${WORKER_IPS[$1]}" --iface eth0
}
# mpirun runs in the switch host (its daemons reach it there) and starts one daemon per worker
# host through this agent, which enters the host's namespace.
AGENT="$OUT/logs/netns-rsh-agent.sh"
cat >"$AGENT" <<EOF
#!/bin/sh
# Open MPI rsh agent: "agent [options] HOST COMMAND..." runs COMMAND in namespace $NAME-HOST.
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
exec ip netns exec "$NAME-\$host" sh -c "\$*"
EOF
chmod +x "$AGENT"
mpi_launch() {
  local r hosts=""
  for ((r = 0; r < $1; r++)); do hosts+="${hosts:+,}w$r"; done
  printf '%s\n' --mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1 --host "$hosts" \
      --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0
}
mpi_prefix() { "$CLUSTER" exec --name "$NAME" --host sw -- "$@"; }
# shellcheck source=bench/scenario_lib.sh
source "$here/scenario_lib.sh"

echo "# workers {${WORKERS}}, types {${TYPES}}, backends {${BACKENDS}}, $MIN..$MAX, $ITERS iterations; output in $OUT"
IFS=',' read -r -a backend_list <<<"$BACKENDS"
rc=0
for t in $TYPES; do
  OUT="$TOP/$t"
  failed=()
  mkdir -p "$OUT/logs"
  common=(-b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -d "$t" "${EXTRA[@]}")
  echo
  echo "# ===== $t ====="
  for n in $WORKERS; do
    for b in "${backend_list[@]}"; do run_backend "$b" "$n"; done
  done
  finish "$BACKENDS" "$WORKERS" || rc=1
done
OUT="$TOP"

# Goodput of the largest size against the link's payload capacity (rate x payload/frame).
# Debian's python3-matplotlib is seen by /usr/bin/python3 (another python3 may come first on PATH).
PYTHON=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}
if [ "$RATE" != none ] && [ -n "$PYTHON" ]; then
  [ -n "$PLOT" ] || PLOT="$TOP/datacenter.png"
  plot_args=()
  "$PYTHON" -c 'import matplotlib' 2>/dev/null && plot_args=(--plot "$PLOT") ||
    echo "run_datacenter.sh: no plot (python3-matplotlib is not installed for $PYTHON)" >&2
  echo
  "$PYTHON" "$here/datacenter_report.py" --rate "$RATE" --mtu "$MTU" --out "$TOP/report.json" "${plot_args[@]}" "$TOP" ||
    { echo "run_datacenter.sh: the goodput report failed" >&2; rc=1; }
fi
echo
[ $rc -eq 0 ] && echo "# datacenter: PASS (every element verified; JSON in $TOP)" ||
  echo "# datacenter: FAIL (logs in $TOP/*/logs)"
exit $rc
