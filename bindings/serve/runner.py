"""Running the service: ``hopgraph serve`` and an in-process background server.

The listening socket is bound before uvicorn starts, so ``--port 0`` picks a free
port and the printed address is the real one.
"""
from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Sequence

import uvicorn
from fastapi import FastAPI

from ..engine.errors import InputError
from ..index import Index
from .app import create_app
from .auth import read_api_key
from .budget import ParamLimits
from .limits import ServeLimits, limits_from_args

log = logging.getLogger("hopgraph.serve")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6; port 0 = any free port)."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port must be between 0 and 65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when
    # the socket says so; without it every answer waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """The ``http://`` URL of a bound socket (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_loopback(host: str) -> bool:
    """``host`` is a loopback IP address or ``localhost``."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def set_cpu_threads(n: int) -> None:
    """Use ``n`` CPU threads in torch (the embedder) and faiss (dense search) in this process."""
    if n < 1:
        raise InputError(f"--threads must be a positive integer, got {n}")
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def _uvicorn_server(app: FastAPI, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level=log_level, access_log=log_level == "debug", lifespan="on",
                            timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


class BackgroundServer:
    """Run an app with uvicorn in a daemon thread of this process (tests, notebooks).

    >>> with BackgroundServer(create_app(index)) as srv:  # doctest: +SKIP
    ...     hopgraph.Client(srv.url).search("question", pipeline=srv.app.state.pipelines[0])
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.app, self.host, self.port, self.log_level = app, host, port, log_level
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        """Bind the socket, start the server thread and return once it serves (RuntimeError after
        ``timeout`` seconds, or when the thread dies); ``url`` is set."""
        sock = bind_socket(self.host, self.port)
        self.url = url_of(sock)
        self._server = _uvicorn_server(self.app, self.log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="hopgraph-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread (at most 15 s)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._server = self._thread = None

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(index_dir: str | Path, host: str = "127.0.0.1", port: int = 8080, api_key_file: str | Path | None = None,
          limits: ServeLimits | None = None, pipelines: Sequence[str] | None = None, embedder: str | None = None,
          device: str = "auto", log_level: str = "info", progress: bool = True, threads: int | None = None,
          read_only: bool = False, param_limits: ParamLimits | None = None, allowed_hosts: Sequence[str] = ()) -> int:
    """Load ``index_dir`` (memory-mapped) once and serve it until interrupted. The load shows no
    progress bars (a server's stderr is a log); with ``progress`` it is logged (INFO) instead, and
    warnings are log records of the ``hopgraph.serve`` logger."""
    api_key = read_api_key(api_key_file) if api_key_file else None
    t0 = time.perf_counter()
    index = Index.load(index_dir, embedder=embedder, device=device, progress=False)  # no bars in a server log
    app = create_app(index, limits, api_key=api_key, pipelines=pipelines, read_only=read_only,
                     param_limits=param_limits, allowed_hosts=allowed_hosts)
    if threads is not None:  # in the interactive worker, whose torch / faiss settings are its own
        app.state.batcher.interactive.executor.submit(set_cpu_threads, threads).result()
    try:
        app.state.batcher.warm_up()  # load the query embedder before the first request
    except InputError as e:
        log.warning("only embedding queries can be answered: %s", e)
    if not read_only:
        app.state.live.start_writer()  # the writer process loads beside the first searches
    gc.freeze()  # what the start loaded (libraries, model, index) leaves the collector's full passes
    if progress:
        log.info("loaded %s (%d passages) and its query embedder in %.1f s", index_dir, index.n_live,
                 time.perf_counter() - t0)
    sock = bind_socket(host, port)
    if not is_loopback(host) and api_key is None:
        names = ", ".join(allowed_hosts) if allowed_hosts else "loopback names only (add --allow-host NAME)"
        log.warning("listening on %s without --api-key-file; Host names accepted: %s", host, names)
    print(f"hopgraph serve: {index.n_live} passages, pipelines {', '.join(app.state.pipelines)}"
          f"{' (read-only)' if read_only else ''}; "
          f"listening on {url_of(sock)}{' (API key required)' if api_key else ''}", flush=True)
    _uvicorn_server(app, log_level).run(sockets=[sock])
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``hopgraph serve`` (options from :func:`hopgraph.serve.limits.add_serve_arguments`)."""
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be a positive integer, got {args.threads}")
    if args.ray is not None or args.shards is not None:
        return _serve_sharded(args)
    if args.index is None:
        raise InputError("give the index directory to serve (or --ray ADDRESS --shards DIR)")
    return serve(args.index, host=args.host, port=args.port, api_key_file=args.api_key_file,
                 limits=limits_from_args(args), pipelines=args.pipelines, embedder=args.embedder,
                 device=args.device, log_level=args.log_level, progress=not args.quiet, threads=args.threads,
                 read_only=args.read_only, param_limits=ParamLimits.from_sources(args.param_limits, args.param_limit),
                 allowed_hosts=args.allow_host)


def _serve_sharded(args: argparse.Namespace) -> int:
    """``hopgraph serve --ray ADDRESS --shards DIR --replicas R`` (:mod:`hopgraph.shards.ray_serve`)."""
    if args.ray is None or args.shards is None:
        raise InputError("a sharded index is served with both --ray ADDRESS and --shards DIR")
    if args.index is not None:
        raise InputError("give either an index directory or --shards DIR, not both")
    from ..shards.layout import read_shards
    from ..shards.ray_serve import serve_sharded

    meta = read_shards(args.shards)
    for name, value in (("--replicas", args.replicas), ("--router-replicas", args.router_replicas)):
        if value < 1:
            raise InputError(f"{name} must be a positive integer, got {value}")
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    print(f"hopgraph serve: {meta['passages']} passages in {meta['n_shards']} shards x {args.replicas} replicas "
          f"on Ray {args.ray}; listening on http://{args.host}:{args.port}", flush=True)
    serve_sharded(args.ray, args.shards, replicas=args.replicas, router_replicas=args.router_replicas,
                  host=args.host, port=args.port,
                  limits=limits_from_args(args), api_key=api_key, pipelines=args.pipelines, read_only=args.read_only,
                  param_limits=ParamLimits.from_sources(args.param_limits, args.param_limit),
                  allowed_hosts=args.allow_host, embedder=args.embedder)
    return 0
