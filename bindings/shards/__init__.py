"""Sharded indexes: :func:`shard_index` splits an index by passage (``hopgraph shard``),
:func:`open_router` serves it through a router whose searches equal the single index's, over
shards reached in this process (:class:`LocalShards`) or on a Ray cluster
(:mod:`hopgraph.shards.ray_serve`, ``hopgraph serve --ray``)."""
from .layout import owner_of, read_shards
from .local import LocalShards
from .router import ShardedIndex, open_router
from .service import ShardService
from .split import shard_index

__all__ = ["LocalShards", "ShardService", "ShardedIndex", "open_router", "owner_of", "read_shards", "shard_index"]
