"""Title bridge: the second hop through a passage title that a top passage mentions (issue 15).

A multi-hop question's second passage is usually the one about the *bridge entity*, and the first
passage names that entity: in Wikipedia-derived corpora (HotpotQA, MuSiQue, 2Wiki) the first
passage mentions the second's title. The **title mention graph** M holds an edge s → j when the
text of passage s mentions the title of passage j ≠ s: a word n-gram (n ≤ ``MAX_TITLE_WORDS``) of
φ(text(s)) equals φ(title(j)) or φ of the title without a trailing parenthesis
(``"Bethel University (Minnesota)"`` → ``"bethel university"``), φ being the extraction's canonical
name (:func:`hopgraph.engine.components.extraction.canonical_name`). It is a sparse, zero-token graph (on the
shared HotpotQA set 0.7 edges a passage, on MuSiQue 1.2).

Re-ranking (:func:`bridge_rerank`, the last step of the G3RAG, STITCH and DMAR queries): a
pipeline's top-``depth`` list (ids and scores), its scores min-max normalised over the list (the
list's best 1, its last 0); every passage that one of the ``seeds`` best passages of the list
mentions (M's row) gains ``weight`` (once, however many seeds mention it), and one outside the list
enters it with 0 + ``weight``; the list is sorted again (ties toward the lower id) and cut to
top_k. Filtered passages (``allowed``) never enter. Each row uses its own list only, so a
question's results do not depend on the other questions of its batch.

Measured (README, "Defaults and the measurements behind them"): the missed gold passage of DMAR's
top 5 on the shared HotpotQA set is mentioned by DMAR's best passage in 15 of 26 cases, while the
passages its best passage mentions are 1.1 a question. Defaults (one set for every corpus and
pipeline): ``weight`` 0.4, ``seeds`` 1, ``depth`` 20.

Cost: building M reads every passage once (pure Python n-gram lookups, linear in the text length:
0.24 s for 1,000 passages); it is built at fit by :meth:`Components.title_mentions` and saved with
the index's components (an index saved before it was is built on its first query). A query reads ``seeds`` rows of M (O(B · (depth + mentions)).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ...kernels.csr import CSR
from .extraction import canonical_name
from ..params import integer, real
from ..ranking import PAD_ID, PAD_SCORE
from ..sparse import unit_weights
from ..storage import RowReader, check_ids, check_indptr

#: the longest title (in canonical words) that is looked for in a passage text
MAX_TITLE_WORDS = 8
#: a trailing parenthesis of a title (a Wikipedia disambiguation), dropped for the second form
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")
#: the defaults, one set for every corpus and every pipeline that re-ranks by the bridge
DEFAULT_WEIGHT = 0.4
DEFAULT_SEEDS = 1
DEFAULT_DEPTH = 20


def weight_field(default: float = DEFAULT_WEIGHT) -> Any:
    """The ``bridge`` parameter of a pipeline (query-time; 0 = off)."""
    return real(default, low=0.0, query=True)


def seeds_field() -> Any:
    """The ``bridge_seeds`` parameter: how many of the list's best passages lend their mentions."""
    return integer(DEFAULT_SEEDS, low=1, query=True)


def depth_field() -> Any:
    """The ``bridge_depth`` parameter: the length of the list that is re-ranked."""
    return integer(DEFAULT_DEPTH, low=1, query=True)


def title_forms(title: str) -> set[str]:
    """The canonical forms a mention of ``title`` may take: φ(title) and φ without a trailing
    parenthesis; empty forms dropped."""
    return {f for f in (canonical_name(title), canonical_name(_PAREN.sub("", title))) if f}


@dataclass(frozen=True)
class TitleMentions:
    """The title mention graph M as an unweighted :class:`CSR` ``[N, N]``: row s lists (sorted) the
    passages whose title passage s mentions (int64 ``indices``, unit weights)."""

    graph: CSR

    #: the arrays :meth:`arrays` returns and :meth:`from_arrays` reads
    ARRAY_FILES = ("indptr", "indices")

    @property
    def n_chunks(self) -> int:
        return self.graph.n_rows

    def row(self, s: int) -> np.ndarray:
        """Row ``s`` of M (read as :meth:`rows` reads)."""
        with RowReader(self.graph.indices) as read:
            return self._row(read, s)

    def rows(self, seeds: Iterable[int]) -> np.ndarray:
        """The sorted distinct passages the titles of ``seeds`` mention (the union of their rows). A
        memory-mapped M (a loaded index) is read with plain reads (:class:`~.storage.RowReader`), so
        the rows read do not stay in the resident set."""
        with RowReader(self.graph.indices) as read:
            parts = [self._row(read, s) for s in seeds]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def _row(self, read: RowReader, s: int) -> np.ndarray:
        return read(int(self.graph.indptr[s]), int(self.graph.indptr[s + 1]))

    @classmethod
    def from_indices(cls, indptr: np.ndarray, indices: np.ndarray) -> "TitleMentions":
        """M of ``len(indptr) - 1`` passages from its row offsets and sorted rows (not checked)."""
        return cls(CSR(indptr, indices, unit_weights(len(indices)), len(indptr) - 1))

    def arrays(self) -> dict[str, np.ndarray]:
        """What an index stores of M: ``indptr`` int64 [N + 1] and ``indices`` int64 [nnz]."""
        return {"indptr": self.graph.indptr, "indices": self.graph.indices}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_chunks: int, where: str) -> "TitleMentions":
        """The stored :meth:`arrays` of an index of ``n_chunks`` passages, checked (ids in range, row
        offsets from 0 to the entry count; IndexFormatError naming the file) and kept as they are (a
        memory-mapped ``indices`` stays mapped)."""
        indices = check_ids(arrays["indices"], n_chunks, f"{where}/indices.npy")
        indptr = check_indptr(arrays["indptr"], n_chunks, len(indices), f"{where}/indptr.npy")
        return cls.from_indices(indptr, arrays["indices"])

    @classmethod
    def build(cls, titles: Sequence[str], texts: Sequence[str]) -> "TitleMentions":
        """M of a corpus (module docstring): every word n-gram of φ(text) looked up in the table of
        title forms."""
        vocab: dict[str, list[int]] = {}
        for j, t in enumerate(titles):
            for form in title_forms(t):
                vocab.setdefault(form, []).append(j)
        longest = min(MAX_TITLE_WORDS, max((len(f.split()) for f in vocab), default=0))
        indptr = np.zeros(len(texts) + 1, np.int64)
        rows: list[np.ndarray] = []
        for s, text in enumerate(texts):
            words = canonical_name(text).split()
            hit: set[int] = set()
            for n in range(1, longest + 1):
                for a in range(len(words) - n + 1):
                    found = vocab.get(" ".join(words[a:a + n]))
                    if found:
                        hit.update(found)
            hit.discard(s)
            rows.append(np.asarray(sorted(hit), np.int64))
            indptr[s + 1] = indptr[s] + len(hit)
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return cls.from_indices(indptr, indices)


def bridge_rerank(mentions: TitleMentions, ids: np.ndarray, scores: np.ndarray, top_k: int, weight: float,
                  seeds: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank each row's list ``ids``/``scores`` ([B, depth], best first, padding -1) by the title
    bridge (module docstring); returns ``(ids int64 [B, top_k], scores float32 [B, top_k])``."""
    B = len(ids)
    out_ids = np.full((B, top_k), PAD_ID, np.int64)
    out_scores = np.full((B, top_k), PAD_SCORE, np.float32)
    for b in range(B):
        ok = ids[b] >= 0
        lst, sc = ids[b][ok], np.asarray(scores[b][ok], np.float64)
        if not len(lst):
            continue
        finite = np.isfinite(sc)
        sc = np.where(finite, sc, sc[finite].min() if finite.any() else 0.0)  # a -inf score ranks last
        low, high = sc.min(), sc.max()
        norm = (sc - low) / (high - low) if high > low else np.ones_like(sc)
        targets = mentions.rows(int(s) for s in lst[:seeds])
        if allowed is not None:
            targets = targets[allowed[targets]]
        new = np.setdiff1d(targets, lst)
        cand = np.concatenate([lst, new])
        value = np.concatenate([norm, np.zeros(len(new))]) + weight * np.isin(np.concatenate([lst, new]), targets)
        order = np.lexsort((cand, -value))[:top_k]
        out_ids[b, :len(order)], out_scores[b, :len(order)] = cand[order], value[order]
    return out_ids, out_scores
