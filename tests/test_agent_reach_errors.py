"""A pod's node agent reached through the API server's ``pods/proxy``, when that goes wrong:
no right to the proxy, an agent that stops answering (its node gone NotReady mid-run: the
API server's proxy answers 502/503, or the connection drops). Each is one line naming the
agent and what to do; a run whose agent stops answering keeps its files as they were (the
command then says so in one line: client/commands/run.py). The API's answers are replayed
(the shapes the kubernetes client returns); the real API server is in
tests/test_two_nodes_commands.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from client.data.files import read_run
from client.run.agent_marks import mark_through_agent
from client.run.agent_timeline import AgentLink, AgentTimelineError, PodRef

NS = "throttle-lab-recorder"


class Answers:
    """The API client's request machinery, answering each GET with ``status`` and ``body``
    (or raising ``error``, as urllib3 does when the connection drops)."""

    def __init__(self, status: int = 200, body: str = "", error: Exception | None = None) -> None:
        self.status, self.body, self.error = status, body, error

    def param_serialize(self, method: str, path: str, **_: Any) -> tuple[Any, ...]:
        return method, path, {}, None, []

    def call_api(self, *_: Any, **__: Any) -> Any:
        if self.error is not None:
            raise self.error
        return SimpleNamespace(status=self.status, data=self.body.encode(), read=lambda: None)


def link(answers: Answers) -> AgentLink:
    return AgentLink(SimpleNamespace(api_client=answers), PodRef("shop", "web-a"), "n2",
                     NS, "a-2")


@pytest.mark.parametrize("answers, said", [
    (Answers(403, json.dumps({"message": 'pods "a-2:9742" is forbidden'})),
     f"not allowed to reach the agent {NS}/a-2 through the API server "
     f'(pods "a-2:9742" is forbidden): the user needs \'get\' on pods/proxy in {NS}: '),
    (Answers(503, json.dumps({"message": "no endpoints available"})),   # its node NotReady
     f"the agent {NS}/a-2 does not answer through the API server's proxy (503: no endpoints "
     "available): is it ready?"),
    (Answers(502, "error trying to reach service: dial tcp 10.244.1.7:9742: connect: no route"),
     f"the agent {NS}/a-2 does not answer through the API server's proxy (502: error trying"),
    (Answers(error=ProtocolError("Connection aborted.")),
     "the API server did not answer: "),
])
def test_an_agent_out_of_reach_is_one_line(answers: Answers, said: str, tmp_path: Path) -> None:
    with pytest.raises(AgentTimelineError) as info:
        link(answers).window(tmp_path, 0.0, None)
    assert str(info.value).startswith(said) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []   # nothing half written


def test_a_run_whose_agent_stopped_answering_keeps_its_files(tmp_path: Path) -> None:
    ms = 1_000_000
    run_csv = tmp_path / "far.csv"
    run_csv.write_text("seq,start_ns,latency_ns,status,error\n" + "".join(
        f"{i},{i * 100 * ms},{90 * ms},200,\n" for i in range(10)))
    run_csv.with_suffix(".json").write_text(json.dumps({
        "name": "far", "clock": {"zero_epoch_ns": 1_800_000_000 * 10**9,
                                 "zero_uncertainty_ns": 1}}))
    files = sorted(tmp_path.iterdir())
    sums = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    with pytest.raises(AgentTimelineError, match="does not answer"):
        mark_through_agent(link(Answers(503, "{}")), read_run(run_csv))
    assert sorted(tmp_path.iterdir()) == files   # no timeline kept beside it
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files} == sums
    assert len(read_run(run_csv).records) == 10   # every request kept
