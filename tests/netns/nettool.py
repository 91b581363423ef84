#!/usr/bin/env python3
"""Small network probes for the emulated-cluster tests (standard library only; run inside a host
namespace with `cluster.sh exec`).

  nettool.py ping IP [--count N] [--timeout S]
      ICMP echo over a raw socket (needs root). Exit 0 iff every request got its reply.
  nettool.py tcp-sink --bind IP --ready-file F --json OUT [--timeout S]
      Accepts one TCP connection, reads it to EOF and writes {"bytes","seconds","mbit_per_s"} to
      OUT, measured from the first to the last byte received (the receiver's goodput), and
      "t_first", "t_last": those two instants on CLOCK_MONOTONIC (shared by all namespaces), so
      that concurrent transfers can be summed over their union. Writes the chosen port to F
      (written atomically) once listening.
  nettool.py tcp-send IP:PORT --seconds S
      Sends as fast as the socket accepts for S seconds, then closes.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(args) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    ok = 0
    for seq in range(1, args.count + 1):
        payload = struct.pack("!d", time.monotonic()) + b"switchml-netns-ping"
        hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, checksum(hdr + payload), ident, seq) + payload
        t0 = time.monotonic()
        sock.sendto(pkt, (args.host, 0))
        deadline = t0 + args.timeout
        got = False
        while not got:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data, addr = sock.recvfrom(2048)
            except socket.timeout:
                break
            ihl = (data[0] & 0x0F) * 4
            typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if typ == 0 and rid == ident and rseq == seq and addr[0] == args.host:
                got = True
                print(f"reply from {args.host}: seq={seq} time={(time.monotonic() - t0) * 1e3:.3f} ms")
        if got:
            ok += 1
        else:
            print(f"no reply from {args.host}: seq={seq}", file=sys.stderr)
    print(f"{args.host}: {ok}/{args.count} replies")
    return 0 if ok == args.count else 1


def tcp_sink(args) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, 0))
    srv.listen(1)
    tmp = args.ready_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.replace(tmp, args.ready_file)
    srv.settimeout(args.timeout)
    conn, _ = srv.accept()
    conn.settimeout(args.timeout)
    buf = bytearray(1 << 20)
    total = 0
    first = last = None
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        now = time.monotonic()
        if first is None:
            first = now
        else:
            total += n  # bytes that arrived after the first read, over [first, last]
        last = now
    secs = (last - first) if first is not None else 0.0
    result = {"bytes": total, "seconds": secs, "mbit_per_s": total * 8 / secs / 1e6 if secs > 0 else 0.0,
              "t_first": first, "t_last": last}
    with open(args.json, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))
    return 0


def tcp_send(args) -> int:
    host, port = args.dest.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    chunk = b"\x5a" * (256 << 10)
    end = time.monotonic() + args.seconds
    sent = 0
    while time.monotonic() < end:
        sock.sendall(chunk)
        sent += len(chunk)
    sock.shutdown(socket.SHUT_WR)
    sock.close()
    print(f"sent {sent} bytes")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ping")
    a.add_argument("host")
    a.add_argument("--count", type=int, default=3)
    a.add_argument("--timeout", type=float, default=2.0)
    a = sub.add_parser("tcp-sink")
    a.add_argument("--bind", required=True)
    a.add_argument("--ready-file", required=True)
    a.add_argument("--json", required=True)
    a.add_argument("--timeout", type=float, default=30.0)
    a = sub.add_parser("tcp-send")
    a.add_argument("dest")
    a.add_argument("--seconds", type=float, default=1.5)
    args = p.parse_args()
    return {"ping": ping, "tcp-sink": tcp_sink, "tcp-send": tcp_send}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
