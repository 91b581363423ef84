# shellcheck shell=bash
# bench/scenario_options.sh — the command-line options the benchmark scenarios share (sourced
# by run_loopback.sh, run_datacenter.sh, run_scaleout.sh and run_racks.sh before they parse
# their arguments), declared once: each script lists the ones it takes and handles the rest.
#
#   while [ $# -gt 0 ]; do
#     case "$1" in
#       --workers) ...; shift ;;                       # the script's own
#       *) scenario_option "rate iters out" "$@" || die "unknown argument '$1' (see --help)"
#          shift $((SCENARIO_SHIFT - 1)) ;;
#     esac
#     shift
#   done
#
# Sourcing it (with $root, the repository, set) gives the shared options their defaults: PERF
# and SWITCHML from build/, CLUSTER the repository's scripts/cluster.sh, MPIRUN Open MPI's
# mpirun if installed, OUT, JSON and PLOT empty (the script picks), EXTRA and SWITCH_FLAGS empty.
#
# scenario_option TAKES ARGS...: TAKES names the shared options the script takes, without the
# dashes: rate iters warmup timeout perf switchml mpirun cluster-sh out json plot perf-arg
# switch-arg (-h/--help, which calls the script's usage, always). When $1 is one of them, sets
# its variable (RATE ITERS WARMUP TIMEOUT PERF SWITCHML MPIRUN CLUSTER OUT JSON PLOT; perf-arg
# and switch-arg append to EXTRA and SWITCH_FLAGS, also as --perf-arg=ARG), dies naming it when
# its value is missing, sets SCENARIO_SHIFT to the arguments used and returns 0; returns 1
# otherwise.
scenario_option() {
  local takes=" $1 " opt=$2 name
  shift
  SCENARIO_SHIFT=1
  case "$opt" in
    -h|--help) usage; exit 0 ;;
    --perf-arg=*|--switch-arg=*) name=${opt%%=*} name=${name#--} ;;
    --*) name=${opt#--} ;;
    *) return 1 ;;
  esac
  [[ $takes == *" $name "* ]] || return 1
  case "$opt" in
    --perf-arg=*) EXTRA+=("${opt#--perf-arg=}"); return 0 ;;
    --switch-arg=*) SWITCH_FLAGS+=("${opt#--switch-arg=}"); return 0 ;;
  esac
  sml_need_value "$@"
  SCENARIO_SHIFT=2
  case "$name" in
    rate) RATE=$2 ;;
    iters) ITERS=$2 ;;
    warmup) WARMUP=$2 ;;
    timeout) TIMEOUT=$2 ;;
    perf) PERF=$2 ;;
    switchml) SWITCHML=$2 ;;
    mpirun) MPIRUN=$2 ;;
    cluster-sh) CLUSTER=$2 ;;
    out) OUT=$2 ;;
    json) JSON=$2 ;;
    plot) PLOT=$2 ;;
    perf-arg) EXTRA+=("$2") ;;
    switch-arg) SWITCH_FLAGS+=("$2") ;;
    *) SCENARIO_SHIFT=1; return 1 ;;
  esac
}

PERF="${root:?scenario_options.sh: set root first}/build/allreduce_perf"
SWITCHML="$root/build/switchml"
CLUSTER="$root/scripts/cluster.sh"
MPIRUN="$(command -v mpirun.openmpi || true)"
OUT="" JSON="" PLOT=""
EXTRA=()
SWITCH_FLAGS=()
