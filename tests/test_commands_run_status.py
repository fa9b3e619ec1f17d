"""``http-timing`` against servers that are not burn-service: every answer is timed and kept
with its status, one status rule (``--ok-status``, by default [200, 400)) decides the CSV's
error column, the summary's error count, the exit status and what ``report`` says, and a reply
that cannot be read says what arrived."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.scripted import answering, read_request, scripted
from tests.support import BIN, usage_error

NOT_MODIFIED = b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 5\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def timed(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str, str]:
    """Run 3 requests: exit code, stdout, stderr."""
    from client.commands import main

    monkeypatch.chdir(tmp_path)
    try:
        code: object = main(["--url", url, "--requests", "3", "--quiet", "--no-plot",
                             "--name", "r", *more])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def report(tmp_path: Path) -> dict[str, object]:
    done = subprocess.run([str(BIN / "http-timing"), "report", "--json",
                           str(tmp_path / "raw-data" / "r.csv")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def errors_in_report(tmp_path: Path) -> int:
    errors = report(tmp_path)["errors"]
    assert isinstance(errors, int)
    return errors


def test_a_304_is_a_timed_answer_not_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with scripted(answering(*[NOT_MODIFIED] * 3)) as url:
        code, out, err = timed(url, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert [(r["status"], r["error"]) for r in rows(tmp_path / "raw-data" / "r.csv")] == \
        [("304", "")] * 3
    assert "errors 0 of 3" in out
    assert errors_in_report(tmp_path) == 0
    meta = json.loads((tmp_path / "raw-data" / "r.json").read_text())
    assert meta["ok_status"] == "200-399" and meta["summary"]["errors"] == 0


@pytest.mark.parametrize(("answer", "rule", "error", "exit_code"), [
    (NOT_MODIFIED, "200-299", "HTTP 304", 1),        # a user who counts 3xx as errors
    (NOT_FOUND, "200-399", "HTTP 404", 1),           # the default: 4xx are errors
    (NOT_FOUND, "200-399,404", "", 0),               # ... unless the user expects them
])
def test_one_status_rule_for_the_csv_the_summary_the_exit_status_and_report(
        answer: bytes, rule: str, error: str, exit_code: int, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with scripted(answering(*[answer] * 3)) as url:
        code, out, err = timed(url, tmp_path, monkeypatch, capsys, "--ok-status", rule)
    status = answer.split()[1].decode()
    assert [(r["status"], r["error"]) for r in rows(tmp_path / "raw-data" / "r.csv")] == \
        [(status, error)] * 3
    failed = 3 if error else 0
    assert code == exit_code, err
    assert f"errors {failed} of 3" in out
    assert errors_in_report(tmp_path) == failed
    assert json.loads((tmp_path / "raw-data" / "r.json").read_text())["ok_status"] == rule


def test_a_bad_ok_status_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(["--url", "http://127.0.0.1:9/", "--ok-status", "2xx"], tmp_path,
                       monkeypatch, capsys)
    assert "--ok-status '2xx'" in line and "200-399,404" in line


def test_a_whole_bare_lf_server_is_timed_on_one_kept_alive_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = b"HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok"
    connections: list[int] = []

    def handle(conn: socket.socket, number: int) -> None:
        while read_request(conn):
            connections.append(number)
            conn.sendall(answer)

    with scripted(handle) as url:
        code, out, err = timed(url, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert [(r["status"], r["error"]) for r in rows(tmp_path / "raw-data" / "r.csv")] == \
        [("200", "")] * 3
    # every request on one connection (the reachability check before the run connects once
    # and sends nothing: client.run.reach)
    assert len(connections) == 3 and len(set(connections)) == 1, connections


def test_the_busybox_cgi_server_of_the_issue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # busybox httpd passes a shell script's echo'd headers (bare LFs) through and ends the
    # body with the close: curl reads it, and so must the client
    from tests.test_run_wire_servers import busybox

    with busybox(tmp_path / "site") as served:
        code, out, err = timed(served.base + "/cgi-bin/burn?iterations=5", tmp_path,
                               monkeypatch, capsys)
    assert code == 0, err
    assert [(r["status"], r["error"]) for r in rows(tmp_path / "raw-data" / "r.csv")] == \
        [("200", "")] * 3


def test_a_reply_that_cannot_be_read_says_what_arrived(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    banner = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"
    with scripted(lambda conn, n: (read_request(conn), conn.sendall(banner))) as url:
        code, out, err = timed(url, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert "answered, but its reply could not be read as HTTP/1.1" in err
    assert "expected an HTTP/1.x status line" in err
    assert "received 'SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\\r\\n'" in err
    assert "burn-service" not in err and "cannot reach" not in err
    [row, *_] = rows(tmp_path / "raw-data" / "r.csv")
    assert row["status"] == "0" and "received 'SSH-2.0" in row["error"]



def test_redirects_are_followed_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_run_redirects import redirecting

    targets: list[bytes] = []
    with scripted(redirecting(1, [], targets)) as url:
        hop = url.split("/x")[0] + "/hop/0"
        code, out, err = timed(hop, tmp_path, monkeypatch, capsys)
        assert code == 0, err
        assert {r["status"] for r in rows(tmp_path / "raw-data" / "r.csv")} == {"302"}
        code, out, err = timed(hop, tmp_path, monkeypatch, capsys, "--follow-redirects", "1")
    assert code == 0, err
    assert {(r["status"], r["error"]) for r in rows(tmp_path / "raw-data" / "r.csv")} == \
        {("200", "")}
    assert targets == [b"/hop/0"] * 3 + [b"/hop/0", b"/hop/1"] * 3


# ---- what the failed requests met (issue 55: "errors 3 of 3" never said 404) ------------------

def _app_answering(statuses: list[int]) -> object:
    """burn-service's app with ``/mixed``: the n-th request is answered ``statuses[n]``."""
    from fastapi import Response

    from service.app import create_app
    from service.config import Settings

    app = create_app(Settings())
    sent = iter(statuses)

    @app.get("/mixed")
    def mixed() -> Response:
        return Response("x", status_code=next(sent, 200))

    return app


@pytest.mark.parametrize("quiet", [True, False])
def test_the_summary_says_what_the_failed_requests_met(
        quiet: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from client.commands import main
    from tests.support import running_service

    with running_service() as base:   # a real uvicorn: no such route, a 404 each time
        monkeypatch.chdir(tmp_path)
        code = main(["--url", f"{base}/no-such-page", "--requests", "3", "--no-plot",
                     "--name", "r", *(["--quiet"] if quiet else [])])
    out = capsys.readouterr().out
    assert code == 1
    assert "errors 3 of 3" in out and "errors: 3 of 3 answered 404" in out, out
    assert ("Status code 404" in out) is not quiet   # the per-request lines say it too
    done = subprocess.run([str(BIN / "http-timing"), "report", str(tmp_path / "raw-data" /
                                                                   "r.csv")],
                          capture_output=True, text=True, timeout=120)
    assert "errors: 3 of 3 answered 404" in done.stdout, done.stdout + done.stderr
    assert report(tmp_path)["errors_by"] == [{"what": "answered 404", "count": 3}]


def test_each_status_is_counted_the_most_frequent_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from client.commands import main
    from tests.support import running_service

    statuses = [200, 503, 404, 404, 200, 404, 503, 404, 404, 200]
    with running_service(app=_app_answering(statuses)) as base:  # type: ignore[arg-type]
        monkeypatch.chdir(tmp_path)
        code = main(["--url", f"{base}/mixed", "--requests", "10", "--no-plot", "--quiet",
                     "--name", "r"])
    out = capsys.readouterr().out
    assert code == 1
    assert "errors 7 of 10" in out
    assert "errors: 5 of 10 answered 404, 2 of 10 answered 503\n" in out, out
    data = report(tmp_path)
    assert data["errors"] == 7 and data["errors_by"] == [
        {"what": "answered 404", "count": 5}, {"what": "answered 503", "count": 2}]


def test_a_request_with_no_answer_says_what_the_transport_said() -> None:
    from client.data.record import RequestRecord
    from client.data.summary import error_kinds
    from client.render.text import format_errors

    records = [RequestRecord(0, 0, 1, 404, "HTTP 404"), RequestRecord(1, 2, 1, 200),
               RequestRecord(2, 4, 1, 0, "ConnectError: [Errno 111] Connection refused"),
               RequestRecord(3, 6, 1, 302, "HTTP 302: redirect to /x (not followed)"),
               RequestRecord(4, 8, 1, 404, "HTTP 404")]
    kinds = error_kinds(records)
    assert kinds == [("answered 404", 2), ("answered 302", 1),
                     ("failed: ConnectError: Connection refused", 1)]
    assert format_errors(kinds, 5) == ("errors: 2 of 5 answered 404, 1 of 5 answered 302, "
                                       "1 of 5 failed: ConnectError: Connection refused")
    assert format_errors(error_kinds(records[1:2]), 1) is None   # none failed: no line
