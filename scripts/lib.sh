# shellcheck shell=bash disable=SC2034
# scripts/lib.sh — the one shell library of the tests, benchmarks and scripts. Source it from any
# directory (it needs nothing from the caller's working directory):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"   # e.g. from tests/e2e/x_test.sh
#   sml_work_dir switchml-mytest            # WORK=/tmp/switchml-mytest.XXXXXX, removed at exit
#   sml_operator_token                      # export SWITCHML_OPERATOR_TOKEN (random unless set)
#   sml_start_switch -- --slots 512 || fail "no switch"     # sets SW_PID, UDP_PORT, CTL_PORT
#   "$SWITCHML" allreduce --controller 127.0.0.1:$CTL_PORT ... & sml_track $!
#   [ "$(json_get "$WORK/r0.json" "j['ok']")" = True ] || fail "rank 0 not ok"
#   sml_stop_switch || fail "the switch exited with status $?"
#   pass "done"
#
# Sourcing only defines functions and the variables below: it sets no shell option, installs no
# trap and prints nothing. Every function works under `set -euo pipefail` and without it. Every
# wait has a deadline; when it expires the function says on stderr what it waited for.
#
# Messages and exit codes
#   die MSG...              "PROG: error: MSG" on stderr; exit $SML_DIE_STATUS (default 2). PROG
#                           is $SML_PROG (default: the script's file name).
#   fail MSG...             a failed test assertion: "FAIL: MSG" on stderr, FAILED=1, exit 1
#   pass MSG...             "ok: MSG" on stdout
#   skip MSG...             "SKIP: MSG" on stdout, exit $SML_SKIP (77, CTest's SKIP_RETURN_CODE)
#   sml_need_value OPT [VALUE...]   in an option loop, called with "$@": dies "OPT needs a value"
#                           unless a non-empty value follows OPT
#   sml_help_header [FILE]  prints the comment block at the top of FILE (default: the script),
#                           after the #! line, without the leading "# ": the start of a --help
# Work directory, own processes, cleanup
#   sml_work_dir PREFIX     WORK=$(mktemp -d /tmp/PREFIX.XXXXXX), and sml_exit_trap
#   sml_exit_trap           installs the exit trap: it stops the tracked processes (sml_stop_tracked),
#                           runs the sml_at_exit commands, then keeps the work directory (and says
#                           "logs in WORK" on stderr) if the exit status is neither 0 nor $SML_SKIP
#                           or KEEP=1, and removes it otherwise; it exits with the script's status.
#                           SIGINT and SIGTERM exit 130 (through the trap).
#   sml_at_exit CMD         CMD (one string, eval'd) runs at exit, after the tracked processes stop
#   sml_track PID...        records processes this script started (stopped at exit)
#   sml_untrack PID...      forgets them (sml_stop does it for the process it stopped)
#   sml_stop_tracked        stops every tracked process that is still a child of this shell, with
#                           all its descendants (sml_kill_tree)
#   sml_alive PID           true while PID exists and is not a zombie
#   sml_descendants PID...  prints the PIDs of every descendant of the PIDs (from /proc)
#   sml_terminate SECONDS PID...  SIGTERM, up to SECONDS for them to exit, then SIGKILL; sets
#                           SML_KILLED to the PIDs that needed SIGKILL
#   sml_kill_tree [-KILL] PID...  sml_terminate ($SML_KILL_GRACE_S, default 2 s) of the PIDs and
#                           all their descendants; with -KILL, SIGKILL at once. Processes are
#                           only ever found from PIDs this script started, never by name.
#   sml_stop PID [SECONDS [WHAT]]  SIGTERM to PID, waits up to SECONDS (default 10) for it to
#                           exit and returns its exit status; if it does not exit, SIGKILLs it and
#                           its descendants, says so and returns 124
#   sml_deadline SECONDS [WHAT]  a watchdog (tracked; SML_DEADLINE_PID): once SECONDS have passed
#                           it says "FAIL: WHAT: deadline of SECONDS s passed" on stderr and sends
#                           SIGTERM to this script, which exits 130 through the exit trap (so its
#                           processes stop and its logs stay); if the script is blocked in a
#                           foreground command, that command gets SIGTERM too, after 2 s. Installs
#                           the exit trap (which stops the watchdog when the script ends in time).
#                           Give a test one below its CTest TIMEOUT: CTest kills a test without
#                           running its trap. The watchdog ends (within a second) if the script
#                           dies without its trap (SIGKILL). The watchdog is a child of the script: wait for
#                           PIDs, never a bare `wait` (which would wait for the watchdog too).
# Waiting (SECONDS may be fractional)
#   sml_wait_for SECONDS WHAT CMD...   runs CMD every $SML_POLL_S (0.05) s until it succeeds; after
#                           SECONDS returns 1 and, unless WHAT is empty, prints
#                           "PROG: timed out after SECONDS s waiting for WHAT" on stderr
#   sml_wait_file FILE SECONDS [WHAT]  until FILE exists and is not empty
#   sml_wait_gone PID SECONDS [WHAT]   until process PID has exited
#   sml_wait_port tcp|udp PORT SECONDS [WHAT]  until a socket of this network namespace is bound to
#                           PORT (tcp: listening)
# Ports, JSON
#   sml_free_port [tcp|udp] prints a port that is free on 127.0.0.1 now (default tcp)
#   json_get FILE EXPR      prints the Python expression EXPR over the JSON document `j` in FILE
# switchml processes (the binary is $SWITCHML; python is ${PYTHON:-python3})
#   sml_operator_token      exports SWITCHML_OPERATOR_TOKEN, a random one unless already set
#   sml_start_server WHAT READY LOG SECONDS CMD...   runs `CMD... --ready-file READY` in the
#                           background (tracked), output to LOG, and waits up to SECONDS for READY;
#                           sets SML_PID. Returns 1, with the end of LOG on stderr, if the process
#                           exits or is not ready in time (then it is killed). CMD may start with
#                           a function that runs its arguments elsewhere (a cluster host); it must
#                           `exec` them so that SML_PID is the server's pid.
#   sml_start_switch [OPTIONS] [--] [SWITCH FLAGS...]   `$SWITCHML switch`, see the function
#   sml_start_controller [OPTIONS] [--] [CONTROLLER FLAGS...]   `$SWITCHML controller`, likewise
#   sml_stop_switch [SECONDS]   sml_stop of the switch sml_start_switch started last
# Network namespaces (root only). A script names what it creates after itself: TAG_PID (TAG a
# few letters of its own, PID its $$, e.g. namespaces TAG_PID-sw or a cluster TAG_PID_a), so
# that a later run can tell an earlier run's leftovers from a live run's.
#   sml_netns_pids NS...    pids of the processes inside the namespaces, but for this shell and
#                           its ancestors (a script run from inside one never stops itself)
#   sml_netns_remove NS...  stops the processes inside them (sml_terminate, $SML_KILL_GRACE_S,
#                           default 2 s), then deletes them, which destroys their interfaces with
#                           their addresses, routes, neighbour entries, qdiscs and iptables
#                           rules; returns 1 (saying which) if one could not be deleted
#   sml_netns_owner TAG     prints TAG_$$: the name prefix of what this run creates
#   sml_netns_sweep TAG     removes what earlier runs of this script left behind, killed before
#                           their cleanup (SIGKILL, a CTest timeout): the namespaces named
#                           TAG_PID-* or TAG_PID_X-* whose PID no longer runs this script (by
#                           its file name), with sml_netns_remove, and the emulated-cluster state
#                           files /tmp/switchml-cluster-TAG_PID[_X].env of such runs
#                           (scripts/cluster.sh); says on stderr what it removed

# Sourcing it again (e.g. through bench/scenario_lib.sh) changes nothing: the tracked processes
# and exit commands so far stay.
[[ -z "${SML_LIB_DIR:-}" ]] || return 0
SML_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SML_ROOT="$(dirname "$SML_LIB_DIR")"
SML_SKIP=77
SML_PIDS=()
SML_EXIT_CMDS=()
SML_WORK=""

# ---------------------------------------------------------------------------------------------
# Messages and exit codes

die() {
  echo "${SML_PROG:-${0##*/}}: error: $*" >&2
  exit "${SML_DIE_STATUS:-2}"
}
fail() {
  FAILED=1
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "ok: $*"; }
skip() {
  echo "SKIP: $*"
  exit "$SML_SKIP"
}
sml_need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
sml_help_header() { awk 'NR == 1 && /^#!/ {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "${1:-$0}"; }

# ---------------------------------------------------------------------------------------------
# Work directory, own processes, cleanup

sml_work_dir() {
  SML_WORK=$(mktemp -d "/tmp/${1:?sml_work_dir: PREFIX}.XXXXXX") || die "cannot create a work directory in /tmp"
  WORK=$SML_WORK
  sml_exit_trap
}

sml_exit_trap() {
  trap _sml_on_exit EXIT
  trap 'exit 130' INT TERM
}

sml_at_exit() { SML_EXIT_CMDS+=("$1"); }

_sml_on_exit() {
  local rc=$? cmd
  set +e
  sml_stop_tracked
  for cmd in "${SML_EXIT_CMDS[@]}"; do eval "$cmd"; done
  # Only the directory sml_work_dir made is ever removed (never whatever WORK says).
  if [[ -n "$SML_WORK" && -d "$SML_WORK" ]]; then
    if [[ ${KEEP:-0} == 1 ]] || ((rc != 0 && rc != SML_SKIP)); then
      echo "logs in $SML_WORK" >&2
    else
      rm -rf "$SML_WORK"
    fi
  fi
  exit "$rc"
}

sml_track() { SML_PIDS+=("$@"); }

sml_untrack() {
  local p q keep=()
  for p in "${SML_PIDS[@]}"; do
    for q in "$@"; do [[ "$p" == "$q" ]] && continue 2; done
    keep+=("$p")
  done
  SML_PIDS=(${keep[@]+"${keep[@]}"})
}

# _sml_stat PID: sets _SML_STATE and _SML_PPID from /proc/PID/stat; false if PID does not exist.
_sml_stat() {
  local s
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s=${s##*) }  # the fields after "(comm)"; comm may itself contain spaces and parentheses
  _SML_STATE=${s%% *}
  s=${s#* }
  _SML_PPID=${s%% *}
}

sml_alive() { _sml_stat "$1" && [[ $_SML_STATE != Z ]]; }

sml_descendants() {
  local -A kids=()
  local f s pid ppid p c
  local queue=("$@")
  for f in /proc/[0-9]*/stat; do
    { read -r s < "$f"; } 2>/dev/null || continue
    pid=${s%% *}
    s=${s##*) }
    s=${s#* }
    ppid=${s%% *}
    kids[$ppid]+=" $pid"
  done
  while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    for c in ${kids[$p]:-}; do
      echo "$c"
      queue+=("$c")
    done
  done
}

_sml_all_gone() {
  local p
  for p in "$@"; do ! sml_alive "$p" || return 1; done
}

sml_terminate() {
  local secs=$1 p
  shift
  SML_KILLED=""
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  sml_wait_for "$secs" "" _sml_all_gone "$@" && return 0
  for p in "$@"; do sml_alive "$p" && SML_KILLED+="${SML_KILLED:+ }$p"; done
  # shellcheck disable=SC2086
  [[ -z "$SML_KILLED" ]] || kill -KILL $SML_KILLED 2>/dev/null || true
}

sml_kill_tree() {
  local now=0
  if [[ "${1:-}" == -KILL ]]; then now=1; shift; fi
  (($#)) || return 0
  local all
  mapfile -t all < <(sml_descendants "$@")
  all=("$@" ${all[@]+"${all[@]}"})
  if ((now)); then
    kill -KILL "${all[@]}" 2>/dev/null || true
  else
    sml_terminate "${SML_KILL_GRACE_S:-2}" "${all[@]}"
  fi
}

sml_stop_tracked() {
  local p own=()
  for p in "${SML_PIDS[@]}"; do
    # Only processes that are still children of this shell: a pid that was waited for may have
    # been reused by a stranger since.
    _sml_stat "$p" && [[ $_SML_PPID == "$BASHPID" ]] && own+=("$p")
  done
  SML_PIDS=()
  ((${#own[@]} == 0)) || sml_kill_tree "${own[@]}"
}

sml_stop() {
  local pid=$1 secs=${2:-10} what=${3:-process $1} rc=0
  kill -TERM "$pid" 2>/dev/null || true
  if ! sml_wait_gone "$pid" "$secs" "$what to exit on SIGTERM"; then
    echo "${SML_PROG:-${0##*/}}: killing $what (pid $pid) and its descendants" >&2
    sml_kill_tree -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    sml_untrack "$pid"
    return 124
  fi
  wait "$pid" 2>/dev/null || rc=$?
  sml_untrack "$pid"
  return "$rc"
}

sml_deadline() {
  local secs=$1 what=${2:-${SML_PROG:-${0##*/}}} main=$BASHPID
  (
    trap - EXIT INT TERM
    # Checked every second: a script that was killed (SIGKILL) takes its watchdog with it, which
    # would otherwise keep the script's output open (CTest waits for it) and could signal a
    # stranger that got the pid.
    SML_POLL_S=1 sml_wait_for "$secs" "" _sml_gone "$main" && exit 0
    echo "FAIL: $what: deadline of $secs s passed; stopping the test" >&2
    kill -TERM "$main" 2>/dev/null || exit 0
    sleep 2
    sml_alive "$main" || exit 0
    # The script defers its trap until a foreground command ends: end that command (every
    # child of the script but this watchdog; its exit trap then stops the rest).
    local f p kids=()
    for f in /proc/[0-9]*; do
      p=${f#/proc/}
      [[ $p != "$BASHPID" ]] && _sml_stat "$p" && [[ $_SML_PPID == "$main" ]] && kids+=("$p")
    done
    ((${#kids[@]} == 0)) || kill -TERM "${kids[@]}" 2>/dev/null || true
  ) &
  SML_DEADLINE_PID=$!
  sml_track "$SML_DEADLINE_PID"
  sml_exit_trap
}

# ---------------------------------------------------------------------------------------------
# Waiting

_sml_usec() {  # SECONDS (integer or decimal) -> microseconds, in _SML_US
  local s=$1 i f=""
  i=${s%%.*}
  [[ $s == *.* ]] && f=${s#*.}
  f="${f}000000"
  _SML_US=$((10#${i:-0} * 1000000 + 10#${f:0:6}))
}

sml_wait_for() {
  local secs=$1 what=$2 end
  shift 2
  _sml_usec "$secs"
  end=$((${EPOCHREALTIME//[.,]/} + _SML_US))
  while :; do
    "$@" && return 0
    ((${EPOCHREALTIME//[.,]/} < end)) || break
    sleep "${SML_POLL_S:-0.05}"
  done
  [[ -z "$what" ]] || echo "${SML_PROG:-${0##*/}}: timed out after $secs s waiting for $what" >&2
  return 1
}

sml_wait_file() { sml_wait_for "$2" "${3-$1 to be written}" test -s "$1"; }

_sml_gone() { ! sml_alive "$1"; }
sml_wait_gone() { sml_wait_for "$2" "${3-process $1 to exit}" _sml_gone "$1"; }

_sml_port_bound() {  # tcp|udp PORT
  local hex files=() f
  printf -v hex ':%04X' "$2"
  for f in "/proc/net/$1" "/proc/net/${1}6"; do [[ -r $f ]] && files+=("$f"); done
  ((${#files[@]})) || return 1
  awk -v p="$hex" -v tcp="$([[ $1 == tcp ]] && echo 1 || echo 0)" \
      'FNR > 1 && substr($2, length($2) - 4) == p && (!tcp || $4 == "0A") {f = 1} END {exit !f}' "${files[@]}"
}
sml_wait_port() {
  [[ $1 == tcp || $1 == udp ]] || die "sml_wait_port: protocol must be tcp or udp, got '$1'"
  sml_wait_for "$3" "${4-a $1 socket on port $2}" _sml_port_bound "$1" "$2"
}

# ---------------------------------------------------------------------------------------------
# Ports, JSON

sml_free_port() {
  "${PYTHON:-python3}" -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "${1:-tcp}"
}

json_get() { "${PYTHON:-python3}" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# ---------------------------------------------------------------------------------------------
# switchml processes

sml_operator_token() {
  [[ -n "${SWITCHML_OPERATOR_TOKEN:-}" ]] ||
      SWITCHML_OPERATOR_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  export SWITCHML_OPERATOR_TOKEN
}

# sml_make_pki DIR: the certificates of docs/operations.md "Securing", made with its openssl
# commands for a switch at 127.0.0.1: DIR/ca.pem (and ca.key), DIR/switch.{pem,key} (IP
# 127.0.0.1, DNS switch1), DIR/client.{pem,key} (client authentication), and DIR/other.pem, a
# second CA that signed none of them. Output in DIR/openssl.log; returns non-zero on failure.
sml_make_pki() {
  local dir=$1
  mkdir -p "$dir"
  (
    cd "$dir"
    newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${newkey[@]}" -keyout ca.key -out ca.pem -days 365 -subj /CN=switchml-ca
    openssl req "${newkey[@]}" -keyout switch.key -out switch.csr -subj /CN=switch1
    openssl x509 -req -in switch.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 -out switch.pem \
      -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:switch1\n')
    openssl req "${newkey[@]}" -keyout client.key -out client.csr -subj /CN=switchml-clients
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 -out client.pem \
      -extfile <(printf 'extendedKeyUsage=clientAuth\n')
    openssl req -x509 "${newkey[@]}" -keyout other.key -out other.pem -days 365 -subj /CN=other-ca
  ) > "$dir/openssl.log" 2>&1
}

_sml_ready_or_gone() { [[ -s "$1" ]] || ! sml_alive "$2"; }

sml_start_server() {
  local what=$1 ready=$2 log=$3 secs=$4 rc=0
  shift 4
  rm -f "$ready"
  "$@" --ready-file "$ready" > "$log" 2>&1 &
  SML_PID=$!
  sml_track "$SML_PID"
  if ! sml_wait_for "$secs" "" _sml_ready_or_gone "$ready" "$SML_PID"; then
    echo "${SML_PROG:-${0##*/}}: timed out after $secs s waiting for the $what to write its ready file $ready; the end of $log:" >&2
    tail -n 5 "$log" >&2
    sml_kill_tree -KILL "$SML_PID"
    wait "$SML_PID" 2>/dev/null || true
    sml_untrack "$SML_PID"
    return 1
  fi
  [[ -s "$ready" ]] && return 0
  wait "$SML_PID" 2>/dev/null || rc=$?
  sml_untrack "$SML_PID"
  echo "${SML_PROG:-${0##*/}}: the $what exited (status $rc) before it was ready; the end of $log:" >&2
  tail -n 5 "$log" >&2
  return 1
}

# sml_start_switch [--bind ADDR] [--port P] [--controller-port P] [--log FILE] [--ready FILE]
#                  [--via LAUNCHER] [--deadline SECONDS] [--] [SWITCH FLAGS...]
#   Starts `$SWITCHML switch --bind ADDR --port P --controller-port P FLAGS...` (defaults
#   127.0.0.1, 0, 0: free ports) through sml_start_server, with output to FILE (default
#   $WORK/switch.log) and its ready file at READY (default $WORK/ready), and waits up to SECONDS
#   (default 30). LAUNCHER: a command or function that runs its arguments where the switch must
#   run and execs them (e.g. into a cluster host). Sets SW_PID (tracked), SW_LOG, SW_READY,
#   UDP_PORT and CTL_PORT; returns 1 (after saying why) if the switch did not come up.
sml_start_switch() {
  local bind=127.0.0.1 port=0 ctl=0 log=${WORK:+$WORK/switch.log} ready=${WORK:+$WORK/ready}
  local secs=30 via=()
  while (($#)); do
    case "$1" in
      --bind) bind=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --controller-port) ctl=$2; shift 2 ;;
      --log) log=$2; shift 2 ;;
      --ready) ready=$2; shift 2 ;;
      --via) via=("$2"); shift 2 ;;
      --deadline) secs=$2; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [[ -n "$log" && -n "$ready" ]] || die "sml_start_switch: --log and --ready are needed without a WORK directory"
  sml_start_server switch "$ready" "$log" "$secs" ${via[@]+"${via[@]}"} "${SWITCHML:?SWITCHML: the switchml binary}" \
      switch --bind "$bind" --port "$port" --controller-port "$ctl" "$@" || return 1
  SW_PID=$SML_PID SW_LOG=$log SW_READY=$ready
  read -r UDP_PORT CTL_PORT < <(json_get "$ready" "'%d %d' % (j['udp_port'], j['controller_port'])") || true
  [[ -n "${CTL_PORT:-}" ]] || { echo "${SML_PROG:-${0##*/}}: no ports in the switch's ready file $ready" >&2; return 1; }
}

# sml_start_controller [--listen ADDR:PORT] [--log FILE] [--ready FILE] [--deadline SECONDS] [--]
#                      [CONTROLLER FLAGS...]
#   Starts `$SWITCHML controller --listen ADDR:PORT FLAGS...` (default 127.0.0.1:0; FLAGS must
#   name the switch: --switch HOST:PORT) like sml_start_switch (defaults $WORK/controller.log,
#   $WORK/controller-ready, 30 s). Sets C_PID (tracked) and C_PORT.
sml_start_controller() {
  local listen=127.0.0.1:0 log=${WORK:+$WORK/controller.log} ready=${WORK:+$WORK/controller-ready} secs=30
  while (($#)); do
    case "$1" in
      --listen) listen=$2; shift 2 ;;
      --log) log=$2; shift 2 ;;
      --ready) ready=$2; shift 2 ;;
      --deadline) secs=$2; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [[ -n "$log" && -n "$ready" ]] || die "sml_start_controller: --log and --ready are needed without a WORK directory"
  sml_start_server controller "$ready" "$log" "$secs" "${SWITCHML:?SWITCHML: the switchml binary}" \
      controller --listen "$listen" "$@" || return 1
  C_PID=$SML_PID
  C_PORT=$(json_get "$ready" "j['controller_port']") || true
  [[ -n "${C_PORT:-}" ]] || { echo "${SML_PROG:-${0##*/}}: no port in the controller's ready file $ready" >&2; return 1; }
}

sml_stop_switch() { sml_stop "$SW_PID" "${1:-10}" switch; }

# ---------------------------------------------------------------------------------------------
# Network namespaces

sml_netns_pids() {
  local ns p a self=" "
  a=$BASHPID
  while ((a > 1)); do self+="$a "; _sml_stat "$a" && a=$_SML_PPID || a=0; done
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null || true); do
      # Not this shell or an ancestor; not gone (e.g. `ip netns pids` itself).
      [[ $self == *" $p "* ]] || ! sml_alive "$p" || echo "$p"
    done
  done
}

sml_netns_remove() {
  local ns rc=0 pids
  (($#)) || return 0
  mapfile -t pids < <(sml_netns_pids "$@")
  ((${#pids[@]} == 0)) || sml_terminate "${SML_KILL_GRACE_S:-2}" "${pids[@]}"
  for ns in "$@"; do
    ip netns del "$ns" 2>/dev/null && continue
    [[ ! -e /run/netns/$ns ]] && continue  # already gone
    echo "${SML_PROG:-${0##*/}}: could not delete network namespace $ns" >&2
    rc=1
  done
  return "$rc"
}

sml_netns_owner() { echo "${1:?sml_netns_owner: TAG}_$$"; }

# _sml_runs_this_script PID: PID is alive and its command line names this script's file.
_sml_runs_this_script() {
  local cmd
  sml_alive "$1" || return 1
  cmd=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null) || return 1
  [[ " $cmd" == *"/${0##*/} "* || " $cmd" == *" ${0##*/} "* ]]
}

sml_netns_sweep() {
  local tag=${1:?sml_netns_sweep: TAG} ns f pid gone=() files=()
  local -A live=()
  _sml_owner_dead() {  # NAME: TAG_PID[_X][-...]; true if PID no longer runs this script
    [[ $1 =~ ^${tag}_([0-9]+)(_[A-Za-z0-9]+)?($|-|\.env$) ]] || return 1
    pid=${BASH_REMATCH[1]}
    if [[ -z ${live[$pid]+x} ]]; then
      if _sml_runs_this_script "$pid"; then live[$pid]=1; else live[$pid]=0; fi
    fi
    ((live[$pid] == 0))
  }
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    _sml_owner_dead "$ns" && gone+=("$ns")
  done
  for f in /tmp/switchml-cluster-"${tag}"_*.env; do
    [[ -e $f ]] && _sml_owner_dead "${f#/tmp/switchml-cluster-}" && files+=("$f")
  done
  ((${#gone[@]} + ${#files[@]})) || return 0
  echo "${SML_PROG:-${0##*/}}: removing what earlier runs left behind: ${gone[*]} ${files[*]}" >&2
  rm -f ${files[@]+"${files[@]}"}
  sml_netns_remove ${gone[@]+"${gone[@]}"}
}
