"""Distributed index build on a Ray cluster (optional extra ``hopgraph[distributed]``).

``hopgraph index CORPUS --out DIR --ray ADDRESS`` (or ``Index.build(...,
ray_address=ADDRESS)``) shards the two expensive stages across the cluster's
workers and assembles exactly the single-process result:

- **embedding**: each chunk of passages (the same chunk boundaries as the
  single-process loop) is embedded by a remote task (:func:`ray_ordered_map`, called by
  :mod:`hopgraph.engine.ingest.streaming`, which this module does not import); blocks are
  written in row order into the memory-mapped matrix, with the same resume state;
- **gain-kNN row blocks**: while :func:`ray_cluster` is active, the G3RAG graph
  build (:func:`hopgraph.engine.pipelines.g3rag.ann_graph.ann_gain_knn`) sends its row blocks
  (IVF cells) to remote tasks; X, the partition and the penalty are put in the
  object store once. Every block is computed independently and deterministically,
  so the assembled graph is identical.

``ADDRESS`` is what :func:`ray.init` takes: ``"auto"`` (a running cluster),
``"ray://host:10001"``, or ``"local"`` to start a new cluster in-process, bound to the
loopback interface (:func:`connect`). Ray is imported only here, only when asked for.
"""
from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from .errors import InputError

#: the task runner used by ann_gain_knn while a cluster is active
_ACTIVE_MAP: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("hopgraph_ray_map", default=None)


def import_ray():
    """The ``ray`` module; :class:`InputError` naming the extra to install when it is missing."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'hopgraph[distributed]'") from None
    return ray


def connect(address: str) -> Any:
    """``ray.init`` on ``address`` unless Ray is already initialised (e.g. by a test); no dashboard,
    no worker output on the driver. ``"local"`` starts a new single-node cluster (never one found
    running on the machine) whose processes listen on 127.0.0.1 only (:func:`loopback_node`)."""
    ray = import_ray()
    if not ray.is_initialized():
        if address == "local":
            with loopback_node():
                ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                         log_to_driver=False)
        else:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


@contextmanager
def loopback_node() -> Iterator[None]:
    """Within this block a Ray node started here takes 127.0.0.1 as its address, so that its GCS,
    raylet, workers and agents listen on loopback only (they bind every interface otherwise).

    Ray maps a loopback ``node_ip_address`` to the machine's outward address unless clusters are
    switched off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the default on macOS and Windows), in
    which case the node is loopback-only. The switch is Ray's module constant, read at import, so
    it is set both there (for this process) and in the environment (for the processes the node
    starts), and both are restored on exit; see docs/decisions/ray-local-loopback.md.
    """
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved_env, saved_flag = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved_env


def current_task_map() -> Callable | None:
    """The Ray task map of the active :func:`ray_cluster`, or None (run locally)."""
    return _ACTIVE_MAP.get()


@contextmanager
def ray_cluster(address: str | None) -> Iterator[Callable | None]:
    """Within this block, gain-kNN row blocks run as Ray tasks on ``address`` (None: no-op)."""
    if address is None:
        yield None
        return
    connect(address)
    token = _ACTIVE_MAP.set(ray_map)
    try:
        yield ray_map
    finally:
        _ACTIVE_MAP.reset(token)


def _cluster_cpus(ray) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def ray_map(fn: Callable[..., Any], task_args: list[tuple], shared: dict[str, Any]) -> Iterable[Any]:
    """Run ``fn(**shared, cell_ids=args[0])`` for every task on the cluster; yields results
    as they finish (callers place them by row, so order does not matter).

    Large ``shared`` values are put in the object store once and passed by reference.
    """
    ray = import_ray()
    refs = {k: ray.put(v) for k, v in shared.items()}
    remote = ray.remote(_run_task)
    window = 2 * _cluster_cpus(ray)
    pending: list = []
    for args in task_args:
        pending.append(remote.remote(fn, refs, args[0]))
        if len(pending) >= window:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


def _run_task(fn: Callable[..., Any], shared: dict[str, Any], cell_ids: Any) -> Any:
    # Ray resolves the top-level ObjectRefs of the dict lazily: fetch them here.
    import ray

    values = {k: (ray.get(v) if isinstance(v, ray.ObjectRef) else v) for k, v in shared.items()}
    return fn(**values, cell_ids=cell_ids)


def ray_ordered_map(fn: Callable[..., Any], shared: Any, task_args: Iterable[tuple], address: str
                    ) -> Iterator[Any]:
    """``fn(shared, *args)`` for every ``args`` of ``task_args`` as Ray tasks on ``address``;
    yields the results in the order of ``task_args``, with at most 2 × CPUs tasks in flight
    (``task_args`` is consumed lazily, so a generator of large arguments stays windowed).

    ``shared`` (e.g. the embedder) is put in the object store once and passed by reference.
    The embedding stage of :mod:`hopgraph.engine.ingest.streaming` runs its chunks through this.
    """
    ray = connect(address)
    remote = ray.remote(fn)
    shared_ref = ray.put(shared)
    window = 2 * _cluster_cpus(ray)
    queue: list[Any] = []
    for args in task_args:
        queue.append(remote.remote(shared_ref, *args))
        if len(queue) >= window:
            yield ray.get(queue.pop(0))
    for ref in queue:
        yield ray.get(ref)
