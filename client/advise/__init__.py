"""The advice, between the analysis and the commands: what ``advise`` (live, on a running
service, or ``--passive``), ``sweep --timeline`` and ``predict --timeline`` do once their options
are parsed.

- :mod:`client.advise.search`: the one search driver, over a judge of a limit (a run, or a
  replay), the stepping itself pure in ``client.analysis.advise``;
- :mod:`client.advise.live`: the live advice (:class:`client.advise.live.Advisor`), each limit
  judged by a run of a :class:`client.run.at_limit.AtLimit`;
- :mod:`client.advise.passive`: ``advise --passive``, each limit judged by the replay of a
  recorded window; :mod:`client.advise.sources`: where that window comes from (a timeline, a
  workload's pods, a group recorded now); :mod:`client.advise.replicas` and
  :mod:`client.advise.hpa`: the replica counts, the HPA's rule over it;
- :mod:`client.advise.cluster_rows`: ``cluster``'s table, a row a recorded workload, from the
  node agents or Prometheus;
- :mod:`client.advise.vpa`: the VPA that would change the limit, which stops the advice;
- :mod:`client.advise.replay`: the replay's inputs read from their files
  (:func:`client.advise.replay.load_replay`), and the replay as a limit
  (:mod:`client.advise.replayed_limit`);
- :mod:`client.advise.answer`: the one answer, live or passive, and its JSON;
- :mod:`client.advise.services`: the service at a limit that plain values name.

It imports ``client.data``, ``client.run``, ``client.analysis`` and ``client.render``; only the
commands import it. Nothing here prints: progress reaches the command through hooks. A problem
the user can fix is an :class:`AdviseError`, one line (the command says it, exit 2).
"""

from __future__ import annotations

__all__ = ["AdviseError"]


class AdviseError(Exception):
    """A problem to say in one line (the command exits 2), never with a traceback."""
