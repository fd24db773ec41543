"""Shards reached in this process (tests, tools, and a single-machine router): each call runs
:class:`~.service.ShardService`'s method directly."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .layout import read_shards
from .service import ShardService


class LocalShards:
    """:class:`~hopgraph.engine.components.sharded.ShardCalls` over services in this process."""

    def __init__(self, services: Sequence[ShardService]) -> None:
        self.services = list(services)
        self.n_shards = len(self.services)
        #: calls made and results' bytes, per method (what a router would send over the network)
        self.calls: dict[str, int] = {}

    @classmethod
    def open(cls, directory: str | Path, verify: str = "full") -> "LocalShards":
        """Services over every shard of the sharded index in ``directory``
        (:func:`~.layout.read_shards`)."""
        meta = read_shards(directory)
        dense = "ann" if meta.get("ivf_bits") else None
        return cls([ShardService(Path(directory) / s["dir"], verify=verify,
                                 graphs=Path(directory) / s["graph"] if s.get("graph") else None, dense=dense)
                     for s in meta["shards"]])

    def map(self, method: str, calls: Mapping[int, tuple]) -> dict[int, Any]:
        """Run ``method(*args)`` on each named shard's service, counting the calls."""
        self.calls[method] = self.calls.get(method, 0) + len(calls)
        return {s: self.services[s].call(method, *args) for s, args in calls.items()}
