"""``http-timing import``: a hand-made timeline (a throttle at a known time) and files: the
requests placed on the timeline's clock (Unix times, --start, --offset), marked, saved as a run
report reads; bad input in one line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.data.files import read_run
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from tests.support import exit_code_and_errors, usage_error

ZERO = 1_732_420_000_000_000_000     # the timeline's zero on the wall clock
MS = 1_000_000
GROUP = {"spec": "/sys/fs/cgroup/cpu/x", "path": "/sys/fs/cgroup/cpu/x", "group": "/x",
         "version": 1, "quota_us": 10000, "period_us": 100000, "burst_us": 0, "cpus": 0.1,
         "usage_source": "cpuacct"}


def make_timeline(tmp_path: Path, with_meta: bool = True,
                  group: dict[str, object] = GROUP) -> Path:
    """2 s sampled every 10 ms; one throttle of 80 ms ended at the boundary at 1.0 s."""
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for i in range(201):
        t = i * 10 * MS
        periods = t // (100 * MS)
        throttled = 80 * MS if t >= 1000 * MS else 0
        rows.append(f"{t},{min(t, 900 * MS)},{periods},{1 if throttled else 0},{throttled}")
    path = tmp_path / "t.cgroup.csv"
    path.write_text("\n".join(rows) + "\n")
    if with_meta:
        write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
            "t", TimelineClock(ZERO, 100), cgroup=group, host="here"))
    return path


def vegeta_csv(tmp_path: Path, starts_ms: list[int], latency_ms: int = 30) -> Path:
    path = tmp_path / "r.csv"
    path.write_text("".join(f"{ZERO + s * MS},200,{latency_ms * MS},0,78,,,,{i},GET,http://x/y,\n"
                            for i, s in enumerate(starts_ms)))
    return path


def test_marks_the_request_the_throttle_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, [100, 300, 500, 700, 940, 1200, 1400])   # 940..970 lies in the throttle
    code, err = exit_code_and_errors(["import", "r.csv", "--timeline", "t.cgroup.csv",
                                      "--name", "imp"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    run = read_run(tmp_path / "raw-data" / "imp.csv")
    marks = [(r.start_ns // MS, r.cgroup_nr_throttled) for r in run.records]
    assert marks == [(100, 0), (300, 0), (500, 0), (700, 0), (940, 1), (1200, 0), (1400, 0)]
    assert run.metadata.limit is not None and run.metadata.limit.cpus == pytest.approx(0.1)
    # vegeta attack sends at its -rate: an open loop, whatever the gaps between its requests
    assert run.metadata.mode.value == "open-loop" and run.timeline is not None
    imported = json.loads((tmp_path / "raw-data" / "imp.json").read_text())["imported"]
    assert imported["format"] == "vegeta-csv"
    assert imported["shape"] == {"loop": "open", "connections": None, "source": "format",
                                 "why": "vegeta attack sends at its -rate, whatever the answers"}


def test_a_group_with_no_limit_marks_no_request(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    unlimited = {**GROUP, "quota_us": None, "cpus": None, "group": "/"}
    make_timeline(tmp_path, group=unlimited)   # its counters count nothing: no claim from them
    vegeta_csv(tmp_path, [100, 940])
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["import", "r.csv", "--timeline", "t.cgroup.csv", "--name", "imp"]) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert said.startswith("2 requests from r.csv (vegeta-csv), not marked: ")
    assert "no CPU quota: throttling cannot happen here, none on it or above" in said
    run = read_run(tmp_path / "raw-data" / "imp.csv")
    assert [(r.cgroup_nr_throttled, r.cgroup_held_ns) for r in run.records] == [(None, None)] * 2


def test_offset_moves_the_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, [100, 2940])   # the second is 2 s late on this clock
    code, err = exit_code_and_errors(["import", "r.csv", "--timeline", "t.cgroup.csv",
                                      "--offset", "-2", "--name", "o"], tmp_path, monkeypatch,
                                     capsys)
    assert code == 0, err
    run = read_run(tmp_path / "raw-data" / "o.csv")
    assert [r.start_ns // MS for r in run.records] == [-1900, 940]
    assert [r.cgroup_nr_throttled for r in run.records] == [None, 1]   # outside: unknown


def test_relative_times_need_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    (tmp_path / "hey.csv").write_text(
        "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,"
        "offset\n" + "".join(f"0.0300,0,0,0,0.03,0,200,{t / 1000:.4f}\n"
                             for t in (0, 100, 200, 300)))
    line = usage_error(["import", "hey.csv", "--timeline", "t.cgroup.csv"], tmp_path,
                       monkeypatch, capsys)
    assert "relative to the tool's own start: give --start EPOCH" in line
    assert not (tmp_path / "raw-data").exists()
    code, err = exit_code_and_errors(["import", "hey.csv", "--timeline", "t.cgroup.csv",
                                      "--start", f"{(ZERO + 600 * MS) / 1e9:.3f}",
                                      "--name", "h"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    run = read_run(tmp_path / "raw-data" / "h.csv")
    assert [r.start_ns // MS for r in run.records] == [600, 700, 800, 900]
    assert [r.cgroup_nr_throttled for r in run.records] == [0, 0, 0, 1]


@pytest.mark.parametrize(("argv", "expected"), [
    (["import", "r.csv"], "--timeline"),
    (["import", "r.csv", "--timeline", "none.cgroup.csv"], "none.cgroup.csv: no such file"),
    (["import", "missing.csv", "--timeline", "t.cgroup.csv"], "missing.csv: no such file"),
    (["import", "r.csv", "--timeline", "t.cgroup.csv", "--start", "soon"], "--start takes"),
    (["import", "r.csv", "--timeline", "t.cgroup.csv", "--format", "wrk"], "--format"),
    (["import", "r.csv", "--timeline", "t.cgroup.csv", "--format", "k6-csv"],
     "r.csv: line 1: expected k6 --out csv"),
    (["import", "r.csv", "--timeline", "t.cgroup.csv", "--name", "a/b"], "name"),
])
def test_bad_input_is_one_line(argv: list[str], expected: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    vegeta_csv(tmp_path, [100])
    assert expected in usage_error(argv, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "raw-data").exists()


def test_a_timeline_without_its_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path, with_meta=False)
    vegeta_csv(tmp_path, [100])
    line = usage_error(["import", "r.csv", "--timeline", "t.cgroup.csv"], tmp_path,
                       monkeypatch, capsys)
    assert "t.json: no clock" in line and "http-timing record" in line


def traefik_json(tmp_path: Path, rows: list[tuple[int, str]], latency_ms: int = 30) -> Path:
    """Traefik --accesslog.format=json lines: (start ms on the timeline, ServiceAddr)."""
    from tests.import_support import rfc3339

    path = tmp_path / "traefik.json"
    path.write_text("".join(
        json.dumps({"StartUTC": rfc3339(ZERO + s * MS), "Duration": latency_ms * MS,
                    "DownstreamStatus": 200, "ServiceAddr": addr, "RequestPath": "/x",
                    "level": "info", "msg": "", "time": "2024-11-24T03:46:40Z"}) + "\n"
        for s, addr in rows))
    return path


def test_upstream_keeps_one_pods_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    traefik_json(tmp_path, [(100, "10.42.0.7:7800"), (500, "10.42.0.8:7800"),
                            (940, "10.42.0.7:7800"), (960, "10.42.0.8:7800")])
    code, err = exit_code_and_errors(["import", "traefik.json", "--timeline", "t.cgroup.csv",
                                      "--upstream", "10.42.0.7", "--name", "u"], tmp_path,
                                     monkeypatch, capsys)
    assert code == 0, err
    run = read_run(tmp_path / "raw-data" / "u.csv")
    assert [(r.start_ns // MS, r.cgroup_nr_throttled) for r in run.records] == [(100, 0), (940, 1)]
    assert "2 of 4 requests served by 10.42.0.7 (--upstream)" in run.metadata.extra[
        "imported"]["notes"]
    line = usage_error(["import", "traefik.json", "--timeline", "t.cgroup.csv", "--upstream",
                        "10.42.0.9:7800"], tmp_path, monkeypatch, capsys)
    assert "no request was served by 10.42.0.9:7800" in line and "10.42.0.7:7800 (2)" in line
    vegeta_csv(tmp_path, [100])
    line = usage_error(["import", "r.csv", "--timeline", "t.cgroup.csv", "--upstream",
                        "10.42.0.7"], tmp_path, monkeypatch, capsys)
    assert "vegeta-csv does not name each request's upstream" in line


def test_traefik_clf_whole_seconds_are_not_marked(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import datetime, timezone

    make_timeline(tmp_path)
    stamp = datetime.fromtimestamp(ZERO // 10**9, timezone.utc).strftime("%d/%b/%Y:%H:%M:%S %z")
    (tmp_path / "access.log").write_text("".join(
        f'127.0.0.1 - - [{stamp}] "GET /x HTTP/1.1" 200 78 "-" "-" {i} "r@file" '
        f'"http://127.0.0.1:7800" {ms}ms\n' for i, ms in enumerate((30, 95, 30), start=1)))
    from client.commands import main

    monkeypatch.chdir(tmp_path)
    assert main(["import", "access.log", "--timeline", "t.cgroup.csv", "--name", "c"]) == 0
    out = capsys.readouterr().out
    assert "not marked: their starts are whole seconds" in out and "format=json" in out
    run = read_run(tmp_path / "raw-data" / "c.csv")
    assert [r.cgroup_nr_throttled for r in run.records] == [None, None, None]
    assert [r.latency_ns // MS for r in run.records] == [30, 95, 30]
    assert run.metadata.extra["imported"]["marked"] is False


def test_log_format_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    make_timeline(tmp_path)
    (tmp_path / "access.log").write_text("1.5 0.25 200\nnot a line\n")
    line = usage_error(["import", "access.log", "--timeline", "t.cgroup.csv", "--log-format",
                        "$time_local $status"], tmp_path, monkeypatch, capsys)
    assert "--log-format needs $msec" in line
    line = usage_error(["import", "access.log", "--timeline", "t.cgroup.csv", "--log-format",
                        "$msec $request_time $status"], tmp_path, monkeypatch, capsys)
    assert "access.log: line 2: does not match the --log-format" in line
    line = usage_error(["import", "access.log", "--timeline", "t.cgroup.csv", "--log-format",
                        "$msec $request_time $status", "--format", "envoy"], tmp_path,
                       monkeypatch, capsys)
    assert "does not go with --format envoy" in line
    assert not (tmp_path / "raw-data").exists()


def test_an_imported_run_over_a_resize_is_judged_per_quota(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """A recorded timeline that spans an in-place resize (quota columns 20000 -> 50000 at
    1 s): the imported run's report says both quotas, each with the requests sent under it."""
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns,quota_us,period_us"]
    for i in range(201):
        t = i * 10 * MS
        rows.append(f"{t},{t // 4},{t // (100 * MS)},0,0,{20000 if t < 1000 * MS else 50000},"
                    "100000")
    (tmp_path / "t.cgroup.csv").write_text("\n".join(rows) + "\n")
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, 100), cgroup={**GROUP, "quota_us": 20000, "cpus": 0.2},
        host="here"))
    vegeta_csv(tmp_path, [100, 400, 700, 1100, 1400, 1700])
    code, err = exit_code_and_errors(["import", "r.csv", "--timeline", "t.cgroup.csv",
                                      "--name", "rs"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    code, err = exit_code_and_errors(["report", "raw-data/rs.csv", "--json"], tmp_path,
                                     monkeypatch, capsys)
    assert code == 0, err
    from client.analysis.report import build_report

    parts = build_report(read_run(tmp_path / "raw-data" / "rs.csv")).to_dict()["quotas"]
    assert [(p["cpus"], p["requests"]) for p in parts] == [(0.2, 3), (0.5, 3)]
