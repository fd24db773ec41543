"""The shared components of one index: corpus store, dense index, BM25 index, zero-token
extraction. Each is built at most once per index (on first use), persisted once, and shared
by every pipeline that declares it needs it (``Pipeline.components``).

* corpus — :class:`~hopgraph.engine.components.corpus.Corpus` (memory-mapped packed strings once saved);
* ``dense`` — :class:`~hopgraph.engine.components.dense.DenseIndex` over X (X itself is the index's
  ``embeddings.npy``); ``dense="auto" | "exact" | "ann"`` (None: the environment variable
  ``HOPGRAPH_DENSE``, else ``"auto"``) chooses exact search or IVF candidates rescored exactly,
  the IVF index (``auto``: from ``dense_index.ANN_MIN_N`` rows up) saved as ``dense-ivf/``;
* ``bm25`` — :class:`~hopgraph.engine.components.bm25.BM25Index` with the index's ``"bm25"``
  parameters (a pipeline variant asking for other BM25 parameters gets its own, not saved
  over the shared one);
* ``extraction`` — :func:`~hopgraph.engine.components.extraction.extract` (SPEC §2 zero-token rules),
  keyed by its two options (``title_entities``, ``numbers``).

Live updates (issue 13): :meth:`Components.extend` takes the grown X and corpus (new rows at the
end) and updates every built component; ``deleted`` (bool [N] or None) marks tombstoned rows,
which no search returns (:meth:`Components.allowed`).

:class:`QueryBatch` holds what one batch of questions needs from them — the BM25 tokens,
the dense and BM25 top lists, the cosine of every passage — each computed once per batch and
shared by the stages of a pipeline's search.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .bm25 import BM25Index, BM25Params
from .corpus import Corpus
from .dense import DenseIndex, dense_method, dense_mode
from ..embedders import Embedder
from ..errors import IndexFormatError, InputError
from .extraction import Extraction, extend_extraction, extract
from .late_pooling import LateTexts
from ..storage import load_arrays, save_arrays
from .query_batch import QueryBatch
from .title_mentions import TitleMentions

#: folder of the saved title mention graph (:meth:`Components.title_mentions`)
TITLE_MENTIONS_DIR = "title-mentions"
#: component kinds a pipeline may declare
KINDS = ("corpus", "dense", "bm25", "extraction")


class Components:
    """The shared parts of one index (module docstring). ``X`` is validated by the caller."""

    def __init__(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
                 bm25: BM25Params | dict[str, Any] | None = None, progress: bool = False,
                 dense: str | None = None) -> None:
        if corpus is not None and len(corpus) != len(X):
            raise InputError(f"corpus has {len(corpus)} passages but X has {len(X)} rows")
        self.X, self.corpus, self.embedder, self.progress = X, corpus, embedder, progress
        #: the dense search mode (``dense_index.DENSE_MODES``), resolved once
        self.dense_mode = dense_mode(dense)
        self.bm25_params = BM25Params.create(bm25)
        self._dense: DenseIndex | None = None
        self._bm25: dict[BM25Params, BM25Index] = {}
        self._extractions: dict[tuple[bool, bool], Extraction] = {}
        #: late-chunked texts of an extraction made in the passages' own embedding pass
        #: (``Index.build``), taken by the first fit that wants them (:meth:`take_late_texts`)
        self._late_texts: dict[tuple[bool, bool], LateTexts] = {}
        #: the build's work directory (``Index.build(work_dir=)``): large build-time arrays are
        #: memory-mapped there instead of held in memory (None: in memory)
        self.work_dir: Path | None = None
        #: the title mention graph and the corpus it was built from (:meth:`title_mentions`)
        self._title_mentions: tuple[Corpus, TitleMentions] | None = None
        #: tombstones: bool [N], True for a deleted row (None: nothing deleted)
        self.deleted: np.ndarray | None = None
        #: what was built in this process: kind → number of builds and seconds (for reports and tests)
        self.builds: dict[str, list[float]] = {k: [] for k in KINDS}

    # ------------------------------------------------------------------ access
    def require_corpus(self, who: str) -> Corpus:
        if self.corpus is None:
            raise InputError(f"pipeline {who!r} needs the corpus texts: fit(X, corpus)")
        return self.corpus

    @property
    def dense(self) -> DenseIndex:
        if self._dense is None:
            t0 = time.perf_counter()
            self._dense = DenseIndex(self.X, self.dense_mode)
            self.builds["dense"].append(time.perf_counter() - t0)
        return self._dense

    def bm25(self, params: BM25Params | None = None, who: str = "bm25") -> BM25Index:
        """The BM25 index with ``params`` (default: the index's), built on first use."""
        params = self.bm25_params if params is None else params
        if params not in self._bm25:
            corpus = self.require_corpus(who)
            t0 = time.perf_counter()
            self._bm25[params] = BM25Index.build(corpus.embedding_texts(), params, self.progress)
            self.builds["bm25"].append(time.perf_counter() - t0)
        return self._bm25[params]

    def extraction(self, title_entities: bool = True, numbers: bool = True, who: str = "extraction") -> Extraction:
        """The zero-token extraction of the corpus with these options, built on first use."""
        key = (bool(title_entities), bool(numbers))
        if key not in self._extractions:
            corpus = self.require_corpus(who)
            t0 = time.perf_counter()
            self._extractions[key] = extract(corpus, *key, progress=self.progress)
            self.builds["extraction"].append(time.perf_counter() - t0)
        return self._extractions[key]

    def adopt_extraction(self, key: tuple[bool, bool], ex: Extraction, late: LateTexts | None = None) -> None:
        """Take the extraction ``ex`` with options ``key`` made by the caller (``Index.build`` makes
        it before embedding when a pipeline wants late-chunked texts), with those texts if any."""
        self._extractions[key] = ex
        self.builds["extraction"].append(0.0)
        if late is not None:
            self._late_texts[key] = late

    def take_late_texts(self, key: tuple[bool, bool]) -> LateTexts | None:
        """The late-chunked texts :meth:`adopt_extraction` received for ``key`` (once), else None."""
        return self._late_texts.pop(key, None)

    def title_mentions(self, who: str = "title_bridge") -> TitleMentions:
        """The title mention graph of the corpus (:mod:`hopgraph.engine.components.title_mentions`), built on first
        use (a fit of a pipeline that re-ranks by the bridge; again after the corpus grew), saved
        with the components and memory-mapped on load (validated: ids in range, row pointers), so a
        loaded index's first query does not rebuild it."""
        corpus = self.require_corpus(who)
        if self._title_mentions is None or self._title_mentions[0] is not corpus \
                or self._title_mentions[1].n_chunks != len(corpus):
            self._title_mentions = (corpus, TitleMentions.build(corpus.titles, corpus.texts))
        return self._title_mentions[1]

    def batch(self, Q: np.ndarray, texts: Sequence[str] | None = None,
              allowed: np.ndarray | None = None) -> QueryBatch:
        """A :class:`QueryBatch` over these components, restricted to ``allowed`` rows (bool [N],
        None = all) minus the deleted ones."""
        return QueryBatch(self, Q, texts, self.allowed(allowed))

    def allowed(self, allowed: np.ndarray | None = None) -> np.ndarray | None:
        """The rows a search may return: ``allowed`` (bool [N], None = all) and not deleted;
        None when every row may be returned."""
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != bool or allowed.shape != (len(self.X),):
                raise InputError(f"allowed must be a boolean mask of shape ({len(self.X)},), "
                                 f"got {allowed.dtype} {allowed.shape}")
        if self.deleted is None or not self.deleted.any():
            return allowed
        return ~self.deleted if allowed is None else allowed & ~self.deleted

    # ------------------------------------------------------------------ live updates
    def extend(self, X: np.ndarray, corpus: Corpus | None, start: int) -> None:
        """Grow to ``X`` / ``corpus``, whose rows ``[start, N)`` are new and the others unchanged:
        the dense index gets the new rows, every built BM25 index is rebuilt over the whole corpus
        (its IDF and length normalisation change with every passage, so the result equals a build
        from scratch), every built extraction is extended (:func:`extend_extraction`)."""
        if corpus is not None and len(corpus) != len(X):
            raise InputError(f"corpus has {len(corpus)} passages but X has {len(X)} rows")
        self.X, self.corpus = X, corpus
        if self._dense is not None:
            self._dense.add(X, start)
        for params in list(self._bm25):
            t0 = time.perf_counter()
            self._bm25[params] = BM25Index.build(self.require_corpus("bm25").embedding_texts(), params, self.progress)
            self.builds["bm25"].append(time.perf_counter() - t0)
        for key, old in list(self._extractions.items()):
            t0 = time.perf_counter()
            self._extractions[key] = extend_extraction(old, self.require_corpus("extraction"), start, *key,
                                                       progress=self.progress)
            self.builds["extraction"].append(time.perf_counter() - t0)
        if self.deleted is not None:
            self.deleted = np.concatenate([self.deleted, np.zeros(len(X) - len(self.deleted), bool)])

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> dict[str, Any]:
        """Write every built BM25 index and extraction under ``directory``, and the dense IVF index
        when the dense search uses one (built now if not yet); returns the manifest entry."""
        entry: dict[str, Any] = {"bm25": [], "extraction": []}
        if dense_method(self.dense_mode, len(self.X)) == "ann":
            entry["dense"] = {"dir": "dense-ivf", **self.dense.save_ivf(directory / "dense-ivf")}
        for i, (params, bm25) in enumerate(self._bm25.items()):
            name = f"bm25-{i}"
            bm25.save(directory / name)
            entry["bm25"].append({"dir": name, "params": params.to_dict()})
        for i, (key, ex) in enumerate(self._extractions.items()):
            name = f"extraction-{i}"
            save_arrays(directory / name, ex.arrays())
            entry["extraction"].append({"dir": name, "title_entities": key[0], "numbers": key[1]})
        if self._title_mentions is not None and self._title_mentions[0] is self.corpus:
            M = self._title_mentions[1]
            save_arrays(directory / TITLE_MENTIONS_DIR, M.arrays())
            entry["title_mentions"] = {"dir": TITLE_MENTIONS_DIR}
        return entry

    @classmethod
    def load(cls, directory: Path, entry: dict[str, Any], X: np.ndarray, corpus: Corpus,
             embedder: Embedder | None, bm25: dict[str, Any] | None, progress: bool = False,
             dense: str | None = None) -> "Components":
        """Open the saved components (BM25 memory-mapped, extraction arrays memory-mapped, the dense
        IVF index validated and read into memory when this mode searches with it)."""
        self = cls(X, corpus, embedder, bm25, progress, dense)
        try:
            if entry.get("dense") is not None:
                t0 = time.perf_counter()
                item = entry["dense"]
                self._dense = DenseIndex.load(directory / item["dir"], item, X, self.dense_mode)
                self.builds["dense"].append(time.perf_counter() - t0)
            for item in entry.get("bm25", []):
                params = BM25Params.create(item["params"])
                if not (directory / item["dir"]).is_dir():
                    raise IndexFormatError(f"index component directory {directory / item['dir']} is missing")
                self._bm25[params] = BM25Index.load(directory / item["dir"], params, len(X))
            for item in entry.get("extraction", []):
                sub = directory / item["dir"]
                if not sub.is_dir():
                    raise IndexFormatError(f"index component directory {sub} is missing")
                arrays = load_arrays(sub, Extraction.ARRAY_FILES)
                ex = Extraction.from_arrays(arrays, len(X), str(sub))
                self._extractions[(bool(item["title_entities"]), bool(item["numbers"]))] = ex
            if entry.get("title_mentions") is not None:
                sub = directory / entry["title_mentions"]["dir"]
                arrays = load_arrays(sub, TitleMentions.ARRAY_FILES)
                self._title_mentions = (corpus, TitleMentions.from_arrays(arrays, len(X), str(sub)))
        except IndexFormatError:
            raise
        except (KeyError, TypeError, OSError, ValueError, IndexError, RuntimeError) as e:  # InputError is a ValueError
            raise IndexFormatError(f"index components in {directory} are corrupt or unreadable: "
                                   f"{type(e).__name__}: {e}") from None
        return self
