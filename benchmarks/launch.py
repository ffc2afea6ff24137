#!/usr/bin/env python3
"""The snapshot benchmark's restore and fork figures: starts N copies of a monitor at
once and times them, from just before the first start to every copy's control API
reporting its VM running. The timing starts inside this program, after its own
(slow, under emulation) start, so both monitors are measured alike.

usage: launch.py KIND N SOCKET LOG -- CMD ARGS...
  KIND    mote (GET / on its API socket says "Running"), mote-copies (the same, but
          CMD is started once and forks the N copies itself: `mote restore --copies N`,
          "{i}" left in CMD for mote) or qemu (QMP query-status says "running"; a copy
          restored from a snapshot taken while stopped is paused once loaded, and is
          continued, as mote's copies run)
  SOCKET  each copy's control socket; "{i}" in it, and in CMD ARGS, is the copy's
          number, 1 to N
  LOG     the copies' stderr, appended
Prints "MS T0_NS" (T0: CLOCK_REALTIME at the first start) and then each copy's PID, one
a line; exits non-zero if a copy never ran (within 300 s), after printing what it has.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mote_api import instance_state  # noqa: E402
from qmp import Qmp  # noqa: E402


def mote_running(path, _state):
    try:
        return instance_state(path) == "Running"
    except (OSError, ValueError, KeyError):
        return False  # not listening yet, or mid-start


def qemu_running(path, state):
    """state holds the copy's QMP connection once made."""
    try:
        if "qmp" not in state:
            state["qmp"] = Qmp(path)
        status = state["qmp"].call("query-status")["status"]
    except (OSError, EOFError):
        state.pop("qmp", None)
        return False
    if status == "paused":
        state["qmp"].call("cont")
        return False
    return status == "running"


def main():
    try:
        split = sys.argv.index("--")
        kind, n, socket_pattern, log = sys.argv[1:split]
        n = int(n)
        command = sys.argv[split + 1:]
    except ValueError:
        raise SystemExit(__doc__)
    running = {"mote": mote_running, "mote-copies": mote_running, "qemu": qemu_running}[kind]
    one_process = kind == "mote-copies"
    t0_ns = time.time_ns()
    start = time.monotonic()
    copies = []
    with open(log, "ab") as err, open(os.devnull, "rb") as null_in, \
            open(os.devnull, "wb") as null_out:
        proc = None
        for i in range(1, n + 1):
            if proc is None or not one_process:
                argv = command if one_process else [arg.replace("{i}", str(i)) for arg in command]
                proc = subprocess.Popen(argv, stdin=null_in, stdout=null_out, stderr=err,
                                        start_new_session=True)
            copies.append((proc, socket_pattern.replace("{i}", str(i)), {}))
    waiting = list(copies)
    while waiting and time.monotonic() - start < 300:
        waiting = [c for c in waiting if c[0].poll() is None and not running(c[1], c[2])]
        if waiting:
            time.sleep(0.001)
    elapsed_ms = (time.monotonic() - start) * 1000
    for _, _, state in copies:
        if "qmp" in state:
            state["qmp"].sock.close()
    print(f"{elapsed_ms:.3f} {t0_ns}")
    for pid in dict.fromkeys(proc.pid for proc, _, _ in copies):
        print(pid)
    ended = [c for c in copies if c[0].poll() is not None]
    if waiting or ended:
        print(f"launch: {len(waiting)} of {n} never ran, {len(ended)} ended",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
