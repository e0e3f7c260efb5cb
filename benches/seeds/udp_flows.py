#!/usr/bin/env python3
"""Many-flow UDP load generator for the seed reproductions (benches/seeds).

Opens FLOWS UDP sockets (one source port each, so one flow each) and sends
sockperf-format pong requests (8-byte sequence, 2-byte flags = client|pong,
4-byte length, all big-endian; padded to --size) to DST:PORT, reading the
replies. A `sockperf server` behind steer's udp_proxy, or steer's
echo_server --sockperf, answers them.

Modes:
  closed (default): each flow keeps --window requests in flight and sends one
      more per reply; a flow with no reply for --stall-ms is re-primed (its
      window resent), so drops do not stop it.
  open: round-robin over the flows, sending as fast as one thread can (or
      at --rate datagrams/s in total), reading replies in between.

Prints key=value lines on stdout at the end: flows, flows_answered, sent,
received, elapsed_s, send_rate, recv_rate, reprimes, send_errors.
Stops after --seconds, or on SIGINT/SIGTERM (then prints what it has).
"""

import argparse
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

CLIENT_PONG = 3  # sockperf flags: from a client, pong requested


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--flows", type=int, default=128)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--mode", choices=["closed", "open"], default="closed")
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--rate", type=float, default=0.0,
                   help="open mode: total datagrams/s (0: as fast as possible)")
    p.add_argument("--stall-ms", type=float, default=200.0)
    p.add_argument("--base-port", type=int, default=0,
                   help="first source port (0: ephemeral ports)")
    return p.parse_args()


def main():
    a = parse_args()
    if a.flows < 1 or a.size < 14 or a.window < 1:
        sys.exit("udp_flows: --flows >= 1, --size >= 14, --window >= 1")
    family = socket.AF_INET6 if ":" in a.dst else socket.AF_INET
    dst = (a.dst, a.port)
    stop = [False]

    def on_signal(_sig, _frm):
        stop[0] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    socks = []
    try:
        for i in range(a.flows):
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0",
                    a.base_port + i if a.base_port else 0))
            s.connect(dst)
            s.setblocking(False)
            socks.append(s)
    except OSError as e:
        sys.exit(f"udp_flows: opening flow {len(socks)}: {e}")

    pad = b"\0" * (a.size - 14)
    seq = 0
    sent = received = reprimes = send_errors = 0
    answered = [False] * a.flows
    last_rx = [0.0] * a.flows
    by_fd = {s.fileno(): i for i, s in enumerate(socks)}
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)

    def send(i):
        nonlocal seq, sent, send_errors
        seq += 1
        try:
            socks[i].send(struct.pack(">QHI", seq, CLIENT_PONG, a.size) + pad)
            sent += 1
            return True
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ECONNREFUSED):
                raise
            send_errors += 1
            return False

    def drain(i):
        nonlocal received
        s = socks[i]
        n = 0
        while True:
            try:
                s.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                continue
            n += 1
        if n:
            received += n
            answered[i] = True
            last_rx[i] = time.monotonic()
        return n

    start = time.monotonic()
    deadline = start + a.seconds
    if a.mode == "closed":
        for i in range(a.flows):
            for _ in range(a.window):
                send(i)
            last_rx[i] = start
        next_check = start + a.stall_ms / 1000.0
        while not stop[0]:
            now = time.monotonic()
            if now >= deadline:
                break
            for fd, _ev in ep.poll(0.05):
                i = by_fd[fd]
                for _ in range(drain(i)):
                    send(i)
            if now >= next_check:
                next_check = now + a.stall_ms / 1000.0
                limit = now - a.stall_ms / 1000.0
                for i in range(a.flows):
                    if last_rx[i] < limit:
                        reprimes += 1
                        last_rx[i] = now
                        for _ in range(a.window):
                            send(i)
    else:
        i = 0
        interval = 1.0 / a.rate if a.rate > 0 else 0.0
        next_send = start
        while not stop[0]:
            now = time.monotonic()
            if now >= deadline:
                break
            # A burst of sends, then whatever replies are waiting.
            for _ in range(64):
                if interval:
                    if now < next_send:
                        break
                    next_send += interval
                send(i)
                i = (i + 1) % a.flows
            for fd, _ev in ep.poll(0):
                drain(by_fd[fd])
            if interval and now < next_send:
                time.sleep(min(next_send - now, 0.001))
    elapsed = time.monotonic() - start
    received_in_run = received
    # Replies still in flight.
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        for fd, _ev in ep.poll(0.05):
            drain(by_fd[fd])
    out = {
        "flows": a.flows,
        "flows_answered": sum(answered),
        "sent": sent,
        "received": received,
        "elapsed_s": f"{elapsed:.3f}",
        "send_rate": f"{sent / elapsed:.1f}" if elapsed > 0 else "0",
        "recv_rate": f"{received_in_run / elapsed:.1f}" if elapsed > 0 else "0",
        "reprimes": reprimes,
        "send_errors": send_errors,
    }
    for k, v in out.items():
        print(f"{k}={v}")
    sys.stdout.flush()
    for s in socks:
        s.close()
    os._exit(0)


if __name__ == "__main__":
    main()
