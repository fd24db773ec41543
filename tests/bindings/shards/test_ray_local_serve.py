"""``hopgraph serve --ray local --host 127.0.0.1`` in a real subprocess: every Ray process of the
local cluster listens on loopback (the Serve replicas' inter-deployment gRPC port excepted, which Ray
binds to every interface: docs/decisions/ray-local-loopback.md), no dashboard; SIGTERM stops the
server, exit status 0, with every Ray process gone and no stack dump on stderr."""
from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hopgraph import Index
from hopgraph.shards import shard_index

pytest.importorskip("ray")
pytest.importorskip("ray.serve")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads listening sockets from /proc")]

#: lines of the C++ failure-signal handler's report (absl / Ray's logging.cc)
STACK_DUMP = re.compile(r"SIGTERM received|^\s*PC: @|^\s*@ |logging\.cc|\*\*\* ")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        todo.extend(children.get(p, []))
    return found


def listening_sockets() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket (/proc/net/tcp and tcp6)."""
    found = {}
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        if not Path(table).is_file():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)  # 32-bit words in host (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            found[int(fields[9])] = (str(ipaddress.ip_address(packed)), int(hex_port, 16))
    return found


def listeners(pids: set[int]) -> list[tuple[str, int, str]]:
    """(address, port, process title) of every listening socket held by ``pids``."""
    sockets, found = listening_sockets(), []
    for pid in pids:
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # gone, or not ours
            continue
        for link in links:
            m = re.fullmatch(r"socket:\[(\d+)\]", link)
            if m and int(m.group(1)) in sockets:
                found.append((*sockets[int(m.group(1))], title))
    return sorted(set(found))


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited before it answered"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise AssertionError(f"no answer from {url}/health in {timeout:g} s")


def test_local_ray_serve_listens_on_loopback_and_stops_cleanly_on_sigterm(saved_index, tmp_path):
    shards = shard_index(Index.load(saved_index, progress=False), 2, tmp_path / "shards")
    port = free_port()
    cmd = [sys.executable, "-m", "hopgraph", "serve", "--ray", "local", "--host", "127.0.0.1", "--port", str(port),
           "--shards", str(shards), "--replicas", "1", "--embedder", "hashing-64"]
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}")
        pids = descendants(proc.pid)
        found = listeners(pids)
        titles = {title for _, _, title in found}
        assert (("127.0.0.1", port) in {(a, p) for a, p, _ in found}), found
        assert any(t.endswith("gcs_server") for t in titles) and any(t.endswith("raylet") for t in titles), found
        assert not any(p == 8265 for _, p, _ in found), f"a dashboard listens: {found}"
        open_wide = [(a, p, t) for a, p, t in found if not is_loopback(a)]
        # Ray Serve binds each replica's inter-deployment gRPC server to [::]:0, one port per replica
        replicas = [t for t in titles if t.startswith("ray::ServeReplica")]
        assert all(t.startswith("ray::ServeReplica") for _, _, t in open_wide), open_wide
        assert len(open_wide) <= len(replicas) == 3, (open_wide, replicas)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
        deadline = time.monotonic() + 30
        while (left := [p for p in pids if Path(f"/proc/{p}").exists()]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"Ray processes left after the server exited: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err_path.read_text()
    assert not [line for line in stderr.splitlines() if STACK_DUMP.search(line)], stderr
