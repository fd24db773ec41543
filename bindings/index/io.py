"""Saving and loading an index (:mod:`hopgraph.engine.storage`: generations, a commit point,
checksums, the write lock and reader leases)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..engine import storage
from ..engine.components.corpus import Corpus
from ..engine.components.shared import Components
from ..engine.embedders import Embedder, embedder_entry, resolve_embedder
from ..engine.errors import IndexFormatError, InputError
from ..engine.pipelines import pipeline_class
from .params import fit_params_only, validate_params

if TYPE_CHECKING:
    from .index import Index


class IndexIO:
    """Persistence of :class:`~hopgraph.index.Index`."""

    def save(self, path: str | Path | None = None, overwrite: bool = False) -> Path:
        """Write the index to ``path`` as a new generation and commit it atomically (format version 3,
        :mod:`hopgraph.engine.storage`): the corpus store, X and the shared components once, then each
        pipeline's own arrays, every file checksummed in the manifest.

        ``path`` must not exist, be empty, or be a hopgraph index directory; an existing index is
        replaced only with ``overwrite=True`` (readers of the old one keep it until they close).
        Without ``path`` the index commits a new generation of itself to the path it was loaded
        from or last saved to, e.g. after :meth:`~hopgraph.index.Index.add` / :meth:`~hopgraph.index.Index.delete`.
        Another process writing to ``path`` gives an :class:`IndexLockedError`."""
        if path is None:
            if self.path is None:
                raise InputError("save: this index has no path yet; give one")
            path, overwrite = self.path, True
        path = Path(path)
        with storage.IndexWriter(path, overwrite) as w:
            tmp = w.dir
            self.corpus.save(tmp / "corpus")
            files = {"embeddings": storage.save_array(tmp, "embeddings", self.X)}
            deleted = self.components.deleted
            if deleted is not None and deleted.any():
                files["deleted_rows"] = storage.save_array(tmp, "deleted_rows", np.flatnonzero(deleted))
            components = self.components.save(tmp / "components")
            pipes = {}
            for name, pipe in self.pipelines.items():
                pdir = tmp / "pipelines" / name
                pdir.mkdir(parents=True)
                pipe.save(pdir)
                pipes[name] = {"params": pipe.fit_params.to_dict(), "fit_seconds": self.fit_seconds.get(name, 0.0)}
            w.manifest = storage.new_manifest(
                corpus={"n_passages": len(self.corpus), "checksum": self.corpus.checksum,
                        "source": self.corpus.source},
                embedder=embedder_entry(self._embedder, self.embedder_name, int(self.X.shape[1])),
                embed_seconds=self.embed_seconds,
                files=files,
                components=components,
                pipelines=pipes,
                params=fit_params_only(self.params),
            )
        self.path = path
        self._manifest = None
        return path

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | Callable | str | None = None, device: str = "auto",
             progress: bool = True, verify: str = "full") -> "Index":
        """Open the live generation of a saved index (arrays memory-mapped).

        ``verify="full"`` (default) checks the size and checksum of every file; ``"fast"`` checks
        sizes only (for very large indexes; ``hopgraph verify`` does the full check). Either way
        every stored array is checked structurally (index ranges, CSR offsets, finite unit
        embeddings, ...), so a corrupt index raises :class:`IndexFormatError` naming the file —
        as do missing files or manifest keys and indexes of another format version (with the
        command that rebuilds them). An ``embedder`` other than the one the index was built with
        raises :class:`InputError`. The loaded index holds a lease on its generation, so a writer
        replacing the index does not remove the files it reads."""
        path = Path(path)
        if verify not in storage.VERIFY_LEVELS:
            raise InputError(f"verify must be one of {storage.VERIFY_LEVELS}, got {verify!r}")
        gen, manifest, lease = storage.open_index(path)
        try:
            index = cls._open(path, gen, manifest, embedder, device, progress, verify)
        except BaseException:
            lease.close()
            raise
        index._lease = lease
        return index

    @classmethod
    def _open(cls, path: Path, gen: Path, manifest: dict[str, Any], embedder: Embedder | Callable | str | None,
              device: str, progress: bool, verify: str) -> "Index":
        """:meth:`~hopgraph.index.Index.load` of the generation directory ``gen`` with its checked ``manifest``."""
        problems = storage.verify_files(gen, manifest, verify)
        if problems:
            more = f" (and {len(problems) - 1} more: hopgraph verify {path})" if len(problems) > 1 else ""
            raise IndexFormatError(f"index {path} is corrupt: {problems[0]}{more}")
        mpath = gen / storage.MANIFEST
        try:
            meta, emb_meta = manifest["corpus"], manifest["embedder"]
            n, checksum = int(meta["n_passages"]), str(meta["checksum"])
            emb_name, dim = str(emb_meta["name"]), int(emb_meta["dim"])
            x_entry, entries = manifest["files"]["embeddings"], manifest["pipelines"]
            params, comp_entry = manifest.get("params") or {}, manifest.get("components") or {}
            pipe_params = {name: dict(entry["params"]) for name, entry in entries.items()}
            fit_seconds = {name: float(entry.get("fit_seconds", 0.0)) for name, entry in entries.items()}
            params = validate_params(params, stored=True)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise IndexFormatError(f"{mpath}: missing or invalid entry {e}") from None
        corpus = Corpus.load(gen / "corpus", n, str(path / "corpus"), checksum)
        X = storage.check_array(gen, x_entry)
        storage.check_unit_rows(X, str(gen / "embeddings.npy"), rows=n, dim=dim)
        for recorded in {emb_name, str(emb_meta.get("spec") or emb_name)}:
            _check_embedder_name(mpath, recorded, dim)
        emb = resolve_embedder(embedder) if embedder is not None else None
        if emb is not None and emb.dim != dim:
            raise IndexFormatError(f"index {path} has dimension {dim}; embedder {emb.name} has {emb.dim}")
        if emb is not None and emb.name != emb_name and not emb_name.startswith("precomputed"):
            raise InputError(f"index {path} was built with embedder {emb_name!r}; queries embedded with "
                             f"{emb.name!r} would not match its passages (give embedder={emb_name!r} or none)")
        components = Components.load(gen / "components", comp_entry, X, corpus, emb, params.get("bm25"), progress)
        if "deleted_rows" in manifest["files"]:
            rows = storage.check_ids(storage.check_array(gen, manifest["files"]["deleted_rows"]), n,
                                     str(gen / "deleted_rows.npy"))
            components.deleted = np.zeros(n, bool)
            components.deleted[rows] = True
        index = cls(corpus, X, emb, emb_name, device=device, params=params, progress=progress,
                    components=components, stored_params=True)
        index.embed_seconds = float(manifest.get("embed_seconds", 0.0) or 0.0)
        index.embedder_entry = dict(emb_meta)
        for name, params_ in pipe_params.items():
            pdir = gen / "pipelines" / name
            if not pdir.is_dir():
                raise IndexFormatError(f"index {path}: pipeline directory {pdir} is missing")
            try:
                pipe = pipeline_class(name).load(pdir, params_, components, index.settings)
                search = {k: v for k, v in index.params.get(name, {}).items() if pipe.SearchParams.accepts(k)}
                index.pipelines[name] = pipe.with_search_defaults(**search) if search else pipe
            except IndexFormatError:
                raise
            except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
                raise IndexFormatError(f"index {path}: pipeline {name} ({pdir}) is corrupt or unreadable: "
                                       f"{type(e).__name__}: {e}") from None
            index.fit_seconds[name] = fit_seconds[name]
        index.path = path
        index._manifest = manifest
        return index

    @classmethod
    @contextlib.contextmanager
    def updating(cls, path: str | Path, **load_kwargs: Any) -> Iterator["Index"]:
        """Load the index at ``path`` under its write lock, yield it for :meth:`~hopgraph.index.Index.add` / :meth:`~hopgraph.index.Index.delete`
        / :meth:`~hopgraph.index.Index.compact`, and commit it as a new generation when the block ends without an
        exception (with one, nothing is written: the index stays as it was). A second writer
        meanwhile gets :class:`IndexLockedError` instead of losing one of the two updates.
        ``path`` must be a hopgraph index (nothing is created)."""
        path = Path(path)
        if not storage.has_index(path):
            raise InputError(f"{path} is not a hopgraph index" + ("" if path.exists() else " (it does not exist)"))
        with storage.TargetGuard(path, overwrite=True):
            index = cls.load(path, **load_kwargs)
            try:
                yield index
                index.save()
            finally:
                index.close()

    def close(self) -> None:
        """Release the lease on the loaded generation (its files may then be removed by a writer)."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest of the generation this index was loaded from or last saved to."""
        if self.path is None:
            raise RuntimeError("this index has not been saved")
        if self._manifest is None:
            self._manifest = storage.read_manifest(self.path)
        return self._manifest


def _check_embedder_name(manifest: Path, name: str, dim: int) -> None:
    """A built-in embedder named in a manifest must have the recorded dimension (checked without
    loading the model); other names (precomputed, callables) are taken as they are."""
    from ..engine.embedders import DEFAULT_EMBEDDER, MiniLMEmbedder

    expected = None
    if name.lower() in ("minilm", DEFAULT_EMBEDDER.lower()):
        expected = MiniLMEmbedder.dim
    elif name.startswith("hashing"):
        try:
            expected = resolve_embedder(name).dim
        except InputError:
            raise IndexFormatError(f"{manifest}: unknown embedder {name!r}") from None
    if expected is not None and expected != dim:
        raise IndexFormatError(f"{manifest}: embedder {name!r} has dimension {expected}, the manifest says {dim}")
