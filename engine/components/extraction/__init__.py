"""Topic / entity extraction for the STITCH topic hypergraph (SPEC §2, "Index").

Two sources produce the same :class:`Extraction` (arrays, not Python objects):

* :func:`extract` — hopgraph's default **zero-token** extractor (no language model): the
  deterministic rules of :mod:`~hopgraph.engine.components.extraction.rules` applied to every
  passage in corpus order;
* :func:`load_extractions` — extractions made elsewhere (e.g. by a language model) as JSON lines,
  one chunk a line (SPEC §2).

The modules, by concern:

* :mod:`~hopgraph.engine.components.extraction.rules` — the zero-token rules: sentences, entity
  spans, canonical names, query-side name matching;
* :mod:`~hopgraph.engine.components.extraction.data` — the :class:`Extraction` data type, its
  arrays and validation, and the string structures it holds (text look-up, word set, merged names);
* :mod:`~hopgraph.engine.components.extraction.builder` — assembling an extraction from mentions
  (prefix-stable text ids): :func:`extract` and :func:`load_extractions`;
* :mod:`~hopgraph.engine.components.extraction.extend` — live indexes: the extraction of a corpus
  grown by appended passages, from the old extraction and the new passages only;
* :mod:`~hopgraph.engine.components.extraction.deltas` — what a segment stores of an extraction,
  and the extraction restored from a base and the segments' deltas.

The names of ``__all__`` are the component's public API, re-exported from those modules.
"""
from __future__ import annotations

from .builder import extract, load_extractions
from .data import Extraction, TextIndex, WordSet
from .deltas import DELTA_FILES, apply_extraction_deltas, extraction_delta
from .extend import extend_extraction
from .rules import FUNCTION_WORDS, canonical_name, lower_words, query_names, sentence_entities, split_sentences

__all__ = ["DELTA_FILES", "FUNCTION_WORDS", "Extraction", "TextIndex", "WordSet", "apply_extraction_deltas",
           "canonical_name", "extend_extraction", "extract", "extraction_delta", "lower_words", "load_extractions",
           "query_names", "sentence_entities", "split_sentences"]
