"""Fixtures of the sharded-index tests: one eight-pipeline index of the demo corpus (with metadata)."""
from __future__ import annotations

import pytest

from shard_corpus import ALL, PARAMS, demo_records


@pytest.fixture(scope="module")
def saved_index(tmp_path_factory):
    """A saved eight-pipeline index of the demo corpus (hashing embedder), and its path."""
    from hopgraph import Index

    path = tmp_path_factory.mktemp("single") / "index"
    Index.build(demo_records(), embedder="hashing-64", pipelines=ALL, params=PARAMS, progress=False).save(path)
    return path


