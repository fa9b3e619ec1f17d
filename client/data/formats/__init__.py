"""The files ``report``, ``plot``, ``compare`` and ``import`` read: one module per format, one
table of them (:data:`FORMATS`, in :mod:`client.data.formats.registry`).

A format recognises a file by its first bytes (``recognises(head)``), never by its name, and
says what it is for (``use``): :data:`RUN`, a run file that report, plot and compare read
directly (``read(path)``: request records), or :data:`RESULTS`, another tool's results that
import joins to a timeline (``read(path)``: an :class:`Imported`). A new format is one module
and one line in the table. :func:`read_run` reads a run file, :func:`read_results` a results
file; :func:`recognise` is how both pick the format.
"""

from __future__ import annotations

from client.data.formats.base import (EPOCH, HEAD_BYTES, RELATIVE, RESULTS, RUN, ImportFileError,
                                      Imported, ImportedRequest, ResultsFormat, RunFormat)
from client.data.formats.registry import (FORMATS, IMPORTERS, READERS, Run, read_results,
                                          read_run, reader_for, recognise, results_format,
                                          run_shape, run_zero_epoch_ns)

__all__ = ["EPOCH", "FORMATS", "HEAD_BYTES", "IMPORTERS", "READERS", "RELATIVE", "RESULTS",
           "RUN", "ImportFileError", "Imported", "ImportedRequest", "ResultsFormat", "Run",
           "RunFormat", "read_results", "read_run", "reader_for", "recognise",
           "results_format", "run_shape", "run_zero_epoch_ns"]
