"""Bad input and file problems, as a user meets them: one line on stderr naming the path (or
the option) and the reason, exit code 2, never a traceback, and nothing already measured lost.
What can still be done is done first: a report's text before its picture, raw data before a
run's picture."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from client.data.files import Run, read_run
from tests.scripted import Handler, answering, scripted, unanswered
from tests.support import exit_code_and_errors, free_port, running_service, usage_error

ROOT = Path(__file__).resolve().parent.parent
RUN = "calibrated-kernel-0.3"   # a committed run: 200 requests at a kernel quota of 0.3 CPU
JMETER = ("timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,"
          "failureMessage,bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect\n"
          "1700000000000,5,GET,200,OK,t1,text,true,,10,10,1,1,http://x/,5,0,1\n")


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A folder with a recorded run in raw-data/ (its CSV and JSON), and files made wrong on
    purpose: ``pictures`` a file, ``somedir`` a directory, a header-only, an empty and a
    JMeter results file, a malformed targets file."""
    (tmp_path / "raw-data").mkdir()
    for suffix in (".csv", ".json"):
        shutil.copy(ROOT / "raw-data" / f"{RUN}{suffix}", tmp_path / "raw-data")
    (tmp_path / "pictures").write_text("not a folder\n")
    (tmp_path / "somedir").mkdir()
    header = (tmp_path / "raw-data" / f"{RUN}.csv").read_text().splitlines()[0]
    (tmp_path / "header.csv").write_text(header + "\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "jmeter.csv").write_text(JMETER)
    (tmp_path / "bad.targets").write_text("FOO\n")
    return tmp_path


def kept(folder: Path) -> set[str]:
    """Every file under ``folder`` (what must still be there after a mistake)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


CLOSED = f"http://127.0.0.1:{free_port()}/"   # nothing listens there


@pytest.mark.parametrize(("args", "message"), [
    (["plot", f"raw-data/{RUN}.csv"],
     f"cannot write pictures/{RUN}.png: pictures is a file, not a directory"),
    (["plot", f"raw-data/{RUN}.csv", "-o", "/proc/x.png"], "cannot write /proc/x.png: "),
    (["plot", f"raw-data/{RUN}.csv", "-o", "somedir"],
     "cannot write somedir: it is a directory, not a file"),
    (["plot", f"raw-data/{RUN}.csv", "-o", "pictures/x.png"],
     "cannot write pictures/x.png: pictures is a file, not a directory"),
    (["compare", f"raw-data/{RUN}.csv", "-o", "pictures/c.png"],
     "cannot write pictures/c.png: pictures is a file, not a directory"),
    (["compare", f"raw-data/{RUN}.csv", "-o", "somedir"], "-o must end in .png"),
    (["plot", f"raw-data/{RUN}.csv", "-o", "x.csv"],
     "cannot write x.csv: a picture's name ends in one of .png, .svg, .pdf"),
    (["report", "raw-data/"], "raw-data: is a directory, not a run file"),
    (["report", "header.csv"], "header.csv holds no requests"),
    (["plot", "header.csv"], "header.csv holds no requests"),
    (["compare", f"raw-data/{RUN}.csv", "header.csv"], "header.csv holds no requests"),
    (["report", "empty.csv"], "empty.csv holds no requests"),
    (["report", "jmeter.csv"], "jmeter.csv: jmeter-csv results, not a run file: make it one "
                               "with http-timing import jmeter.csv --timeline "),
    (["plot", "jmeter.csv"], "http-timing import jmeter.csv --timeline "),
    (["--url", CLOSED, "--requests", "0"], "argument --requests: must be an integer >= 1"),
    (["--url", CLOSED, "--requests", "-1"], "argument --requests: must be an integer >= 1"),
    (["--url", CLOSED, "--requests", str(10**12), "--no-plot"],
     "connection refused: nothing listens on"),   # a huge count is no mistake: it is sent
    (["--url", CLOSED, "--no-plot"], f"cannot reach {CLOSED}: connection refused"),
    (["--targets", "bad.targets", "--no-plot"], "bad.targets:1: expected a target"),
    (["--targets", "somedir", "--no-plot"], "--targets somedir: cannot read it"),
    (["--url", CLOSED, "--data-dir", "pictures"],
     "--data-dir pictures: cannot write in it: pictures is a file, not a directory"),
    (["--url", CLOSED, "--data-dir", "pictures/raw"],
     "--data-dir pictures/raw: cannot write in it: pictures is a file, not a directory"),
    (["--url", CLOSED], "--pictures-dir pictures: cannot write in it: pictures is a file"),
    (["sweep", "--backend", "inprocess", "--cpus", "1"], "--pictures-dir pictures: cannot "
                                                         "write in it"),
    (["advise", "--backend", "inprocess", "--p99", "30"], "--pictures-dir pictures: cannot "
                                                          "write in it"),
    (["sweep", "--backend", "inprocess", "--cpus", "1", "--no-plot"],   # its tables go there
     "--pictures-dir pictures: cannot write in it"),
], ids=lambda value: value.replace(CLOSED, "CLOSED") if isinstance(value, str) else None)
def test_each_mistake_is_one_line_exit_2_and_nothing_is_lost(
        here: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = kept(here)
    line = usage_error(args, here, monkeypatch, capsys)
    assert message in line, line
    assert kept(here) == before   # every file that was there still is, and no run started


def test_a_picture_named_without_a_suffix_is_a_png_and_said_so(
        here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(here)
    from client.commands import main

    assert main(["plot", f"raw-data/{RUN}.csv", "-o", "somedir/pic"]) == 0
    assert capsys.readouterr().out.split() == ["somedir/pic.png"]
    assert (here / "somedir" / "pic.png").is_file()


def test_a_report_prints_its_text_before_its_picture_fails(
        here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(here)
    from client.commands import main

    code = main(["report", f"raw-data/{RUN}.csv", "--predict"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [f"http-timing: cannot write pictures/{RUN}-predict.png: "
                                        "pictures is a file, not a directory"]
    assert f"run: {RUN}" in out and "picture: not written" in out   # the text came first


def test_a_row_cut_short_at_the_end_is_skipped_and_the_rest_read(
        here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    whole = (here / "raw-data" / f"{RUN}.csv").read_text()
    rows = whole.splitlines()
    cut = here / "cut.csv"
    cut.write_text(whole[:-10])   # the last row loses its end: a number cut in two
    code, err = exit_code_and_errors(["report", "cut.csv", "--json"], here, monkeypatch, capsys)
    assert code == 0
    assert err.strip().splitlines() == [f"{cut.name}: line {len(rows)} is cut short (the run "
                                        "was interrupted while writing it): skipped"]
    assert len(read_run(cut).records) == len(rows) - 2   # the header and the cut row aside


def test_a_row_cut_short_before_the_end_is_an_error_naming_its_line(
        here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rows = (here / "raw-data" / f"{RUN}.csv").read_text().splitlines()
    (here / "mid.csv").write_text("\n".join([*rows[:3], rows[3][:12], *rows[4:]]) + "\n")
    line = usage_error(["report", "mid.csv"], here, monkeypatch, capsys)
    assert line.startswith("http-timing: mid.csv: line 4: ")


@pytest.mark.parametrize(("handler", "message"), [
    (answering(b"garbage\r\n\r\n", keep=False),
     "answered, but its reply could not be read as HTTP/1.1"),
    (unanswered([]), "closed the connection without an answer"),
])
def test_a_server_that_answers_no_http_is_said_as_such(
        tmp_path: Path, handler: Handler, message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with scripted(handler) as url:
        line = usage_error(["--url", url, "--requests", "2", "--quiet", "--name", "r"],
                           tmp_path, monkeypatch, capsys)
    assert message in line and "cannot reach" not in line
    assert len(read_run(tmp_path / "raw-data" / "r.csv").records) == 2   # the tries are kept


def test_a_picture_that_fails_after_the_run_keeps_the_raw_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The folder is fine when the run starts and gone wrong when its picture is drawn."""
    from client.commands import common

    draw = common.plot_run

    def pictures_turned_into_a_file(run: Run, out: Path, **kw: Any) -> Path:
        out.parent.write_text("")   # the run made no pictures folder: a file takes its place
        return draw(run, out, **kw)

    monkeypatch.setattr(common, "plot_run", pictures_turned_into_a_file)
    with running_service() as base:
        line = usage_error(["--url", f"{base}/cpuBurnFlow", "--iterations", "100", "--requests",
                            "3", "--quiet", "--name", "p"], tmp_path, monkeypatch, capsys)
    assert line == ("http-timing: cannot write pictures/p.png: pictures is a file, not a "
                    "directory (the raw data is kept: raw-data/p.csv, metadata raw-data/p.json)")
    assert len(read_run(tmp_path / "raw-data" / "p.csv").records) == 3


@pytest.mark.parametrize("iterations", ["-1", str(10**12), "many"])
def test_burn_service_refuses_iterations_out_of_range_with_one_json_line(
        iterations: str) -> None:
    with running_service() as base:
        r = httpx.get(f"{base}/cpuBurnFlow", params={"iterations": iterations})
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert "\n" not in r.text.strip() and "Traceback" not in r.text
    assert "iterations must be an integer in [0, " in r.json()["message"]
