#!/usr/bin/env python3
"""mote's side of the snapshot benchmark, through its control API as any client would
use it: pause, resume and snapshots, each timed from the request to mote's answer, in
ms, as qmp.py times QEMU's (the connection is made, and a GET / answered on it, before
the clock starts, as qmp.py connects and negotiates first). Also the VM's state, for
launch.py.

usage: mote_api.py SOCKET pause | resume
       mote_api.py SOCKET snapshot full|diff STATE MEM
"""
import json
import socket
import sys
import time


def request(sock, method, path, body=None, keep_alive=False):
    """One HTTP/1.1 request on a connected socket; the answer's status and body, taken
    as soon as they are complete (the head, and the body its Content-Length gives: none
    for a 204), as qmp.py takes QEMU's answer at its end of line: the connection's
    close comes after, and is not waited for."""
    data = json.dumps(body).encode() if body is not None else b""
    connection = "keep-alive" if keep_alive else "close"
    head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: {connection}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    sock.sendall(head.encode() + data)
    answer = b""
    while True:
        head, sep, rest = answer.partition(b"\r\n\r\n")
        if sep and len(rest) >= content_length(head):
            break
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError(f"{method} {path}: the connection closed mid-answer")
        answer += chunk
    if not head.startswith(b"HTTP/1.1 "):
        raise RuntimeError(f"{method} {path}: not an HTTP/1.1 answer")
    return int(head.split()[1]), rest


def content_length(head):
    """The Content-Length of an answer's head, 0 without one."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def instance_state(path):
    """GET / on the API socket (Firecracker's InstanceInfo); its "state"."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        status, body = request(sock, "GET", "/")
    if status != 200:
        raise RuntimeError(f"GET /: status {status}")
    return json.loads(body)["state"]


def main():
    path, verb = sys.argv[1], sys.argv[2]
    if verb in ("pause", "resume"):
        call = ("PATCH", "/vm", {"state": "Paused" if verb == "pause" else "Resumed"})
    elif verb == "snapshot" and len(sys.argv) == 6:
        kind, state, mem = sys.argv[3:6]
        call = ("PUT", "/snapshot/create", {"snapshot_type": kind.capitalize(),
                                            "snapshot_path": state, "mem_file_path": mem})
    else:
        raise SystemExit(__doc__)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        # As qmp.py has QEMU greet it and negotiate before its clock starts: one
        # exchange first, so that the server has taken the connection in, and the
        # timed request waits for nothing but its own work.
        status, body = request(sock, "GET", "/", keep_alive=True)
        if status != 200:
            raise SystemExit(f"GET /: status {status}: {body.decode(errors='replace')}")
        start = time.time_ns()
        status, body = request(sock, *call)
        elapsed_ms = (time.time_ns() - start) / 1e6
    if status >= 300:
        raise SystemExit(f"{verb}: status {status}: {body.decode(errors='replace')}")
    print(f"{elapsed_ms:.3f}")


if __name__ == "__main__":
    main()
