"""Parameters as data, in three kinds (fit, search, run settings), validated in one place and reached by
constructors, Index.pipeline overrides, Index params, per-call search parameters, the CLI and the server."""
from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np

import pytest

from hopgraph import Index
from hopgraph.cli import main
from hopgraph.engine import storage
from hopgraph.assignments import parse_assignments
from hopgraph.engine.params import RUN_SETTINGS, DeprecatedParameterWarning, InvalidParameter, RunSettings
from hopgraph.engine.pipelines import pipeline_class, pipeline_names
from hopgraph.engine.pipelines.base import RefitNeeded
from hopgraph.engine.pipelines.dmar import DMARSearch
from hopgraph.engine.pipelines.g3rag import G3RAG, G3RAGFit, G3RAGSearch
from hopgraph.engine.pipelines.stitch import STITCHSearch


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


def param_fields(name: str) -> list[tuple[str, dataclasses.Field]]:
    """(kind, field) of every fit and search parameter of pipeline ``name``."""
    cls = pipeline_class(name)
    return [(kind, f) for kind, P in (("fit", cls.FitParams), ("search", cls.SearchParams)) for f in dataclasses.fields(P)]


CASES = [(name, field.name, bad)
         for name in pipeline_names()
         for _, field in param_fields(name)
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


def test_every_parameter_has_a_domain_and_one_kind():
    for name in pipeline_names():
        fields = param_fields(name)
        for _, field in fields:
            assert "domain" in field.metadata, (name, field.name)
        names = [f.name for _, f in fields]
        assert len(names) == len(set(names)), f"{name}: a name is both a fit and a search parameter"
        assert not set(names) & set(RUN_SETTINGS), f"{name}: a run setting is a parameter"
    assert len({(p, n) for p, n, _ in CASES}) >= 80


def test_unknown_parameter_lists_the_known_ones(empty_index):
    with pytest.raises(InvalidParameter, match=r"g3rag: unknown parameter 'Scoring'; fit parameters: n_neighbors, "
                                               r"sim_min.*search parameters: .*scoring"):
        empty_index.pipeline("g3rag", Scoring="fused")
    with pytest.raises(InvalidParameter, match="scoring.*one of 'mask', 'fused', got 'Fused'"):
        G3RAG(scoring="Fused")
    with pytest.raises(InvalidParameter, match="gamma.*>= 0, got -1.0"):
        G3RAG(gamma=-1.0)
    with pytest.raises(InvalidParameter, match="sim_min.*must not exceed sim_max"):
        G3RAGFit(sim_min=0.95)
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        Index.build(["a b", "c d"], embedder="hashing-16", pipelines=[], params={"nope": {}}, progress=False)
    with pytest.raises(InvalidParameter, match="bm25: parameter 'b'"):
        Index.build(["a b", "c d"], embedder="hashing-16", pipelines=[], params={"bm25": {"b": 2}}, progress=False)


def test_params_are_frozen_data_in_three_kinds():
    pipe = G3RAG(published=True, n_neighbors=7)
    p = pipe.search_defaults
    assert (p.scoring, p.seed_source, p.n_seeds) == ("mask", "dense", 3) and p == G3RAGSearch.published()
    assert pipe.fit_params == G3RAGFit(n_neighbors=7) and pipe.settings == RunSettings()
    assert G3RAGSearch.published(n_seeds=5).n_seeds == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.gamma = 1.0  # type: ignore[misc]
    assert STITCHSearch.published().delta_mode == "absolute" and STITCHSearch().delta_mode == "relative"
    assert "gamma" in G3RAGSearch.names() and "n_neighbors" in G3RAGFit.names()
    # get_params holds both kinds as JSON; it makes the same pipeline again
    again = G3RAG(json.loads(json.dumps(G3RAG(n_neighbors=7, gamma=0.5).get_params())))
    assert again.fit_params == G3RAGFit(n_neighbors=7) and again.search_defaults.gamma == 0.5
    assert G3RAGFit(n_neighbors=3.0).n_neighbors == 3 and isinstance(G3RAGFit(n_neighbors=3.0).n_neighbors, int)
    with pytest.raises(InvalidParameter, match="device"):
        RunSettings(device="tpu")
    with pytest.raises(InvalidParameter, match="threads"):
        RunSettings(threads=0)


def test_old_names_warn_and_name_the_new_one():
    with pytest.warns(DeprecatedParameterWarning, match="'seed_k' is now called 'n_seeds'"):
        assert G3RAG(seed_k=5).search_defaults.n_seeds == 5
    with pytest.warns(DeprecatedParameterWarning, match="'k' is now called 'n_neighbors'"):
        assert G3RAG(k=9).fit_params.n_neighbors == 9
    with pytest.warns(DeprecatedParameterWarning, match="'device' is a run setting"):
        pipe = G3RAG(device="cpu")
    assert pipe.settings.device == "cpu"
    with pytest.warns(DeprecatedParameterWarning, match="'T' is now called 'shapley_samples'"):
        assert DMARSearch.create(T=7).shapley_samples == 7
    with pytest.raises(InvalidParameter, match="'seed_k' and 'n_seeds' name the same parameter"):
        G3RAGSearch.create(seed_k=1, n_seeds=2)
    # stored old names are read silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert G3RAGFit.from_saved({"k": 4}).n_neighbors == 4


def test_search_parameters_are_per_call_and_fit_parameters_refuse(empty_index):
    pipe = empty_index.pipeline("g3rag")
    Q = empty_index.embed_queries(["who founded the prize"])
    a = pipe.search(Q, 3, gamma=0.5)
    assert pipe.search_defaults.gamma == 0.02, "a call's search parameters are not stored"
    assert np.array_equal(a[0], pipe.with_search_defaults(gamma=0.5).search(Q, 3)[0])
    with pytest.raises(RefitNeeded, match="'n_neighbors' are fit parameters"):
        pipe.search(Q, 3, n_neighbors=4)
    with pytest.raises(InvalidParameter, match="unknown search parameter"):
        pipe.search(Q, 3, Gamma=1)


def test_variants_search_share_fit_refit(empty_index):
    base = empty_index.pipeline("hybrid")
    v = empty_index.pipeline("hybrid", fusion_depth=10)
    assert v.components is base.components and v.search_defaults.fusion_depth == 10
    assert base.search_defaults.fusion_depth == 100
    g = empty_index.pipeline("g3rag")
    refit = empty_index.pipeline("g3rag", n_neighbors=4)
    assert refit.graph_ is not g.graph_ and refit.components is g.components
    assert empty_index.pipeline("g3rag", gamma=0.1).graph_ is g.graph_


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
                 "--pipelines", "dense,bm25,g3rag", "--param", "g3rag.gamma=0.1"]) == 2
    assert "a search parameter, not stored with an index" in capsys.readouterr().err
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-16", "-q",
                 "--pipelines", "dense,bm25,g3rag", "--param", "g3rag.n_neighbors=4", "--param", "bm25.k1=1.2"]) == 0
    manifest = storage.read_manifest(out)
    assert manifest["pipelines"]["g3rag"]["params"]["n_neighbors"] == 4 and manifest["params"]["bm25"] == {"k1": 1.2}
    assert "gamma" not in manifest["pipelines"]["g3rag"]["params"], "search parameters are never stored"
    capsys.readouterr()
    assert main(["search", str(out), "topic 1", "--pipeline", "g3rag", "--param", "gamma=-2", "-q"]) == 2
    assert "parameter 'gamma'" in capsys.readouterr().err
    assert main(["search", str(out), "topic 1", "--pipeline", "g3rag", "--param", "gamma=0.3", "--json",
                 "-q"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["hits"]
