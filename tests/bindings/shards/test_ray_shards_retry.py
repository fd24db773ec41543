""":class:`hopgraph.shards.ray_serve.RayShards` over fake deployment handles (Ray imported, no
cluster): a call whose replica is lost is sent again until it answers or ``retry_seconds`` pass; the
shard's own error is raised at once, unretried."""
from __future__ import annotations

import time

import pytest

from hopgraph.engine.errors import InputError, ShardUnavailableError

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")

from hopgraph.shards.ray_serve import RETRY_WAIT, RayShards  # noqa: E402


class Response:
    def __init__(self, outcome) -> None:
        self.outcome = outcome

    def result(self):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class Handle:
    """A deployment handle whose n-th call answers ``outcomes[n]`` (the last one from then on)."""

    def __init__(self, *outcomes) -> None:
        self.outcomes, self.calls = list(outcomes), []
        self.call = self

    def remote(self, method, *args):
        self.calls.append((method, args))
        return Response(self.outcomes[min(len(self.calls), len(self.outcomes)) - 1])


def test_a_lost_replica_is_retried_until_one_answers():
    from ray.serve.exceptions import BackPressureError

    flaky = Handle(ray.exceptions.RayActorError(), BackPressureError(num_queued_requests=1, max_queued_requests=1),
                   {"rows": [1, 2]})
    steady = Handle("ok")
    shards = RayShards([steady, flaky], retry_seconds=30)
    assert shards.map("search", {0: ("q",), 1: ("q", 3)}) == {0: "ok", 1: {"rows": [1, 2]}}
    assert steady.calls == [("search", ("q",))]
    assert flaky.calls == [("search", ("q", 3))] * 3  # the first call and two resends, the same arguments


def test_a_shard_no_replica_answers_is_unavailable_after_retry_seconds():
    dead = Handle(ray.exceptions.RayActorError())
    start = time.monotonic()
    with pytest.raises(ShardUnavailableError,
                       match=r"^shard 1 is unavailable: no replica answered within 0\.5 s \(RayActorError\)$") as caught:
        RayShards([Handle("ok"), dead], retry_seconds=0.5).map("search", {1: ()})
    assert caught.value.shard == 1
    assert 0.5 <= time.monotonic() - start < 5
    assert 2 <= len(dead.calls) <= 0.5 / RETRY_WAIT + 2


def test_the_shards_own_error_is_raised_unretried():
    own = InputError("k must be positive")
    failing = Handle(ray.exceptions.RayTaskError("call", "Traceback ...", own))
    with pytest.raises(InputError, match="k must be positive"):
        RayShards([failing], retry_seconds=30).map("search", {0: ()})
    assert len(failing.calls) == 1
