"""The shared components of one index: corpus store, dense index, BM25 index, zero-token
extraction, title mention graph. Each is built at most once per index (on first use), persisted
once, and shared by every pipeline that declares it needs it (``Pipeline.components``).

* corpus — :class:`~hopgraph.engine.components.corpus.Corpus` (memory-mapped packed strings once saved);
* ``dense`` — :class:`~hopgraph.engine.components.dense.DenseIndex` over X (X itself is the index's
  ``embeddings.npy``); ``dense="auto" | "exact" | "ann"`` (None: the environment variable
  ``HOPGRAPH_DENSE``, else ``"auto"``) chooses exact search or IVF candidates rescored exactly,
  the IVF index (``auto``: from ``dense_index.ANN_MIN_N`` rows up) saved as ``dense-ivf/``;
* ``bm25`` — :class:`~hopgraph.engine.components.bm25.BM25Index`: term-frequency postings per stop-word
  setting, scored with the index's ``"bm25"`` parameters (a pipeline variant asking for other ``k1``
  / ``b`` reads the same postings);
* ``extraction`` — :func:`~hopgraph.engine.components.extraction.extract` (SPEC §2 zero-token rules),
  keyed by its two options (``title_entities``, ``numbers``);
* title mentions — :class:`~hopgraph.engine.components.title_mentions.TitleMentions`;
* fitted states — what a pipeline's fit builds from the components alone, keyed by the pipeline
  family and what the fit depends on (:meth:`Components.shared_fit`): two pipelines whose fits
  would build the same state (DMAR and ``hop`` with the same fit parameters) build it once and
  share it; saved once (:meth:`Components.save_state`: the second pipeline's folder names the
  first's, :data:`SAME_STATE`) and read once (:meth:`Components.stored_state`).

Live updates: :meth:`Components.extend` takes the grown X and corpus (new rows at the end) and
updates every built component from the new rows (dense: added rows; BM25: the new passages'
postings; extraction and title mentions: extended; fitted states: forgotten, each pipeline updates
its own, :meth:`Components.shared_update` sharing the result); ``deleted`` (bool [N] or None) marks tombstoned
rows, which no search returns (:meth:`Components.allowed`).

Segments: :meth:`Components.save` writes every component whole (a base segment);
:meth:`Components.save_segment` writes what rows ``[start, stop)`` add to the state of a
:meth:`Components.snapshot` (the dense IVF entries, the BM25 postings of those passages, the
extraction's and title mentions' appended parts), or a component whole when it was built after the
snapshot; :meth:`Components.load_segments` reads a list of segments back (each component from the
last segment holding it whole, then the later segments' parts).

:class:`QueryBatch` holds what one batch of questions needs from them — the BM25 tokens,
the dense and BM25 top lists, the cosine of every passage — each computed once per batch and
shared by the stages of a pipeline's search.
"""
from __future__ import annotations

import json
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence, TypeVar

import numpy as np

from .bm25 import BM25Index, BM25Params, Postings
from .corpus import Corpus
from .dense import DenseIndex, dense_method, dense_mode
from ..embedders import Embedder
from ..errors import IndexFormatError, InputError
from .extraction import (DELTA_FILES as EXTRACTION_DELTA_FILES, Extraction, apply_extraction_deltas,
                         extend_extraction, extract, extraction_delta, lower_words)
from .late_pooling import LateTexts
from ..storage import load_arrays, save_arrays, write_json
from .query_batch import QueryBatch
from .title_mentions import TitleMentions
from ..graphs.store import GraphStore, LocalStore

#: the file a pipeline's folder holds instead of its fitted state when that state is the one saved in
#: a folder beside it (``{"pipeline": name of that folder}``, :meth:`Components.save_state`)
SAME_STATE = "same-state.json"
#: folder of the saved title mention graph (:meth:`Components.title_mentions`)
TITLE_MENTIONS_DIR = "title-mentions"
#: the kinds of shared components, which a pipeline declares in ``components_used`` (the corpus
#: store is every pipeline's and need not be declared)
COMPONENT_KINDS = ("corpus", "dense", "bm25", "extraction")
T = TypeVar("T")
#: stored BM25 postings of segments after the last whole one are joined in memory up to this many passages
JOIN_POSTINGS_BELOW = 1_000_000


@dataclass
class ComponentsSnapshot:
    """What :meth:`Components.save_segment` compares with: the components as of a commit (the
    objects themselves; they are replaced, never changed in place, by updates)."""

    n_rows: int
    ivf: tuple[int, int] | None
    bm25: frozenset = frozenset()
    extractions: dict = field(default_factory=dict)
    title_mentions: Any = None


def state_source(directory: Path) -> Path:
    """The folder a pipeline's state in ``directory`` is read from: ``directory``, or the folder
    beside it that its :data:`SAME_STATE` names (IndexFormatError when that names no such folder)."""
    if not (directory / SAME_STATE).is_file():
        return directory
    try:
        name = json.loads((directory / SAME_STATE).read_text(encoding="utf-8")).get("pipeline")
    except (ValueError, AttributeError, OSError):
        name = None
    plain = isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
    source = directory.parent / name if plain else directory
    if source == directory or not source.is_dir():
        raise IndexFormatError(f"{directory / SAME_STATE}: names no folder beside it holding a state ({name!r})")
    return source


class Components:
    """The shared parts of one index (module docstring). ``X`` is validated by the caller."""

    def __init__(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
                 bm25: BM25Params | dict[str, Any] | None = None, progress: bool = False,
                 dense: str | None = None, graphs: GraphStore | None = None) -> None:
        """``graphs``: where the index keeps its graphs (:mod:`hopgraph.engine.graphs.store`; None:
        in its own files, :class:`~hopgraph.engine.graphs.store.LocalStore`)."""
        if corpus is not None and len(corpus) != len(X):
            raise InputError(f"corpus has {len(corpus)} passages but X has {len(X)} rows")
        self.X, self.corpus, self.embedder, self.progress = X, corpus, embedder, progress
        #: the graph store every pipeline and component saves its graphs to and loads them from
        self.graphs: GraphStore = LocalStore() if graphs is None else graphs
        #: the dense search mode (``dense_index.DENSE_MODES``), resolved once
        self.dense_mode = dense_mode(dense)
        self.bm25_params = BM25Params.create(bm25)
        self._dense: DenseIndex | None = None
        #: the BM25 postings per stop-word setting, and the views scored with each parameter set
        self._postings: dict[str | None, BM25Index] = {}
        self._bm25: dict[BM25Params, BM25Index] = {}
        self._extractions: dict[tuple[bool, bool], Extraction] = {}
        #: late-chunked texts of an extraction made in the passages' own embedding pass
        #: (``Index.build``, ``Index.add``) with the id of their first text, taken by the first fit
        #: or update that wants them (:meth:`take_late_texts`)
        self._late_texts: dict[tuple[bool, bool], tuple[int, LateTexts]] = {}
        #: the build's work directory (``Index.build(work_dir=)``): large build-time arrays are
        #: memory-mapped there instead of held in memory (None: in memory)
        self.work_dir: Path | None = None
        #: the title mention graph and the corpus it was built from (:meth:`title_mentions`)
        self._title_mentions: tuple[Corpus, TitleMentions] | None = None
        #: pipelines' fitted states by key (:meth:`shared_fit`, :meth:`shared_update`, :meth:`stored_state`)
        self._fitted: dict[Hashable, Any] = {}
        #: the folders :meth:`save_state` wrote a state into, with its parts (weak references)
        self._saved: dict[Path, tuple[weakref.ref, ...]] = {}
        #: tombstones: bool [N], True for a deleted row (None: nothing deleted)
        self.deleted: np.ndarray | None = None
        #: what was built in this process: kind → number of builds and seconds (for reports and tests)
        self.builds: dict[str, list[float]] = {k: [] for k in COMPONENT_KINDS}

    # ------------------------------------------------------------------ access
    def require_corpus(self, who: str) -> Corpus:
        """The corpus; InputError naming ``who`` when the components have none."""
        if self.corpus is None:
            raise InputError(f"pipeline {who!r} needs the corpus texts: fit(X, corpus)")
        return self.corpus

    @property
    def dense(self) -> DenseIndex:
        """The dense index over X, built on first use."""
        if self._dense is None:
            t0 = time.perf_counter()
            self._dense = DenseIndex(self.X, self.dense_mode)
            self.builds["dense"].append(time.perf_counter() - t0)
        return self._dense

    def bm25(self, params: BM25Params | None = None, who: str = "bm25") -> BM25Index:
        """The BM25 index with ``params`` (default: the index's): the postings of its stop-word setting,
        built on first use, scored with its ``k1`` / ``b``."""
        params = self.bm25_params if params is None else params
        if params not in self._bm25:
            postings = self._postings.get(params.stopwords)
            if postings is None:
                corpus = self.require_corpus(who)
                t0 = time.perf_counter()
                postings = BM25Index.build(corpus.embedding_texts(), params, self.progress)
                self._postings[params.stopwords] = postings
                self.builds["bm25"].append(time.perf_counter() - t0)
            self._bm25[params] = postings.with_params(params)
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
            self._late_texts[key] = (0, late)

    def built_extraction(self, key: tuple[bool, bool]) -> Extraction | None:
        """The extraction with options ``key`` if built or loaded (never builds it), else None."""
        return self._extractions.get(key)

    def take_late_texts(self, key: tuple[bool, bool], first_text: int = 0) -> LateTexts | None:
        """The late-chunked texts of extraction ``key`` from text ``first_text`` on that
        :meth:`adopt_extraction` or :meth:`extend` received (once), else None."""
        first, late = self._late_texts.pop(key, (None, None))
        return late if first == first_text else None

    def title_mentions(self, who: str = "title_bridge") -> TitleMentions:
        """The title mention graph of the corpus (:mod:`hopgraph.engine.components.title_mentions`), built on first
        use (a fit of a pipeline that re-ranks by the bridge; again after the corpus grew), saved
        with the components and memory-mapped on load (validated: ids in range, row pointers), so a
        loaded index's first query does not rebuild it."""
        corpus = self.require_corpus(who)
        if self._title_mentions is None:
            self._title_mentions = (corpus, TitleMentions.build(corpus.titles, corpus.texts, corpus))
        elif self._title_mentions[1].n_chunks != len(corpus):
            self._title_mentions = (corpus, self._title_mentions[1].extended(corpus, self._title_mentions[1].n_chunks))
        return self._title_mentions[1]

    def shared_fit(self, key: Hashable, build: Callable[[], T]) -> T:
        """The fitted state ``build()`` makes over these components, built once per ``key`` (the
        pipeline family and every value the fit depends on) until the rows grow, and shared by every
        pipeline that asks with the same key. The state is read, never changed in place: a pipeline
        that retrains a part replaces its own reference."""
        if key not in self._fitted:
            self._fitted[key] = build()
        return self._fitted[key]

    def shared_update(self, key: Hashable, old: tuple[Any, ...], update: Callable[[], T]) -> T:
        """The state ``update()`` makes from the state ``old`` (its parts) after the rows grew (a live
        add), computed once for ``key`` and those parts and shared by the pipelines that held them
        (compared by identity: a pipeline holding other parts, e.g. loaded from its own files or
        retrained, updates its own). The parts are held by weak reference only."""
        held = self._fitted.get(("update", key))
        if held is None or len(held[0]) != len(old) or any(r() is not o for r, o in zip(held[0], old)):
            held = self._fitted[("update", key)] = (tuple(weakref.ref(o) for o in old), update())
        return held[1]

    def save_state(self, directory: Path, parts: tuple[Any, ...], save: Callable[[Path], None]) -> None:
        """Save a pipeline's fitted state (its ``parts``) into ``directory`` with ``save(directory)``;
        or, when this process saved the same parts (identical objects) into a folder beside
        ``directory`` (same parent: ``dmar`` beside ``hop`` in one segment), write only
        :data:`SAME_STATE` naming that folder."""
        for where, refs in self._saved.items():
            if where.parent == directory.parent and where != directory and where.is_dir() \
                    and not (where / SAME_STATE).exists() \
                    and len(refs) == len(parts) and all(r() is p for r, p in zip(refs, parts)):
                directory.mkdir(parents=True, exist_ok=True)
                write_json(directory / SAME_STATE, {"pipeline": where.name})
                return
        save(directory)
        self._saved[directory] = tuple(weakref.ref(p) for p in parts)

    def begin_segment_write(self) -> None:
        """Forget the folders :meth:`save_state` wrote before: a segment's pipelines name only a
        folder of the segment being written (an earlier, failed write of the same name included)."""
        self._saved.clear()

    def stored_state(self, directory: Path, rows: int | None, load: Callable[[Path], T]) -> T:
        """The state ``load(folder)`` reads from ``directory``, or from the folder beside it that its
        :data:`SAME_STATE` names (:func:`state_source`); read once per folder and row count, and
        shared by the pipelines that read it, until :meth:`forget_stored_states`."""
        source = state_source(directory)
        return self.shared_fit(("stored", str(source), rows), lambda: load(source))

    def forget_stored_states(self) -> None:
        """Stop holding the states :meth:`stored_state` read (the pipelines hold what they use): called
        once an index's pipelines are loaded, so a stored state that later deltas replaced is freed."""
        for key in [k for k in self._fitted if isinstance(k, tuple) and k[:1] == ("stored",)]:
            del self._fitted[key]

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
    def extend(self, X: np.ndarray, corpus: Corpus | None, start: int,
               extended: tuple[tuple[bool, bool], Extraction, LateTexts | None] | None = None) -> None:
        """Grow to ``X`` / ``corpus``, whose rows ``[start, N)`` are new and the others unchanged:
        the dense index gets the new rows, every BM25 index the new passages' postings (the scores
        then equal those of a build from scratch: the statistics are summed at query time), every
        built extraction is extended (:func:`extend_extraction`), the title mentions get the new rows
        (:meth:`TitleMentions.extended`). ``extended``: ``(key, extraction, late texts)``, the
        extraction ``key`` already extended by the caller (``Index.add`` extends it before embedding
        to pool the new texts in the new passages' pass), taken as is, with the late-chunked
        embeddings of its new texts (or None)."""
        if corpus is not None and len(corpus) != len(X):
            raise InputError(f"corpus has {len(corpus)} passages but X has {len(X)} rows")
        self.X, self.corpus = X, corpus
        self._fitted.clear()
        if self._dense is not None:
            self._dense.add(X, start)
        if self._postings:
            texts = self.require_corpus("bm25").embedding_texts(start)
            for key, index in list(self._postings.items()):
                t0 = time.perf_counter()
                self._postings[key] = index.extended(texts)
                self.builds["bm25"].append(time.perf_counter() - t0)
            self._bm25 = {p: self._postings[p.stopwords].with_params(p) for p in self._bm25}
        for key, old in list(self._extractions.items()):
            if extended is not None and key == extended[0]:
                self._extractions[key] = extended[1]
                self.builds["extraction"].append(0.0)  # made by the caller, as adopt_extraction's
                if extended[2] is not None:
                    self._late_texts[key] = (len(old.texts), extended[2])
                continue
            t0 = time.perf_counter()
            self._extractions[key] = extend_extraction(old, self.require_corpus("extraction"), start, *key,
                                                       progress=self.progress)
            self.builds["extraction"].append(time.perf_counter() - t0)
        if self._title_mentions is not None and corpus is not None:
            self._title_mentions = (corpus, self._title_mentions[1].extended(corpus, start))
        if self.deleted is not None:
            self.deleted = np.concatenate([self.deleted, np.zeros(len(X) - len(self.deleted), bool)])

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> dict[str, Any]:
        """Write every built component whole under ``directory`` (a base segment), and the dense IVF
        index when the dense search uses one (built now if not yet); returns the manifest entry."""
        return self.save_segment(directory, None, 0, len(self.X))

    def snapshot(self) -> ComponentsSnapshot:
        """The components as they are now (references), for a later :meth:`save_segment`."""
        tm = self._title_mentions[1] if self._title_mentions is not None else None
        return ComponentsSnapshot(len(self.X), None if self._dense is None else self._dense.ivf_state(),
                                  frozenset(self._postings), dict(self._extractions), tm)

    def save_segment(self, directory: Path, since: ComponentsSnapshot | None, start: int, stop: int
                     ) -> dict[str, Any]:
        """Write what the rows ``[start, stop)`` add to the state ``since`` (None: everything whole) under
        ``directory``; returns the manifest entry (each item's ``state``: ``"full"`` for rows ``[0,
        stop)``, else the rows' part; an item unchanged since ``since`` is left out). ``stop`` must be
        the current row count unless ``since`` is None."""
        entry: dict[str, Any] = {"bm25": [], "extraction": []}
        grew = since is None or stop > start
        if dense_method(self.dense_mode, len(self.X)) == "ann":
            state = self.dense.ivf_state() if self._dense is not None else None
            if since is not None and since.ivf is not None and state is not None and state[1] == since.ivf[1] \
                    and since.ivf[0] == start:
                if grew:
                    entry["dense"] = {"dir": "dense-ivf", **self.dense.save_ivf_tail(directory / "dense-ivf",
                                                                                     start, stop)}
            else:
                entry["dense"] = {"dir": "dense-ivf", **self.dense.save_ivf(directory / "dense-ivf"), "state": "full"}
        texts = None
        for i, (key, index) in enumerate(self._postings.items()):
            name = f"bm25-{i}"
            if since is not None and key in since.bm25:
                if not grew:
                    continue
                if texts is None:
                    texts = self.require_corpus("bm25").embedding_texts(start, stop)
                part, state = Postings.build(texts, key), "rows"
            else:
                part, state = Postings.merge(index.parts), "full"
            entry["bm25"].append({"dir": name, "stopwords": key, "state": state, **part.save(directory / name)})
        for i, (key, ex) in enumerate(self._extractions.items()):
            name = f"extraction-{i}"
            item = {"dir": name, "title_entities": key[0], "numbers": key[1]}
            old = since.extractions.get(key) if since is not None else None
            if old is ex:
                continue
            if old is not None:
                common = lower_words(self.require_corpus("extraction").texts[start:stop])
                save_arrays(directory / name, extraction_delta(old, ex, common))
                item["state"] = "delta"
            else:
                save_arrays(directory / name, ex.arrays())
                item["state"] = "full"
            entry["extraction"].append(item)
        if self._title_mentions is not None and self._title_mentions[1].n_chunks == len(self.X):
            M = self._title_mentions[1]
            if since is not None and since.title_mentions is not None:
                if grew and since.title_mentions is not M:
                    save_arrays(directory / TITLE_MENTIONS_DIR, M.tail_arrays(start, stop))
                    entry["title_mentions"] = {"dir": TITLE_MENTIONS_DIR, "state": "tail"}
            else:
                M.save(directory / TITLE_MENTIONS_DIR, self.graphs)
                entry["title_mentions"] = {"dir": TITLE_MENTIONS_DIR, "state": "full"}
        return entry

    @classmethod
    def load(cls, directory: Path, entry: dict[str, Any], X: np.ndarray, corpus: Corpus,
             embedder: Embedder | None, bm25: dict[str, Any] | None, progress: bool = False,
             dense: str | None = None) -> "Components":
        """Open the components saved whole in ``directory`` (:meth:`save`)."""
        return cls.load_segments([(directory, entry, 0, len(X))], X, corpus, embedder, bm25, progress, dense)

    @classmethod
    def load_segments(cls, segments: Sequence[tuple[Path, dict[str, Any], int, int]], X: np.ndarray,
                      corpus: Corpus, embedder: Embedder | None, bm25: dict[str, Any] | None,
                      progress: bool = False, dense: str | None = None, graphs: GraphStore | None = None
                      ) -> "Components":
        """Open the components of a list of segments ``(components directory, entry, first row, rows)``
        in row order (module docstring): BM25 postings and extraction arrays memory-mapped (the
        postings of small later segments joined in memory), the dense IVF index validated and read
        into memory when this mode searches with it. An older index's bm25s files are not read: its
        BM25 is built again from the corpus on first use. ``graphs``: the index's graph store
        (:meth:`__init__`), which reads the graphs saved in the segments."""
        self = cls(X, corpus, embedder, bm25, progress, dense, graphs)
        where = segments[-1][0] if segments else Path(".")
        try:
            self._load_dense(segments)
            self._load_bm25(segments)
            self._load_extractions(segments)
            self._load_title_mentions(segments, corpus)
        except IndexFormatError:
            raise
        except (KeyError, TypeError, OSError, ValueError, IndexError, RuntimeError) as e:  # InputError is a ValueError
            raise IndexFormatError(f"index components in {where} are corrupt or unreadable: "
                                   f"{type(e).__name__}: {e}") from None
        return self

    @staticmethod
    def _chain(segments: Sequence[tuple[Path, dict[str, Any], int, int]], pick: Any
               ) -> tuple[tuple[Path, dict[str, Any], int, int] | None, list[tuple[Path, dict[str, Any], int, int]]]:
        """The last segment holding an item whole (``pick(entry)`` gives the item's entry or None) and the
        later segments holding a part of it: ``((dir, item, first, rows) | None, [(dir, item, first, rows)])``."""
        found = [(d / item["dir"], item, first, n) for d, e, first, n in segments
                 for item in [pick(e)] if item is not None]
        for i in range(len(found) - 1, -1, -1):
            if found[i][1].get("state", "full") == "full":
                for sub, item, _, _ in found[i:]:
                    if not sub.is_dir():
                        raise IndexFormatError(f"index component directory {sub} is missing")
                return found[i], found[i + 1:]
        return None, []

    def _load_dense(self, segments: Sequence[tuple[Path, dict[str, Any], int, int]]) -> None:
        full, tails = self._chain(segments, lambda e: e.get("dense"))
        if full is not None:
            t0 = time.perf_counter()
            self._dense = DenseIndex.load(full[0], full[1], self.X, self.dense_mode,
                                          tails=[(d, item) for d, item, _, _ in tails])
            self.builds["dense"].append(time.perf_counter() - t0)

    def _load_bm25(self, segments: Sequence[tuple[Path, dict[str, Any], int, int]]) -> None:
        keys = {item.get("stopwords") for _, e, _, _ in segments for item in e.get("bm25", []) if "state" in item}
        for key in keys:
            def pick(e: dict[str, Any], key=key) -> dict[str, Any] | None:
                return next((it for it in e.get("bm25", []) if "state" in it and it.get("stopwords") == key), None)
            full, rows = self._chain(segments, pick)
            if full is None:
                continue
            end = full[2] + full[3]
            parts = [Postings.load(full[0], end)]
            later = []
            for d, item, first, n in rows:
                if first != end:
                    raise IndexFormatError(f"BM25 postings {d}: rows from {first}, expected {end}")
                later.append(Postings.load(d, n))
                end += n
            if end != len(self.X):
                raise IndexFormatError(f"BM25 postings of {segments[-1][0]}: {end} passages, the index has "
                                       f"{len(self.X)}")
            if later and sum(p.n_docs for p in later) <= JOIN_POSTINGS_BELOW:
                later = [Postings.merge(later)]
            self._postings[key] = BM25Index(parts + later, BM25Params.create({**self.bm25_params.to_dict(),
                                                                            "stopwords": key}))

    def _load_extractions(self, segments: Sequence[tuple[Path, dict[str, Any], int, int]]) -> None:
        keys = {(bool(it["title_entities"]), bool(it["numbers"])) for _, e, _, _ in segments
                for it in e.get("extraction", [])}
        for key in keys:
            def pick(e: dict[str, Any], key=key) -> dict[str, Any] | None:
                return next((it for it in e.get("extraction", [])
                             if (bool(it["title_entities"]), bool(it["numbers"])) == key), None)
            full, deltas = self._chain(segments, pick)
            if full is None:
                continue
            sub = full[0]
            files = list(Extraction.ARRAY_FILES) + [f for f in Extraction.OPTIONAL_FILES
                                                    if (sub / f"{f}.npy").is_file()]
            ex = Extraction.from_arrays(load_arrays(sub, files), full[2] + full[3], str(sub))
            if deltas:
                ex = apply_extraction_deltas(ex, [load_arrays(d, EXTRACTION_DELTA_FILES) for d, _, _, _ in deltas],
                                             len(self.X), str(deltas[-1][0]))
            if ex.n_chunks != len(self.X):
                raise IndexFormatError(f"extraction {sub}: {ex.n_chunks} passages, the index has {len(self.X)}")
            self._extractions[key] = ex

    def _load_title_mentions(self, segments: Sequence[tuple[Path, dict[str, Any], int, int]], corpus: Corpus) -> None:
        full, tails = self._chain(segments, lambda e: e.get("title_mentions"))
        if full is None:
            return
        sub, n = full[0], full[2] + full[3]
        M = TitleMentions.load(sub, n, corpus, self.graphs)
        if tails:
            M = M.with_tails([load_arrays(d, TitleMentions.TAIL_FILES) for d, _, _, _ in tails], corpus, str(sub))
        if M.n_chunks != len(self.X):
            raise IndexFormatError(f"title mentions {sub}: {M.n_chunks} passages, the index has {len(self.X)}")
        self._title_mentions = (corpus, M)
