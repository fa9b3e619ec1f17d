"""Records Prometheus's answers beside it: Debian's Prometheus on loopback scraping the node
agent (run on the host) that watches a v1 group throttled at 0.2 CPU, as
tests/test_cluster_prometheus.py runs them (tests/prometheus_support.py). ``answers.json``:
each query ``cluster --prometheus`` makes (the raw samples of the agent's counters, level
"group") -> Prometheus's JSON answer; ``counted.json``: the group's cpu.stat before and after
the burn, read from the kernel in the same run. Run as root: .venv/bin/python
tests/data/prometheus/make.py"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))

import httpx  # noqa: E402

from client.run.prometheus import AGENT_METRICS  # noqa: E402
from tests.prometheus_support import scraped_agent  # noqa: E402

SINCE_S = 600
MATCHERS = 'level="group"'


def main() -> None:
    with tempfile.TemporaryDirectory() as work, scraped_agent(Path(work)) as scraped:
        at = time.time()
        answers = {}
        for name in AGENT_METRICS.values():
            query = f"{name}{{{MATCHERS}}}[{SINCE_S}s]"
            answers[query] = httpx.get(scraped.base + "/api/v1/query", timeout=30,
                                       params={"query": query, "time": f"{at:.3f}"}).json()
        (HERE / "answers.json").write_text(json.dumps(answers, indent=1) + "\n")
        (HERE / "counted.json").write_text(json.dumps({
            "since_s": SINCE_S, "at": round(at, 3), "before": scraped.before,
            "after": scraped.after, "usage_ns": list(scraped.usage_ns)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
