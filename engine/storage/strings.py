"""Strings stored as one UTF-8 byte array plus int64 offsets (memory-mapped, decoded on demand)."""
from __future__ import annotations

import codecs
from typing import Callable, Iterable, Sequence

import numpy as np

from ..errors import IndexFormatError
from .arrays import RowReader, release_pages
from .validate import check_indptr


def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A string list as arrays for :func:`save_arrays`: the UTF-8 bytes of all strings
    concatenated (uint8) and their int64 offsets ``[n + 1]`` (compact and mmap-able)."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets


def check_packed(data: np.ndarray, offsets: np.ndarray, name: str, n: int | None = None) -> None:
    """Structural check of packed strings: 1-D uint8 bytes and ``n + 1`` non-decreasing offsets
    from 0 to ``len(data)``; IndexFormatError naming ``name``."""
    data, offsets = np.asarray(data) if not isinstance(data, np.memmap) else data, offsets
    if data.ndim != 1 or data.dtype != np.uint8:
        raise IndexFormatError(f"{name}: string bytes must be 1-D uint8, got shape {data.shape} dtype {data.dtype}")
    rows = len(offsets) - 1 if n is None else n
    check_indptr(offsets, rows, len(data), f"{name} offsets")


def check_utf8(data: np.ndarray, offsets: np.ndarray, name: str, block: int = 1 << 24) -> None:
    """Every string of packed strings (structure already checked by :func:`check_packed`) is valid
    UTF-8, checked without building them: the bytes decode as one stream (block by block, so the
    check holds at most ``block`` characters at a time) and no string starts inside a character
    (at a continuation byte). IndexFormatError naming ``name`` otherwise."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with RowReader(data) as read:  # from the file: the mapped bytes do not become resident
            for s in range(0, len(data), block):
                decoder.decode(read(s, min(s + block, len(data))).tobytes(), final=s + block >= len(data))
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise IndexFormatError(f"{name}: invalid UTF-8 ({e.reason})") from None
    starts = np.asarray(offsets[:-1])
    starts = starts[starts < np.asarray(offsets[1:])]  # non-empty strings
    inside = len(starts) and ((np.asarray(data)[starts] & 0xC0) == 0x80).any()
    release_pages(data, offsets)  # the reads above touched every page
    if inside:
        raise IndexFormatError(f"{name}: a string starts inside a UTF-8 character (bad offsets)")


def unpack_strings(data: np.ndarray, offsets: np.ndarray, name: str = "packed strings") -> list[str]:
    """The strings packed by :func:`pack_strings` (structure checked; invalid UTF-8 refused)."""
    check_packed(data, offsets, name)
    raw = np.asarray(data).tobytes()
    o = np.asarray(offsets).tolist()
    try:
        return [raw[o[i]:o[i + 1]].decode("utf-8") for i in range(len(o) - 1)]
    except UnicodeDecodeError as e:
        raise IndexFormatError(f"{name}: invalid UTF-8 ({e})") from None


def _hasher():
    try:
        import xxhash

        return lambda b: xxhash.xxh3_64_intdigest(b)
    except ImportError:  # pragma: no cover - xxhash is a dependency
        import hashlib

        return lambda b: int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little")


def string_hashes(strings: Iterable[str]) -> np.ndarray:
    """64-bit hashes (XXH3-64 of the UTF-8 bytes) of ``strings``, uint64."""
    h = _hasher()
    return np.fromiter((h(s.encode("utf-8")) for s in strings), np.uint64)


class HashTable:
    """Where strings sit in a list, by hash: ``hashes`` (uint64, sorted) and ``positions`` (int64, the
    list position of each hash). Built once per segment and stored with it, so a look-up reads a few
    entries of memory-mapped arrays instead of building a dict of every string. Collisions are
    resolved by comparing the strings themselves."""

    def __init__(self, hashes: np.ndarray, positions: np.ndarray) -> None:
        self.hashes, self.positions = hashes, positions

    @classmethod
    def build(cls, strings: Sequence[str]) -> "HashTable":
        """The table of ``strings``: their hashes sorted, with each one's position in ``strings``."""
        h = string_hashes(strings)
        order = np.argsort(h, kind="stable")
        return cls(h[order], order.astype(np.int64))

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The table as named arrays (``PREFIXhashes``, ``PREFIXpositions``), for :func:`save_arrays`."""
        return {f"{prefix}hashes": self.hashes, f"{prefix}positions": self.positions}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str, n: int, name: str) -> "HashTable":
        """The stored table of a list of ``n`` strings, checked (IndexFormatError naming ``name``)."""
        from .validate import check_ids

        hashes, positions = arrays[f"{prefix}hashes"], arrays[f"{prefix}positions"]
        if hashes.dtype != np.uint64 or hashes.shape != (n,):
            raise IndexFormatError(f"{name} {prefix}hashes: shape {list(hashes.shape)} dtype {hashes.dtype}, "
                                   f"expected [{n}] uint64")
        check_ids(positions, max(n, 1), f"{name} {prefix}positions", n)
        h = np.asarray(hashes)
        if n > 1 and not (h[1:] >= h[:-1]).all():
            raise IndexFormatError(f"{name} {prefix}hashes: not sorted")
        return cls(hashes, positions)

    def find(self, strings: Sequence[str], get: "Callable[[int], str]") -> np.ndarray:
        """For each string, the largest position holding it (``get(pos)`` reads the string at a
        position), -1 where none does: int64 [len(strings)]."""
        out = np.full(len(strings), -1, np.int64)
        if not len(strings) or not len(self.hashes):
            return out
        h = string_hashes(strings)
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        for i in np.flatnonzero(hi > lo).tolist():
            for pos in sorted(np.asarray(self.positions[lo[i]:hi[i]]).tolist(), reverse=True):
                if get(pos) == strings[i]:
                    out[i] = pos
                    break
        return out
