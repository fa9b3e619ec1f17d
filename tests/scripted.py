"""A TCP server that answers exactly what a test says, byte for byte (framing, closes, resets):
for the client's senders, whose behaviour on a broken answer no real server shows on demand."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Handler", "answering", "closing_the_second", "read_request", "scripted",
           "unanswered"]

Handler = Callable[[socket.socket, int], None]  # (connection, its number from 0)


@contextmanager
def scripted(handler: Handler) -> Iterator[str]:
    """A TCP server on 127.0.0.1 whose every connection is given to ``handler``."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)  # so the accept loop sees ``stop`` promptly
    port = listener.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        count = 0
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            with conn:
                try:
                    handler(conn, count)
                except OSError:
                    pass
            count += 1

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/x?y=1"
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def answering(*answers: bytes, keep: bool = True) -> Handler:
    """Each request on a connection gets the next answer; close after them unless ``keep``."""
    def handle(conn: socket.socket, number: int) -> None:
        for answer in answers:
            if not read_request(conn):
                return
            conn.sendall(answer)
        if keep:
            read_request(conn)  # wait for the client to go away
    return handle


def closing_the_second(answer: bytes, connections: list[int]) -> Handler:
    """The first connection answers one request, then reads the next and closes unanswered (a
    server whose idle timeout fires as the request arrives); later connections answer two.
    Each connection's number is appended to ``connections``."""
    def handle(conn: socket.socket, number: int) -> None:
        connections.append(number)
        if number == 0:
            read_request(conn)
            conn.sendall(answer)
            read_request(conn)
            return
        answering(answer, answer)(conn, number)
    return handle


def unanswered(connections: list[int]) -> Handler:
    """Every connection reads its request and closes without a byte of an answer."""
    def handle(conn: socket.socket, number: int) -> None:
        connections.append(number)
        read_request(conn)
    return handle
