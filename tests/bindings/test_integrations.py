"""Framework retrievers: hopgraph.integrations.langchain / .llamaindex against the real langchain-core
and llama-index-core, over a local Index and over a served index (Client, AsyncClient)."""
from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import importlib.util

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import hopgraph  # noqa: E402
from hopgraph.client import RequestRejected  # noqa: E402
from hopgraph.demo import DEMO_QUESTIONS  # noqa: E402
from hopgraph.integrations import _source as hg_source  # noqa: E402
from hopgraph.integrations import langchain as hg_langchain  # noqa: E402
from hopgraph.integrations import llamaindex as hg_llamaindex  # noqa: E402
from hopgraph.serve import BackgroundServer, ServeLimits, create_app  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever as LCBaseRetriever  # noqa: E402
from llama_index.core.retrievers import BaseRetriever as LIBaseRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ["dense", "bm25", "hybrid"]
K = 4
QUESTIONS = list(DEMO_QUESTIONS) + ["Which engineer built the Great Western Railway?"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, demo_corpus) -> Path:
    path = tmp_path_factory.mktemp("integrations") / "index"
    hopgraph.Index.build(demo_corpus, embedder="hashing-64", pipelines=PIPELINES, progress=False).save(path)
    return path


@pytest.fixture(scope="module")
def index(index_dir) -> hopgraph.Index:
    return hopgraph.Index.load(index_dir, progress=False)


@pytest.fixture(scope="module")
def server(index_dir):
    limits = ServeLimits(max_batch=16, max_query_chars=300, max_k=20, max_body_bytes=64 * 1024)
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), limits)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with hopgraph.Client(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def meta_index() -> hopgraph.Index:
    """Passages with their own metadata fields (url, year)."""
    records = [{"id": f"m{i}", "title": t, "text": x, "url": f"https://example.org/{i}", "year": 2000 + i}
               for i, (t, x) in enumerate([
                   ("Brunel", "Isambard Kingdom Brunel designed the Clifton Suspension Bridge in Bristol."),
                   ("Bristol", "Bristol is a city in England on the River Avon."),
                   ("Harlow", "Peter Harlow is a painter who was born in Bristol."),
                   ("Prize", "The Harrow Prize was founded by a lighthouse keeper in 1950.")])]
    return hopgraph.Index.build(records, embedder="hashing-64", pipelines=["hybrid"], progress=False)


class CountingSource:
    """Wraps a source: counts ``search`` calls and the questions of each; forwards ``corpus``."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.calls: list[list[str]] = []
        if hasattr(source, "corpus"):
            self.corpus = source.corpus

    def search(self, questions, pipeline="g3rag", k=5, **kwargs):
        self.calls.append(list(questions))
        return self.source.search(questions, pipeline=pipeline, k=k, **kwargs)


class AsyncCountingSource:
    """An asynchronous client over a synchronous one (``search`` is a coroutine function); counts calls."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.calls: list[list[str]] = []

    async def search(self, questions, pipeline="g3rag", k=5, **kwargs):
        self.calls.append(list(questions))
        return await asyncio.to_thread(self.source.search, questions, pipeline=pipeline, k=k, **kwargs)


def expected_docs(index: hopgraph.Index, questions: list[str], pipeline: str, k: int = K) -> list[list[Document]]:
    """The LangChain documents that Index.search's hits must give (text and metadata from the corpus)."""
    out = []
    for hits in index.search(questions, pipeline=pipeline, k=k):
        docs = []
        for h in hits:
            row = index.corpus.position(h.id)
            meta = {**index.corpus.meta(row), "id": h.id, "title": h.title, "score": h.score, "rank": h.rank,
                    "pipeline": pipeline}
            docs.append(Document(id=h.id, page_content=index.corpus.texts[row], metadata=meta))
        out.append(docs)
    return out


# ---------------------------------------------------------------- LangChain, local Index
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_langchain_invoke_batch_abatch_equal_index_search(index, pipeline):
    retriever = hg_langchain.HopgraphRetriever(index=index, pipeline=pipeline, k=K)
    assert isinstance(retriever, LCBaseRetriever)
    expected = expected_docs(index, QUESTIONS, pipeline)
    assert all(0 < len(docs) <= K for docs in expected)
    assert [retriever.invoke(q) for q in QUESTIONS] == expected
    assert retriever.batch(QUESTIONS) == expected
    assert asyncio.run(retriever.abatch(QUESTIONS)) == expected
    assert asyncio.run(retriever.ainvoke(QUESTIONS[1])) == expected[1]
    assert all(d.page_content for docs in expected for d in docs)


def test_langchain_batch_and_abatch_search_once(index):
    source = CountingSource(index)
    retriever = hg_langchain.HopgraphRetriever(index=source, pipeline="hybrid", k=K)
    docs = retriever.batch(QUESTIONS)
    assert source.calls == [QUESTIONS]                     # one batched search, not one per question
    assert asyncio.run(retriever.abatch(QUESTIONS)) == docs
    assert source.calls == [QUESTIONS, QUESTIONS]
    assert retriever.batch([]) == [] and len(source.calls) == 2
    retriever.invoke(QUESTIONS[0])
    assert source.calls[-1] == [QUESTIONS[0]]


class RecordingHandler(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_retriever_start(self, serialized, query, **kwargs):
        self.events.append(("start", query))

    def on_retriever_end(self, documents, **kwargs):
        self.events.append(("end", [d.id for d in documents]))

    def on_retriever_error(self, error, **kwargs):
        self.events.append(("error", type(error).__name__))


def test_langchain_batch_traces_each_question_and_isolates_failures(index):
    handler = RecordingHandler()
    retriever = hg_langchain.HopgraphRetriever(index=index, pipeline="bm25", k=2)
    docs = retriever.batch(QUESTIONS[:2], config={"callbacks": [handler]})
    assert handler.events == [("start", QUESTIONS[0]), ("start", QUESTIONS[1]),
                              ("end", [d.id for d in docs[0]]), ("end", [d.id for d in docs[1]])]
    # a bad question: the whole batch raises, or with return_exceptions only that one is an exception
    with pytest.raises(hopgraph.InputError):
        retriever.batch([QUESTIONS[0], ""])
    out = retriever.batch([QUESTIONS[0], "", QUESTIONS[1]], return_exceptions=True)
    assert out[0] == docs[0] and out[2] == docs[1]
    assert isinstance(out[1], hopgraph.InputError)
    handler.events.clear()
    out = asyncio.run(retriever.abatch(["", QUESTIONS[1]], config={"callbacks": [handler]},
                                       return_exceptions=True))
    assert isinstance(out[0], hopgraph.InputError) and out[1] == docs[1]
    assert sorted(e[0] for e in handler.events) == ["end", "error", "start", "start"]


def test_langchain_passage_metadata_and_search_kwargs(meta_index):
    retriever = hg_langchain.HopgraphRetriever(index=meta_index, pipeline="hybrid", k=2)
    doc = retriever.invoke("Who designed the Clifton Suspension Bridge?")[0]
    row = meta_index.corpus.position(doc.id)
    assert doc.metadata["url"] == f"https://example.org/{row}" and doc.metadata["year"] == 2000 + row
    assert doc.page_content == meta_index.corpus.texts[row] and doc.metadata["pipeline"] == "hybrid"
    # search_kwargs reach Index.search (an invalid pipeline parameter is refused, naming it)
    bad = hg_langchain.HopgraphRetriever(index=meta_index, pipeline="hybrid", search_kwargs={"no_such": 1})
    with pytest.raises(hopgraph.InvalidParameter, match="no_such"):
        bad.invoke("bridge")


def test_langchain_uses_text_and_metadata_carried_by_hits():
    """A source whose hits carry ``text`` / ``metadata`` (no corpus) gives them unchanged."""
    class Source:
        def search(self, questions, pipeline="g3rag", k=5):
            return [[SimpleNamespace(id=f"x{i}", title="T", score=0.5, rank=1, text=f"text of {q}",
                                     metadata={"lang": "en"})] for i, q in enumerate(questions)]

    docs = hg_langchain.HopgraphRetriever(index=Source(), pipeline="dense", k=1).batch(["a", "b"])
    assert [d[0].page_content for d in docs] == ["text of a", "text of b"]
    assert docs[1][0].metadata == {"lang": "en", "id": "x1", "title": "T", "score": 0.5, "rank": 1,
                                   "pipeline": "dense"}


def test_langchain_rejects_bad_arguments(index):
    with pytest.raises(ValueError, match="index must be"):
        hg_langchain.HopgraphRetriever(index="not an index")
    with pytest.raises(ValueError):
        hg_langchain.HopgraphRetriever(index=index, k=0)
    with pytest.raises(ValueError, match="async_client"):
        hg_langchain.HopgraphRetriever(index=index, async_client=index)
    with pytest.raises(hopgraph.InputError, match="question string"):
        hg_langchain.HopgraphRetriever(index=index, pipeline="dense").batch([{"text": "q"}])


# ---------------------------------------------------------------- LangChain, served index
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_langchain_client_equals_index_search(client, index, pipeline):
    source = CountingSource(client)
    retriever = hg_langchain.HopgraphRetriever(index=source, pipeline=pipeline, k=K)
    batch = retriever.batch(QUESTIONS)
    assert len(source.calls) == 1                           # one HTTP request for the batch
    hits = client.search(QUESTIONS, pipeline=pipeline, k=K)
    expected = expected_docs(index, QUESTIONS, pipeline)
    for docs, want, client_hits in zip(batch, expected, hits):
        assert [d.id for d in docs] == [d.id for d in want]
        assert [d.metadata["score"] for d in docs] == pytest.approx([d.metadata["score"] for d in want], abs=1e-6)
        assert [(d.metadata["rank"], d.metadata["title"]) for d in docs] == \
               [(d.metadata["rank"], d.metadata["title"]) for d in want]
        # a client's hits carry passage text only where the service sends it
        assert [d.page_content for d in docs] == [getattr(h, "text", None) or "" for h in client_hits]
    assert [retriever.invoke(q) for q in QUESTIONS[:2]] == batch[:2]
    assert asyncio.run(retriever.abatch(QUESTIONS)) == batch


def test_langchain_async_client_is_awaited(client, index):
    async_source = AsyncCountingSource(client)
    sync_source = CountingSource(client)
    retriever = hg_langchain.HopgraphRetriever(index=sync_source, async_client=async_source, pipeline="dense", k=K)
    docs = asyncio.run(retriever.abatch(QUESTIONS))
    one = asyncio.run(retriever.ainvoke(QUESTIONS[0]))
    assert async_source.calls == [QUESTIONS, [QUESTIONS[0]]] and sync_source.calls == []
    assert one == docs[0] == retriever.invoke(QUESTIONS[0])
    assert [d.id for d in docs[2]] == [h.id for h in index.search([QUESTIONS[2]], pipeline="dense", k=K)[0]]
    # an asynchronous client alone also serves the synchronous API
    only_async = hg_langchain.HopgraphRetriever(index=AsyncCountingSource(client), pipeline="dense", k=K)
    assert only_async.batch(QUESTIONS) == docs


# ---------------------------------------------------------------- LlamaIndex
def expected_nodes(index: hopgraph.Index, questions: list[str], pipeline: str) -> list[list[NodeWithScore]]:
    return [[NodeWithScore(node=TextNode(id_=d.id, text=d.page_content, metadata=d.metadata),
                           score=d.metadata["score"]) for d in docs]
            for docs in expected_docs(index, questions, pipeline)]


def node_view(nodes: list[NodeWithScore]) -> list[tuple]:
    return [(n.node.node_id, n.node.get_content(), n.node.metadata, n.score) for n in nodes]


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_llamaindex_retrieve_equals_index_search(index, pipeline):
    source = CountingSource(index)
    retriever = hg_llamaindex.HopgraphRetriever(source, pipeline=pipeline, k=K)
    assert isinstance(retriever, LIBaseRetriever)
    expected = [node_view(n) for n in expected_nodes(index, QUESTIONS, pipeline)]
    assert [node_view(retriever.retrieve(q)) for q in QUESTIONS] == expected
    assert len(source.calls) == len(QUESTIONS)
    assert [node_view(n) for n in retriever.retrieve_batch(QUESTIONS)] == expected
    assert source.calls[-1] == QUESTIONS and len(source.calls) == len(QUESTIONS) + 1
    assert [node_view(n) for n in asyncio.run(retriever.aretrieve_batch(QUESTIONS))] == expected
    assert len(source.calls) == len(QUESTIONS) + 2
    assert node_view(asyncio.run(retriever.aretrieve(QueryBundle(QUESTIONS[2])))) == expected[2]
    assert node_view(retriever.retrieve(QueryBundle(QUESTIONS[1]))) == expected[1]


def test_llamaindex_metadata_client_and_async(meta_index, client, index):
    node = hg_llamaindex.HopgraphRetriever(meta_index, pipeline="hybrid", k=1).retrieve("Clifton bridge designer")[0]
    row = meta_index.corpus.position(node.node.node_id)
    assert node.node.metadata["year"] == 2000 + row and node.node.get_content() == meta_index.corpus.texts[row]
    # served index: ids and scores equal Index.search; one request per batch; async client awaited
    source, async_source = CountingSource(client), AsyncCountingSource(client)
    retriever = hg_llamaindex.HopgraphRetriever(source, pipeline="bm25", k=K, async_client=async_source)
    batch = retriever.retrieve_batch(QUESTIONS)
    assert len(source.calls) == 1
    for nodes, hits in zip(batch, index.search(QUESTIONS, pipeline="bm25", k=K)):
        assert [n.node.node_id for n in nodes] == [h.id for h in hits]
        assert [n.score for n in nodes] == pytest.approx([h.score for h in hits], abs=1e-6)
    assert [node_view(n) for n in asyncio.run(retriever.aretrieve_batch(QUESTIONS))] == [node_view(n) for n in batch]
    assert async_source.calls == [QUESTIONS] and len(source.calls) == 1


def test_llamaindex_rejects_bad_arguments(index):
    with pytest.raises(hopgraph.InputError, match="index must be"):
        hg_llamaindex.HopgraphRetriever(object())
    with pytest.raises(hopgraph.InputError, match="k must be"):
        hg_llamaindex.HopgraphRetriever(index, k=0)
    with pytest.raises(hopgraph.InputError, match="list of questions"):
        hg_llamaindex.HopgraphRetriever(index, pipeline="dense").retrieve_batch("one question")


# ---------------------------------------------------------------- packaging
def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
def test_import_hopgraph_imports_no_framework():
    r = _run("import sys, hopgraph, hopgraph.integrations\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'llama_index')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("module, blocked, extra", [("langchain", "langchain_core", "langchain"),
                                                    ("llamaindex", "llama_index", "llamaindex")])
def test_missing_framework_names_the_extra(module, blocked, extra):
    r = _run(f"import sys\nsys.modules[{blocked!r}] = None\n"
             f"try:\n    import hopgraph.integrations.{module}\n"
             f"except ModuleNotFoundError as e:\n    print(type(e).__name__, e.name, '|', e)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"ModuleNotFoundError {blocked}")
    assert f"pip install 'hopgraph[{extra}]'" in r.stdout


def test_pyproject_installs_the_integrations():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    spec = importlib.util.spec_from_file_location("hopgraph_setup", ROOT / "setup.py")
    setup_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_module)
    assert setup_module.package_dirs(ROOT)["hopgraph.integrations"] == "bindings/integrations"
    extras = project["project"]["optional-dependencies"]
    assert extras["langchain"] == ["langchain-core>=0.2"] and extras["llamaindex"] == ["llama-index-core>=0.10"]
    assert {"langchain-core>=0.2", "llama-index-core>=0.10"} <= set(extras["dev"])


def test_langchain_with_the_real_async_client_gets_passage_text(server, index):
    async def run() -> tuple[list, list]:
        async with hopgraph.AsyncClient(server.url) as aclient:
            retriever = hg_langchain.HopgraphRetriever(index=aclient, pipeline="hybrid", k=K)
            return await retriever.abatch(QUESTIONS), [await retriever.ainvoke(QUESTIONS[0])]

    batch, (one,) = asyncio.run(run())
    expected = expected_docs(index, QUESTIONS, "hybrid")
    for docs, want in zip(batch, expected):
        assert [d.id for d in docs] == [d.id for d in want]
        assert [d.page_content for d in docs] == [d.page_content for d in want]  # text from the service
        assert all(d.page_content for d in docs)
    assert one == batch[0]


# ---------------------------------------------------------------- search_kwargs, local and served alike
@pytest.fixture(scope="module")
def chunked_index(demo_corpus) -> hopgraph.Index:
    """The demo corpus in 8-word passages (several per document), for group_by_document."""
    return hopgraph.Index.build(demo_corpus, embedder="hashing-64", pipelines=PIPELINES, progress=False,
                                chunk_tokens=8, chunk_overlap=2)


@pytest.fixture(scope="module")
def chunked_server(chunked_index):
    with BackgroundServer(create_app(chunked_index, ServeLimits(max_k=20))) as srv:
        yield srv


def _view(index: hopgraph.Index, hits) -> list[tuple[str, float, str]]:
    return [(h.id, round(float(h.score), 6), index.corpus.meta(index.corpus.position(h.id))["document"])
            for h in hits]


SEARCH_KWARGS = [  # (retriever search_kwargs, the equivalent Index.search keywords)
    ({"rrf_k": 10}, {"rrf_k": 10}),
    ({"params": {"rrf_k": 10}, "group_by_document": True}, {"rrf_k": 10, "group_by_document": True}),
    ({"rrf_k": 7, "group_by_document": True, "with_text": False},
     {"rrf_k": 7, "group_by_document": True, "with_text": False}),
]


@pytest.mark.parametrize("search_kwargs, index_kwargs", SEARCH_KWARGS)
def test_search_kwargs_mean_the_same_for_index_client_and_async_client(chunked_index, chunked_server,
                                                                       search_kwargs, index_kwargs):
    qs = ["Who designed the Clifton Suspension Bridge?", "comet discovered by an amateur astronomer"]
    want = chunked_index.search(qs, pipeline="hybrid", k=K, **index_kwargs)
    default = chunked_index.search(qs, pipeline="hybrid", k=K)
    assert [_view(chunked_index, h) for h in want] != [_view(chunked_index, h) for h in default]  # it can fail
    if index_kwargs.get("group_by_document"):
        assert all(len({d for _, _, d in _view(chunked_index, h)}) == K for h in want)
    want_view = [_view(chunked_index, h) for h in want]
    want_text = [[h.text or "" for h in hits] for hits in want]

    def lc_view(docs):
        return [[(d.id, round(d.metadata["score"], 6), d.metadata["document"]) for d in ds] for ds in docs], \
               [[d.page_content for d in ds] for ds in docs]

    def li_view(nodes):
        return [[(n.node.node_id, round(n.score, 6), n.node.metadata["document"]) for n in ns] for ns in nodes], \
               [[n.node.get_content() for n in ns] for ns in nodes]

    async def with_async_client():
        async with hopgraph.AsyncClient(chunked_server.url) as ac:
            lc = hg_langchain.HopgraphRetriever(index=ac, pipeline="hybrid", k=K, search_kwargs=search_kwargs)
            li = hg_llamaindex.HopgraphRetriever(ac, pipeline="hybrid", k=K, search_kwargs=search_kwargs)
            return lc_view(await lc.abatch(qs)), li_view(await li.aretrieve_batch(qs))

    with hopgraph.Client(chunked_server.url) as client:
        for source in (chunked_index, client):
            lc = hg_langchain.HopgraphRetriever(index=source, pipeline="hybrid", k=K, search_kwargs=search_kwargs)
            li = hg_llamaindex.HopgraphRetriever(source, pipeline="hybrid", k=K, search_kwargs=search_kwargs)
            for got in (lc_view(lc.batch(qs)), lc_view(asyncio.run(lc.abatch(qs))),
                        li_view(li.retrieve_batch(qs)), li_view(asyncio.run(li.aretrieve_batch(qs)))):
                assert got == (want_view, want_text), type(source).__name__
    for got in asyncio.run(with_async_client()):
        assert got == (want_view, want_text)
    if index_kwargs.get("with_text") is False:
        assert all(t == "" for texts in want_text for t in texts)
    else:
        assert all(t for texts in want_text for t in texts)


def test_search_arguments_map_parameters_per_source(index, client):
    kwargs = {"rrf_k": 10, "group_by_document": True, "with_text": False}
    assert hg_source.search_arguments(index, kwargs) == kwargs
    assert hg_source.search_arguments(client, kwargs) == {"group_by_document": True, "with_text": False,
                                                          "params": {"rrf_k": 10}}
    assert hg_source.search_arguments(client, {"params": {"rrf_k": 3}, "depth": 9}) == \
        {"params": {"depth": 9, "rrf_k": 3}}
    assert hg_source.search_arguments(index, {"params": {"rrf_k": 3}}) == {"rrf_k": 3}
    assert hg_source.search_arguments(client, {"with_text": True}) == {"with_text": True}
    assert hg_source.search_arguments(index, None) == {}


@pytest.mark.parametrize("bad, message", [
    ({"k": 0}, "search_kwargs['k'] must be a positive integer"),
    ({"where": ["x"]}, "search_kwargs['where'] must be a filter object"),
    ({"pipeline": "dense"}, "may not set 'pipeline'"),
    ({"with_text": "no"}, "search_kwargs['with_text'] must be true or false"),
    ({"group_by_document": 1}, "search_kwargs['group_by_document'] must be true or false"),
    ({"params": [1]}, "search_kwargs['params'] must be a mapping"),
    ({"rrf_k": 1, "params": {"rrf_k": 2}}, "'rrf_k' twice"),
])
def test_bad_search_kwargs_are_refused_when_the_retriever_is_made(index, bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hg_langchain.HopgraphRetriever(index=index, pipeline="hybrid", search_kwargs=bad)
    with pytest.raises(hopgraph.InputError, match=re.escape(message)):
        hg_llamaindex.HopgraphRetriever(index, pipeline="hybrid", search_kwargs=bad)


def test_invalid_pipeline_parameter_is_named_by_index_and_server(index, client):
    for source, error in ((index, hopgraph.InvalidParameter), (client, RequestRejected)):
        lc = hg_langchain.HopgraphRetriever(index=source, pipeline="hybrid", search_kwargs={"rrf_k": 0})
        with pytest.raises(error, match="rrf_k"):
            lc.invoke("bridge")
        li = hg_llamaindex.HopgraphRetriever(source, pipeline="hybrid", search_kwargs={"params": {"no_such": 1}})
        with pytest.raises(hopgraph.InputError, match="no_such"):
            li.retrieve("bridge")


# ---------------------------------------------------------------- the real AsyncClient from synchronous code
def test_sync_retrievers_over_an_async_client_ten_calls_in_a_row(server, index):
    want = [[h.id for h in row] for row in index.search(QUESTIONS, pipeline="hybrid", k=K)]
    ac = hopgraph.AsyncClient(server.url)
    lc = hg_langchain.HopgraphRetriever(async_client=ac, pipeline="hybrid", k=K)
    lc_index = hg_langchain.HopgraphRetriever(index=ac, pipeline="hybrid", k=K)  # an async index= is the same
    li = hg_llamaindex.HopgraphRetriever(async_client=ac, pipeline="hybrid", k=K)
    for i in range(10):
        q = QUESTIONS[i % len(QUESTIONS)]
        assert [d.id for d in lc.invoke(q)] == want[i % len(QUESTIONS)]
        assert [d.id for d in lc_index.invoke(q)] == want[i % len(QUESTIONS)]
        assert [n.node.node_id for n in li.retrieve(q)] == want[i % len(QUESTIONS)]
    assert [[d.id for d in docs] for docs in lc.batch(QUESTIONS)] == want
    for _ in range(3):  # and from asynchronous code, each time in a new event loop
        assert [[d.id for d in docs] for docs in asyncio.run(lc.abatch(QUESTIONS))] == want
        assert [n.node.node_id for n in asyncio.run(li.aretrieve(QUESTIONS[0]))] == want[0]

    async def sync_call_inside_a_loop():
        return lc.invoke(QUESTIONS[1])
    assert [d.id for d in asyncio.run(sync_call_inside_a_loop())] == want[1]


def test_retrievers_take_client_and_async_client_and_k_in_search_kwargs(server, index):
    want = [h.id for h in index.search(QUESTIONS[:1], pipeline="dense", k=2)[0]]
    with hopgraph.Client(server.url) as client:
        ac = hopgraph.AsyncClient(server.url)
        for kwargs in ({"client": client}, {"async_client": ac}, {"client": client, "async_client": ac}):
            lc = hg_langchain.HopgraphRetriever(pipeline="dense", search_kwargs={"k": 2}, **kwargs)
            li = hg_llamaindex.HopgraphRetriever(pipeline="dense", search_kwargs={"k": 2}, **kwargs)
            assert [d.id for d in lc.invoke(QUESTIONS[0])] == want, kwargs
            assert [d.id for d in asyncio.run(lc.ainvoke(QUESTIONS[0]))] == want, kwargs
            assert [n.node.node_id for n in li.retrieve(QUESTIONS[0])] == want, kwargs
            assert [n.node.node_id for n in asyncio.run(li.aretrieve(QUESTIONS[0]))] == want, kwargs
        lc = hg_langchain.HopgraphRetriever(client=client, pipeline="dense", k=3,
                                            search_kwargs={"where": {"$not": {"title": "Bristol"}}})
        assert len(lc.invoke(QUESTIONS[0])) == 3
        with pytest.raises(ValueError, match="index= or client="):
            hg_langchain.HopgraphRetriever(index=index, client=client)
        with pytest.raises(ValueError, match="give index="):
            hg_langchain.HopgraphRetriever(pipeline="dense")
        with pytest.raises(hopgraph.InputError, match="one asynchronous source"):
            hg_llamaindex.HopgraphRetriever(client=ac, async_client=ac)
