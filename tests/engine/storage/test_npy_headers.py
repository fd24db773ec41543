"""A damaged ``.npy`` header is an :class:`IndexFormatError` naming the file, at every verify level,
whatever the damage (the header is a Python literal: a broken one fails in the tokenizer or the parser)."""
from __future__ import annotations

import pytest

import hopgraph
from hopgraph.engine import storage
from hopgraph.engine.errors import IndexFormatError, InputError
from hopgraph.engine.ingest.precomputed import open_embeddings


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, demo_corpus):
    path = tmp_path_factory.mktemp("npy") / "index"
    hopgraph.Index.build(demo_corpus, embedder="hashing-16", pipelines=["dense"], progress=False).save(path)
    return path


def damage_header(path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    head = data.index(b"\n") + 1
    assert old in data[:head]
    path.write_bytes(data[:head].replace(old, new, 1) + data[head:])


@pytest.mark.parametrize("old, new", [(b"{", b"\""),              # an unterminated string: tokenize.TokenError
                                      (b"{", b"("),                   # unbalanced brackets
                                      (b"'shape'", b"'sh\x00pe'")])   # a NUL byte in the literal
def test_damaged_npy_header_is_an_index_format_error(index_dir, tmp_path, old, new):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(index_dir, copy)
    damage_header(storage.segment_dirs(copy)[0] / "embeddings.npy", old, new)
    for verify in ("fast", "full"):
        with pytest.raises(IndexFormatError, match="embeddings.npy"):
            hopgraph.Index.load(copy, verify=verify, progress=False)
    with pytest.raises(InputError, match="not a valid .npy file"):
        open_embeddings(storage.segment_dirs(copy)[0] / "embeddings.npy")
