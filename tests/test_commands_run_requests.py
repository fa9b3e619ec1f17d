"""``http-timing -X/-H/-d/--targets/--redact``: what a real server received, byte for byte, and
no secret in any file written. The server is a uvicorn app that records each request
(``tests.recording``)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tests.recording import recording_server
from tests.support import BIN, exit_code_and_errors, usage_error


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def run(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code_and_errors(argv, cwd, monkeypatch, capsys)
    assert code == 0, err


def written(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_foreign_url_is_sent_exactly_as_given_and_not_asked_for_limits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with recording_server() as (base, app):
        run(["--url", f"{base}/api/items?page=2&sort=-id", "--requests", "3", "--quiet",
             "--no-plot", "--name", "r"], tmp_path, monkeypatch, capsys)
    assert [(r.method, r.target) for r in app.received] == [("GET", "/api/items?page=2&sort=-id")] * 3
    assert app.received[0].header("user-agent", ).startswith("http-timing/")
    meta = json.loads((tmp_path / "raw-data" / "r.json").read_text())
    assert meta["url"] == f"{base}/api/items?page=2&sort=-id"
    assert meta["limits"] is None and meta["iterations"] == 0
    assert "request" not in meta  # a plain GET: the url says it all


def test_iterations_go_to_a_foreign_url_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with recording_server() as (base, app):
        run(["--url", f"{base}/api", "--iterations", "7", "--requests", "1", "--quiet",
             "--no-plot"], tmp_path, monkeypatch, capsys)
    assert [r.target for r in app.received] == ["/api?iterations=7"]


def test_method_headers_and_body_are_sent_and_secrets_stay_out_of_every_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '{"card": "SECRET-BODY-4242"}'
    with recording_server() as (base, app):
        run(["--url", f"{base}/api/pay", "-X", "PUT", "-H", "Authorization: Bearer SECRET-TOK",
             "-H", "Cookie: sid=SECRET-COOKIE", "-H", "X-Api-Key: SECRET-KEY",
             "-H", "Content-Type: application/json", "-H", "User-Agent: mine/1",
             "--redact", "x-api-key", "-d", body, "--requests", "4", "--concurrency", "2",
             "--name", "pay"], tmp_path, monkeypatch, capsys)
    assert len(app.received) == 4
    for got in app.received:
        assert (got.method, got.target, got.body) == ("PUT", "/api/pay", body.encode())
        assert got.header("authorization") == "Bearer SECRET-TOK"
        assert got.header("cookie") == "sid=SECRET-COOKIE"
        assert got.header("x-api-key") == "SECRET-KEY"
        assert got.header("content-type") == "application/json"
        assert got.header("content-length") == str(len(body))
        assert got.header("user-agent") == "mine/1"  # the user's replaces the client's
    files = written(tmp_path)
    assert {p.suffix for p in files} >= {".csv", ".json", ".png"}
    for path in files:
        data = path.read_bytes()
        assert b"SECRET" not in data, path
    meta = json.loads((tmp_path / "raw-data" / "pay.json").read_text())
    request = meta["request"]
    assert request["method"] == "PUT"
    assert dict(request["headers"]) == {
        "Authorization": "<redacted>", "Cookie": "<redacted>", "X-Api-Key": "<redacted>",
        "Content-Type": "application/json", "User-Agent": "mine/1"}
    assert request["body"]["bytes"] == len(body) and len(request["body"]["sha256"]) == 64
    assert "-d" in meta["command"] and "<redacted>" in meta["command"]


def test_data_from_a_file_and_from_stdin_make_a_post(tmp_path: Path) -> None:
    payload = tmp_path / "body.bin"
    payload.write_bytes(b"\x00binary\xffbody\n")
    with recording_server() as (base, app):
        for data, stdin in ((f"@{payload}", b""), ("@-", b"from stdin")):
            result = subprocess.run(
                [str(BIN / "http-timing"), "--url", f"{base}/in", "-d", data, "--requests",
                 "1", "--quiet", "--no-plot"], cwd=tmp_path, input=stdin, capture_output=True,
                timeout=60)
            assert result.returncode == 0, result.stderr
    assert [(r.method, r.body) for r in app.received] == [
        ("POST", b"\x00binary\xffbody\n"), ("POST", b"from stdin")]


def test_a_targets_file_is_sent_round_robin_and_each_request_says_its_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "new.json").write_text('{"name": "x"}')
    with recording_server() as (base, app):
        targets = tmp_path / "targets.txt"
        targets.write_text(f"# two targets\nGET {base}/items?page=1\nAccept-Encoding: gzip\n\n"
                           f"POST {base}/items\nContent-Type: application/json\n"
                           "Authorization: Bearer SECRET-T\n@new.json\n")
        run(["--targets", str(targets), "-H", "X-Run: 1", "--requests", "5", "--quiet",
             "--no-plot", "--name", "t"], tmp_path, monkeypatch, capsys)
    assert [(r.method, r.target) for r in app.received] == [
        ("GET", "/items?page=1"), ("POST", "/items")] * 2 + [("GET", "/items?page=1")]
    assert app.received[0].header("accept-encoding") == "gzip"
    assert app.received[1].body == b'{"name": "x"}'
    assert all(r.header("x-run") == "1" for r in app.received)
    assert [r["target"] for r in rows(tmp_path / "raw-data" / "t.csv")] == \
        ["0", "1", "0", "1", "0"]
    meta = json.loads((tmp_path / "raw-data" / "t.json").read_text())
    assert [t["method"] for t in meta["targets"]] == ["GET", "POST"]
    assert b"SECRET" not in (tmp_path / "raw-data" / "t.json").read_bytes()


@pytest.mark.parametrize(("args", "files", "words"), [
    (["-H", "Authorization Bearer x"], {}, "'Name: value'"),
    (["-d", "@nowhere.json"], {}, "nowhere.json"),
    (["--targets", "t.txt"], {"t.txt": "GET http://127.0.0.1:9/\n\nfetch it\n"}, "t.txt:3"),
    (["--targets", "t.txt"], {"t.txt": "GET http://127.0.0.1:9/\nno colon\n"}, "t.txt:2"),
    (["--targets", "t.txt"], {"t.txt": "POST http://127.0.0.1:9/\n@gone.json\n"}, "gone.json"),
    (["--targets", "missing.txt"], {}, "missing.txt"),
    (["--targets", "t.txt", "-X", "PUT"], {"t.txt": "GET http://127.0.0.1:9/\n"}, "-X"),
    (["-X", "GE T"], {}, "method"),
])
def test_bad_requests_are_one_line(args: list[str], files: dict[str, str], words: str,
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    url = [] if "--targets" in args else ["--url", "http://127.0.0.1:9/"]
    line = usage_error([*url, "--requests", "1", *args], tmp_path, monkeypatch, capsys)
    assert words in line, line
    assert not (tmp_path / "raw-data").exists()  # nothing half-written


def test_a_rate_beyond_the_client_says_it_fell_behind(tmp_path: Path) -> None:
    from tests.support import http_timing, running_service

    with running_service() as base:
        result = http_timing("--url", f"{base}/healthz", "--rate", "100000", "--requests",
                             "3000", "--quiet", "--name", "far", cwd=tmp_path)
        report = http_timing("report", "raw-data/far.csv", cwd=tmp_path)
        as_json = http_timing("report", "raw-data/far.csv", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if "fell behind" in line]
    assert len(said) == 1 and "include its own queue" in said[0], result.stdout
    meta = json.loads((tmp_path / "raw-data" / "far.json").read_text())
    assert meta["client_fell_behind"] is True
    pace = meta["client_pace"]
    assert pace["asked_rps"] == 100000 and pace["achieved_rps"] < 98000
    assert pace["sent"] == 3000 and pace["send_lag_p99_ms"] > 1
    assert report.returncode == 0 and said[0] in report.stdout.splitlines()
    assert json.loads(as_json.stdout)["client_fell_behind"] is True
    # the CSV says when each request was meant to go and when it went
    first = rows(tmp_path / "raw-data" / "far.csv")[-1]
    assert int(first["start_ns"]) > int(first["scheduled_ns"])


def test_a_closed_loop_keeps_the_clients_own_time(tmp_path: Path) -> None:
    from tests.support import http_timing, running_service

    with running_service() as base:
        result = http_timing("--url", f"{base}/healthz", "--concurrency", "2", "--requests",
                             "50", "--quiet", "--no-plot", "--name", "c", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "raw-data" / "c.json").read_text())
    assert "client_fell_behind" not in meta
    assert meta["client_pace"]["requests"] == 50
    assert 0 < meta["client_pace"]["own_time_per_request_us"] < 1e6
