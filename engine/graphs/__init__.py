"""Graphs as an index keeps them: the graph store chosen by the index and the views a graph is read
through.

* :mod:`.store` — the :class:`~hopgraph.engine.graphs.store.GraphStore` interface pipelines save to
  and load from, its reader interfaces (a CSR-like and a row-matrix-like reader) and the
  :class:`~hopgraph.engine.graphs.store.LocalStore` of an index whose graphs are in its own files;
* :mod:`.router_store` — the store of a sharded index's router (rows held by the shards, by reference);
* :mod:`.shard` — what one shard holds of those rows and serves;
* :mod:`.remote` — graphs and row matrices read by rows from the shards;
* :mod:`.renumbered` — such graphs and matrices over nodes renumbered since they were stored;
* :mod:`.views` — :class:`~hopgraph.engine.graphs.views.CSRView` and
  :class:`~hopgraph.engine.graphs.views.OverlayCSR` (a stored graph with rows replaced and appended).
"""
