"""An OpenAI-compatible HTTP embeddings endpoint as an embedder (``openai:MODEL``): OpenAI, vLLM,
TEI, Ollama, LiteLLM ... httpx is imported on first use."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from .protocol import batches, validate_embeddings

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
    timeouts and connection errors are retried (``tenacity``) ``tries`` times in all with exponential backoff
    (``backoff`` · 2^attempt seconds, or the server's ``Retry-After``); then, or at once for
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
        for b, lo in enumerate(batches(len(texts), size, progress, f"embed ({self.name})")):
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
