"""The data layer: what a run is on disk and in memory (records, metadata, summary, files).

Imports nothing else from ``client``; every other layer builds on it.
"""
