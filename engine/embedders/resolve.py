"""Embedders from names and manifest entries: what a user's ``embedder=`` / ``--embedder`` choice
makes (:func:`resolve_embedder`), the spec an index manifest records (:func:`embedder_entry`), and the
embedder re-created from it on load (:func:`embedder_from_entry`)."""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from ..errors import InputError
from .callables import CallableEmbedder
from .hashing import HashingEmbedder
from .minilm import DEFAULT_EMBEDDER, MiniLMEmbedder
from .openai_http import OpenAIEmbedder
from .protocol import Embedder
from .sentence_transformer import SentenceTransformerEmbedder, is_sentence_transformer

#: spec prefixes that :func:`resolve_embedder` can re-create (``Index.load`` does it automatically)
RESOLVABLE_HINT = "'minilm', 'hashing-DIM', 'st:NAME_OR_PATH', 'openai:MODEL'"


def resolve_embedder(embedder: "Embedder | Callable | str | None", device: str = "cpu", *,
                     prompts: Mapping[str, str] | None = None, dim: int | None = None) -> Embedder:
    """Turn a user choice into an Embedder.

    None/``"minilm"``/``"all-MiniLM-L6-v2"`` → :class:`MiniLMEmbedder`; ``"hashing[-DIM]"`` →
    :class:`HashingEmbedder`; ``"st:NAME_OR_PATH"`` or a ``SentenceTransformer`` instance →
    :class:`SentenceTransformerEmbedder` (with ``prompts``); ``"openai:MODEL"`` →
    :class:`OpenAIEmbedder` (``dim``, when known, saves the probe request); an Embedder as it is;
    any other callable → :class:`CallableEmbedder`. ``prompts`` are for sentence-transformers
    models only. Raises :class:`InputError` for an unknown name, a ``callable:`` / ``instance:``
    spec (an object that must be passed again) or prompts given to another embedder.
    """
    if isinstance(embedder, str):
        spec = embedder.strip()
        if spec.startswith("st:"):
            if not spec[3:]:
                raise InputError("embedder 'st:': give a model folder or a cached model name after 'st:'")
            return SentenceTransformerEmbedder(spec[3:], prompts=prompts, device=device)
        if spec.startswith("openai:"):
            return OpenAIEmbedder(spec[len("openai:"):], dim=dim)
        if prompts:
            raise InputError(f"prompts are for 'st:' embedders, not {embedder!r}")
        if spec.lower() in ("minilm", DEFAULT_EMBEDDER.lower()):
            return MiniLMEmbedder(device=device)
        m = re.fullmatch(r"hashing(?:-(\d+))?", spec)
        if m:
            return HashingEmbedder(int(m.group(1) or 64))
        kind = spec.split(":", 1)[0] + ":" if ":" in spec else ""
        if kind in ("callable:", "instance:"):
            raise InputError(f"embedder {embedder!r} was given as a Python object and cannot be re-created "
                             f"from its name: pass the same object as embedder=")
        raise InputError(f"unknown embedder {embedder!r} (use {RESOLVABLE_HINT}, an Embedder or a callable)")
    if embedder is None:
        return MiniLMEmbedder(device=device)
    if is_sentence_transformer(embedder):
        return SentenceTransformerEmbedder(embedder, prompts=prompts, device=device)
    if prompts:
        raise InputError(f"prompts are for sentence-transformers models, not {type(embedder).__name__}")
    if isinstance(embedder, Embedder):
        return embedder
    if callable(embedder):
        return CallableEmbedder(embedder)
    raise InputError(f"embedder must be a name, an Embedder or a callable, got {type(embedder).__name__}")


def embedder_spec(embedder: Embedder) -> str:
    """The spec recorded in an index manifest: ``minilm``, ``hashing-64``, ``st:/path``,
    ``openai:MODEL`` (re-created by :func:`resolve_embedder`), or ``callable:NAME`` /
    ``instance:NAME`` / ``object:NAME`` for objects that must be passed again as ``embedder=``."""
    spec = getattr(embedder, "spec", None)
    return spec if isinstance(spec, str) and spec else f"object:{embedder.name}"


def embedder_entry(embedder: Embedder | None, name: str, dim: int) -> dict[str, Any]:
    """The manifest's ``embedder`` entry: ``name``, ``dim``, ``spec`` (:func:`embedder_spec`; ``name``
    when there is no embedder), and the ``prompts`` of an embedder that has non-empty ones."""
    entry: dict[str, Any] = {"name": name, "dim": int(dim),
                             "spec": embedder_spec(embedder) if embedder is not None else name}
    prompts = getattr(embedder, "prompts", None) if embedder is not None else None
    if isinstance(prompts, Mapping) and any(prompts.values()):
        entry["prompts"] = dict(prompts)
    return entry


def is_resolvable(spec: str) -> bool:
    """Whether :func:`resolve_embedder` can re-create an embedder from the manifest ``spec``."""
    s = spec.lower()
    return (s in ("minilm", DEFAULT_EMBEDDER.lower()) or re.fullmatch(r"hashing(?:-\d+)?", s) is not None
            or s.startswith(("st:", "openai:")))


def embedder_from_entry(entry: Mapping[str, Any], where: str, device: str = "cpu") -> Embedder:
    """Re-create the embedder a manifest ``embedder`` entry describes (its ``spec``, else its ``name``).
    ``where`` names the index in errors. Raises :class:`InputError` naming the ``embedder=``
    argument to give when the spec cannot be re-created (precomputed embeddings, a Python object),
    or when the re-created embedder's dimension is not the entry's ``dim``."""
    spec = str(entry.get("spec") or entry.get("name") or "")
    if spec.startswith("precomputed"):
        raise InputError(f"{where} was built from precomputed embeddings: pass query embeddings, "
                         f"or give embedder=... to Index.load/Index.build")
    if not is_resolvable(spec):
        raise InputError(f"{where} was built with embedder {spec!r}, which cannot be re-created from the "
                         f"index: pass it again, Index.load(..., embedder=<the same embedder or callable>)")
    emb = resolve_embedder(spec, device=device, prompts=entry.get("prompts") or None,
                           dim=entry.get("dim") if spec.startswith("openai:") else None)
    dim = entry.get("dim")
    if dim is not None and int(emb.dim) != int(dim):
        raise InputError(f"{where}: embedder {spec!r} has dimension {emb.dim}, the index {dim}")
    return emb
