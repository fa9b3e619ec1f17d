"""JMeter's JTL in CSV (``jmeter -n -t plan.jmx -l out.jtl``; xdocs/usermanual/listeners.xml):
``timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,...``.
``timeStamp`` is Unix ms: the sample's **start** with the properties JMeter ships
(``sampleresult.timestamp.start=true`` in bin/jmeter.properties), read so; ``elapsed`` ms.
``threadName`` (when there) is the sampler's thread: each a closed loop, so the file says the
load's shape (:class:`client.data.loadshape.LoadShape`, ``"column"``). JMeter does not run
here: the tests use a file written as its documentation shows."""

from __future__ import annotations

from pathlib import Path

from client.data.formats.base import (EPOCH, RESULTS, Imported, ImportedRequest, bad_line,
                                      read_text, table_rows)
from client.data.loadshape import LoadShape

__all__ = ["JMeterCsv"]

_REQUIRED = ("timeStamp", "elapsed", "responseCode", "success")


class JMeterCsv:
    name = "jmeter-csv"
    use = RESULTS
    description = "JMeter JTL CSV (timeStamp: Unix ms, the start with the shipped properties)"

    def recognises(self, head: bytes) -> bool:
        return head.lstrip().startswith(b"timeStamp,elapsed,")

    def read(self, path: Path) -> Imported:
        requests, url, threads = [], "", set()
        for line_no, row in table_rows(path, read_text(path), _REQUIRED, "a JMeter JTL CSV"):
            try:
                start, elapsed = int(row["timeStamp"]), int(row["elapsed"])
            except ValueError:
                bad_line(path, line_no, "expected integer ms in timeStamp and elapsed (JTL)")
            code = row["responseCode"].strip()
            status = int(code) if code.isdigit() else 0
            ok = row["success"].strip().lower() == "true"
            error = "" if ok else " ".join((row.get("failureMessage") or
                                             row.get("responseMessage") or
                                             f"HTTP {code}").split())
            requests.append(ImportedRequest(start * 1_000_000, elapsed * 1_000_000, status,
                                            error))
            url = url or row.get("URL", "")
            threads.add(row.get("threadName", "").strip())
        threads.discard("")
        shape = None if not threads else LoadShape(
            True, len(threads), "column", f"the file's threadName column: {len(threads)} "
            f"thread{'s' if len(threads) > 1 else ''}, each sending its next when answered")
        return Imported(self.name, EPOCH, requests, url=url, shape=shape)
