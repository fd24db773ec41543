"""JSON schema of the ``hopgraph serve`` API, as pydantic models.

A query is a question string, ``{"text": str}`` or ``{"embedding": [float, ...]}``.
Types are strict (no string-to-number coercion) and embedding values must be
finite: JSON has no NaN literal, but Python's json module reads ``NaN`` and
``Infinity``, so they are refused here explicitly. Size limits (batch, question
length, k, embedding dimension, parameter bounds) depend on the server's
:class:`ServeLimits` and :class:`ParamLimits` and on the index, and are checked by the endpoint.
"""
from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

from ..engine.components.records import MAX_ID_BYTES

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class TextQuery(BaseModel):
    """A question given as ``{"text": "..."}``."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr


class EmbeddingQuery(BaseModel):
    """A question given by its embedding (same dimension as the index); only for
    pipelines that do not need the question text (e.g. ``dense``)."""

    model_config = ConfigDict(extra="forbid")
    embedding: list[FiniteFloat]


def _query_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "embedding" if "embedding" in value else "text"
    if isinstance(value, (TextQuery, EmbeddingQuery)):
        return "embedding" if isinstance(value, EmbeddingQuery) else "text"
    return None


Query = Annotated[
    Union[Annotated[StrictStr, Tag("string")], Annotated[TextQuery, Tag("text")],
          Annotated[EmbeddingQuery, Tag("embedding")]],
    Discriminator(_query_kind, custom_error_type="query_type",
                  custom_error_message='a query must be a string, {"text": str} or {"embedding": [float, ...]}'),
]


class SearchRequest(BaseModel):
    """``POST /search``: top-``k`` passages for each query with ``pipeline``."""

    model_config = ConfigDict(extra="forbid")
    queries: list[Query] = Field(description="questions (a batch); see GET /info for the size limits")
    pipeline: StrictStr | None = Field(None, description="one of GET /info's 'pipelines' (those this server loaded); "
                                                        "default: the server's first, GET /info's pipelines[0]")
    k: StrictInt = Field(5, description="passages per query, from 1 to GET /info's limits.max_k (fewer come back "
                                        "when the index holds fewer live passages)")
    params: dict[StrictStr, Any] = Field(
        default_factory=dict,
        description="query-time parameters of the pipeline for this request (e.g. {\"gamma\": 0.05}); "
                    "GET /info's 'query_params' lists them with their allowed values, 'param_limits' the "
                    "largest value this server accepts for each integer one")
    where: dict[StrictStr, Any] | None = Field(
        None, description="only passages whose metadata passes this filter: {field: value}, {field: [values]}, "
                          "{field: {\"$eq\"|\"$ne\"|\"$gt\"|\"$gte\"|\"$lt\"|\"$lte\": value}}, "
                          "{field: {\"$in\"|\"$nin\": [values]}}, {field: {\"$exists\": bool}}, "
                          "{\"$and\"|\"$or\": [filters]}, {\"$not\": filter}; e.g. "
                          "{\"year\": {\"$gte\": 2020}, \"lang\": [\"en\", \"de\"]}")
    allowed_ids: list[StrictStr] | None = Field(None, description="only these passages (ids the index holds)")
    with_text: StrictBool = Field(True, description="return each hit's passage text (false: 'text' is null; "
                                                    "'metadata' is always returned)")
    group_by_document: StrictBool = Field(
        False, description="each document once, as its best passage (a chunked index's 'document' metadata; "
                           "an unchunked passage is its own document); k documents come back when the index "
                           "has them")


class PassageIn(BaseModel):
    """A passage to add: as a corpus record of ``hopgraph index``."""

    model_config = ConfigDict(extra="forbid")
    id: StrictStr = Field(description=f"the passage id: at most {MAX_ID_BYTES:,} bytes of UTF-8 (any characters)")
    title: StrictStr = ""
    text: StrictStr
    metadata: dict[StrictStr, Any] = Field(default_factory=dict)


class AddRequest(BaseModel):
    """``POST /passages``: append passages to the served index (embedded by the server)."""

    model_config = ConfigDict(extra="forbid")
    passages: list[PassageIn] = Field(description="the passages; at most GET /info's limits.max_add")
    upsert: StrictBool = Field(False, description="replace passages whose id the index already holds "
                                                  "(else such an id is refused with 409)")


class AddResponse(BaseModel):
    """The answer to ``POST /passages``: the ids added and replaced, the passage count, whether a commit was written."""

    added: list[str]
    replaced: list[str]
    unchanged: list[str] = Field(description="ids the index already held with the same title, text and metadata "
                                             "(an add repeated: nothing to do)")
    passages: int = Field(description="passages the index now returns (deleted ones excluded)")
    committed: bool = Field(description="the index directory holds the write (a commit)")
    commit: str | None = Field(description="the commit served that holds the write (None without a directory)")


class DeleteResponse(BaseModel):
    """The answer to ``DELETE /passages/{id}``: the id deleted, the passage count, whether a commit was written."""

    deleted: str
    passages: int
    committed: bool
    commit: str | None


class WriteAccepted(BaseModel):
    """The 202 answer of a write sent with ``?wait=false``: follow it at ``GET /commits/{id}``."""

    id: str
    status: str = Field(description='"pending"')


class WriteStatus(BaseModel):
    """``GET /commits/{id}``: an asynchronous write's state."""

    id: str
    status: str = Field(description='"pending", "committed" or "failed"')
    result: dict[str, Any] | None = Field(None, description="the write's answer, once committed")
    error: dict[str, Any] | None = Field(None, description='{"status", "detail"}: what the write would have '
                                                           'answered, when it failed')


class HitOut(BaseModel):
    """One retrieved passage."""

    id: str
    title: str
    score: float
    rank: int
    text: str | None = Field(description="the passage text; null when the request had \"with_text\": false")
    metadata: dict[str, Any] = Field(description="the corpus record's metadata object ({} for none)")


class PassageOut(BaseModel):
    """``GET /passages/{id}``: one passage of the index's corpus."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any] = Field(description="the corpus record's metadata object ({} for none)")


class QueryResult(BaseModel):
    """The hits of one query, best first."""

    hits: list[HitOut]


class Timing(BaseModel):
    """Where the request's time went. The search runs in micro-batches shared with
    concurrent requests: ``embed_ms`` and ``search_ms`` are those of the whole batch."""

    queue_ms: float = Field(description="waiting for the search worker")
    embed_ms: float = Field(description="embedding the batch's question texts")
    search_ms: float = Field(description="the pipeline's search over the batch")
    total_ms: float = Field(description="from the request's arrival to its answer")
    batch_queries: int = Field(description="queries in the micro-batch this request ran in")
    batch_requests: int = Field(description="requests in that micro-batch")
    lane: str = Field(description="the search worker that ran it: 'interactive', or 'bulk' for a request whose "
                                  "estimated work is above limits.heavy_cost")


class SearchResponse(BaseModel):
    """The answer to ``POST /search``: one result per query, the timing and the warnings."""

    pipeline: str
    k: int
    results: list[QueryResult] = Field(description="one entry per query, in request order")
    timing: Timing
    warnings: list[str] = Field(default_factory=list, description="what to know about the answer, e.g. that "
                                                                  "the filter passes no passage of the index")


class ErrorResponse(BaseModel):
    """A refused request (4xx): what is wrong, in one line."""

    detail: str
