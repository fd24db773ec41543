"""Arrays on disk: ``.npy`` files written in blocks, memory-mapped on load, read by rows with plain
reads so a loaded index keeps its resident set small."""
from __future__ import annotations

import mmap
import os
import tokenize
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import IndexFormatError

#: what ``np.load`` raises for a damaged or hostile ``.npy`` (a mangled header is parsed as a Python
#: literal: its tokenizer's and parser's errors are among them)
NPY_READ_ERRORS = (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError)



def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``name.npy`` in ``directory``; returns its manifest entry (shape, dtype). A memory-mapped
    array (e.g. STITCH's text embeddings built in a work directory, 3 GB at 10⁶ passages) is copied
    in blocks of :data:`SAVE_BLOCK_BYTES` read with plain reads (:class:`RowReader`), so its pages
    never enter the resident set; the file is byte for byte ``np.save``'s."""
    path = directory / f"{name}.npy"
    if hasattr(array, "blocks") and not isinstance(array, np.ndarray):  # rows of several segments (StackedRows)
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(array.dtype),
                                                     "fortran_order": False, "shape": array.shape})
            step = max(1, SAVE_BLOCK_BYTES // max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize))
            for _, block in array.blocks(0, step):
                np.ascontiguousarray(block).tofile(f)
        return {"file": f"{name}.npy", "shape": list(array.shape), "dtype": str(array.dtype)}
    if _file_backed(array) and array.ndim and len(array):
        step = max(1, SAVE_BLOCK_BYTES // max(1, _row_bytes(array)))
        with open(path, "wb") as f, RowReader(array) as read:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
            for a in range(0, len(array), step):
                read(a, min(a + step, len(array))).tofile(f)
    else:
        array = np.ascontiguousarray(array)
        np.save(path, array, allow_pickle=False)
    return {"file": f"{name}.npy", "shape": list(array.shape), "dtype": str(array.dtype)}


#: bytes per block when :func:`save_array` copies a memory-mapped array
SAVE_BLOCK_BYTES = 64 << 20


def save_arrays(directory: Path, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Save each array as ``NAME.npy`` under ``directory`` (made if missing; :func:`save_array`);
    returns each one's manifest entry by name."""
    directory.mkdir(parents=True, exist_ok=True)
    return {name: save_array(directory, name, a) for name, a in arrays.items()}


def load_array(directory: Path, name: str, mmap: bool = True) -> np.ndarray:
    """Load ``name.npy`` (memory-mapped by default); IndexFormatError if missing or corrupt."""
    path = directory / f"{name}.npy"
    if not path.is_file():
        raise IndexFormatError(f"index file {path} is missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as e:  # a damaged header fails in numpy's parser in many ways (ValueError, SyntaxError, ...)
        raise IndexFormatError(f"index file {path} is corrupt: {type(e).__name__}: {e}") from None


def load_arrays(directory: Path, names: Sequence[str], mmap: bool = True) -> dict[str, np.ndarray]:
    """The arrays ``names`` saved under ``directory`` (:func:`load_array`: memory-mapped when
    ``mmap``; IndexFormatError for a missing or corrupt one), by name."""
    return {n: load_array(directory, n, mmap) for n in names}


def release_pages(*arrays: object) -> None:
    """Drop the resident pages of memory-mapped arrays from this process (``MADV_DONTNEED``; the OS
    page cache keeps them and the next read faults them back in): load-time validation reads whole
    arrays that a query reads a few rows of, and without this they stayed in the resident set
    (``docs/decisions/memory-at-a-million.md``). Anything not memory-mapped (or an OS without
    ``madvise``) is left as it is."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    for a in arrays:
        m = getattr(a, "_mmap", None) if isinstance(a, np.memmap) else None
        if m is not None:
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # pragma: no cover - a closed or unusual mapping
                pass


def _file_backed(arr: np.ndarray) -> bool:
    """``arr`` is a C-contiguous memory mapping of a named file: its rows can be read with plain reads."""
    return isinstance(arr, np.memmap) and arr.flags.c_contiguous and bool(arr.filename)


def _file_offset(arr: np.memmap) -> int:
    """The byte position of ``arr``'s first element in its file. A slice of a mapping keeps its
    parent's ``offset`` (numpy copies the attribute), so the position is found from the element's
    address within the mapping, which numpy opens at ``offset`` rounded down to the allocation
    granularity."""
    m = getattr(arr, "_mmap", None)
    if m is None:
        return int(arr.offset)
    start = int(arr.offset) - int(arr.offset) % mmap.ALLOCATIONGRANULARITY
    return start + arr.__array_interface__["data"][0] - np.frombuffer(m, np.uint8).__array_interface__["data"][0]


def _row_bytes(arr: np.ndarray) -> int:
    """Bytes of one row (everything past the first axis) of ``arr``."""
    return int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize


class RowReader:
    """Rows ``[a, b)`` of a stored array as a fresh C-contiguous copy (``with RowReader(arr) as read:
    read(a, b)``). A memory-mapped array is read from its file with plain reads, so the mapping's
    pages never enter the process's resident set (copying a code array into faiss through the
    mapping would hold both copies at once); any other array is sliced."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.file = None
        self.row_bytes = _row_bytes(arr)

    def __enter__(self) -> "RowReader":
        if _file_backed(self.arr):
            self.file = open(self.arr.filename, "rb", buffering=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()

    def __call__(self, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[a, b)``, into ``out`` when given (C-contiguous, ``b − a`` rows: a reused buffer)."""
        if self.file is None:
            if out is None:
                return np.ascontiguousarray(self.arr[a:b])
            out[...] = self.arr[a:b]
            return out
        if out is None:
            out = np.empty((b - a,) + tuple(self.arr.shape[1:]), self.arr.dtype)
        self.file.seek(_file_offset(self.arr) + a * self.row_bytes)
        if self.file.readinto(memoryview(out.reshape(-1).view(np.uint8))) != out.nbytes:
            raise IndexFormatError(f"index file {self.arr.filename}: shorter than its header says")
        return out


#: rows from which :func:`read_rows` reads through the mapping, block by block, instead of row by row
MAPPED_GATHER_MIN = 16_384
#: rows of one such block (the resident pages are dropped after each)
MAPPED_GATHER_BLOCK = 65_536


def read_rows(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``arr[rows]`` (any shape of row ids) as a fresh array. A C-contiguous memory-mapped ``arr`` is
    read row by row from its file with ``os.pread``: a scattered read through the mapping faults in
    the readahead window (up to megabytes of page-cache folios) around every row, and those pages
    stay in the process's resident set (``docs/decisions/memory-at-a-million.md``). Anything else is indexed."""
    rows = np.asarray(rows, np.int64)
    if not _file_backed(arr):
        return np.asarray(arr[rows])
    flat = rows.ravel()
    shape = tuple(arr.shape[1:])
    out = np.empty((len(flat),) + shape, arr.dtype)
    if len(flat) >= MAPPED_GATHER_MIN and getattr(arr, "_mmap", None) is not None \
            and os.stat(arr.filename).st_size >= _file_offset(arr) + arr.nbytes:  # a file cut short: no SIGBUS
        # many rows: read through the mapping in sorted blocks (a page fault a row, not a system
        # call), the pages dropped from the resident set after each block
        order = np.argsort(flat, kind="stable")
        for a in range(0, len(order), MAPPED_GATHER_BLOCK):
            part = order[a:a + MAPPED_GATHER_BLOCK]
            out[part] = arr[flat[part]]
            release_pages(arr)
        return out.reshape(rows.shape + shape)
    row_bytes, first = _row_bytes(arr), _file_offset(arr)
    fd = os.open(arr.filename, os.O_RDONLY)
    try:
        for i, r in enumerate(flat.tolist()):
            chunk = os.pread(fd, row_bytes, first + r * row_bytes)
            if len(chunk) != row_bytes:
                raise IndexFormatError(f"index file {arr.filename}: shorter than its header says")
            out[i] = np.frombuffer(chunk, arr.dtype).reshape(shape)
    finally:
        os.close(fd)
    return out.reshape(rows.shape + shape)


def check_array(directory: Path, entry: dict[str, Any]) -> np.ndarray:
    """Load a file listed in the manifest and verify its recorded shape and dtype; returns it."""
    arr = load_array(directory, Path(entry["file"]).stem)
    if list(arr.shape) != list(entry["shape"]) or str(arr.dtype) != entry["dtype"]:
        raise IndexFormatError(
            f"index file {directory / entry['file']} has shape {list(arr.shape)} dtype {arr.dtype}, "
            f"manifest says {entry['shape']} {entry['dtype']}"
        )
    return arr
