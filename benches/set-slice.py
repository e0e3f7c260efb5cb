#!/usr/bin/env python3
"""Give every thread of a process the same scheduling slice (Linux >= 6.12).

    benches/set-slice.py PID MICROSECONDS

The benchmark scripts use it to give a kernel-path server (sockperf server)
the scheduling slice steer's workers ask for (EngineBuilder::worker_slice),
so both servers are scheduled alike. Only the slice changes: each thread's
policy and nice value are read with sched_getattr and written back; threads
under a real-time or deadline policy are skipped. Prints each thread's
resulting se.slice; exits 1 if a thread could not be set.
"""
import ctypes
import os
import struct
import sys

SYS_SCHED_SETATTR, SYS_SCHED_GETATTR = 314, 315  # x86_64
ATTR = struct.Struct("IIQiIQQQII")  # struct sched_attr, version 1 (56 bytes)
FAIR = (0, 3)  # SCHED_OTHER, SCHED_BATCH

libc = ctypes.CDLL(None, use_errno=True)


def set_slice(tid: int, ns: int) -> bool:
    buf = ctypes.create_string_buffer(ATTR.size)
    if libc.syscall(SYS_SCHED_GETATTR, tid, buf, ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_getattr({tid})")
    fields = list(ATTR.unpack(buf.raw))
    if fields[1] not in FAIR:
        return False
    fields[0] = ATTR.size  # size
    fields[2] = 0  # flags read back may not be valid on a write
    fields[5] = ns  # sched_runtime: the slice
    buf = ctypes.create_string_buffer(ATTR.pack(*fields))
    if libc.syscall(SYS_SCHED_SETATTR, tid, buf, 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_setattr({tid})")
    return True


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    pid, usec = int(sys.argv[1]), int(sys.argv[2])
    failed = 0
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        try:
            changed = set_slice(tid, usec * 1000)
        except OSError as e:
            print(f"set-slice: thread {tid}: {e}", file=sys.stderr)
            failed += 1
            continue
        sched = open(f"/proc/{pid}/task/{tid}/sched").read()
        now = next((l.split(":")[1].strip() for l in sched.splitlines() if l.startswith("se.slice")), "?")
        print(f"thread {tid}: slice {now} ns{'' if changed else ' (real-time: left alone)'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
