#!/usr/bin/env python3
"""mote's control API as the snapshot benchmark's launch.py asks it: the VM's state."""
import json
import socket


def instance_state(path):
    """GET / on the API socket (Firecracker's InstanceInfo); its "state"."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET /: {head.splitlines()[0] if head else 'no answer'}")
    return json.loads(body)["state"]
