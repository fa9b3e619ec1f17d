"""Importers of other tools' per-request results (and access logs): one module per format,
each an :class:`Importer` (``recognises`` the file from its first bytes, ``read`` gives an
:class:`Imported`: each request's start and latency in ns, its status, and which clock the
start is on). ``IMPORTERS`` is the registry: a new format is one module and one line here.
``read_results`` picks the format from the content (or takes the one named)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from client.data.imports.base import (EPOCH, RELATIVE, ImportedRequest, Imported,
                                      ImportFileError, read_bytes)
from client.data.imports.envoy import EnvoyDefault, EnvoyJson
from client.data.imports.hey import HeyCsv
from client.data.imports.http_timing import HttpTimingRun
from client.data.imports.jmeter import JMeterCsv
from client.data.imports.k6 import K6Csv, K6Json
from client.data.imports.locust import LocustCsv
from client.data.imports.nginx import NginxTiming
from client.data.imports.oha import OhaCsv, OhaSqlite
from client.data.imports.traefik import TraefikClf, TraefikJson
from client.data.imports.vegeta import VegetaCsv, VegetaJson

__all__ = ["EPOCH", "IMPORTERS", "RELATIVE", "ImportFileError", "Imported", "ImportedRequest",
           "Importer", "read_results", "recognise"]

HEAD_BYTES = 4096


class Importer(Protocol):
    name: str
    description: str   # the tool, the command that writes the file, and its time semantics

    def recognises(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` (its first bytes, gunzipped) is this format."""

    def read(self, path: Path) -> Imported:
        """The requests (``ImportFileError``, one line naming the line, when it is not)."""


IMPORTERS: dict[str, Importer] = {i.name: i for i in (
    VegetaCsv(), VegetaJson(), K6Json(), K6Csv(), HeyCsv(), OhaCsv(), OhaSqlite(),
    JMeterCsv(), LocustCsv(), TraefikClf(), TraefikJson(), NginxTiming(), EnvoyDefault(),
    EnvoyJson(), HttpTimingRun())}


def recognise(path: Path) -> Importer:
    """The importer whose format the file is (``ImportFileError`` naming the formats if none)."""
    head = read_bytes(path)[:HEAD_BYTES]
    if not head.strip():
        raise ImportFileError(f"{path}: empty file")
    for importer in IMPORTERS.values():
        if importer.recognises(head):
            return importer
    raise ImportFileError(f"{path}: line 1: not a format import knows (expected one of "
                          f"{', '.join(IMPORTERS)}; --format names one)")


def read_results(path: Path, format_name: str | None = None) -> Imported:
    """The requests of ``path``, in the format named or recognised."""
    importer = IMPORTERS[format_name] if format_name else recognise(path)
    imported = importer.read(path)
    if not imported.requests:
        raise ImportFileError(f"{path}: no requests in it (read as {importer.name})")
    return imported
