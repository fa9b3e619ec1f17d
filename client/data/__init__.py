"""The data layer: what a run is on disk and in memory (records, metadata, summary, files,
the readers of every run-file format, a cgroup timeline and which requests its throttles hit).

Imports nothing else from ``client``; every other layer builds on it.
"""
