"""DMAR's fitted state (knowledge graph, encoder, subgraph embeddings, gate) is built once per index
and shared by ``dmar`` and ``hop`` (``Components.shared_fit`` / ``shared_update``), with the results
of separate fits."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hopgraph import HashingEmbedder, Index
from hopgraph.engine.components.shared import SAME_STATE, Components
from hopgraph.engine.errors import IndexFormatError
from hopgraph.engine.storage import verify_index
from hopgraph.engine.pipelines.dmar import pipeline as dmar_module

QUESTIONS = ["Which engineer designed the bridge in the home city of the amateur astronomer Peter Harlow?",
             "Who is the rector of the university that operates the observatory where comet Venn-Harlow was "
             "discovered?", "Which company did Linda Faraday found after Purdue?", "Orbis Computing founder"]
PARAMS = {"dmar": {"gnn_steps": 3}, "hop": {"gnn_steps": 3}}
SPLIT = 24
STATE = ("knowledge_graph_", "encoder_", "subgraph_emb_", "gate_")


@pytest.fixture
def counted(monkeypatch):
    """Counts of the knowledge-graph builds and of the live updates of the DMAR state."""
    calls = {"kg": 0, "update": 0}
    build, update = dmar_module.build_knowledge_graph, dmar_module.DMAR._update

    def counting_build(*a, **kw):
        calls["kg"] += 1
        return build(*a, **kw)

    def counting_update(self, *a, **kw):
        calls["update"] += 1
        return update(self, *a, **kw)

    monkeypatch.setattr(dmar_module, "build_knowledge_graph", counting_build)
    monkeypatch.setattr(dmar_module.DMAR, "_update", counting_update)
    return calls


def same_results(a: Index, b: Index, pipeline: str, k: int = 8) -> None:
    a_ids, a_scores = a.search_arrays(QUESTIONS, pipeline, k=k)
    b_ids, b_scores = b.search_arrays(QUESTIONS, pipeline, k=k)
    np.testing.assert_array_equal(a_ids, b_ids, err_msg=pipeline)
    np.testing.assert_array_equal(a_scores, b_scores, err_msg=pipeline)


def alone(corpus, pipeline: str) -> Index:
    return Index.build(corpus, embedder=HashingEmbedder(64), pipelines=[pipeline], params=PARAMS, progress=False)


def test_dmar_and_hop_share_one_fit(demo_corpus, counted):
    index = Index.build(demo_corpus, embedder=HashingEmbedder(64), pipelines=["dense", "hop", "dmar"],
                        params=PARAMS, progress=False)
    assert counted["kg"] == 1
    dmar, hop = index.pipelines["dmar"], index.pipelines["hop"]
    assert all(getattr(dmar, a) is getattr(hop, a) for a in STATE)
    for name in ("dmar", "hop"):
        same_results(index, alone(demo_corpus, name), name)


def test_other_fit_parameters_or_seed_fit_again(demo_corpus, counted):
    index = Index.build(demo_corpus, embedder=HashingEmbedder(64), pipelines=["dmar", "hop"],
                        params={"dmar": {"gnn_steps": 3}, "hop": {"gnn_steps": 4}}, progress=False)
    assert counted["kg"] == 2 and index.pipelines["dmar"].encoder_ is not index.pipelines["hop"].encoder_
    seeded = index.pipeline("dmar").clone()
    seeded.search_defaults = seeded.search_defaults.replace(random_state=1)
    seeded.fit(index.X, components=index.components)
    assert counted["kg"] == 3 and seeded.encoder_ is not index.pipelines["dmar"].encoder_


def test_a_live_add_updates_the_shared_state_once(demo_corpus, counted):
    index = Index.build(demo_corpus.take(np.arange(SPLIT)), embedder=HashingEmbedder(64), pipelines=["dmar", "hop"],
                        params=PARAMS, progress=False)
    index.add(demo_corpus.take(np.arange(SPLIT, len(demo_corpus))))
    assert counted["update"] == 1
    dmar, hop = index.pipelines["dmar"], index.pipelines["hop"]
    assert dmar.knowledge_graph_ is hop.knowledge_graph_ and dmar.subgraph_emb_ is hop.subgraph_emb_
    single = Index.build(demo_corpus.take(np.arange(SPLIT)), embedder=HashingEmbedder(64), pipelines=["hop"],
                         params=PARAMS, progress=False)
    single.add(demo_corpus.take(np.arange(SPLIT, len(demo_corpus))))
    np.testing.assert_array_equal(hop.subgraph_emb_, single.pipelines["hop"].subgraph_emb_)
    same_results(index, single, "hop")


def test_a_retrained_pipeline_updates_its_own_state(demo_corpus, counted):
    index = Index.build(demo_corpus.take(np.arange(SPLIT)), embedder=HashingEmbedder(64), pipelines=["dmar", "hop"],
                        params=PARAMS, progress=False)
    index.pipelines["hop"].train_gnn(2)
    index.add(demo_corpus.take(np.arange(SPLIT, len(demo_corpus))))
    assert counted["update"] == 2
    assert index.pipelines["dmar"].subgraph_emb_ is not index.pipelines["hop"].subgraph_emb_


def test_saved_index_and_segments_load_with_the_same_results(tmp_path, demo_corpus):
    index = Index.build(demo_corpus.take(np.arange(SPLIT)), embedder=HashingEmbedder(64), pipelines=["dmar", "hop"],
                        params=PARAMS, progress=False)
    index.save(tmp_path / "idx")
    index.add(demo_corpus.take(np.arange(SPLIT, len(demo_corpus))))
    index.save()  # a second segment: the add's deltas
    assert index.commit["segments"] == 2
    loaded = Index.load(tmp_path / "idx", embedder=HashingEmbedder(64), progress=False)
    for name in ("dmar", "hop"):
        same_results(index, loaded, name)


def test_the_shared_deltas_are_saved_and_applied_once(tmp_path, demo_corpus, counted):
    """After a live add the second segment holds the shared state's delta once (the other pipeline's
    folder names it); on load the delta is applied once, both pipelines hold the result, and the
    state read before the delta is no longer held by the index."""
    index = Index.build(demo_corpus.take(np.arange(SPLIT)), embedder=HashingEmbedder(64), pipelines=["dmar", "hop"],
                        params=PARAMS, progress=False)
    index.save(tmp_path / "idx")
    index.add(demo_corpus.take(np.arange(SPLIT, len(demo_corpus))))
    index.save()
    dirs = sorted(tmp_path.glob("idx/**/pipelines/*"), key=lambda d: (d.parent.parent.name, d.name))
    assert len(dirs) == 4
    later = [d for d in dirs if d.parent.parent != dirs[0].parent.parent]
    assert sorted(len(list(d.iterdir())) == 1 and (d / SAME_STATE).is_file() for d in later) == [False, True]
    assert verify_index(tmp_path / "idx") == []
    counted["kg"] = 0
    loaded = Index.load(tmp_path / "idx", embedder=HashingEmbedder(64), progress=False)
    dmar, hop = loaded.pipelines["dmar"], loaded.pipelines["hop"]
    assert all(getattr(dmar, a) is getattr(hop, a) for a in STATE)
    assert counted["kg"] == 1  # the graph after the delta, built once (the stored one is read)
    assert not [k for k in loaded.components._fitted if k[:1] == ("stored",)]
    for name in ("dmar", "hop"):
        same_results(index, loaded, name)


def test_the_shared_state_is_saved_once(tmp_path, demo_corpus):
    index = Index.build(demo_corpus, embedder=HashingEmbedder(64), pipelines=["hop", "dmar"], params=PARAMS,
                        progress=False)
    index.save(tmp_path / "idx")
    (hop_dir,) = tmp_path.glob("idx/**/pipelines/hop")
    (dmar_dir,) = tmp_path.glob("idx/**/pipelines/dmar")
    assert [p.name for p in dmar_dir.iterdir()] == [SAME_STATE]
    assert json.loads((dmar_dir / SAME_STATE).read_text()) == {"pipeline": "hop"}
    assert any(p.suffix == ".npy" for p in hop_dir.iterdir())
    assert verify_index(tmp_path / "idx") == []
    loaded = Index.load(tmp_path / "idx", embedder=HashingEmbedder(64), progress=False)
    assert all(getattr(loaded.pipelines["dmar"], a) is getattr(loaded.pipelines["hop"], a) for a in STATE)
    for name in ("dmar", "hop"):
        same_results(index, loaded, name)
    index.pipelines["dmar"].train_gnn(1)  # states no longer the same: each saved whole
    index.save(tmp_path / "idx2")
    (dmar_dir,) = tmp_path.glob("idx2/**/pipelines/dmar")
    assert not (dmar_dir / SAME_STATE).exists()
    same_results(index, Index.load(tmp_path / "idx2", embedder=HashingEmbedder(64), progress=False), "dmar")


def test_stored_state_reads_the_folder_named_once(tmp_path, demo_corpus):
    comp = Components(np.eye(4, dtype=np.float32))
    for name in ("dmar", "hop"):
        (tmp_path / name).mkdir()
    (tmp_path / "hop" / SAME_STATE).write_text(json.dumps({"pipeline": "dmar"}))
    read = []
    state = comp.stored_state(tmp_path / "dmar", 4, lambda d: read.append(d.name) or object())
    assert comp.stored_state(tmp_path / "hop", 4, lambda d: read.append(d.name) or object()) is state
    assert read == ["dmar"]
    for bad in ("../dmar", "missing", "hop", 3):
        (tmp_path / "hop" / SAME_STATE).write_text(json.dumps({"pipeline": bad}))
        with pytest.raises(IndexFormatError, match=SAME_STATE):
            comp.stored_state(tmp_path / "hop", 4, lambda d: object())


def test_shared_fit_is_built_once_per_key_and_forgotten_when_rows_grow(demo_corpus):
    X = HashingEmbedder(16).encode(demo_corpus.embedding_texts())
    comp = Components(X[:SPLIT], demo_corpus.take(np.arange(SPLIT)))
    made = []
    first = comp.shared_fit("k", lambda: made.append(1) or object())
    assert comp.shared_fit("k", lambda: made.append(1) or object()) is first and len(made) == 1
    assert comp.shared_fit("other", object) is not first
    comp.extend(X, demo_corpus, SPLIT)
    assert comp.shared_fit("k", lambda: made.append(1) or object()) is not first and len(made) == 2
    old = (np.zeros(2), np.ones(2))
    new = comp.shared_update("k", old, object)
    assert comp.shared_update("k", old, object) is new
    assert comp.shared_update("k", (old[0], np.ones(2)), object) is not new


def test_save_state_names_only_a_full_state_of_the_segment_being_written(tmp_path):
    class Part:
        pass

    comp = Components(np.eye(4, dtype=np.float32))
    parts = (Part(), Part())

    def write(directory):
        directory.mkdir(parents=True)
        (directory / "state.npy").write_bytes(b"x")

    comp.save_state(tmp_path / "seg" / "hop", parts, write)
    comp.save_state(tmp_path / "seg" / "dmar", parts, write)
    assert [p.name for p in (tmp_path / "seg" / "dmar").iterdir()] == [SAME_STATE]
    comp.save_state(tmp_path / "seg" / "third", parts, write)  # never a folder that names another
    assert json.loads((tmp_path / "seg" / "third" / SAME_STATE).read_text()) == {"pipeline": "hop"}
    comp.begin_segment_write()  # a new write of the same segment name: the earlier folders are forgotten
    comp.save_state(tmp_path / "seg" / "dmar2", parts, write)
    assert (tmp_path / "seg" / "dmar2" / "state.npy").is_file()
