"""Per-file checksums of a stored index: XXH3-128 digests (CRC-32 without xxhash), verified on load."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


from ..errors import IndexFormatError, InputError
from .layout import MANIFEST, READERS_FILE, SEGMENT_MANIFEST


#: ``verify=`` levels of :func:`verify_files` / ``Index.load``
VERIFY_LEVELS = ("full", "fast")


def _default_hash() -> str:
    try:
        import xxhash  # noqa: F401
        return "xxh3_128"
    except ImportError:  # pragma: no cover - xxhash is a dependency; CRC-32 for environments without it
        return "crc32"


HASH = _default_hash()


def file_digest(path: Path, algorithm: str = HASH, block: int = 8 << 20) -> str:
    """Hex digest of a file's bytes (``"xxh3_128"`` or ``"crc32"``), read in 8 MB blocks."""
    if algorithm == "xxh3_128":
        import xxhash

        h = xxhash.xxh3_128()
        update: Callable[[memoryview], None] = h.update
        digest: Callable[[], str] = h.hexdigest
    elif algorithm == "crc32":
        import zlib

        state = [0]
        update = lambda b: state.__setitem__(0, zlib.crc32(b, state[0]))  # noqa: E731
        digest = lambda: f"{state[0]:08x}"  # noqa: E731
    else:
        raise IndexFormatError(f"unknown checksum algorithm {algorithm!r} (this hopgraph knows xxh3_128, crc32)")
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            update(view[:n])
    return digest()


def data_files(root: Path) -> list[Path]:
    """Every data file under a segment (or format-3 generation) directory, relative and sorted: all but
    its manifest and lease file."""
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() not in (MANIFEST, SEGMENT_MANIFEST, READERS_FILE))


def verify_files(gen_dir: Path, manifest: dict[str, Any], level: str = "full") -> list[str]:
    """Problems with the files of a segment (or format-3 generation), one line each (empty: all good).

    ``"full"``: every file listed in the manifest exists with its size and checksum, and no
    unlisted data file is present. ``"fast"``: the same without reading the files (sizes only).
    """
    if level not in VERIFY_LEVELS:
        raise InputError(f"verify must be one of {VERIFY_LEVELS}, got {level!r}")
    mfile = gen_dir / (SEGMENT_MANIFEST if (gen_dir / SEGMENT_MANIFEST).is_file() else MANIFEST)
    listed = manifest.get("checksums")
    algorithm = manifest.get("checksum_algorithm")
    if not isinstance(listed, dict) or not isinstance(algorithm, str):
        return [f"{mfile}: no file checksums (key 'checksums' / 'checksum_algorithm')"]
    problems = []
    for rel, entry in sorted(listed.items()):
        path = gen_dir / rel
        try:
            size, digest = int(entry["size"]), str(entry["digest"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"{mfile}: bad checksum entry for {rel}")
            continue
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != size:
            problems.append(f"{path}: {path.stat().st_size} bytes, manifest says {size}")
        elif level == "full" and file_digest(path, algorithm) != digest:
            problems.append(f"{path}: checksum mismatch (corrupt)")
    for rel in data_files(gen_dir):
        if rel.as_posix() not in listed:
            problems.append(f"{gen_dir / rel}: not listed in the manifest")
    return problems
