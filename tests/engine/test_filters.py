"""The metadata filter language: every operator against a plain-Python reading of its definition, on
every pipeline, with k hits whenever k passages pass; the per-field cache is bounded."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hopgraph import Index, InputError
from hopgraph.demo import demo_corpus
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.cancel import CancelToken, SearchCancelled, cancellable
from hopgraph.engine.filters import (MAX_FIELDS, MAX_WHERE_CLAUSES, MAX_WHERE_DEPTH, MAX_WHERE_VALUES,
                                     EmptyFilterWarning, MetadataIndex, check_where)

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")
QUESTIONS = ["Who designed the bridge in Bristol?", "Which club plays at Millbrook Park?",
             "What novel did the Irish writer publish?"]
MISSING = object()


def meta(i: int) -> dict:
    """Metadata of passage i: ints, floats, ISO dates, booleans, lists, a field absent or null."""
    m = {"year": 1990 + i % 10, "score": round(0.1 * (i % 7), 1), "date": f"20{i % 3:02d}-0{1 + i % 9}-15",
         "lang": ["en", "de", "fr"][i % 3], "tags": ["even" if i % 2 == 0 else "odd", "all"]}
    if i % 4 == 0:
        m["draft"] = i % 8 == 0
    if i % 5 == 0:
        m["editor"] = None
    elif i % 5 == 1:
        m["editor"] = "ana"
    return m


def records() -> list[dict]:
    c = demo_corpus()
    return [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i], "metadata": meta(i)} for i in range(len(c))]


# ---------------------------------------------------------------------- a reference reading of the definitions
def _values(m: dict, field: str) -> list:
    v = m.get(field, MISSING)
    if v is MISSING or v is None:
        return []
    return v if isinstance(v, list) else [v]


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def _ordered(a, b) -> bool:
    """a and b comparable by $gt.. : both numbers (not booleans) or both strings."""
    num = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    return (num(a) and num(b)) or (isinstance(a, str) and isinstance(b, str))


def passes(m: dict, where: dict) -> bool:
    for key, cond in where.items():
        if key == "$and":
            ok = all(passes(m, c) for c in cond)
        elif key == "$or":
            ok = any(passes(m, c) for c in cond)
        elif key == "$not":
            ok = not passes(m, cond)
        elif isinstance(cond, dict):
            ok = all(field_passes(m, key, op, v) for op, v in cond.items())
        elif isinstance(cond, list):
            ok = field_passes(m, key, "$in", cond)
        else:
            ok = field_passes(m, key, "$eq", cond)
        if not ok:
            return False
    return True


def field_passes(m: dict, field: str, op: str, v) -> bool:
    vals = _values(m, field)
    if op == "$eq":
        return not vals if v is None else any(_same(x, v) for x in vals)
    if op == "$ne":
        return not field_passes(m, field, "$eq", v)
    if op == "$in":
        return any(field_passes(m, field, "$eq", x) for x in v)
    if op == "$nin":
        return not field_passes(m, field, "$in", v)
    if op == "$exists":
        return bool(vals) == v
    cmp = {"$gt": lambda a: a > v, "$gte": lambda a: a >= v, "$lt": lambda a: a < v, "$lte": lambda a: a <= v}[op]
    return any(_ordered(x, v) and cmp(x) for x in vals)


FILTERS = [
    {"year": 1993},
    {"year": 1993.0},
    {"lang": ["en", "fr"]},
    {"tags": "even"},
    {"year": {"$eq": 1995}},
    {"year": {"$ne": 1995}},
    {"lang": {"$in": ["de"]}},
    {"lang": {"$nin": ["de", "fr"]}},
    {"year": {"$gt": 1996}},
    {"year": {"$gte": 1996, "$lt": 1998}},
    {"score": {"$lte": 0.2}},
    {"date": {"$gte": "2001-01-01", "$lt": "2002-01-01"}},
    {"draft": True},
    {"draft": {"$exists": True}},
    {"draft": {"$exists": False}},
    {"editor": None},
    {"editor": {"$exists": True}},
    {"editor": {"$ne": "ana"}},
    {"$or": [{"year": {"$lt": 1992}}, {"lang": "fr"}]},
    {"$and": [{"tags": "odd"}, {"year": {"$gte": 1995}}]},
    {"$not": {"lang": "en"}},
    {"$not": {"$or": [{"year": 1990}, {"year": 1991}]}, "tags": "all"},
    {"year": {"$gt": "1995"}},      # a string bound never matches a number
    {"draft": {"$eq": 1}},          # booleans are not numbers
]


@pytest.fixture(scope="module")
def index() -> Index:
    return Index.build(records(), embedder="hashing-64", pipelines=list(ALL), params={"dmar": {"gnn_steps": 2}},
                       progress=False)


def test_every_operator_matches_its_definition(index):
    metas = [meta(i) for i in range(len(index.corpus))]
    mi = MetadataIndex(index.corpus)
    for where in FILTERS:
        want = np.array([passes(m, where) for m in metas])
        assert np.array_equal(mi.mask(where), want), where
    assert not mi.mask({"year": {"$gt": "1995"}}).any() and not mi.mask({"draft": {"$eq": 1}}).any()


@pytest.mark.parametrize("pipeline", ALL)
def test_every_pipeline_returns_k_passing_hits_whenever_k_pass(index, pipeline):
    metas = [meta(i) for i in range(len(index.corpus))]
    for where in FILTERS:
        passing = {i for i, m in enumerate(metas) if passes(m, where)}
        if not passing:
            continue
        for k in (3, 5):
            ids = index.search_arrays(QUESTIONS, pipeline=pipeline, k=k, where=where)[0]
            got = ids[ids >= 0]
            assert set(got.tolist()) <= passing, (pipeline, where)
            assert ((ids >= 0).sum(1) == min(k, len(passing))).all(), (pipeline, where, ids)


def test_a_filter_passing_nothing_warns_and_returns_nothing(index):
    with pytest.warns(EmptyFilterWarning, match=r"passes no passage"):
        ids = index.search_arrays(QUESTIONS, pipeline="bm25", k=3, where={"year": {"$gt": 3000}})[0]
    assert (ids == -1).all()


@pytest.mark.parametrize("where, message", [
    ({"year": {"$gt": [1]}}, r"where\['year'\]\['\$gt'\]: filter values must be"),
    ({"year": {"$gt": True}}, r"\$gt compares numbers or strings"),
    ({"year": {"$in": 1990}}, r"where\['year'\]\['\$in'\] must be a list"),
    ({"year": {"$nin": []}}, "empty list"),
    ({"year": {"$exists": 1}}, "must be true or false"),
    ({"year": {"$regex": "x"}}, r"unknown operator '\$regex'"),
    ({"$nor": [{"year": 1}]}, r"unknown operator '\$nor'"),
    ({"$or": {"year": 1}}, r"where\['\$or'\] must be a non-empty list"),
    ({"$and": [{"year": 1}, 3]}, r"where\['\$and'\]\[1\] must map metadata fields"),
    ({"$not": [1]}, r"where\['\$not'\] must map"),
])
def test_malformed_filters_name_the_bad_part(index, where, message):
    with pytest.raises(InputError, match=message):
        index.search(QUESTIONS[:1], pipeline="dense", where=where)


def corpus(n: int = 40) -> Corpus:
    meta = [json.dumps({"year": 2000 + i % 4, f"f{i % 7}": "x", "tags": ["a", "b"] if i % 2 else ["c"]})
            for i in range(n)]
    return Corpus([f"p{i}" for i in range(n)], [""] * n, [f"text {i}" for i in range(n)], metadata=meta)


def test_field_cache_is_bounded_and_unknown_fields_are_free():
    c = corpus()
    index = MetadataIndex(c, max_fields=4)
    want_year = np.array([i % 4 == 1 for i in range(len(c))])
    np.testing.assert_array_equal(index.mask({"year": 2001}), want_year)
    for i in range(5000):  # a request naming fresh field names, as an abusive client would
        assert not index.mask({f"no-such-field-{i}": "v"}).any()
        assert index.mask({f"no-such-field-{i}": None}).all()  # a missing field is None
    assert len(index._fields) == 1  # unknown names were never cached
    for i in range(7):
        index.mask({f"f{i}": "x"})
    assert len(index._fields) == 4
    np.testing.assert_array_equal(index.mask({"year": 2001}), want_year)  # rebuilt after eviction: same mask
    np.testing.assert_array_equal(index.mask({"tags": "a"}), np.arange(len(c)) % 2 == 1)
    assert MetadataIndex(c)._fields.maxsize == MAX_FIELDS


# ---------------------------------------------------------------------- size bounds and deadlines
def nested(where: dict, depth: int, op: str = "$and") -> dict:
    """``where`` wrapped in ``op`` until the filter is ``depth`` objects deep."""
    for _ in range(depth - 1):
        where = {op: [where]} if op != "$not" else {"$not": where}
    return where


@pytest.mark.parametrize("where, bound", [
    (nested({"year": 1990}, MAX_WHERE_DEPTH + 1), f"nesting depth through $and / $or / $not is {MAX_WHERE_DEPTH}"),
    (nested({"year": 1990}, MAX_WHERE_DEPTH + 1, "$not"), f"nesting depth through $and / $or / $not is "
                                                          f"{MAX_WHERE_DEPTH}"),
    ({"$and": [{"$or": [{"year": y} for y in range(MAX_WHERE_CLAUSES)]}]},
     f"the bound on clauses in one filter is {MAX_WHERE_CLAUSES}"),
    ({"$or": [{"year": {"$gt": 0, "$lt": y}} for y in range(MAX_WHERE_CLAUSES // 2 + 1)]},
     f"the bound on clauses in one filter is {MAX_WHERE_CLAUSES}"),
    ({"$or": [{}] * (MAX_WHERE_CLAUSES + 1)}, f"the bound on clauses in one filter is {MAX_WHERE_CLAUSES}"),
    ({"$or": [{"year": {"$in": list(range(MAX_WHERE_VALUES // 2))}},
              {"$not": {"lang": {"$nin": [str(v) for v in range(MAX_WHERE_VALUES // 2 + 1)]}}}]},
     f"the bound on listed values is {MAX_WHERE_VALUES}"),
])
def test_filters_over_a_bound_are_refused_before_evaluation(index, where, bound, monkeypatch):
    evaluated = []
    monkeypatch.setattr(MetadataIndex, "_field_mask", lambda *a: evaluated.append(a))
    with pytest.raises(InputError, match=re.escape(bound)):
        index.search(QUESTIONS[:1], pipeline="dense", where=where)
    with pytest.raises(InputError, match=re.escape(bound)):
        MetadataIndex(index.corpus).mask(where)
    assert not evaluated


def test_a_filter_at_every_bound_matches_its_definition(index):
    n_in = MAX_WHERE_VALUES // 4
    leaves = [{"year": {"$in": list(range(1990, 1990 + n_in))}}, {"lang": {"$nin": ["fr", *map(str, range(n_in - 1))]}},
              {"score": [0.3, 0.5, *range(10, 10 + n_in - 2)]}, {"editor": ["ana", None, *map(str, range(n_in - 2))]}]
    deep = nested({"year": {"$gte": 1993}}, MAX_WHERE_DEPTH - 1, "$not")  # 1 + 14 nested: depth 16 under $and
    used = 4 + (MAX_WHERE_DEPTH - 1) + 1  # the leaves, the $nots and the inner comparison, the $and
    filler = [{"date": {"$gte": "2000-01-01"}} for _ in range(MAX_WHERE_CLAUSES - used - 1)]  # - the $or
    where = {"$and": [*leaves, deep, {"$or": filler}]}
    assert check_where(where) == (MAX_WHERE_CLAUSES, MAX_WHERE_VALUES, MAX_WHERE_DEPTH, 5)
    metas = [meta(i) for i in range(len(index.corpus))]
    want = np.array([passes(m, where) for m in metas])
    assert want.any() and not want.all()
    np.testing.assert_array_equal(MetadataIndex(index.corpus).mask(where), want)


class CountingToken(CancelToken):
    """A token that expires after ``allowed`` checks (a deadline passed part-way through the work)."""

    def __init__(self, allowed: int) -> None:
        super().__init__(None, "search")
        self.allowed, self.checks = allowed, 0

    def check(self) -> None:
        self.checks += 1
        if self.checks > self.allowed:
            raise SearchCancelled("search ran past its deadline")


def test_the_evaluation_of_a_filter_honours_the_deadline(index):
    mi = MetadataIndex(index.corpus)
    where = {"$or": [{"year": y} for y in range(500)]}
    token = CountingToken(allowed=10)
    with pytest.raises(SearchCancelled, match="deadline"), cancellable(token):
        mi.mask(where)
    assert token.checks == 11  # stopped at the first checkpoint past the deadline, not after the 500 clauses
    with pytest.raises(SearchCancelled), cancellable(CountingToken(allowed=1)):
        index.search(QUESTIONS[:1], pipeline="dense", where=where)


def test_a_filter_that_passes_nothing_says_why(index):
    """The EmptyFilterWarning names a field no passage has (and the fields there are) and a range
    comparison of a field with a value of a kind none of its values has; a filter that is merely
    narrow says nothing more."""
    from hopgraph.engine.filters import EmptyFilterWarning

    Q = index.embed_queries(["a question"])
    for where, note in (({"yaer": 1990}, "no passage has the metadata field 'yaer' (fields: "),
                        ({"$or": [{"year": {"$gt": ">3000"}}]}, "field 'year' holds number, compared ($gt) with the "
                                                               "text \">3000\""),
                        ({"year": 1890}, None)):
        with pytest.warns(EmptyFilterWarning) as caught:
            index.search_arrays(["a question"], pipeline="dense", k=3, query_embeddings=Q, where=where)
        message = str(caught[0].message)
        assert "passes no passage" in message
        assert (note in message) if note else message.endswith("no results"), message
