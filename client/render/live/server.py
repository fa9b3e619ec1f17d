"""The live page's server (``--live``): one thread, one asyncio loop, the page and its events.

Why here (``client.render``): it shows a run, as a picture does; it reads the pure
:class:`client.analysis.live.LiveState` (analysis) and is driven by ``record_run`` through the
run layer's :class:`client.run.observer.RunObserver` interface, which :class:`LivePage`
implements, so nothing below imports it and the load modes know nothing of it.

The timed path's whole share is :meth:`LivePage.request_done`: one ``list.append`` (no lock,
no I/O, never blocks) to a queue the server drains every ``tick``. Everything else happens on
the server's own thread: take the new requests, mark them, count, send each viewer the points it has not seen yet
(Server-sent events, ``GET /events``). A viewer whose socket is not keeping up (more than
``MAX_BUFFERED`` bytes still unsent) misses frames, not requests: it gets the points it missed
in the next frame it can take. With no viewer the server does nothing but wait. Detection over
every request is re-run at most at ``DETECT_SHARE`` of the thread's time (it costs ~ms per
thousand requests). The thread's own CPU time (``pthread_getcpuclockid``) goes in the run's
metadata (``live``).

``GET /`` is the page (self-contained: inline script and style, nothing fetched elsewhere);
``GET /state`` the whole state as one JSON object (every point).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from client.analysis.detect import Detection
from client.analysis.live import LiveState
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "LiveError", "LivePage"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7900
TICK_S = 0.2                 # frames per second: 5
MAX_BUFFERED = 1 << 20       # bytes unsent to one viewer before its frames are dropped
SEND_BUFFER = 1 << 16        # the kernel's send buffer for a viewer (SO_SNDBUF)
DETECT_SHARE = 0.05          # detection may take this share of the server thread's time
END_FLUSH_S = 3.0            # at the end, how long viewers get to receive the last frame


class LiveError(Exception):
    """The page cannot be served (the address is taken, not ours...): one line."""


@dataclass
class _Viewer:
    writer: asyncio.StreamWriter
    cursor: int = 0
    epoch: int = -1
    cgroup_version: int = -1


def page_html() -> bytes:
    return resources.files("client.render.live").joinpath("page.html").read_bytes()


def _response(status: str, content_type: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
            "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n").encode() + body


class LivePage:
    """The live page of one run: a :class:`client.run.observer.RunObserver`, serving while
    inside ``with`` (the server stops when it is left, whatever happened)."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 tick: float = TICK_S, window_s: float | None = None) -> None:
        try:
            self._sock = socket.create_server((host, port))
        except OSError as exc:
            raise LiveError(f"--live cannot serve on {host}:{port}: "
                            f"{exc.strerror or exc}") from None
        self.host, self.port = host, self._sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/"
        self.tick, self.window_s = tick, window_s   # window_s: the group's last seconds only
        self.state = LiveState()
        self._arrived: list[RequestRecord] = []   # the timed path appends, the server drains
        self._metadata: RunMetadata | None = None
        self._timeline: Sequence[CgroupSample] | None = None
        self._viewers: list[_Viewer] = []
        self._next_detect = 0.0
        self.frames_sent = self.frames_dropped = self.detections = self.most_viewers = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="live-page", daemon=True)
        self._cpu_clock: int | None = None

    # -- lifetime ------------------------------------------------------------------------

    def __enter__(self) -> LivePage:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (viewers are disconnected) and end the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._sock.close()

    def cpu_seconds(self) -> float | None:
        """CPU time the server's thread has used so far (None once it has ended)."""
        if self._cpu_clock is None or not self._thread.is_alive():
            return None
        try:
            return time.clock_gettime(self._cpu_clock)
        except OSError:
            return None

    # -- RunObserver -------------------------------------------------------------------

    def run_started(self, metadata: RunMetadata,
                    timeline: Sequence[CgroupSample] | None) -> None:
        self._metadata, self._timeline = metadata, timeline

    def request_done(self, record: RequestRecord) -> None:
        self._arrived.append(record)

    def run_ended(self, records: Sequence[RequestRecord]) -> dict[str, Any]:
        cpu = self.cpu_seconds()
        return {"url": self.url, "server_cpu_s": None if cpu is None else round(cpu, 4),
                "frames_sent": self.frames_sent, "frames_dropped": self.frames_dropped,
                "detections": self.detections, "viewers": self.most_viewers}

    # -- the end -----------------------------------------------------------------------

    def show_end(self, records: Sequence[RequestRecord], detection: Detection | None,
                 files: Sequence[Path | str], *, interrupted: bool = False,
                 picture: Path | None = None) -> None:
        """The final picture (``detection``: the run's picture's marks) and the files' names
        to every viewer; returns once they have it (at most ``END_FLUSH_S``)."""
        data_url = None
        if picture is not None and picture.exists():
            data_url = "data:image/png;base64," + base64.b64encode(picture.read_bytes()).decode()
        names = [str(f) for f in files]
        future = asyncio.run_coroutine_threadsafe(
            self._end(list(records), detection, names, interrupted, data_url), self._loop)
        try:
            future.result(END_FLUSH_S + 5)
        except Exception:  # noqa: BLE001 - the page is a view: never fail the run for it
            future.cancel()

    async def _end(self, records: list[RequestRecord], detection: Detection | None,
                   files: list[str], interrupted: bool, picture: str | None) -> None:
        self._take()
        self.state.records, self.state.kinds, self.state.points = [], [], []
        self.state.extend(records)
        if detection is None:
            self.state.reclassify()
            detection = self.state.detection
        if self._timeline is not None:
            self.state.read_timeline(self._timeline, self.window_s, self._usage())
        if detection is not None:
            self.state.finish(detection, files, interrupted=interrupted, picture=picture)
        self._push()
        deadline = time.monotonic() + END_FLUSH_S
        while time.monotonic() < deadline and any(
                v.writer.transport.get_write_buffer_size() for v in self._viewers):
            await asyncio.sleep(0.02)

    def _usage(self) -> dict[str, Any] | None:
        """The run's ``cgroup.usage`` as the sampler knows it now (it keeps the metadata's
        copy up to date: a usage found coarse or unknown mid-run shows at once)."""
        cgroup = self._metadata.cgroup if self._metadata is not None else None
        usage = cgroup.get("usage") if cgroup else None
        return dict(usage) if isinstance(usage, dict) else None

    # -- the server's thread -------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, sock=self._sock))
        ticker = self._loop.create_task(self._tick())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            ticker.cancel()
            server.close()
            for viewer in self._viewers:
                viewer.writer.close()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            if self.state.end is not None:
                continue
            if self._viewers:
                self._update()
                self._push()
            else:   # nobody looks: keep the queue short, analyse nothing
                self._take()

    def _take(self) -> None:
        """The requests that arrived since last time, and the run's start if new."""
        if self._metadata is not None and not self.state.title:
            fresh = LiveState.of(self._metadata)
            self.state.limit, self.state.sequential = fresh.limit, fresh.sequential
            self.state.unlimited, self.state.title = fresh.unlimited, fresh.title
        count = len(self._arrived)
        if count:   # appends meanwhile land after ``count``: list operations are atomic
            batch = self._arrived[:count]
            del self._arrived[:count]
            self.state.extend(batch)

    def _update(self) -> None:
        self._take()
        if self.state.records and time.monotonic() >= self._next_detect:
            cpu = time.thread_time()
            self.state.reclassify()
            cost = time.thread_time() - cpu
            self._next_detect = time.monotonic() + cost / DETECT_SHARE
            self.detections += 1
        if self._timeline is not None:
            self.state.read_timeline(self._timeline, self.window_s, self._usage())
        self.state.count()

    def _push(self) -> None:
        state = self.state
        for viewer in list(self._viewers):
            if (viewer.cursor == len(state.points) and viewer.epoch == state.epoch
                    and viewer.cgroup_version == state.cgroup_version and state.end is None):
                continue
            if viewer.writer.transport.get_write_buffer_size() > MAX_BUFFERED:
                self.frames_dropped += 1
                continue
            frame = state.frame(viewer.cursor, viewer.epoch, viewer.cgroup_version)
            viewer.writer.write(b"data: " + json.dumps(frame, separators=(",", ":")).encode()
                                + b"\n\n")
            viewer.cursor, viewer.epoch = frame["cursor"], frame["epoch"]
            viewer.cgroup_version = state.cgroup_version
            self.frames_sent += 1

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            parts = request.split(b" ", 2)
            path = parts[1].decode("latin-1").split("?", 1)[0] if len(parts) > 1 else ""
            if parts[0] != b"GET":
                writer.write(_response("405 Method Not Allowed", "text/plain", b"GET only\n"))
            elif path == "/":
                writer.write(_response("200 OK", "text/html; charset=utf-8", page_html()))
            elif path == "/state":
                if self.state.end is None:
                    self._update()
                body = json.dumps(self.state.frame(0, -1, -1), separators=(",", ":")).encode()
                writer.write(_response("200 OK", "application/json", body))
            elif path == "/events":
                await self._stream(reader, writer)
                return
            else:
                writer.write(_response("404 Not Found", "text/plain", b"not found\n"))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-store\r\nConnection: keep-alive\r\n\r\n"
                     b"retry: 1000\n\n")
        sock = writer.get_extra_info("socket")
        if sock is not None:   # what the kernel holds for a viewer stays small: the rest waits
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)   # in our count
        viewer = _Viewer(writer)
        self._viewers.append(viewer)
        self.most_viewers = max(self.most_viewers, len(self._viewers))
        try:
            if self.state.end is None:
                self._update()
            self._push()
            while not reader.at_eof():   # until the viewer goes (or the server stops)
                if not await reader.read(1024):
                    break
        finally:
            self._viewers.remove(viewer)
