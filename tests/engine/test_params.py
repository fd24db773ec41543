"""Parameters as data (issue 10): one frozen dataclass per pipeline, validated in one place,
reached by constructors, Index.pipeline overrides, Index params, the CLI and the server."""
from __future__ import annotations

import dataclasses
import json

import pytest

from hopgraph import Index
from hopgraph.cli import main
from hopgraph.engine import storage
from hopgraph.engine.params import InvalidParameter, parse_assignments
from hopgraph.engine.pipelines import pipeline_class, pipeline_names
from hopgraph.engine.pipelines.g3rag.pipeline import G3RAG, G3RAGParams
from hopgraph.engine.pipelines.stitch.pipeline import STITCHParams


def bad_values(domain) -> list:
    """Values outside a field's domain: a wrong type, and each side of every bound or choice list."""
    if domain.kind == "bool":
        return ["yes", 1]
    if domain.choices is not None:
        return ["not-a-choice", 3]
    if domain.kind in ("int", "float"):
        out = ["3"]
        if domain.low is not None:
            out.append(domain.low if domain.low_open else domain.low - 1)
        if domain.high is not None:
            out.append(domain.high if domain.high_open else domain.high + 1)
        if domain.kind == "int":
            out.append(2.5)
        else:
            out.append(float("nan"))
        return out
    if domain.kind == "path":
        return ["", 7]
    return [123]  # an "any" field with a predicate (the DMAR generator)


CASES = [(name, field.name, bad)
         for name in pipeline_names()
         for field in dataclasses.fields(pipeline_class(name).Params)
         for bad in bad_values(field.metadata["domain"])]


@pytest.fixture(scope="module")
def empty_index(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=[], progress=False)


@pytest.mark.parametrize("pipeline,param,bad", CASES, ids=[f"{p}.{n}={b!r}" for p, n, b in CASES])
def test_invalid_override_raises_naming_the_parameter(empty_index, pipeline, param, bad):
    with pytest.raises(InvalidParameter, match=rf"{pipeline}: parameter '{param}' must be") as err:
        empty_index.pipeline(pipeline, **{param: bad})
    assert isinstance(err.value, ValueError)
    assert not empty_index.pipelines, "an invalid override must be refused before anything is fitted"


def test_every_restricted_parameter_is_covered():
    # every field of every pipeline has a domain, so the parametrised test covers all of them
    for name in pipeline_names():
        for field in dataclasses.fields(pipeline_class(name).Params):
            assert "domain" in field.metadata, (name, field.name)
    assert len({(p, n) for p, n, _ in CASES}) >= 80


def test_unknown_parameter_lists_the_known_ones(empty_index):
    with pytest.raises(InvalidParameter, match=r"g3rag: unknown parameter\(s\) 'Scoring'; known: k, sim_min"):
        empty_index.pipeline("g3rag", Scoring="fused")
    with pytest.raises(InvalidParameter, match="scoring.*one of 'mask', 'fused', got 'Fused'"):
        G3RAG(scoring="Fused")
    with pytest.raises(InvalidParameter, match="gamma.*>= 0, got -1.0"):
        G3RAG(gamma=-1.0)
    with pytest.raises(InvalidParameter, match="sim_min.*must not exceed sim_max"):
        G3RAGParams(sim_min=0.95)
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        Index.build(["a b", "c d"], embedder="hashing-16", pipelines=[], params={"nope": {}}, progress=False)
    with pytest.raises(InvalidParameter, match="bm25: parameter 'b'"):
        Index.build(["a b", "c d"], embedder="hashing-16", pipelines=[], params={"bm25": {"b": 2}}, progress=False)


def test_params_are_frozen_data_with_named_presets():
    p = G3RAGParams.published()
    assert (p.scoring, p.seeds, p.seed_k) == ("mask", "dense", 3)
    assert G3RAGParams.improved() == G3RAGParams() and G3RAG(published=True).params == p
    assert G3RAGParams.published(seed_k=5).seed_k == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.gamma = 1.0  # type: ignore[misc]
    assert STITCHParams.published().delta_mode == "absolute" and STITCHParams().delta_mode == "relative"
    assert "gamma" in G3RAGParams.query_names() and "k" not in G3RAGParams.query_names()
    # get_params is the dataclass as JSON; it makes the same parameters again
    assert G3RAGParams.create(json.loads(json.dumps(G3RAG(k=7).get_params()))) == G3RAGParams(k=7)
    assert G3RAGParams(k=3.0).k == 3 and isinstance(G3RAGParams(k=3.0).k, int)


def test_variants_query_time_share_fit_time_refit(empty_index):
    base = empty_index.pipeline("hybrid")
    v = empty_index.pipeline("hybrid", depth=10)
    assert v.components is base.components and v.depth == 10 and base.depth == 100
    g = empty_index.pipeline("g3rag")
    refit = empty_index.pipeline("g3rag", k=4)
    assert refit.graph is not g.graph and refit.components is g.components
    assert empty_index.pipeline("g3rag", gamma=0.1).graph is g.graph


def test_parse_assignments():
    assert parse_assignments(["g3rag.gamma=0.05", "bm25.stopwords=null", "stitch.relevance=dense",
                              "seed_k=4"], "dmar") == {
        "g3rag": {"gamma": 0.05}, "bm25": {"stopwords": None}, "stitch": {"relevance": "dense"},
        "dmar": {"seed_k": 4}}
    with pytest.raises(ValueError, match=r"expected \[PIPELINE.\]NAME=VALUE"):
        parse_assignments(["gamma"])
    with pytest.raises(ValueError, match="say which pipeline"):
        parse_assignments(["gamma=1"])


def test_cli_param_is_validated_and_applied(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "title": f"T{i}", "text": f"passage {i} about topic {i % 3}"})
                              + "\n" for i in range(12)))
    out = tmp_path / "idx"
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-16", "-q",
                 "--pipelines", "dense,bm25,g3rag", "--param", "g3rag.scoring=Fused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "parameter 'scoring' must be one of 'mask', 'fused', got 'Fused'" in err[0]
    assert not out.exists()
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-16", "-q",
                 "--pipelines", "dense,bm25,g3rag", "--param", "g3rag.k=4", "--param", "bm25.k1=1.2"]) == 0
    manifest = json.loads((storage.current_generation(out) / "manifest.json").read_text())
    assert manifest["pipelines"]["g3rag"]["params"]["k"] == 4 and manifest["params"]["bm25"] == {"k1": 1.2}
    capsys.readouterr()
    assert main(["search", str(out), "topic 1", "--pipeline", "g3rag", "--param", "gamma=-2", "-q"]) == 2
    assert "parameter 'gamma'" in capsys.readouterr().err
    assert main(["search", str(out), "topic 1", "--pipeline", "g3rag", "--param", "gamma=0.3", "--json",
                 "-q"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["hits"]
