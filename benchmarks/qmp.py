#!/usr/bin/env python3
"""QEMU's side of the snapshot benchmark: a few QMP commands, each timed from the
request to QEMU's answer (or, for a migration, to its completion), printed in ms.

usage: qmp.py SOCKET stop | cont | quit
       qmp.py SOCKET migrate FILE     full snapshot: migrate to FILE, until completed
"""
import json
import socket
import sys
import time


class Qmp:
    def __init__(self, path, wait_s=0):
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.001)
        self.file = self.sock.makefile("rwb")
        self.read()  # the greeting
        self.call("qmp_capabilities")

    def read(self):
        while True:
            line = self.file.readline()
            if not line:
                raise EOFError("QEMU closed its QMP socket")
            msg = json.loads(line)
            if "event" not in msg:
                return msg

    def call(self, command, **arguments):
        request = {"execute": command}
        if arguments:
            request["arguments"] = arguments
        self.file.write(json.dumps(request).encode() + b"\n")
        self.file.flush()
        reply = self.read()
        if "error" in reply:
            raise RuntimeError(f"{command}: {reply['error']}")
        return reply["return"]


def ms_since(start_ns):
    return (time.time_ns() - start_ns) / 1e6


def main():
    path, verb = sys.argv[1], sys.argv[2]
    qmp = Qmp(path)
    if verb == "migrate":
        # Untimed: QEMU's default migration bandwidth cap (128 MiB/s) would make its
        # snapshot wait on a throttle, not on its work; mote writes at disk speed.
        qmp.call("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
    start = time.time_ns()
    if verb in ("stop", "cont", "quit"):
        qmp.call(verb)
    elif verb == "migrate":
        qmp.call("migrate", uri=f"exec:cat > {sys.argv[3]}")
        deadline = time.monotonic() + 300
        while True:
            status = qmp.call("query-migrate").get("status")
            if status == "completed":
                break
            if status in ("failed", "cancelled") or time.monotonic() > deadline:
                raise RuntimeError(f"migration {status}")
            time.sleep(0.001)
    else:
        raise SystemExit(__doc__)
    print(f"{ms_since(start):.3f}")


if __name__ == "__main__":
    main()
