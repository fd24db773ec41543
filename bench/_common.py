"""Timing and table printing shared by the bench/ scripts (run as ``python bench/NAME.py``,
so this folder is on ``sys.path``): re-exported from the installed :mod:`suite.common`,
which ``hopgraph bench`` uses too."""
from __future__ import annotations

from suite.common import best_of, median_interleaved, peak_rss_gb, stamp, table

__all__ = ["best_of", "median_interleaved", "peak_rss_gb", "stamp", "table"]
