# shellcheck shell=bash
# bench/scenario_lib.sh — what the benchmark scenarios share (sourced by run_loopback.sh and
# run_datacenter.sh): one function per backend that runs allreduce_perf with n ranks over the
# same sizes and inputs, and the summary at the end.
#
# The caller sets:
#   PERF SWITCHML MPIRUN    binaries
#   OUT                     output directory (JSON at top level, logs in $OUT/logs)
#   TIMEOUT                 seconds before a run is killed
#   common=(...)            allreduce_perf flags every rank of every backend gets
#   SCENARIO                name used in messages ("loopback", "datacenter")
#   SWITCH_IP               address the switch binds to and workers reach it at
# and defines the hooks:
#   on_switch_host CMD...   runs CMD where the switch lives (must `exec`: it is the launcher of
#                           sml_start_switch --via, whose pid must be the switch's)
#   on_worker_host R CMD... runs CMD on rank R's host (same rule)
#   rank_args R             prints flags for rank R's allreduce_perf, one per line
#   mpi_launch N            prints the mpirun launch flags for N ranks, one per line
#   mpi_prefix CMD...       runs mpirun (CMD) where it must run
#   drops_snapshot          (optional) prints per-host drop counters (`cluster.sh drops`); when
#                           defined, each SwitchML run prints and logs what grew during it
# Functions return non-zero when a run failed or found a wrong element. Sourcing it installs
# the exit trap of scripts/lib.sh (sml_exit_trap): every process a run started is stopped at exit,
# with its descendants; the caller adds its own cleanup with sml_at_exit.

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
# The emulated hosts' links never leave this machine: tokens may cross them in plaintext gRPC
# (switches, controllers, workers and `switchml jobs` read it; docs/operations.md "Securing").
export SWITCHML_INSECURE=${SWITCHML_INSECURE-1}

failed=()
sml_exit_trap

# Waits for the rank processes in "$@" (pids); returns non-zero if any failed.
wait_ranks() {
  local rc=0 p
  for p in "$@"; do wait "$p" || rc=1; done
  return $rc
}

# Prints rank 0's log, and the tail of the others' when the run failed.
show_logs() {  # tag n rc
  local tag=$1 n=$2 rc=$3 r
  cat "$OUT/logs/$tag.rank0.log"
  [ "$rc" -eq 0 ] || for ((r = 1; r < n; r++)); do tail -3 "$OUT/logs/$tag.rank$r.log"; done
}

run_switchml() {  # n [switch flags...]
  local n=$1 tag="switchml-n$1" port r rc=0 ranks=() args
  shift
  [ -x "$SWITCHML" ] || { echo "$SCENARIO: switchml CLI not found at '$SWITCHML' (pass --switchml)" >&2; return 1; }
  sml_start_switch --bind "$SWITCH_IP" --via on_switch_host --ready "$OUT/logs/$tag.switch.ready" \
      --log "$OUT/logs/$tag.switch.log" --deadline 20 -- "$@" || return 1
  port=$CTL_PORT
  if declare -F drops_snapshot >/dev/null; then drops_snapshot >"$OUT/logs/$tag.drops.before" || true; fi
  for ((r = 0; r < n; r++)); do
    mapfile -t args < <(rank_args "$r")
    on_worker_host "$r" timeout "$TIMEOUT" "$PERF" --backend switchml --rank "$r" --workers "$n" \
        --controller "$SWITCH_IP:$port" --label switchml --json "$OUT/$tag.json" "${common[@]}" "${args[@]}" \
        >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "${ranks[@]}" || rc=1
  sml_stop_switch 10 || true  # SIGTERM: it prints its counters
  show_logs "$tag" "$n" "$rc"
  if declare -F drops_snapshot >/dev/null; then
    drops_snapshot >"$OUT/logs/$tag.drops.after" || true
    drops_grown "$OUT/logs/$tag.drops.before" "$OUT/logs/$tag.drops.after" | tee "$OUT/logs/$tag.drops"
  fi
  return $rc
}

# drops_grown BEFORE AFTER: the counters of `cluster.sh drops` that grew between two snapshots,
# one line ("# drops during the run: w1 tbf_in +12 ..." or "...: none").
drops_grown() {
  awk 'NR == FNR { for (i = 2; i <= NF; i++) { split($i, kv, "="); b[$1 " " kv[1]] = kv[2] } next }
       { for (i = 2; i <= NF; i++) { split($i, kv, "="); d = kv[2] - b[$1 " " kv[1]]
                                    if (d > 0) out = out " " $1 " " kv[1] " +" d } }
       END { print "# drops during the run:" (out == "" ? " none" : out) }' "$1" "$2"
}

run_gloo() {  # n
  local n=$1 tag="gloo-n$1" rdv r rc=0 ranks=() args
  rdv="$(mktemp -d "$OUT/logs/gloo-rendezvous.XXXXXX")"
  for ((r = 0; r < n; r++)); do
    mapfile -t args < <(rank_args "$r")
    on_worker_host "$r" timeout "$TIMEOUT" "$PERF" --backend gloo --rank "$r" --workers "$n" --rendezvous-dir "$rdv" \
        --label gloo --json "$OUT/$tag.json" "${common[@]}" "${args[@]}" >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "${ranks[@]}" || rc=1
  rm -rf "$rdv"
  show_logs "$tag" "$n" "$rc"
  return $rc
}

MPI_BASE=(--allow-run-as-root --oversubscribe --bind-to none --mca btl tcp,self)
# Open MPI's TCP PUT protocol and busy polling cost it half its bandwidth on the development
# machine; these flags recover it (docs/benchmarks.md#measured-on-the-development-machine).
MPI_TUNED=(--mca btl_tcp_flags send,inplace,need-ack,need-csum --mca mpi_yield_when_idle 1
           --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4)

# Seconds mpirun may take to start every rank (rank 0's first output line); see run_mpi.
MPI_LAUNCH_TIMEOUT=${MPI_LAUNCH_TIMEOUT:-90}

_mpi_started_or_gone() { ! sml_alive "$1" || grep -q '^# allreduce_perf' "$2"; }

run_mpi() {  # n label [mpirun flags...]
  local n=$1 label=$2 tag="$2-n$1" rc=0 launch args attempt job
  shift 2
  [ -n "$MPIRUN" ] || { echo "$SCENARIO: mpirun.openmpi not found (install openmpi-bin)" >&2; return 1; }
  mapfile -t launch < <(mpi_launch "$n")
  mapfile -t args < <(rank_args 0)
  for attempt in 1 2; do
    rc=0
    mpi_prefix timeout "$TIMEOUT" "$MPIRUN" "${MPI_BASE[@]}" "$@" "${launch[@]}" -np "$n" "$PERF" --backend mpi \
        --label "$label" --json "$OUT/$tag.json" "${common[@]}" "${args[@]}" >"$OUT/logs/$tag.log" 2>&1 &
    job=$!
    sml_track "$job"
    # Launch watchdog: mpirun first starts one daemon per host; when one never reports back (seen
    # now and then through the emulated cluster's rsh agent) it waits, silently, until the run's
    # timeout. Rank 0 prints its header once MPI_Init returned everywhere; without it after
    # MPI_LAUNCH_TIMEOUT seconds the launch (mpirun, its daemons and ranks) is stopped and tried
    # once more.
    SML_POLL_S=0.5 sml_wait_for "$MPI_LAUNCH_TIMEOUT" "" _mpi_started_or_gone "$job" "$OUT/logs/$tag.log"
    if sml_alive "$job" && ! grep -q '^# allreduce_perf' "$OUT/logs/$tag.log"; then
      sml_kill_tree "$job"
      wait "$job" 2>/dev/null
      echo "# $tag: mpirun started no rank within $MPI_LAUNCH_TIMEOUT s (attempt $attempt of 2)"
      rc=1
      continue
    fi
    wait "$job" || rc=1
    break
  done
  cat "$OUT/logs/$tag.log"
  return $rc
}

# Runs backend $1 with n = $2 ranks; records a failure by name.
run_backend() {  # backend n
  local b=$1 n=$2
  echo
  echo "## $b, n = $n"
  case "$b" in
    switchml) run_switchml "$n" "${SWITCH_FLAGS[@]}" ;;
    gloo) run_gloo "$n" ;;
    mpi) run_mpi "$n" mpi ;;
    mpi-tuned) run_mpi "$n" mpi-tuned "${MPI_TUNED[@]}" ;;
    *) echo "$SCENARIO: unknown backend '$b' (switchml, gloo, mpi, mpi-tuned)" >&2; false ;;
  esac || { failed+=("$b n=$n"); echo "## FAILED: $b, n = $n (logs in $OUT/logs)"; }
}

# Summarises every JSON of backends $1 (comma list) × worker counts $2 into $OUT/summary.json
# and prints the verdict; returns 0 only if nothing failed.
finish() {  # backends workers
  local b n files=() backend_list
  IFS=',' read -r -a backend_list <<<"$1"
  for b in "${backend_list[@]}"; do
    for n in $2; do [ -s "$OUT/$b-n$n.json" ] && files+=("$OUT/$b-n$n.json"); done
  done
  echo
  if [ ${#files[@]} -gt 0 ]; then
    "$PERF" summarize --json "$OUT/summary.json" "${files[@]}" || failed+=("summary")
  fi
  echo
  if [ ${#failed[@]} -eq 0 ]; then
    echo "# $SCENARIO: PASS (${#files[@]} runs, every element verified; JSON in $OUT)"
    return 0
  fi
  echo "# $SCENARIO: FAIL: ${failed[*]} (logs in $OUT/logs)"
  return 1
}

# report_python: sets REPORT_PY to the first python3 that has matplotlib (Debian's
# python3-matplotlib is seen by /usr/bin/python3; another python3 may come first on PATH; $PYTHON
# first) and plot_args to (--plot "$PLOT"); without one, REPORT_PY is a plain python3, plot_args
# is empty and $SML_PROG says on stderr that there is no plot.
report_python() {
  local p
  REPORT_PY=""
  for p in ${PYTHON:-} /usr/bin/python3 "$(command -v python3)"; do
    [ -x "$p" ] && "$p" -c 'import matplotlib' 2>/dev/null && { REPORT_PY=$p; break; }
  done
  plot_args=(--plot "$PLOT")
  if [ -z "$REPORT_PY" ]; then
    REPORT_PY=${PYTHON:-/usr/bin/python3}
    [ -x "$REPORT_PY" ] || REPORT_PY=$(command -v python3)
    plot_args=()
    echo "${SML_PROG:-${0##*/}}: no plot (python3-matplotlib is not installed for $REPORT_PY)" >&2
  fi
}

# operator_token_file FILE: the operator credential (SWITCHML_OPERATOR_TOKEN, made if unset) in
# FILE (mode 600) for the switches, controllers and `jobs create` of a run; sets TOKEN_FILE;
# the file is removed at exit.
operator_token_file() {
  sml_operator_token
  TOKEN_FILE=$1
  (umask 077 && printf '%s\n' "$SWITCHML_OPERATOR_TOKEN" >"$TOKEN_FILE") || die "cannot write $TOKEN_FILE"
  # shellcheck disable=SC2016  # expanded at exit
  sml_at_exit 'rm -f "$TOKEN_FILE"'
}
