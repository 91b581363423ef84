#!/usr/bin/env bash
# 1% ingress and 1% egress loss in the switch's drop simulator (docs/protocol.md#drop-simulator):
# int32 exact, float32 bit-identical to the loss-free run, and no hang (CTest timeout).
source "$(dirname "$0")/lib.sh"
COUNTS=1,64,65,65537,1000000
for type in int32 float32; do
  "$SWITCHML" demo --workers 3 --type $type --counts $COUNTS --json "$WORK/clean-$type.json" --timeout-s 100 \
      > "$WORK/clean-$type.log" 2>&1 || { cat "$WORK/clean-$type.log"; fail "loss-free $type run failed"; }
  "$SWITCHML" demo --workers 3 --type $type --counts $COUNTS --ingress-drop 0.01 --egress-drop 0.01 --drop-seed 7 \
      --json "$WORK/lossy-$type.json" --timeout-s 100 \
      > "$WORK/lossy-$type.log" 2>&1 || { cat "$WORK/lossy-$type.log"; fail "lossy $type run failed"; }
  tail -n +1 "$WORK/lossy-$type.log" | grep -E "verdict|^ +[0-9]" || true
  clean=$(json_get "$WORK/clean-$type.json" "[r['checksum'] for r in j['rows']]")
  lossy=$(json_get "$WORK/lossy-$type.json" "[r['checksum'] for r in j['rows']]")
  [ "$clean" = "$lossy" ] || fail "$type results differ between the loss-free and the lossy run: $clean vs $lossy"
  drops=$(json_get "$WORK/lossy-$type.json" "j['switch_counters']['sim_ingress_drops'] + j['switch_counters']['sim_egress_drops']")
  retx=$(json_get "$WORK/lossy-$type.json" "sum(r['retx_pct'] for r in j['rows'])")
  [ "$drops" -gt 0 ] || fail "the drop simulator dropped nothing"
  python3 -c "import sys; sys.exit(0 if float('$retx') > 0 else 1)" || fail "no retransmissions under loss"
  pass "$type: identical results with 1% ingress + 1% egress loss ($drops packets dropped by the simulator)"
done
