"""Asynchronous writes of ``hopgraph serve``: a write sent with ``?wait=false`` is answered 202 with an
id as soon as its checks pass, and ``GET /commits/{id}`` follows it — ``pending``, ``committed``
(with the answer the write would have given) or ``failed`` (with the status and detail it would
have answered). The states of the last :data:`KEPT` writes are kept (a bounded LRU: the memory
never depends on how many writes clients send).
"""
from __future__ import annotations

import asyncio
import secrets
from typing import Any, Coroutine

from fastapi import HTTPException

from ..engine.lru import LRUCache

#: how many writes' states ``GET /commits/{id}`` remembers
KEPT = 10_000


class Writes:
    """The asynchronous writes of one server and their states (module docstring)."""

    def __init__(self, maxsize: int = KEPT) -> None:
        self.maxsize = maxsize
        self._states: LRUCache[str, dict[str, Any]] = LRUCache(maxsize)
        self._tasks: set[asyncio.Task] = set()

    def start(self, commit: Coroutine[Any, Any, dict[str, Any]]) -> str:
        """Run the write ``commit`` (a coroutine answering the write's result, raising an HTTPException
        for what it would answer otherwise) in the background and return its new id."""
        write_id = secrets.token_hex(8)
        state: dict[str, Any] = {"id": write_id, "status": "pending", "result": None, "error": None}
        self._states.put(write_id, state)
        task = asyncio.get_running_loop().create_task(self._follow(commit, state))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return write_id

    @staticmethod
    async def _follow(commit: Coroutine[Any, Any, dict[str, Any]], state: dict[str, Any]) -> None:
        try:
            state["result"] = await commit
            state["status"] = "committed"
        except HTTPException as e:
            state["status"], state["error"] = "failed", {"status": e.status_code, "detail": e.detail}

    def get(self, write_id: str) -> dict[str, Any] | None:
        """The state of write ``write_id`` (a copy), or None for an id never given or forgotten."""
        state = self._states.get(write_id)
        return None if state is None else dict(state)

    async def drain(self) -> None:
        """Wait for the writes still running (a stopping server answers them before it stops)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
