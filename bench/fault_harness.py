"""Fault harness of index storage, shared by ``tests/engine/storage/test_fault.py`` (quick) and
``bench/bench_faults.py`` (long).

* :func:`kill_trials`: SIGKILL a ``hopgraph index --overwrite`` at random moments of its build,
  save and replace; after each kill the path must hold the old complete index or the new one
  (it loads, and searches give exactly the old or the new results).
* :func:`step_kill_trials`: SIGKILL a ``hopgraph add`` / ``delete`` / ``merge`` (any command) before
  each of its filesystem operations in the index directory in turn — every file opened for
  writing, every directory made, every rename, replace, removal — the first, the second, ... until
  one run completes; after each kill the index must hold the old or the new commit, loadable and
  searchable with exactly its results, and the next run of the command must complete.
* :func:`corruption_cases` + :func:`load_outcomes`: copies of an index with one fault each (a
  flipped bit, an out-of-range or non-finite value, a truncated or deleted file), loaded and
  searched in a worker subprocess, so that a crash (a signal) is seen as one. The outcome of each
  case is ``refused`` (``IndexFormatError``), ``same`` (identical results), ``changed`` (valid
  but different results), ``crash`` or ``error`` (any other exception).

Each outcome must be ``refused`` or ``same`` with full verification (the default); ``crash`` and
``error`` never, in any mode.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

import numpy as np

#: the fault kinds of :func:`corrupt`
FAULTS = ("bit", "value", "truncate", "delete")

WORKER_INDEX = r"""
import sys, time
from hopgraph import cli, index  # imports done before the parent starts its clock
print("ready", flush=True)
t0 = time.perf_counter()
rc = cli.main(sys.argv[1:])
print(f"done {time.perf_counter() - t0:.3f}", flush=True)
sys.exit(rc)
"""

WORKER_LOAD = r"""
import json, sys
import numpy as np
from hopgraph import Index, IndexFormatError
pipelines, questions, base, verify = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]

def results(index):
    return {p: [a.tolist() for a in index.search_arrays(questions, pipeline=p, k=4)] for p in pipelines}

expected = results(Index.load(base, progress=False))
for line in sys.stdin:
    case = line.strip()
    print("start", case, flush=True)
    try:
        got = results(Index.load(case, progress=False, verify=verify))
        same = all(got[p][0] == expected[p][0] and np.allclose(got[p][1], expected[p][1], rtol=1e-5)
                   for p in pipelines)
        outcome = "same" if same else "changed"
    except IndexFormatError as e:
        outcome = "refused"
    except Exception as e:
        outcome = f"error {type(e).__name__}: {e}".replace("\n", " ")
    print("end", case, outcome, flush=True)
"""


WORKER_STEPS = r"""
import builtins, io, json, os, shutil, signal, sys
from hopgraph import cli, index  # imported once; each trial runs in a forked child
print("ready", flush=True)
for line in sys.stdin:
    k, root, argv, every = json.loads(line)
    pid = os.fork()
    if pid == 0:
        count, seen = [0], set()
        def step(path):
            path = str(os.fspath(path))
            if not path.startswith(root):
                return
            rel = path[len(root):].lstrip("/").split("/")
            hidden = rel[0].startswith(".") and len(rel) > 1  # inside a temporary directory
            if hidden and not every:
                if rel[0] in seen:  # one step per temporary directory: its files are invisible
                    return
                seen.add(rel[0])
            count[0] += 1
            if count[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
        def wrap(fn, writes_only=False):
            def inner(file, *a, **kw):
                mode = (a[0] if a else kw.get("mode", "r")) if writes_only else "w"
                if not isinstance(file, int) and any(c in str(mode) for c in "wax+"):
                    step(file)
                return fn(file, *a, **kw)
            return inner
        builtins.open = io.open = wrap(io.open, writes_only=True)
        for name in ("rename", "replace", "unlink", "mkdir", "rmdir"):
            setattr(os, name, wrap(getattr(os, name)))
        shutil.rmtree = wrap(shutil.rmtree)
        sys.stdout = open(os.devnull, "w")
        rc = cli.main(argv)
        os.write(1, f"done {rc} {count[0]}\n".encode())
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print(f"killed {os.WTERMSIG(status)}", flush=True)
"""


class StepKiller:
    """A process that runs hopgraph commands killed before their k-th filesystem operation in an
    index directory (:func:`step_kill_trials`); imports hopgraph once and forks a child per run."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER_STEPS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"step-kill worker did not start: {self.proc.stderr.read()[-2000:]}")

    def run(self, k: int, root: Path, argv: list[str], every: bool = True) -> tuple[str, int]:
        """Run ``hopgraph ARGV`` killed before its ``k``-th operation under ``root`` (0: never):
        ``("killed", k)`` or ``("done", operations)``. ``every=False`` counts the operations inside a
        temporary directory (a segment being written, invisible until renamed) as one."""
        self.proc.stdin.write(json.dumps([k, str(root), argv, every]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if not line:
            raise RuntimeError(f"step-kill worker died: {self.proc.stderr.read()[-2000:]}")
        if line[0] == "killed":
            return "killed", k
        if line[1] != "0":
            raise RuntimeError(f"hopgraph {' '.join(argv)} failed (exit {line[1]})")
        return "done", int(line[2])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def index_state(path: Path, questions: list[str], pipelines: Iterable[str]) -> tuple:
    """What tells two commits apart: the segments the live commit lists and every pipeline's top-5
    for ``questions`` (the index loaded with full verification)."""
    from hopgraph.engine import storage

    return tuple(s["name"] for s in storage.read_manifest(path)["segments"]), \
        search_results(path, questions, pipelines)


def step_kill_trials(killer: StepKiller, base: Path, argv: list[str], work: Path, questions: list[str],
                     pipelines: Iterable[str], every: bool = True) -> list[str]:
    """Kill ``hopgraph ARGV`` (``"INDEX"`` standing for the index path) before each of its filesystem
    operations on a copy of the index ``base`` (module docstring; ``every``: see
    :meth:`StepKiller.run`). Returns each step's outcome: ``old`` / ``new`` (the index holds that
    commit — its segments, and searches give its results with full verification — and the command
    then completes to the new one), or ``broken: ...``."""
    pipelines = list(pipelines)
    old = index_state(base, questions, pipelines)
    ref = work / "reference"
    shutil.copytree(base, ref)
    kind, total = killer.run(0, ref, [str(ref) if a == "INDEX" else a for a in argv], every)
    new = index_state(ref, questions, pipelines)
    outcomes = []
    for k in range(1, total + 1):
        trial = work / f"step{k}"
        shutil.copytree(base, trial)
        args = [str(trial) if a == "INDEX" else a for a in argv]
        kind, _ = killer.run(k, trial, args, every)
        try:
            got = index_state(trial, questions, pipelines)
        except Exception as e:  # noqa: BLE001 - any failure to load is the outcome
            outcomes.append(f"broken: step {k}: {type(e).__name__}: {e}")
            continue
        state = "old" if got == old else "new" if got[1] == new[1] and len(got[0]) == len(new[0]) else None
        if state is None or kind != "killed":
            outcomes.append(f"broken: step {k}: {'neither the old nor the new commit' if state is None else kind}")
            continue
        if state == "old":  # a state left by a kill never blocks the next writer
            killer.run(0, trial, args, every)
            if index_state(trial, questions, pipelines)[1] != new[1]:
                outcomes.append(f"broken: step {k}: the command run again did not give the new results")
                continue
        outcomes.append(state)
        shutil.rmtree(trial, ignore_errors=True)
    return outcomes


def synthetic_corpus(path: Path, n: int, seed: int) -> Path:
    """A JSON-lines corpus of ``n`` short passages naming entities (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(400)]
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(words, 12)) + f" Entity{i % 50} met Person{(i * 7) % 60}."
            f.write(json.dumps({"id": f"p{i}", "title": f"Title {i % 97}", "text": text}) + "\n")
    return path


# ---------------------------------------------------------------------- kills
def start_cli(argv: list[str]) -> subprocess.Popen:
    """A ``hopgraph ARGV...`` child process, started and imported (it printed "ready")."""
    p = subprocess.Popen([sys.executable, "-c", WORKER_INDEX, *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError(f"hopgraph worker did not start: {p.stderr.read()[-2000:]}")
    return p


def start_index(corpus: Path, out: Path, pipelines: str = "dense,bm25", embedder: str = "hashing-32"
                ) -> subprocess.Popen:
    """A ``hopgraph index --overwrite`` child process, started and imported (it printed "ready")."""
    return start_cli(["index", str(corpus), "--out", str(out), "--overwrite", "--embedder", embedder,
                      "--pipelines", pipelines, "--batch-size", "64", "-q"])


def worker_seconds(p: subprocess.Popen) -> float:
    """The time a finished worker spent in ``cli.main`` (its "done SECONDS" line)."""
    return float(next(x for x in p.stdout.read().splitlines() if x.startswith("done ")).split()[1])


def search_results(path: Path, questions: list[str], pipelines: Iterable[str]) -> list:
    """The top-5 ids of each pipeline for ``questions`` on the index at ``path`` (loaded with full
    verification)."""
    from hopgraph import Index

    index = Index.load(path, progress=False)
    try:
        return [index.search_arrays(questions, pipeline=p, k=5)[0].tolist() for p in pipelines]
    finally:
        index.close()


def kill_trials(corpora: list[Path], out: Path, trials: int, seed: int, questions: list[str],
                pipelines: tuple[str, ...] = ("dense", "bm25")) -> tuple[list[str], int]:
    """Build ``out`` from ``corpora[0]``, then ``trials`` times start a rebuild from the other corpus and
    SIGKILL it after a random share (0.3–1.4) of an uninterrupted build's time. Returns each trial's
    outcome (``old`` / ``new``: the path holds that complete index; or ``broken: ...``) and the
    number of the corpus the path holds at the end."""
    from hopgraph import Index

    expected = [[Index.build(c, embedder="hashing-32", pipelines=list(pipelines), progress=False)
                 .search_arrays(questions, pipeline=p, k=5)[0].tolist() for p in pipelines] for c in corpora]
    p = start_index(corpora[0], out, ",".join(pipelines))
    if p.wait(120) != 0:
        raise RuntimeError(p.stderr.read()[-2000:])
    work = worker_seconds(p)
    state, rng, outcomes = 0, np.random.default_rng(seed), []
    for _ in range(trials):
        new = 1 - state
        p = start_index(corpora[new], out, ",".join(pipelines))
        time.sleep(rng.uniform(0.3, 1.4) * work)  # most kills late: in the save and the replace
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        try:
            got = search_results(out, questions, pipelines)
        except Exception as e:  # noqa: BLE001 - any failure to load is the outcome
            outcomes.append(f"broken: {type(e).__name__}: {e}")
            continue
        if got not in expected:
            outcomes.append("broken: neither the old nor the new results")
            continue
        state = expected.index(got)
        outcomes.append("new" if state == new else "old")
    return outcomes, state


# ---------------------------------------------------------------------- corruption
def npy_data_start(path: Path) -> int:
    """Offset of a ``.npy`` file's values (after its header); 0 for other files."""
    if path.suffix != ".npy":
        return 0
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)(f)
        return f.tell()


def corrupt(path: Path, fault: str, rng: np.random.Generator) -> str:
    """Apply one fault of :data:`FAULTS` to ``path``; returns a short description.

    ``bit`` flips one bit (of a ``.npy``'s values, its header kept); ``value`` sets one element of a
    ``.npy`` to an out-of-range value (ints: -1 or a huge id; floats: NaN, inf or a large number;
    other files: one byte set to 0xFF); ``truncate`` cuts the file in half; ``delete`` removes it.
    """
    if fault == "delete":
        path.unlink()
        return "deleted"
    raw = bytearray(path.read_bytes())
    if fault == "truncate":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
        return f"truncated to {len(raw) // 2} bytes"
    start = npy_data_start(path)
    if fault == "value" and path.suffix == ".npy":
        a = np.load(path, allow_pickle=False)
        if a.size:
            flat = a.reshape(-1).copy()
            i = int(rng.integers(0, flat.size))
            if flat.dtype.kind in "iu":
                flat[i] = -1 if flat.dtype.kind == "i" and rng.random() < 0.5 else np.iinfo(flat.dtype).max // 2
            elif flat.dtype.kind == "f":
                flat[i] = rng.choice([np.nan, np.inf, 1e30])
            elif flat.dtype.kind == "b":
                flat[i] = not flat[i]
            np.save(path, flat.reshape(a.shape), allow_pickle=False)
            return f"element {i} set to {flat[i]!r}"
    if start >= len(raw):  # nothing but a header: change the header instead
        start = 0
    i = int(rng.integers(start, len(raw)))
    if fault == "value":
        raw[i] = 0xFF
    else:
        raw[i] ^= 1 << int(rng.integers(0, 8))
    path.write_bytes(bytes(raw))
    return f"byte {i} changed"


def index_files(base: Path) -> list[Path]:
    """Every file of a saved index, relative to it (lock and lease files, which hold no data, excluded)."""
    from hopgraph.engine import storage

    return sorted(p.relative_to(base) for p in base.rglob("*")
                  if p.is_file() and p.name not in (storage.LOCK_FILE, storage.READERS_FILE)
                  and not p.name.endswith(".lock"))


def corruption_cases(base: Path, root: Path, faults: Iterable[str], rng: np.random.Generator,
                     files: list[Path] | None = None) -> dict[str, tuple[str, str]]:
    """One copy of ``base`` under ``root`` per (file, fault): case path → (file, fault description)."""
    cases = {}
    for rel in files if files is not None else index_files(base):
        for fault in faults:
            case = root / f"case{len(cases)}"
            shutil.copytree(base, case)
            what = corrupt(case / rel, fault, rng)
            cases[str(case)] = (rel.as_posix(), f"{fault}: {what}")
    return cases


def load_outcomes(base: Path, cases: Iterable[str], pipelines: list[str], questions: list[str],
                  verify: str = "full", timeout: float = 600) -> dict[str, str]:
    """Outcome of loading and searching each case in a worker subprocess (restarted after a crash)."""
    outcomes: dict[str, str] = {}
    todo = list(cases)
    while todo:
        proc = subprocess.run([sys.executable, "-c", WORKER_LOAD, json.dumps(pipelines), json.dumps(questions),
                               str(base), verify],
                              input="\n".join(todo) + "\n", capture_output=True, text=True, timeout=timeout)
        started = None
        for line in proc.stdout.splitlines():
            kind, case, *rest = line.split(" ", 2)
            if kind == "start":
                started = case
            else:
                outcomes[case] = rest[0]
        if proc.returncode != 0:  # the worker died (a signal: a crash) while on case ``started``
            if started is None or started in outcomes:
                raise RuntimeError(f"load worker failed: {proc.stderr[-2000:]}")
            outcomes[started] = f"crash (exit {proc.returncode})"
        todo = [c for c in todo if c not in outcomes]
    return outcomes


def outcome_kind(outcome: str) -> str:
    """``refused`` / ``same`` / ``changed`` / ``crash`` / ``error``."""
    return outcome.split(" ")[0]
