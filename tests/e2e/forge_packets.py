#!/usr/bin/env python3
"""Hostile and malformed SwitchML traffic for the e2e tests (tests/e2e/hostile_test.sh).

Sends, to a switch's UDP port on loopback, a paced stream of datagrams in classes that the
switch must drop, each under one known reason of dataplane/switch_counters.h:

  from unregistered sockets (one socket per class, each bound to 127.0.0.1:<ephemeral>,
  i.e. a registered worker's address but a different port):
    forged_job_id      well-formed 256-element packets, job number cycling 0..255, in-range
                       job-relative slots                               -> unknown_sender
    slot_out_of_range  well-formed packets for slots 8191 and 16383      -> unknown_sender
    other_port         well-formed packets for slot 0, set 0 and 1 (what a worker of the job
                       sends), from another port of the worker's IP      -> unknown_sender
    size_code          size codes 0, 2, 6, 7                             -> decode_unsupported_size_code
    length             size code 3 / 1 / 5 with a wrong payload length   -> decode_length_mismatch
    truncated          0..9 bytes                                        -> decode_truncated
    msg_type           msg_type 0, 2..15                                 -> decode_unknown_msg_type
    garbage            random bytes of random length (0..1100); each one classified here by
                       the same rules as wire::Decode                    -> its reason
    oversized          8000 bytes (longer than any SwitchML datagram)    -> rx_truncated or
                                                                            decode_length_mismatch
  spoofed from a registered worker's exact (ip, port), with --spoof-port (raw socket; needs
  CAP_NET_RAW; these packets are dropped before they touch aggregation state):
    spoof_slot         slots >= the job's --job-slots                    -> job_slot_out_of_range
    spoof_too_large    1024-element packets (size code 5) to a job of --job-elements < 1024
                                                                         -> too_large

Wire format (src/wire/packet.h, docs/protocol.md#header-layout): byte 0 = msg_type << 4 |
size code, byte 1 = job number, bytes 2..5 = tsi (little-endian), bytes 6..7 = set << 15 | slot
(big-endian), bytes 8, 9 = exponents, then big-endian int32 elements.

Runs for --duration seconds or until SIGTERM/SIGINT, then writes --report (JSON):
  {"sent": {class: n}, "expected": {counter: n}, "spoofed": bool, "seconds": s}
where "expected" sums, per switch counter, the datagrams that should land there
("rx_truncated_or_length" holds the oversized ones, which land in either of two counters
depending on the switch's receive buffer size).
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import sys
import time

ELEMENTS_FOR_CODE = {1: 64, 3: 256, 4: 512, 5: 1024}


def header(msg_type=1, code=3, job=0, tsi=0, slot=0, set_bit=0, e0=0, e1=0):
    return (bytes([(msg_type & 0xF) << 4 | (code & 7), job & 0xFF]) + struct.pack("<I", tsi & 0xFFFFFFFF)
            + struct.pack(">H", (set_bit & 1) << 15 | (slot & 0x3FFF)) + struct.pack("bb", e0, e1))


def packet(code=3, **kw):
    n = ELEMENTS_FOR_CODE[code]
    return header(code=code, **kw) + struct.pack(">%di" % n, *([7] * n))


def classify(d):
    """The switch counter a datagram from an unregistered sender lands in (wire::Decode)."""
    if len(d) < 10:
        return "decode_truncated"
    if d[0] >> 4 != 1:
        return "decode_unknown_msg_type"
    n = ELEMENTS_FOR_CODE.get(d[0] & 7, 0)
    if n == 0:
        return "decode_unsupported_size_code"
    if len(d) != 10 + 4 * n:
        return "decode_length_mismatch"
    return "unknown_sender"


def udp_ipv4(src_port, dst_port, payload):
    """IPv4 + UDP header (checksum 0 = none) + payload, from/to 127.0.0.1."""
    lo = socket.inet_aton("127.0.0.1")
    udp = struct.pack(">HHHH", src_port, dst_port, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0, lo, lo)
    s = sum(struct.unpack(">10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ip[:10] + struct.pack(">H", ~s & 0xFFFF) + ip[12:] + udp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True, help="the switch's UDP port on 127.0.0.1")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds to send (or until SIGTERM)")
    ap.add_argument("--rate", type=float, default=5000.0, help="datagrams per second in all (paced)")
    ap.add_argument("--report", help="write the JSON report here")
    ap.add_argument("--started-file", help="create this file once the first round is sent")
    ap.add_argument("--spoof-port", type=int, default=0,
                    help="a registered worker's UDP port on 127.0.0.1 to spoof (raw socket)")
    ap.add_argument("--job-slots", type=int, default=256, help="the spoofed worker's job's slot count")
    ap.add_argument("--job-elements", type=int, default=256,
                    help="the spoofed worker's job's elements per packet (< 1024)")
    ap.add_argument("--classes", default="",
                    help="comma-separated classes to send (default: every class above; the spoof_* "
                         "ones only with --spoof-port)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not 0 < a.port < 65536:
        sys.exit("forge_packets.py: --port must be in [1, 65535], got %d" % a.port)
    if not 0 <= a.spoof_port < 65536:
        sys.exit("forge_packets.py: --spoof-port must be in [0, 65535], got %d" % a.spoof_port)
    if a.spoof_port and a.job_elements >= 1024:
        sys.exit("forge_packets.py: --job-elements must be < 1024 to forge too-large packets")
    if not 0 < a.job_slots < 16384:
        sys.exit("forge_packets.py: --job-slots must be in [1, 16383], got %d" % a.job_slots)
    if not a.rate > 0:
        sys.exit("forge_packets.py: --rate must be > 0")
    rng = random.Random(a.seed)
    dst = ("127.0.0.1", a.port)

    def sock():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        return s

    # class -> (socket, generator of datagrams, expected counter or None = classify each)
    classes = {
        "forged_job_id": (lambda i: packet(job=i % 256, tsi=i, slot=i % 256, set_bit=i & 1), "unknown_sender"),
        "slot_out_of_range": (lambda i: packet(tsi=i, slot=(8191, 16383)[i & 1], set_bit=(i >> 1) & 1),
                              "unknown_sender"),
        "other_port": (lambda i: packet(job=1, tsi=i, slot=0, set_bit=i & 1), "unknown_sender"),
        "size_code": (lambda i: header(code=(0, 2, 6, 7)[i % 4]) + bytes(256), "decode_unsupported_size_code"),
        "length": (lambda i: header(code=(3, 1, 5)[i % 3]) + bytes((100, 300, 1023)[i % 3]),
                   "decode_length_mismatch"),
        "truncated": (lambda i: bytes([0x13, 5, 70, 0, 0, 0, 0x80, 6, 3])[: i % 10], "decode_truncated"),
        "msg_type": (lambda i: header(msg_type=(0, 2, 3, 15)[i % 4]) + bytes(1024), "decode_unknown_msg_type"),
        "garbage": (lambda i: rng.randbytes(rng.randrange(0, 1100)), None),
        "oversized": (lambda i: bytes(8000), "rx_truncated_or_length"),
    }
    spoofed = {
        "spoof_slot": (lambda i: packet(tsi=i, slot=a.job_slots + i % (16384 - a.job_slots), set_bit=i & 1),
                       "job_slot_out_of_range"),
        "spoof_too_large": (lambda i: packet(code=5, tsi=i, slot=0, set_bit=i & 1), "too_large"),
    }
    wanted = [c for c in a.classes.split(",") if c]
    for c in wanted:
        if c not in classes and c not in spoofed:
            sys.exit("forge_packets.py: --classes: unknown class '%s' (known: %s)"
                     % (c, ", ".join(list(classes) + list(spoofed))))
        if c in spoofed and not a.spoof_port:
            sys.exit("forge_packets.py: --classes: %s needs --spoof-port" % c)
    raw = None
    if a.spoof_port and (not wanted or any(c in spoofed for c in wanted)):
        try:
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        except PermissionError:
            print("forge_packets.py: no raw socket (needs CAP_NET_RAW): spoofed classes skipped", flush=True)
        else:
            classes.update(spoofed)
    if wanted:
        classes = {name: v for name, v in classes.items() if name in wanted}
    if not classes and raw is None and a.spoof_port:
        print("forge_packets.py: only spoofed classes were asked for: sending nothing", flush=True)
    elif not classes:
        sys.exit("forge_packets.py: nothing to send")
    socks = {name: sock() for name in classes if not name.startswith("spoof_")}
    sent = {name: 0 for name in classes}
    expected = {}

    stop = [False]

    def on_signal(_sig, _frame):
        stop[0] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    start = time.monotonic()
    per_round = max(len(classes), 1)
    interval = per_round / a.rate
    i = 0
    next_round = start
    while not stop[0] and time.monotonic() - start < a.duration:
        for name, (gen, counter) in classes.items():
            d = gen(i)
            if name.startswith("spoof_"):
                raw.sendto(udp_ipv4(a.spoof_port, a.port, d), dst)
            else:
                try:
                    socks[name].sendto(d, dst)
                except OSError as e:  # e.g. ENOBUFS under memory pressure: not sent, not counted
                    print("forge_packets.py: %s: send failed: %s" % (name, e), file=sys.stderr)
                    continue
            sent[name] += 1
            key = counter if counter is not None else classify(d)
            expected[key] = expected.get(key, 0) + 1
        if i == 0 and a.started_file:
            open(a.started_file, "w").close()
        i += 1
        next_round += interval
        delay = next_round - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    report = {"sent": sent, "expected": expected, "spoofed": any(n.startswith("spoof_") for n in sent),
              "seconds": round(time.monotonic() - start, 3)}
    if a.report:
        tmp = a.report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, a.report)
    print("forge_packets.py: sent %d datagrams in %.1f s: %s" % (sum(sent.values()), report["seconds"], sent),
          flush=True)


if __name__ == "__main__":
    main()
