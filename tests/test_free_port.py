"""free_port: a port below the kernel's ephemeral range, so that no outgoing connection takes it
between the pick and the service's bind (a fleet of 20 replicas once lost that race)."""

from __future__ import annotations

import socket
from pathlib import Path

from client.run.targets.service import PORT_RANGE, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_bind() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(50)}
    assert len(ports) > 40   # random picks, not the same few
    for port in ports:
        assert PORT_RANGE[0] <= port < min(PORT_RANGE[1], low), (port, low)
    with socket.socket() as s:
        s.bind(("127.0.0.1", next(iter(ports))))   # free when given back


def test_a_taken_port_is_never_given() -> None:
    held = []
    try:
        for _ in range(200):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert len(taken) == len(held)
        assert all(free_port() not in taken for _ in range(200))
    finally:
        for s in held:
            s.close()
