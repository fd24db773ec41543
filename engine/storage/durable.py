"""Durable writes: fsync of files and directories, atomic replacement of small files."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any





def fsync_dir(path: Path) -> None:
    """fsync a directory (its entries: new names, renames); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and every directory under ``root`` (directories after their contents)."""
    dirs = [root]
    for p in root.rglob("*"):
        if p.is_dir():
            dirs.append(p)
        elif p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(d)


def write_file_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling: write, fsync, rename, fsync the directory."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json(path: Path, obj: Any, compact: bool = False) -> None:
    """Write ``obj`` as JSON (keys sorted; indented, or ``compact``: one line without spaces)."""
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, sort_keys=True, separators=(",", ":"))
        else:
            json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
