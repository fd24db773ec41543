"""Any sentence-transformers model as an embedder (``st:NAME_OR_PATH`` or a ``SentenceTransformer``
instance), with optional query and passage prompts. Models are loaded from a folder or the local
Hugging Face cache, never downloaded. sentence-transformers is the optional extra ``[st]``
(``pip install 'hopgraph[st]'``; ``[gpu]`` brings it too): it is imported only when such a model is
loaded (:func:`sentence_transformer_class`)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputError
from .protocol import validate_embeddings

PROMPT_KEYS = ("query", "passage")
#: the extra that installs sentence-transformers, as named in the error when it is missing
EXTRA = "hopgraph[st]"


def sentence_transformer_class(what: str) -> type:
    """sentence-transformers' ``SentenceTransformer`` class, imported now. Raises :class:`InputError`
    naming ``what`` (the embedder that needs it) and the extra to install when sentence-transformers
    (or a package it needs) cannot be imported."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        missing = f"the package {e.name!r} is missing" if e.name else f"{type(e).__name__}: {e}"
        raise InputError(f"{what} needs sentence-transformers ({missing}): pip install '{EXTRA}'") from None
    return SentenceTransformer


@contextmanager
def quiet_model_loading() -> Iterator[None]:
    """transformers' weight-loading progress bar off while the block runs (noise for a local model)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def encode_normalised(model: Any, texts: Sequence[str], dim: int, what: str, batch_size: int, progress: bool,
                      prompt: str | None = None) -> np.ndarray:
    """``model.encode`` of ``texts`` (``prompt`` prepended when given) as validated, L2-normalised
    float32 ``[len(texts), dim]``; ``what`` names the output in errors."""
    if len(texts) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    options = {} if prompt is None else {"prompt": prompt}
    X = model.encode(list(texts), **options, batch_size=batch_size, show_progress_bar=progress,
                     convert_to_numpy=True, normalize_embeddings=True)
    return validate_embeddings(np.asarray(X, dtype=np.float32), what, dim)


def _check_prompts(prompts: Mapping[str, str] | None) -> dict[str, str]:
    """``prompts`` as ``{"query": str, "passage": str}`` (missing keys → ""); other keys are refused."""
    if prompts is None:
        return {}
    if not isinstance(prompts, Mapping):
        raise InputError(f"prompts must be a mapping {{'query': ..., 'passage': ...}}, got {type(prompts).__name__}")
    unknown = sorted(set(prompts) - set(PROMPT_KEYS))
    if unknown:
        raise InputError(f"prompts: unknown key(s) {unknown} (allowed: {list(PROMPT_KEYS)})")
    for k, v in prompts.items():
        if not isinstance(v, str):
            raise InputError(f"prompts[{k!r}] must be a string, got {type(v).__name__}")
    return {k: prompts.get(k, "") for k in PROMPT_KEYS}


def _st_model_path(name_or_path: str) -> str:
    """A local folder for ``st:NAME_OR_PATH``: the path itself, or the model's snapshot in the local
    Hugging Face cache. Never downloads: a name that is neither gives an InputError naming it."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InputError(f"embedder 'st:{name_or_path}': {path} is not a model folder")
        return str(path.resolve())
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path:
        raise InputError(f"embedder 'st:{name_or_path}': no such model folder {path}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a dependency of sentence-transformers
        snapshot_download = None
    repos = [name_or_path] if "/" in name_or_path else [name_or_path, f"sentence-transformers/{name_or_path}"]
    for repo in repos if snapshot_download is not None else []:
        try:
            local = snapshot_download(repo, local_files_only=True)
        except Exception:  # not cached (LocalEntryNotFoundError), or an invalid repo id
            continue
        if (Path(local) / "config.json").is_file() or (Path(local) / "modules.json").is_file():
            return local
    raise InputError(
        f"embedder 'st:{name_or_path}': not a local folder and not in the local Hugging Face cache "
        f"(hopgraph never downloads models: download it first, e.g. with huggingface-cli download, "
        f"or give the model's folder)")


class SentenceTransformerEmbedder:
    """A sentence-transformers model (a ``SentenceTransformer`` instance, or ``st:NAME_OR_PATH``).

    Embeddings are L2-normalised. Optional prompts are prepended to queries
    (:meth:`encode_queries`) and to passages (:meth:`encode`): ``prompts={"query": ...,
    "passage": ...}``, else the model's own ``prompts`` (``"query"`` and ``"passage"`` or
    ``"document"``), else none. Loading never downloads (see :func:`_st_model_path`). Raises
    :class:`InputError` for a model that is not found or does not load, bad prompts, or
    sentence-transformers not installed (naming the extra ``[st]``).
    """

    def __init__(self, model: Any, prompts: Mapping[str, str] | None = None, device: str = "cpu") -> None:
        what = f"embedder 'st:{model}'" if isinstance(model, (str, Path)) else "SentenceTransformerEmbedder"
        SentenceTransformer = sentence_transformer_class(what)

        if isinstance(model, (str, Path)):
            folder = _st_model_path(str(model))
            with quiet_model_loading():
                try:
                    st = SentenceTransformer(folder, device=device, local_files_only=True)
                except Exception as e:
                    raise InputError(f"embedder 'st:{model}': cannot load a sentence-transformers model from "
                                     f"{folder}: {type(e).__name__}: {e}") from None
            self.name = self.spec = f"st:{folder}"
        elif isinstance(model, SentenceTransformer):
            st = model
            self.name = f"st:{_st_instance_name(st)}"
            self.spec = f"instance:{self.name}"  # an in-memory model cannot be re-created from a name
        else:
            raise InputError(f"SentenceTransformerEmbedder: model must be a SentenceTransformer, a model folder "
                             f"or a cached model name, got {type(model).__name__}")
        self.model = st
        own = dict(getattr(st, "prompts", None) or {})
        given = _check_prompts(prompts)
        self.prompts: dict[str, str] = given or {
            "query": own.get("query", "") or "",
            "passage": own.get("passage", own.get("document", "")) or ""}
        get_dim = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            dim = int(np.asarray(st.encode(["dimension probe"], convert_to_numpy=True)).shape[1])
        self.dim = int(dim)

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Passage embeddings (the passage prompt prepended)."""
        return encode_normalised(self.model, texts, self.dim, f"{self.name} output (passages)", batch_size,
                                 progress, prompt=self.prompts.get("passage", ""))

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Query embeddings (the query prompt prepended)."""
        return encode_normalised(self.model, texts, self.dim, f"{self.name} output (queries)", batch_size,
                                 progress, prompt=self.prompts.get("query", ""))


def _st_instance_name(st: Any) -> str:
    """The folder or hub name a SentenceTransformer was loaded from (absolute for a folder)."""
    try:
        name = str(st[0].auto_model.config._name_or_path)
    except Exception:
        name = ""
    if not name:
        return type(st).__name__
    return str(Path(name).resolve()) if Path(name).is_dir() else name


def is_sentence_transformer(obj: Any) -> bool:
    """``obj`` is a SentenceTransformer (checked without importing sentence-transformers otherwise)."""
    if "sentence_transformers" not in type(obj).__module__.split(".")[0] and \
            not any(c.__module__.startswith("sentence_transformers") for c in type(obj).__mro__):
        return False
    from sentence_transformers import SentenceTransformer

    return isinstance(obj, SentenceTransformer)
