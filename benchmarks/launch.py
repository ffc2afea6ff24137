#!/usr/bin/env python3
"""The snapshot benchmark's restore and fork figures: starts N copies of a monitor at
once and times them, from just before the first start to every copy reporting its VM
running. The timing starts inside this program, after its own (slow, under emulation)
start, so both monitors are measured alike.

How a copy reports that it runs:
  mote  its "restored VM running" line on stderr (into LOG), written once every vCPU
        thread has started. This program watches LOG's size and reads only what was
        added, so watching costs the copies almost no CPU. (It used to ask each copy's
        API every millisecond: under emulation, 32 HTTP exchanges a round took enough
        of the two CPUs to slow the restores it timed by seconds.) Once all have
        reported, each copy's API must say "Running" (GET /), untimed.
  qemu  QMP query-status says "running" (QEMU prints nothing when it starts, and
        emits no event when an incoming migration leaves it paused); a copy restored
        from a snapshot taken while stopped is paused once loaded, and is continued, as
        mote's copies run. Each copy is asked every QEMU_POLL_S (10 ms): asking every
        millisecond, as this did before 2026-12-07, cost the copies, whose main loops
        answer QMP while they load, the CPU that mote's copies were spared. The figure
        may be late by up to one interval.

usage: launch.py KIND N SOCKET LOG -- CMD ARGS...
  KIND    mote, mote-copies (CMD is started once and forks the N copies itself:
          `mote restore --copies N`, "{i}" left in CMD for mote) or qemu
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

MOTE_RUNNING_LINE = b"restored VM running"
TIMEOUT_S = 300
QEMU_POLL_S = 0.010


def mote_api_state(path):
    """The copy's state as its API says it, given a second to turn "Running": the
    line is written just before the state changes."""
    for _ in range(100):
        try:
            state = instance_state(path)
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            state = f"no answer ({err})"
        if state == "Running":
            break
        time.sleep(0.01)
    return state


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


class LogWatch:
    """Counts the lines with MOTE_RUNNING_LINE appended to a file after its creation."""

    def __init__(self, path):
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0
        self.partial = b""
        self.count = 0

    def poll(self):
        if os.path.getsize(self.path) <= self.offset:
            return self.count
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            added = log.read()
        self.offset += len(added)
        *lines, self.partial = (self.partial + added).split(b"\n")
        self.count += sum(MOTE_RUNNING_LINE in line for line in lines)
        return self.count


def main():
    try:
        split = sys.argv.index("--")
        kind, n, socket_pattern, log_path = sys.argv[1:split]
        n = int(n)
        command = sys.argv[split + 1:]
    except ValueError:
        raise SystemExit(__doc__)
    if kind not in ("mote", "mote-copies", "qemu"):
        raise SystemExit(__doc__)
    one_process = kind == "mote-copies"
    watch = LogWatch(log_path) if kind != "qemu" else None
    t0_ns = time.time_ns()
    start = time.monotonic()
    copies = []
    with open(log_path, "ab") as err, open(os.devnull, "rb") as null_in, \
            open(os.devnull, "wb") as null_out:
        proc = None
        for i in range(1, n + 1):
            if proc is None or not one_process:
                argv = command if one_process else [arg.replace("{i}", str(i)) for arg in command]
                proc = subprocess.Popen(argv, stdin=null_in, stdout=null_out, stderr=err,
                                        start_new_session=True)
            copies.append((proc, socket_pattern.replace("{i}", str(i)), {}))

    def alive():
        return [c for c in copies if c[0].poll() is None]

    if watch:
        while watch.poll() < n and alive() and time.monotonic() - start < TIMEOUT_S:
            time.sleep(0.002)
        waiting = copies[watch.count:] if watch.count < n else []
    else:
        waiting = list(copies)
        while waiting and time.monotonic() - start < TIMEOUT_S:
            waiting = [c for c in waiting if c[0].poll() is None and not qemu_running(c[1], c[2])]
            if waiting:
                time.sleep(QEMU_POLL_S)
    elapsed_ms = (time.monotonic() - start) * 1000

    disagree = []
    if watch and not waiting:
        for _, path, _ in copies:
            state = mote_api_state(path)
            if state != "Running":
                disagree.append(f"{path}: {state}")
    for _, _, state in copies:
        if "qmp" in state:
            state["qmp"].sock.close()
    print(f"{elapsed_ms:.3f} {t0_ns}")
    for pid in dict.fromkeys(proc.pid for proc, _, _ in copies):
        print(pid)
    ended = [c for c in copies if c[0].poll() is not None]
    if waiting or ended or disagree:
        print(f"launch: {len(waiting)} of {n} never ran, {len(ended)} ended", file=sys.stderr)
        for line in disagree:
            print(f"launch: reported running, but the API says {line}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
