"""The live page's server (client.render.live) with a plain HTTP client: the page, the events
a viewer gets (each point once, all of them after a slow viewer catches up), the end, and the
server gone with the run. The browser's view is tests/test_browser.py's."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from client.analysis.detect import detect
from client.data.metadata import RunMetadata
from client.render.live import LivePage, LiveError
from client.render.live import server as live_server
from tests.captures import capture
from tests.test_pages import Tags


def frames(url: str, timeout: float = 20.0) -> Iterator[dict[str, Any]]:
    """The frames of ``GET /events``, as a browser's EventSource gets them."""
    with httpx.stream("GET", url + "events", timeout=timeout) as response:
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                yield json.loads(line[len("data: "):])


def metadata() -> RunMetadata:
    return RunMetadata(name="x", url="http://127.0.0.1:9/cpuBurnFlow", requests=100)


def test_the_page_is_self_contained_and_unknown_paths_are_404() -> None:
    with LivePage(port=0) as page:
        response = httpx.get(page.url, timeout=10)
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        for tag, attrs in Tags(response.text).tags:
            assert "src" not in attrs and "href" not in attrs, (tag, attrs)
        assert "<canvas" in response.text and 'new EventSource("events")' in response.text
        assert httpx.get(page.url + "nothing", timeout=10).status_code == 404
        assert httpx.post(page.url, timeout=10).status_code == 405


def test_a_viewer_gets_each_point_once_then_the_end_and_the_server_stops(tmp_path: Path) -> None:
    records, truth = capture(0.3, 4.3)
    with LivePage(port=0, tick=0.05) as page:
        page.run_started(metadata(), None)
        for record in records[:40]:
            page.request_done(record)
        seen: list[list[float]] = []
        stream = frames(page.url)
        first = next(stream)
        assert first["reset"] and first["counts"]["requests"] == 40
        seen = first["points"]
        for record in records[40:]:
            page.request_done(record)
        while len(seen) < 100:
            frame = next(stream)
            seen = frame["points"] if frame["reset"] else seen + frame["points"]
        assert [p[1] for p in seen] == [round(r.latency_ms, 3) for r in records]
        assert page.run_ended(records)["viewers"] == 1
        picture = tmp_path / "x.png"
        picture.write_bytes(b"\x89PNG\r\n\x1a\n")
        page.show_end(records, detect(records), ["raw-data/x.csv"], picture=picture)
        end = next(stream)["end"]
        assert end["files"] == ["raw-data/x.csv"] and end["picture"].startswith("data:image/png")
        state = httpx.get(page.url + "state", timeout=10).json()
        assert [p[2] == 1 for p in state["points"]] == truth
        port = page.port
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=5)


def test_a_viewer_that_does_not_read_misses_frames_not_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_server, "MAX_BUFFERED", 2000)
    records = capture(0.3, 4.3, n=2000)[0] * 15     # 30k points: MBs of frames
    with LivePage(port=0, tick=0.02) as page, socket.socket() as slow:
        page.run_started(metadata(), None)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", page.port))
        slow.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.perf_counter()
        for i, record in enumerate(records):
            page.request_done(record)
            if i % 1000 == 999:
                time.sleep(0.05)     # a few ticks: frames pile up for the viewer
        assert time.perf_counter() - started < 10
        deadline = time.monotonic() + 10
        while page.frames_dropped == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert page.frames_dropped > 0
        slow.settimeout(10)
        buffered = b""
        points: list[list[float]] = []
        while len(points) < len(records):   # now it reads: every request is there
            chunk = slow.recv(65536)
            assert chunk, "the server closed the stream"
            buffered += chunk
            *done, buffered = buffered.split(b"\n\n")
            for event in done:
                if event.startswith(b"data: "):
                    frame = json.loads(event[len(b"data: "):])
                    points = frame["points"] if frame["reset"] else points + frame["points"]
    assert [p[1] for p in points] == [round(r.latency_ms, 3) for r in records]


def test_a_taken_port_is_one_line() -> None:
    with LivePage(port=0) as page:
        with pytest.raises(LiveError, match=rf"--live cannot serve on 127.0.0.1:{page.port}: "):
            LivePage(port=page.port)
