#!/usr/bin/env bash
# `switchml top` in a pseudo-terminal (tmux): while a job streams, the screen shows the switch
# and the job with their rates moving; `q` quits it; a wrong controller address is an error.
source "$(dirname "$0")/lib.sh"
command -v tmux > /dev/null || fail "tmux is not installed (scripts/install-deps.sh installs it)"
start_switch
CTL=127.0.0.1:$CTL_PORT

expect_fail() {  # NAME PATTERN command...
  local name=$1 pattern=$2 rc=0; shift 2
  timeout 30 "$@" > "$WORK/fail.log" 2>&1 || rc=$?
  ((rc != 0 && rc < 124)) || { cat "$WORK/fail.log"; fail "$name: exit code $rc"; }
  grep -qE -- "$pattern" "$WORK/fail.log" || { cat "$WORK/fail.log"; fail "$name: no /$pattern/"; }
  pass "$name: $(head -1 "$WORK/fail.log")"
}
expect_fail "top: no controller there" "127\.0\.0\.1:9" "$SWITCHML" top --controller 127.0.0.1:9 --rpc-timeout-ms 1000 --iterations 1
expect_fail "top: bad interval" "--interval-s must be in" "$SWITCHML" top --controller "$CTL" --interval-s 0

# A job that streams until the hold file appears (every result verified by the ranks).
eval "$("$SWITCHML" jobs create --controller "$CTL" --workers 2 --slots 64 --name toptest)"
for r in 0 1; do
  timeout 120 "$SWITCHML" allreduce --controller "$CTL" --rank $r --workers 2 --window 64 \
      --size 1MiB --type int32 --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN" \
      --hold-file "$WORK/stop" --json "$WORK/r$r.json" > "$WORK/r$r.log" 2>&1 &
  sml_track $!
  eval "pid$r=$!"
done

# top in a detached tmux session of its own (its own server socket), 120 x 40 characters.
SOCK="sml-top-$$"
sml_at_exit "tmux -L $SOCK kill-server 2>/dev/null || true"
tmux -L "$SOCK" new-session -d -x 120 -y 40 \
    "'$SWITCHML' top --controller '$CTL' --interval-s 0.2; echo \"top exited \$?\" > '$WORK/top.exit'; sleep 60"
screen() { tmux -L "$SOCK" capture-pane -p > "$WORK/screen.txt" 2>/dev/null; cat "$WORK/screen.txt"; }

# Wait (bounded only as a hang guard) until the job's line shows it running with a datagram
# rate above 0: the view refreshes and its rates move.
job_rate() { screen | awk -v id="$SWITCHML_JOB_ID" '$1 == id && $2 == "running" { print $5 }'; }
moving=""
for _ in $(seq 1 300); do
  rate=$(job_rate)
  if [[ -n $rate && $rate != "-" && $rate != "0" ]]; then moving=$rate; break; fi
  sleep 0.2
done
[ -n "$moving" ] || { cat "$WORK/screen.txt"; fail "top: the job's line never showed a rate above 0"; }
grep -q "switchml top: controller $CTL" "$WORK/screen.txt" || { cat "$WORK/screen.txt"; fail "top: no title line"; }
grep -qE '^switch +[0-9.]+[kMG]? ' "$WORK/screen.txt" || { cat "$WORK/screen.txt"; fail "top: no switch line with a rate"; }
grep -q "toptest" "$WORK/screen.txt" || { cat "$WORK/screen.txt"; fail "top: the job's name is missing"; }
grep -q "2/2" "$WORK/screen.txt" || { cat "$WORK/screen.txt"; fail "top: the job's workers (2/2) are missing"; }
pass "top: job $SWITCHML_JOB_ID running at $moving datagrams/s on screen"

touch "$WORK/stop"
wait "$pid0" && wait "$pid1" || { tail -5 "$WORK"/r*.log; fail "a rank failed"; }
for r in 0 1; do [ "$(json_get "$WORK/r$r.json" "j['ok']")" = True ] || fail "rank $r not ok"; done

# q quits (exit status 0) and the terminal is left as it was.
tmux -L "$SOCK" send-keys q
for _ in $(seq 1 100); do [ -f "$WORK/top.exit" ] && break; sleep 0.2; done
[ -f "$WORK/top.exit" ] || { screen; fail "top: q did not quit it"; }
grep -q "top exited 0" "$WORK/top.exit" || fail "top: $(cat "$WORK/top.exit")"
pass "top: q quits (status 0)"
stop_switch
