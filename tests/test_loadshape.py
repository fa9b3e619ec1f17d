"""The load's shape (client/data/loadshape.py) and the import's clock alignment, on captures
from the real kernel (tests/data/loadshape/README.md): a one-connection load stays one
connection through rounded times, a closed loop recorded under throttling sends faster (wants
more CPU) at a higher limit, and a hey file imported with ``--start`` taken before hey marks
about as many requests as the kernel throttled periods."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from client.analysis.replay import demand_of, load_of, replay_limits
from client.advise.replay import requests_of
from client.data.files import read_run
from client.data.loadshape import chains, infer, time_step
from client.data.timeline import read_timeline
from client.run.replay_input import read_recording, read_requests

DATA = Path(__file__).parent / "data" / "loadshape"
MS = 1_000_000
STEP = 100_000   # hey's 4 decimals of a second


def rounded(spans: list[tuple[int, int]], step: int = STEP) -> list[tuple[int, int]]:
    """Each start and latency rounded to ``step`` on its own, as hey writes them."""
    return [(round(s / step) * step, round(s / step) * step + round((e - s) / step) * step)
            for s, e in spans]


def one_after_another(n: int, gap_ns: int = 30_000) -> list[tuple[int, int]]:
    out, t = [], 0
    for i in range(n):
        latency = (5 + 7 * (i % 3)) * MS + 37_123 * i % 90_000
        out.append((t, t + latency))
        t += latency + gap_ns
    return out


def test_rounded_times_of_one_connection_make_one_chain() -> None:
    spans = rounded(one_after_another(200))
    # the rounding makes some requests seem to start before the previous answer ...
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    assert time_step(spans) == STEP
    # ... which, read exactly, needs two chains; within the rounding it is one
    assert sum(1 for f in chains(spans)[0] if f is None) == 2
    shape = infer(spans)
    assert (shape.closed, shape.connections, shape.source) == (True, 1, "inferred")
    assert "0.1 ms" in shape.why and shape.describe().startswith("closed loop: one at a time")


def test_requests_that_do_not_follow_one_another_are_not_known() -> None:
    spaced = [(i * 125 * MS, i * 125 * MS + 20 * MS) for i in range(40)]   # 8 a second
    shape = infer(spaced)
    assert shape.closed is None and not shape.known
    assert shape.describe().startswith("concurrency not known")


def test_two_connections_are_two_chains() -> None:
    a = one_after_another(50)
    b = [(s + 3 * MS, e + 3 * MS) for s, e in one_after_another(50, gap_ns=70_000)]
    shape = infer(rounded(a + b))
    assert (shape.closed, shape.connections) == (True, 2)


def test_a_closed_loop_recorded_under_throttling_sends_faster_at_a_higher_limit() -> None:
    """The capture: one request after another at 0.3 CPU, throttled. Replayed as the closed
    loop it was, a higher limit answers sooner, so the loop sends sooner: the same requests
    in less time, more CPU per second. Replayed open (each at its recorded time), they take
    as long at any limit: the demand a 0.3 CPU quota held back is not seen."""
    recording = read_recording(DATA / "seq.cgroup.csv")
    placed = read_requests(DATA / "seq.csv", recording)
    assert placed.closed is True and "closed loop: one at a time (the run's plan)" in placed.how
    demand = demand_of(recording.samples, recording.period_ns)
    assert demand.recorded.nr_throttled > 0
    requests = requests_of(placed)
    assert load_of(demand, requests, placed.closed).lanes == 1

    def span_s(closed: bool, cpus: float | None) -> float:
        (row,) = replay_limits(demand, [cpus], requests, closed=closed)
        assert row.sent_ns is not None and row.latencies_ns is not None
        last = max(range(len(row.sent_ns)), key=lambda i: row.sent_ns[i])   # type: ignore
        return (row.sent_ns[last] + row.latencies_ns[last] - min(row.sent_ns)) / 1e9

    at, higher, free = (span_s(True, c) for c in (0.3, 0.6, None))
    recorded = (max(r.end_ns for r in placed.records) - min(r.start_ns for r in placed.records))
    assert at == pytest.approx(recorded / 1e9, rel=0.1)   # at the recorded limit: as recorded
    assert higher < 0.95 * at and free <= higher
    rate = {c: len(requests) / s for c, s in ((0.3, at), (0.6, higher))}
    assert rate[0.6] > 1.05 * rate[0.3]
    assert span_s(False, 0.6) == pytest.approx(span_s(False, 0.3), rel=0.02)


def _kernel_periods(timeline: Path) -> int:
    samples = read_timeline(timeline)
    return samples[-1].nr_throttled - samples[0].nr_throttled


def _delayed(path: Path) -> int:
    return sum(1 for r in read_run(path).records if r.cgroup_held_ns)


def test_hey_imported_as_the_docs_say_marks_as_many_as_the_kernel_throttled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """hey -c 1 against the burner at 0.3 CPU, ``date +%s.%N`` taken just before it: the
    requests delayed by throttling against the periods the kernel throttled across the run
    (one connection: each throttle holds the one request in flight). The stated clock marks
    the fast requests beside each throttled stretch too."""
    for name in ("hey.csv", "hey-record.cgroup.csv", "hey-record.json"):
        shutil.copy(DATA / name, tmp_path / name)
    start = (DATA / "hey.start").read_text().strip()
    periods = _kernel_periods(tmp_path / "hey-record.cgroup.csv")
    args = ("hey.csv", "--timeline", "hey-record.cgroup.csv", "--start", start)
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["import", *args, "--name", "aligned"]) == 0
    out = capsys.readouterr().out
    assert "applied: a shift of +" in out and "better" in out, out
    assert "load: closed loop: one at a time (inferred from the requests" in out, out
    aligned = tmp_path / "raw-data" / "aligned.csv"
    assert abs(_delayed(aligned) - periods) <= 0.15 * periods, (_delayed(aligned), periods)
    meta = json.loads(aligned.with_suffix(".json").read_text())
    assert (meta["mode"], meta["concurrency"]) == ("sequential", 1)
    assert meta["imported"]["shape"]["source"] == "inferred" and meta["imported"]["aligned_s"] > 0

    assert main(["import", *args, "--name", "stated", "--no-align"]) == 0
    assert "--no-align keeps the stated clock" in capsys.readouterr().out
    assert _delayed(tmp_path / "raw-data" / "stated.csv") > 1.15 * periods


def hey_file(run_csv: Path, out: Path) -> int:
    """The run's requests as hey -o csv writes them (offsets from the first start, 0.1 ms),
    and the first start's place on the run's clock."""
    rows = list(csv.DictReader(run_csv.read_text().splitlines()))
    first = int(rows[0]["start_ns"])
    lines = ["response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,"
             "status-code,offset"]
    lines += [f"{int(r['latency_ns']) / 1e9:.4f},0.0000,0.0000,0.0000,0.0000,0.0000,"
              f"{r['status']},{(int(r['start_ns']) - first) / 1e9:.4f}" for r in rows]
    out.write_text("\n".join(lines) + "\n")
    return first


@pytest.mark.parametrize("late_ms", [0, 8, 20, 40, 75])
def test_the_alignment_finds_a_known_start(late_ms: int, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """An http-timing --cgroup run (sequential: each request's marks read from cpu.stat
    around it) written as hey's file, its --start ``late_ms`` before the first request: the
    import moves the requests back onto their own times (within 5 ms; at 0 it leaves them) and
    marks the requests the run's own probes marked."""
    for name in ("seq.cgroup.csv", "seq.json"):
        shutil.copy(DATA / name, tmp_path / name)
    first = hey_file(DATA / "seq.csv", tmp_path / "h.csv")
    zero = json.loads((DATA / "seq.json").read_text())["clock"]["zero_epoch_ns"]
    start = f"{(zero + first - late_ms * MS) / 1e9:.9f}"
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["import", "h.csv", "--timeline", "seq.cgroup.csv", "--start", start,
                 "--name", "imp"]) == 0
    capsys.readouterr()
    meta = json.loads((tmp_path / "raw-data" / "imp.json").read_text())
    aligned_ms = meta["imported"]["aligned_s"] * 1e3
    if late_ms >= 20:   # the stated clock marks the wrong requests: clearly worse
        assert aligned_ms == pytest.approx(late_ms, abs=5)
    else:               # near enough to mark the same ones: left, or moved to the truth
        assert aligned_ms == 0 or aligned_ms == pytest.approx(late_ms, abs=5)
    probed = {r.seq for r in read_run(DATA / "seq.csv").records if r.cgroup_held_ns}
    marked = {r.seq for r in read_run(tmp_path / "raw-data" / "imp.csv").records
              if r.cgroup_held_ns}
    assert probed and len(probed & marked) >= 0.85 * len(probed)
    assert len(marked) <= 1.15 * len(probed) + 1


def test_offset_is_kept_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("seq.cgroup.csv", "seq.json"):
        shutil.copy(DATA / name, tmp_path / name)
    first = hey_file(DATA / "seq.csv", tmp_path / "h.csv")
    zero = json.loads((DATA / "seq.json").read_text())["clock"]["zero_epoch_ns"]
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["import", "h.csv", "--timeline", "seq.cgroup.csv", "--start",
                 f"{(zero + first) / 1e9:.9f}", "--offset", "0.02", "--name", "imp"]) == 0
    assert "applied: --offset 0.02 (not aligned" in capsys.readouterr().out
    meta = json.loads((tmp_path / "raw-data" / "imp.json").read_text())
    assert meta["imported"]["aligned_s"] == 0 and meta["imported"]["offset_s"] == 0.02


def test_a_file_with_no_shape_says_what_to_give(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Requests 125 ms apart in a Locust file: nothing says how they were sent. The import
    says so in one line, with what to give; --concurrency says it."""
    for name in ("seq.cgroup.csv", "seq.json"):
        shutil.copy(DATA / name, tmp_path / name)
    zero = json.loads((DATA / "seq.json").read_text())["clock"]["zero_epoch_ns"]
    (tmp_path / "l.csv").write_text(
        "timestamp,request_type,name,response_time_ms,response_length,status_code,exception\n"
        + "".join(f"{(zero + (100 + 125 * i) * MS) / 1e9:.6f},GET,/burn,12.5,10,200,\n"
                  for i in range(20)))
    monkeypatch.chdir(tmp_path)
    from client.commands import main

    assert main(["import", "l.csv", "--timeline", "seq.cgroup.csv", "--name", "imp"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("load:")]
    assert len(said) == 1 and said[0].startswith("load: concurrency not known")
    assert "--concurrency C" in said[0] and "--open-loop" in said[0]
    meta = json.loads((tmp_path / "raw-data" / "imp.json").read_text())
    assert meta["imported"]["shape"]["loop"] is None and meta["mode"] == "open-loop"
    assert main(["import", "l.csv", "--timeline", "seq.cgroup.csv", "--name", "imp",
                 "--concurrency", "3"]) == 0
    assert "load: closed loop: 3 at a time (--concurrency 3)" in capsys.readouterr().out
    meta = json.loads((tmp_path / "raw-data" / "imp.json").read_text())
    assert (meta["mode"], meta["concurrency"]) == ("closed-loop", 3)


def test_requests_outside_the_timeline_say_when_each_was(tmp_path: Path) -> None:
    from client.data.record import RawDataError

    shutil.copy(DATA / "hey-record.cgroup.csv", tmp_path / "hey-record.cgroup.csv")
    shutil.copy(DATA / "hey-record.json", tmp_path / "hey-record.json")
    recording = read_recording(tmp_path / "hey-record.cgroup.csv")
    with pytest.raises(RawDataError) as caught:
        read_requests(DATA / "seq.csv", recording)   # recorded minutes apart
    said = str(caught.value)
    assert "\n" not in said and said.startswith(f"{DATA / 'seq.csv'}: none of its 200 ")
    assert "UTC" in said and "give the timeline recorded during the load" in said
