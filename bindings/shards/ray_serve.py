"""``hopgraph serve --ray ADDRESS --shards DIR --replicas R``: a sharded index served by Ray Serve.

One deployment per shard (``shard-000`` ...), ``R`` replicas each, every replica a
:class:`~.service.ShardService` over the shard's directory (replicas of one shard share it and take
in each other's commits before every call); one router deployment, the ingress, serving the same
HTTP API as ``hopgraph serve`` (:func:`hopgraph.serve.create_app` over the router,
:mod:`.router`), so clients, auth and limits are unchanged.

The router reaches a shard through its deployment handle (:class:`RayShards`): Ray Serve picks a
replica; a call that fails because its replica died (killed, node lost) is sent again, to another
replica, for up to :data:`RETRY_SECONDS`; a shard none of whose replicas answers by then gives
:class:`~hopgraph.engine.errors.ShardUnavailableError` naming it (HTTP 503). Ray Serve starts a
replacement for a dead replica, which joins the deployment once it has loaded its shard.

Ray and Ray Serve are imported only here (``pip install 'hopgraph[distributed]'``).
"""
from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..engine.distributed import connect, import_ray
from ..engine.errors import InputError, ShardUnavailableError
from .layout import read_shards, shard_dir_name

#: how long a call to a shard is retried on other replicas before the shard counts as unavailable
RETRY_SECONDS = 10.0
#: seconds between two tries of a call to a shard
RETRY_WAIT = 0.2
#: the application name and the router deployment's name
APP_NAME = "hopgraph"
ROUTER_NAME = "router"


class RayShards:
    """:class:`~hopgraph.engine.components.sharded.ShardCalls` over Ray Serve deployment handles."""

    def __init__(self, handles: list[Any], retry_seconds: float = RETRY_SECONDS) -> None:
        self.handles, self.n_shards, self.retry_seconds = handles, len(handles), retry_seconds

    def map(self, method: str, calls: Mapping[int, tuple]) -> dict[int, Any]:
        """Send every call at once, then collect; a call whose replica failed is sent again."""
        pending = {s: self.handles[s].call.remote(method, *args) for s, args in calls.items()}
        return {s: self._result(s, response, method, calls[s]) for s, response in pending.items()}

    def _result(self, shard: int, response: Any, method: str, args: tuple) -> Any:
        """The answer of ``response``; a call whose replica is lost (a Ray error other than the
        shard's own, back pressure, no replica) is sent again every :data:`RETRY_WAIT` seconds
        (``tenacity``) until ``retry_seconds`` have passed, then the shard is unavailable."""
        ray = import_ray()
        from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
        from tenacity import RetryError, Retrying, retry_if_exception, stop_after_delay, wait_fixed

        def lost(e: BaseException) -> bool:
            return isinstance(e, (ray.exceptions.RayError, BackPressureError, DeploymentUnavailableError)) \
                and not isinstance(e, ray.exceptions.RayTaskError)

        sent = [response]

        def once() -> Any:
            call = sent.pop() if sent else self.handles[shard].call.remote(method, *args)
            try:
                return call.result()
            except ray.exceptions.RayTaskError as e:  # the shard raised: its own error, as raised
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, BaseException) else e) from None

        retrying = Retrying(retry=retry_if_exception(lost), stop=stop_after_delay(self.retry_seconds),
                            wait=wait_fixed(RETRY_WAIT))
        try:
            return retrying(once)
        except RetryError as e:
            error = e.last_attempt.exception()
            raise ShardUnavailableError(shard, f"no replica answered within {self.retry_seconds:g} s "
                                               f"({type(error).__name__})") from None


def shard_deployment(name: str, path: str, replicas: int, graphs: str | None = None, dense: str | None = None) -> Any:
    """The Ray Serve deployment of one shard (``replicas`` replicas over ``path``, its graph rows in
    ``graphs``, its dense search mode ``dense``)."""
    from ray import serve

    @serve.deployment(name=name, num_replicas=replicas, ray_actor_options={"num_cpus": 0},
                      health_check_period_s=2, graceful_shutdown_timeout_s=2)
    class Shard:
        def __init__(self, shard_path: str, graph_path: str | None, dense_mode: str | None) -> None:
            from .service import ShardService

            self.service = ShardService(shard_path, graphs=graph_path, dense=dense_mode)

        def call(self, method: str, *args: Any) -> Any:
            return self.service.call(method, *args)

    return Shard.bind(path, graphs, dense)


def router_app_builder(directory: str, shard_names: list[str], serve_options: dict[str, Any]) -> Any:
    """A function building the router's FastAPI app on its replica (Ray Serve's ASGI builder)."""

    def build() -> Any:
        from ray import serve

        from ..serve.app import create_app
        from .router import open_router

        handles = [serve.get_deployment_handle(name, app_name=APP_NAME) for name in shard_names]
        with ThreadPoolExecutor(1) as opener:  # the open checks the shards: blocking calls, off the replica's event loop
            router = opener.submit(open_router, directory, RayShards(handles), embedder=serve_options.get("embedder"),
                                   cleanup=True).result()
        return create_app(router, **{k: v for k, v in serve_options.items() if k != "embedder"})

    return build


def serve_sharded(address: str, directory: str | Path, replicas: int = 2, host: str = "127.0.0.1",
                  port: int = 8000, blocking: bool = True, router_replicas: int = 1, **serve_options: Any) -> Any:
    """Deploy the sharded index at ``directory`` on the Ray cluster at ``address``: one deployment
    per shard with ``replicas`` replicas, and ``router_replicas`` routers at ``http://host:port``
    (``serve_options``: :func:`hopgraph.serve.create_app`'s keywords, and ``embedder``). Routers
    share the router state on disk: each takes in the others' commits before every request.

    Returns the router's handle; ``blocking``: serves until SIGINT (Ctrl-C) or SIGTERM instead, then
    deletes the application and disconnects from Ray (which stops a ``"local"`` cluster) and
    returns None (:func:`stopped_by_sigterm`)."""
    for name, value in (("--replicas", replicas), ("--router-replicas", router_replicas)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    directory = Path(directory).resolve()
    meta = read_shards(directory)
    connect(address)
    if not blocking:
        return deploy(directory, meta, replicas, host, port, router_replicas, serve_options)
    with stopped_by_sigterm():
        try:
            deploy(directory, meta, replicas, host, port, router_replicas, serve_options)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a repeated SIGTERM does not cut the shutdown short
            stop_serving()
    return None


def deploy(directory: Path, meta: dict, replicas: int, host: str, port: int, router_replicas: int,
           serve_options: dict[str, Any]) -> Any:
    """Start Serve's proxy at ``host:port`` and run the shard and router deployments of the sharded
    index at ``directory`` (``meta``: its shards.json); returns the router's handle."""
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    names = [shard_dir_name(s) for s in range(int(meta["n_shards"]))]
    shards = [shard_deployment(name, str(directory / s["dir"]), replicas,
                               str(directory / s["graph"]) if s.get("graph") else None,
                               "ann" if meta.get("ivf_bits") else None)
              for name, s in zip(names, meta["shards"])]
    router = serve.deployment(serve.ingress(router_app_builder(str(directory), names, serve_options))(_Router),
                              name=ROUTER_NAME, num_replicas=router_replicas, ray_actor_options={"num_cpus": 0})
    return serve.run(router.bind(*shards), name=APP_NAME, route_prefix="/", blocking=False)


def stop_serving() -> None:
    """Delete the application (when Serve got as far as starting), then disconnect from Ray."""
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        serve.delete(APP_NAME)
    except RayServeException:  # no Serve controller: the deployment failed before starting it
        pass
    finally:
        import_ray().shutdown()


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Within this block (in the main thread) SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so
    that a terminated server shuts down like an interrupted one; the previous handler is restored
    after it.

    Without it, SIGTERM meets the C++ failure-signal handler that ``ray.init`` installs in the
    driver: a stack dump of the driver on stderr, then an abort, the cluster left to notice that
    its driver is gone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


class _Router:
    """The router deployment's class: its app is built by :func:`router_app_builder`; the shard
    deployments are bound as arguments so that they are deployed with it."""

    def __init__(self, *shards: Any) -> None:
        self.shards = shards
