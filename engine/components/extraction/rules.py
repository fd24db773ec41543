"""The zero-token extraction rules (SPEC §2, "Index", steps 1–4): deterministic, no language model.

:func:`~hopgraph.engine.components.extraction.builder.extract` applies them to every passage (chunk)
in corpus order:

1. **Topics** (hyperedges) are the sentences of the passage text. Sentences end at
   ``. ! ?`` (optionally followed by closing quotes/brackets) followed by white
   space and a non-lower-case character, except after a single letter
   (``J. R. R. Tolkien``), a dotted acronym (``U.S.``) or a common abbreviation (``Mr``, ``St``, ``Inc``, ``Jan`` ...). A passage
   with no sentence end is one topic.
2. **Entities** of a sentence:

   * the **passage title** (when non-empty and ``title_entities=True``) is an
     entity of every sentence of its passage — the passage is about it;
   * **capitalised spans**: maximal runs of capitalised words separated only by
     spaces or hyphens (or the dot of an initial, ``George T. Solomon``), which
     may contain the lower-case connectors ``of the de del della da di la le von
     van der den du y for`` (a connector must be followed by a capitalised word;
     ``and`` never joins). Leading function words (``The``, ``In``, ``He`` ...)
     are dropped; a possessive ``'s`` ends a span; a span left with only a
     month/weekday name or a function word is dropped, and so is a one-word span
     opening the sentence whose lower-case form occurs as a word elsewhere in
     the corpus (``Originally``, ``Traditional``);
   * **numbers** (``numbers=True``): digit tokens of 3+ digits (years, counts;
     ``1,000`` is one token). Smaller numbers form huge, meaningless groups.

3. **Entity states** (nodes): one per (passage, canonical name) — the same name
   mentioned in several sentences of a passage is one state that belongs to all
   those hyperedges. Its **description** ψ(v) is the sentence (sentences joined
   by a space, in order) that mention it; the title state's description is the
   passage's embedding text ``"title: text"`` (shared with the chunk embedding).
4. **Canonical name** φ = :func:`canonical_name`: Unicode NFKC, casefold, a
   trailing possessive removed, punctuation turned into spaces, white space
   collapsed, leading articles (``the``, ``a``, ``an``) removed.

Cost: linear in the text length (pure Python regular expressions; the arrays are
assembled with numpy). The index builds it once and shares it (one per
``(title_entities, numbers)`` pair, :mod:`hopgraph.engine.components.shared`) between
``stitch``, ``ppr_binary`` and ``dmar``.

:func:`query_names` applies the same canonical names to query texts (query-side entity matching).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np

#: lower-case words allowed inside a capitalised span (between capitalised words)
CONNECTORS = frozenset("of the de del della da di la le von van der den du y for".split())
#: capitalised words that are not entities on their own and are dropped at a span's start
FUNCTION_WORDS = frozenset("""
a an the in on at of for to from by with as and or but nor so yet if when while after before during
since until unlike despite although though because however thus also then there here this that these
those it its he she his her hers they them their we our you your i my me him us who whom whose which
what where why how all some many most several each every both either neither no not one another other
such first last later early late born is was are were be been has had have do does did can could will
would may might must shall should according following located based known called named
""".split())
MONTHS_DAYS = frozenset("""
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
""".split())
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof st jr sr inc co ltd corp no vs etc mt ft gen col lt sgt rev hon gov sen rep
jan feb mar apr jun jul aug sep sept oct nov dec est approx fig vol pp ca
""".split())
ARTICLES = ("the ", "a ", "an ")

_SENT_END = re.compile(r"[.!?][\"'”’)\]]*\s+")
_WORD = re.compile(r"[^\W_](?:[\w&]|['’\-.](?=\w)|,(?=\d{3}))*")
_NON_WORD = re.compile(r"[\W_]+")
_LOWER_WORD = re.compile(r"(?<![\w'’\-])[a-z]+(?![\w'’\-])")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def canonical_name(name: str) -> str:
    """φ: NFKC, casefold, possessive and punctuation removed, leading article dropped.

    >>> canonical_name("The  Beatles'")
    'beatles'
    >>> canonical_name("Hello Love's")
    'hello love'
    """
    s = unicodedata.normalize("NFKC", name).casefold().strip()
    s = _POSSESSIVE.sub("", s)
    s = _NON_WORD.sub(" ", s).strip()
    for art in ARTICLES:
        if s.startswith(art) and len(s) > len(art):
            s = s[len(art):]
            break
    return s


def split_sentences(text: str) -> list[str]:
    """Topics of a passage: its sentences (the rules of this module's docstring), stripped, non-empty."""
    out, start = [], 0
    for m in _SENT_END.finditer(text):
        before = text[start:m.start()].rsplit(None, 1)
        last = before[-1].rstrip(".") if before else ""
        word = _NON_WORD.sub("", last).lower()
        if (len(word) <= 1 and not word.isdigit()) or word in ABBREVIATIONS or "." in last:
            continue  # initial, abbreviation or dotted acronym (U.S.)
        nxt = text[m.end():m.end() + 1]
        if nxt and nxt.islower():
            continue
        out.append(text[start:m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def _is_capitalised(word: str) -> bool:
    return word[0].isupper() or (word[0].isdigit() and any(c.isupper() for c in word))


def sentence_entities(sentence: str, numbers: bool = True, common_words: frozenset[str] | set[str] = frozenset()
                      ) -> list[str]:
    """Surface forms of the entities of one sentence (capitalised spans, numbers), in order.

    ``common_words``: lower-case words of the corpus; a one-word span at the start of
    the sentence that is such a word (``Originally``, ``Traditional``) is dropped.
    """
    words = list(_WORD.finditer(sentence))
    found: list[str] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i].group()
        if not _is_capitalised(w):
            if numbers and w.replace(",", "").isdigit() and len(w.replace(",", "")) >= 3:
                found.append(w)
            i += 1
            continue
        span = [i]
        j = i
        while not _POSSESSIVE.search(words[j].group()) and j + 1 < n:
            gap = sentence[words[j].end():words[j + 1].start()]
            if len(words[j].group()) == 1 and gap.startswith("."):
                gap = gap[1:]  # an initial: George T. Solomon
            if gap.strip(" -"):
                break
            nw = words[j + 1].group()
            if _is_capitalised(nw):
                j += 1
                span.append(j)
                continue
            if nw in CONNECTORS and j + 2 < n and _is_capitalised(words[j + 2].group()) \
                    and not sentence[words[j + 1].end():words[j + 2].start()].strip(" -"):
                span += [j + 1, j + 2]
                j += 2
                continue
            break
        tokens = [words[k].group() for k in span]
        while tokens and tokens[0].lower() in FUNCTION_WORDS:
            tokens.pop(0)
        single = _POSSESSIVE.sub("", tokens[0].lower()) if len(tokens) == 1 else ""
        if single and (single in MONTHS_DAYS or single in FUNCTION_WORDS or (span[0] == 0 and single in common_words)):
            tokens = []
        if tokens:
            found.append(" ".join(tokens))
        i = j + 1
    return found


def lower_words(texts: Iterable[str]) -> set[str]:
    """The lower-case words occurring in ``texts`` (the ``common`` words of :func:`extract`)."""
    out: set[str] = set()
    for text in texts:
        out.update(_LOWER_WORD.findall(text))
    return out


def query_names(texts: Sequence[str], name_ids: dict[str, int], max_words: int = 6,
                stop: Iterable[str] = ()) -> list[np.ndarray]:
    """Name ids mentioned by each query: every word n-gram (n ≤ ``max_words``) of the
    canonical query text that is a canonical name of the vocabulary (minus ``stop``).

    Used for query-side entity matching (binary PPR seeds, SPEC §2 baseline).
    """
    stop = set(stop)
    out = []
    for text in texts:
        words = canonical_name(text).split()
        ids = set()
        for n in range(1, max_words + 1):
            for s in range(len(words) - n + 1):
                phrase = " ".join(words[s:s + n])
                i = name_ids.get(phrase)
                if i is not None and phrase not in stop:
                    ids.add(i)
        out.append(np.asarray(sorted(ids), np.int32))
    return out
