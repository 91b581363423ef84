#!/usr/bin/env bash
# The raw-frame channel (src/transport/raw_channel.h) on a veth pair between two namespaces this
# test creates (and always removes). Usage: raw_channel_test.sh RAW_RATE_BINARY
#
# Namespace A runs `raw_rate echo` on A's veth end (10.78.x.1:48864); from B a Python script sends
# hand-made frames: correct checksums; IPv4 checksum 0 + UDP pseudo-header-only checksum (what the
# reference DPDK client sends); UDP checksum 0; a wrong IPv4 checksum; a wrong UDP checksum; and one
# ordinary datagram through B's kernel UDP socket (ARP resolved by the kernels). Each hand-made
# frame carries its own source MAC. Asserted:
#  - every accepted datagram is echoed, once, to the MAC its frame came from, from A's MAC, with a
#    correct IPv4 and UDP checksum and the same payload; refused ones are not echoed;
#  - the channel's counters by reason (ok 2, ipv4_checksum_zero 1, udp_checksum_partial 1,
#    udp_checksum_zero 1, ipv4_checksum_bad 1, udp_checksum_bad 1), and with
#    --refuse-bad-checksums refused_checksum 3 and only the three good ones echoed; again with the
#    TPACKET_V3 ring;
#  - the kernel in A sends no ICMP port unreachable for port 48864 (none on the wire; Udp NoPorts
#    and Icmp OutDestUnreachs grow by the control's 1 only) while it does for a datagram to port 48865 (the capture's positive control), and
#    still answers ping (ICMP stays with the kernel);
#  - UDP GSO from B's kernel (`raw_rate udp-send`: transport::UdpChannel, bursts of K datagrams to
#    A, the last one shorter): each burst reaches A's ring as one super-frame, which the channel
#    splits into exactly the K datagrams, echoed in order with the same sizes and bytes (checked
#    by the sender), counted (gso_frames_split = bursts, gso_datagrams = received = bursts * K,
#    frames = bursts), also when the echo server's RecvBurst batch is smaller than K; a
#    super-frame that fits a TPACKET_V2 slot, one that does not (read whole with recv:
#    copied_frames), the TPACKET_V3 ring; and with --no-gso the same datagrams one frame each
#    (nothing split).
# Skips (exit 77) without root or network namespaces.
RAW_RATE=${1:?usage: raw_channel_test.sh RAW_RATE_BINARY}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_netns
own_namespaces smlraw
VA="rw$$a"
VB="rw$$b"
NET="10.78.$(($$ % 250))"
netns_add a b
A=$(ns_of a)
B=$(ns_of b)
netns_veth a "$VA" 02:00:00:78:00:01 b "$VB" 02:00:00:78:00:02
ip -n "$A" addr add "$NET.1/24" dev "$VA"
ip -n "$B" addr add "$NET.2/24" dev "$VB"

# snmp_field PROTO FIELD: a counter from A's /proc/net/snmp.
snmp_field() {
  ip netns exec "$A" awk -v p="$1:" -v f="$2" \
    '$1 == p && !h { for (i = 2; i <= NF; i++) n[i] = $i; h = 1; next }
     $1 == p && h { for (i = 2; i <= NF; i++) if (n[i] == f) print $i }' /proc/net/snmp
}

cat >"$WORK/frames.py" <<'EOF'
import json, socket, struct, sys, time
mode, iface, a_ip, b_ip, a_mac_text = sys.argv[1:6]
PORT = 48864
def csum_sum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack(f"!{len(b)//2}H", b))
    while s >> 16: s = (s & 0xFFFF) + (s >> 16)
    return s
def mac(t): return bytes(int(x, 16) for x in t.split(":"))
A_MAC = mac(a_mac_text)
ip_a, ip_b = socket.inet_aton(a_ip), socket.inet_aton(b_ip)
def frame(src_mac, sport, dport, payload, ip_mode, udp_mode):
    ulen = 8 + len(payload)
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 7, 0x4000, 64, 17, 0, ip_b, ip_a)
    good_ip = ~csum_sum(iph) & 0xFFFF
    ipc = {"ok": good_ip, "zero": 0, "bad": good_ip ^ 0x5555}[ip_mode]
    iph = iph[:10] + struct.pack("!H", ipc) + iph[12:]
    pseudo = ip_b + ip_a + struct.pack("!BBH", 0, 17, ulen)
    udp = struct.pack("!HHHH", sport, dport, ulen, 0) + payload
    good_udp = (~csum_sum(pseudo + udp) & 0xFFFF) or 0xFFFF
    uc = {"ok": good_udp, "zero": 0, "partial": csum_sum(pseudo), "bad": good_udp ^ 0x0F0F}[udp_mode]
    udp = udp[:6] + struct.pack("!H", uc) + udp[8:]
    return A_MAC + src_mac + b"\x08\x00" + iph + udp
# name, source MAC, source port, IPv4 checksum, UDP checksum, accepted when refusing bad ones
cases = [
    ("bad_ip",   "02:00:00:00:bb:03", 41003, "bad",  "ok",      False),
    ("bad_udp",  "02:00:00:00:bb:04", 41004, "ok",   "bad",     False),
    ("offload",  "02:00:00:00:bb:02", 41002, "zero", "partial", False),
    ("correct",  "02:00:00:00:bb:01", 41001, "ok",   "ok",      True),
    ("udp_zero", "02:00:00:00:bb:05", 41005, "ok",   "zero",    True),
]
refuse = mode == "refuse"
cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
cap.bind((iface, 0))
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind((iface, 0))
# An odd payload length (checksums over a padded last byte), distinct per case.
expect = {}
for i, (name, smac, sport, ipm, udpm, good) in enumerate(cases):
    payload = (name.encode() * 40)[: 101 + 2 * i]
    tx.send(frame(mac(smac), sport, PORT, payload, ipm, udpm))
    if good or not refuse:
        expect[sport] = (name, mac(smac), payload)
# Through B's kernel: an ordinary datagram (ARP first), and the positive control to port 48865.
ks = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ks.bind((b_ip, 41006))
ks.sendto(b"kernel-sent" * 9, (a_ip, PORT))
ks.sendto(b"control", (a_ip, PORT + 1))
expect[41006] = ("kernel", None, b"kernel-sent" * 9)
errors, seen, icmp_ours, icmp_control = [], {}, 0, 0
deadline = time.monotonic() + 5
cap.settimeout(0.2)
while time.monotonic() < deadline and not (len(seen) == len(expect) and icmp_control):
    try:
        data, addr = cap.recvfrom(65535)
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_OUTGOING or len(data) < 34 or data[12:14] != b"\x08\x00":
        continue
    ihl = (data[14] & 15) * 4
    ip = data[14:14 + ihl]
    if ip[12:16] != ip_a:
        continue
    if ip[9] == 1:  # ICMP from A
        icmp = data[14 + ihl:]
        if icmp[0] == 3 and icmp[1] == 3:  # port unreachable: which port was it about?
            inner = icmp[8:]
            dport = struct.unpack("!H", inner[(inner[0] & 15) * 4 + 2:][:2])[0]
            if dport == PORT: icmp_ours += 1
            if dport == PORT + 1: icmp_control += 1
        continue
    if ip[9] != 17:
        continue
    sport, dport, ulen, uc = struct.unpack("!HHHH", data[14 + ihl:14 + ihl + 8])
    if sport != PORT:
        continue
    payload = data[14 + ihl + 8:14 + ihl + ulen]
    if dport not in expect:
        errors.append(f"reply to port {dport}, which sent nothing that should be echoed"); continue
    name, smac, want = expect[dport]
    if dport in seen:
        errors.append(f"{name}: echoed twice"); continue
    seen[dport] = name
    if csum_sum(ip) != 0xFFFF: errors.append(f"{name}: reply's IPv4 checksum is wrong")
    pseudo = ip[12:16] + ip[16:20] + struct.pack("!BBH", 0, 17, ulen)
    if uc == 0 or csum_sum(pseudo + data[14 + ihl:14 + ihl + ulen]) != 0xFFFF:
        errors.append(f"{name}: reply's UDP checksum {uc:#06x} is wrong")
    if data[6:12] != A_MAC: errors.append(f"{name}: reply from MAC {data[6:12].hex(':')}, not A's")
    if smac is not None and data[0:6] != smac:
        errors.append(f"{name}: reply to MAC {data[0:6].hex(':')}, not the sender's {smac.hex(':')}")
    if payload != want: errors.append(f"{name}: payload differs")
    if ip[16:20] != ip_b: errors.append(f"{name}: reply to the wrong IP")
missing = sorted(expect[p][0] for p in expect if p not in seen)
if missing: errors.append(f"no reply for {missing}")
if icmp_ours: errors.append(f"{icmp_ours} ICMP port unreachable for port {PORT} (the kernel answered)")
if not icmp_control: errors.append("no ICMP port unreachable for the control datagram to port 48865: the capture would not have seen one")
print(json.dumps({"seen": sorted(seen.values()), "icmp_ours": icmp_ours, "icmp_control": icmp_control, "errors": errors}))
sys.exit(1 if errors else 0)
EOF

run_case() {  # MODE (accept|refuse) COUNT [echo flags...]
  local mode=$1 count=$2
  shift 2
  local noports0 unreach0
  noports0=$(snmp_field Udp NoPorts)
  unreach0=$(snmp_field Icmp OutDestUnreachs)
  ip netns exec "$A" "$RAW_RATE" echo --if "$VA" --local "$NET.1:48864" --count "$count" --timeout 20 \
    "$@" >"$WORK/echo-$mode.json" 2>"$WORK/echo-$mode.err" &
  local pid=$!
  sml_track "$pid"
  sml_wait_for 10 "the echo server (ready)" grep -q ready "$WORK/echo-$mode.err" ||
    fail "echo server did not start: $(cat "$WORK/echo-$mode.err")"
  ip netns exec "$B" "$PYTHON" "$WORK/frames.py" "$mode" "$VB" "$NET.1" "$NET.2" 02:00:00:78:00:01 \
    >"$WORK/frames-$mode.json" || fail "$mode: $(cat "$WORK/frames-$mode.json")"
  wait "$pid" || fail "$mode: echo server exited with $?: $(cat "$WORK/echo-$mode.err" "$WORK/echo-$mode.json")"
  sml_untrack "$pid"
  # The control datagram to port 48865 is the one NoPorts of the run.
  [[ $(snmp_field Udp NoPorts) == $((noports0 + 1)) ]] ||
    fail "$mode: Udp NoPorts in A went from $noports0 to $(snmp_field Udp NoPorts), want +1 (the control)"
  [[ $(snmp_field Icmp OutDestUnreachs) == $((unreach0 + 1)) ]] ||
    fail "$mode: A sent $(($(snmp_field Icmp OutDestUnreachs) - unreach0)) ICMP unreachables, want 1 (the control)"
  pass "$mode: $(cat "$WORK/frames-$mode.json")"
}

# expect_counter MODE EXPR VALUE: a field of the echo server's counters.
expect_counter() {
  local got
  got=$(json_get "$WORK/echo-$1.json" "j$2")
  [[ "$got" == "$3" ]] || fail "$1: counter $2 = $got, want $3 ($(cat "$WORK/echo-$1.json"))"
}

run_case accept 6
for kv in ok=2 ipv4_checksum_zero=1 udp_checksum_partial=1 udp_checksum_zero=1 ipv4_checksum_bad=1 \
          udp_checksum_bad=1 truncated=0 not_udp=0; do
  expect_counter accept "['verdicts']['${kv%=*}']" "${kv#*=}"
done
expect_counter accept "['received']" 6
expect_counter accept "['refused_checksum']" 0
# B's kernel leaves the UDP checksum of its datagram to offload (veth); A's kernel flags it.
expect_counter accept "['udp_checksum_offloaded']" 1
expect_counter accept "['send_no_mac']" 0
expect_counter accept "['local_mac']" 02:00:00:78:00:01
pass "accept: counters by reason"

run_case refuse 3 --refuse-bad-checksums
expect_counter refuse "['received']" 3
expect_counter refuse "['refused_checksum']" 3
expect_counter refuse "['verdicts']['udp_checksum_partial']" 1
pass "refuse: the three frames with bad or partial checksums dropped and counted"

# The same with the TPACKET_V3 ring: every accepted frame echoed correctly, counted the same.
run_case accept-v3 6 --ring v3
expect_counter accept-v3 "['verdicts']['udp_checksum_partial']" 1
expect_counter accept-v3 "['verdicts']['ipv4_checksum_zero']" 1
expect_counter accept-v3 "['udp_checksum_offloaded']" 1

# ICMP (and ARP) stay with the kernel.
ip netns exec "$B" "$PYTHON" "$NETTOOL" ping "$NET.1" --count 2 --timeout 2 >/dev/null ||
  fail "A does not answer ping"
pass "the kernel still answers ping"

# UDP GSO super-frames from B's kernel. run_gso_case NAME BURSTS K SIZE LAST ECHO_BATCH
# [echo flags...] [-- udp-send flags...]
run_gso_case() {
  local name=$1 bursts=$2 k=$3 size=$4 last=$5 batch=$6
  shift 6
  local echo_flags=() send_flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do echo_flags+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  send_flags=("$@")
  ip netns exec "$A" "$RAW_RATE" echo --if "$VA" --local "$NET.1:48864" --burst "$batch" \
    --count $((bursts * k)) --timeout 20 ${echo_flags[@]+"${echo_flags[@]}"} \
    >"$WORK/echo-$name.json" 2>"$WORK/echo-$name.err" &
  local pid=$!
  sml_track "$pid"
  sml_wait_for 10 "the echo server (ready)" grep -qs ready "$WORK/echo-$name.err" ||
    fail "$name: echo server did not start: $(cat "$WORK/echo-$name.err")"
  ip netns exec "$B" "$RAW_RATE" udp-send --local "$NET.2:41010" --to "$NET.1:48864" \
    --bursts "$bursts" --burst "$k" --size "$size" --last-size "$last" --timeout 15 \
    ${send_flags[@]+"${send_flags[@]}"} >"$WORK/send-$name.json" 2>"$WORK/send-$name.err" ||
    fail "$name: udp-send: $(cat "$WORK/send-$name.json" "$WORK/send-$name.err")"
  wait "$pid" || fail "$name: echo server exited with $?: $(cat "$WORK/echo-$name.err" "$WORK/echo-$name.json")"
  sml_untrack "$pid"
  [[ $(json_get "$WORK/send-$name.json" "j['echoes_ok']") == $((bursts * k)) ]] ||
    fail "$name: $(cat "$WORK/send-$name.json")"
  expect_counter "$name" "['received']" $((bursts * k))
  expect_counter "$name" "['truncated']" 0
  expect_counter "$name" "['verdicts']['truncated']" 0
  expect_counter "$name" "['verdicts']['udp_checksum_partial']" 0
}

# GSO on: the sender's kernel sent each burst as one message (else this tests nothing).
gso_case() {  # NAME BURSTS K COPIED: the counters of a GSO run
  [[ $(json_get "$WORK/send-$1.json" "j['gso_messages']") == "$2" ]] ||
    fail "$1: the sender did not use GSO: $(cat "$WORK/send-$1.json")"
  expect_counter "$1" "['frames']" "$2"
  expect_counter "$1" "['gso_frames_split']" "$2"
  expect_counter "$1" "['gso_datagrams']" $(($2 * $3))
  expect_counter "$1" "['udp_checksum_offloaded']" "$2"
  expect_counter "$1" "['copied_frames']" "$4"
}

# 4 x 1000 + 300 bytes: fits a TPACKET_V2 slot; the echo server takes 3 per RecvBurst. Refusing
# bad checksums: a super-frame's partial UDP checksum is flagged (left to offload), not bad.
run_gso_case gso-v2 5 4 1000 300 3 --refuse-bad-checksums
gso_case gso-v2 5 4 0
expect_counter gso-v2 "['refused_checksum']" 0
pass "gso-v2: 5 super-frames of 4 datagrams (last 300 bytes) split, echoed in order"
# 15 x 1000 + 500 bytes: longer than a TPACKET_V2 slot (max_payload 9000), read whole from the
# socket's queue.
run_gso_case gso-v2-copy 5 16 1000 500 5
gso_case gso-v2-copy 5 16 5
pass "gso-v2-copy: 5 super-frames of 16 datagrams (15.5 KB, longer than a ring slot) split"
run_gso_case gso-v3 5 16 1000 500 5 --ring v3
gso_case gso-v3 5 16 0
pass "gso-v3: the same with the TPACKET_V3 ring"
# GSO off: the same datagrams, one frame each, nothing split.
run_gso_case no-gso 5 16 1000 500 5 -- --no-gso
[[ $(json_get "$WORK/send-no-gso.json" "j['gso_messages']") == 0 ]] ||
  fail "no-gso: the sender used GSO: $(cat "$WORK/send-no-gso.json")"
expect_counter no-gso "['frames']" 80
expect_counter no-gso "['gso_frames_split']" 0
expect_counter no-gso "['gso_datagrams']" 0
expect_counter no-gso "['copied_frames']" 0
expect_counter no-gso "['udp_checksum_offloaded']" 80
pass "no-gso: 80 datagrams, one frame each, none split"
