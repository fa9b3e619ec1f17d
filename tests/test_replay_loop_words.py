"""The replay says how it sends the requests and where that comes from (``advise --passive``'s
and ``predict``'s ``requests.loop``): the run's JSON, the file's format, inferred from the
requests, or "concurrency not known". On the node agent's rows and the run they recorded
(tests/data/node_replay) and the kernel capture of tests/data/loadshape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from client.advise.replay import load_replay, replay_answer

NODE = Path(__file__).parent / "data" / "node_replay" / "sequential"
SHAPE = Path(__file__).parent / "data" / "loadshape"
MS = 1_000_000


def _loop(timeline: Path, requests: Path) -> str:
    replayed = load_replay(timeline, requests, None)
    said = replay_answer(replayed.recording, replayed.demand, [], replayed.placed, requests)
    return str(said["requests"]["loop"])


def _run(tmp_path: Path, **changes: object) -> Path:
    shutil.copy(NODE / "run.csv", tmp_path / "run.csv")
    meta = {**json.loads((NODE / "run.json").read_text()), **changes}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    return tmp_path / "run.csv"


def test_a_runs_json_says_its_loop_and_the_answer_says_it_came_from_there(
        tmp_path: Path) -> None:
    timeline = NODE / "agent.cgroup.csv"
    assert _loop(timeline, NODE / "run.csv") == (
        "closed loop of one (one after another): each sent its recorded gap after the one "
        "before it ended (from the run's JSON: the run's plan)")
    four = _loop(timeline, _run(tmp_path, mode="closed-loop", concurrency=4))
    assert four.startswith("closed loop of ") and four.endswith(
        "(from the run's JSON: the run's plan: --concurrency 4; the requests run in one "
        "lane)")   # sent one after another, whatever the JSON says
    rate = _loop(timeline, _run(tmp_path, mode="open-loop", concurrency=1, rate_rps=8.0))
    assert rate == ("open loop: each sent at its recorded time (from the run's JSON: the "
                    "run's plan: --rate)")
    bare = _loop(timeline, _run(tmp_path, tool="vegeta (http-timing import)"))
    assert bare.endswith("(inferred: read from the gaps between them (the file does not "
                         "say))")


def test_an_access_log_is_an_open_loop_by_its_format(tmp_path: Path) -> None:
    for name in ("seq.cgroup.csv", "seq.json"):
        shutil.copy(SHAPE / name, tmp_path / name)
    zero = json.loads((SHAPE / "seq.json").read_text())["clock"]["zero_epoch_ns"]
    (tmp_path / "access.log").write_text("".join(
        f'10.0.0.1 - - [01/Dec/2026:10:00:00 +0000] "GET /burn HTTP/1.1" 200 5 "-" "hey" '
        f"0.012 {(zero + (112 + 125 * i) * MS) / 1e9:.3f}\n" for i in range(20)))
    assert _loop(tmp_path / "seq.cgroup.csv", tmp_path / "access.log") == (
        "open loop: each sent at its recorded time (from the file (access.log): an access "
        "log: each request arrived when it arrived)")


def test_a_file_that_does_not_say_and_does_not_show_is_concurrency_not_known(
        tmp_path: Path) -> None:
    for name in ("seq.cgroup.csv", "seq.json"):
        shutil.copy(SHAPE / name, tmp_path / name)
    zero = json.loads((SHAPE / "seq.json").read_text())["clock"]["zero_epoch_ns"]
    (tmp_path / "l.csv").write_text(
        "timestamp,request_type,name,response_time_ms,response_length,status_code,exception\n"
        + "".join(f"{(zero + (100 + 125 * i) * MS) / 1e9:.6f},GET,/burn,12.5,10,200,\n"
                  for i in range(20)))
    said = _loop(tmp_path / "seq.cgroup.csv", tmp_path / "l.csv")
    assert said.startswith("open loop: each sent at its recorded time (concurrency not "
                           "known: the file does not say how its requests were sent"), said
