"""Names of an index directory's files (format version 4: segments behind commits; version 3:
generations, still read)."""
from __future__ import annotations

import re

FORMAT_NAME = "hopgraph-index"
FORMAT_VERSION = 4
#: format versions this hopgraph opens (3: one generation, read as one base segment)
READ_VERSIONS = (3, 4)
CURRENT = "CURRENT"
LOCK_FILE = "write.lock"

# ---- format 4
COMMIT_PREFIX = "commit-"
COMMIT_PATTERN = re.compile(r"commit-(\d{6,})\.json")
#: a reader's lease on a commit: a shared flock on ``commit-NNNNNN.lock``
LEASE_SUFFIX = ".lock"
SEGMENT_PREFIX = "seg-"
SEGMENT_PATTERN = re.compile(r"seg-(\d{6,})")
#: the manifest inside a segment directory (its files with sizes and checksums)
SEGMENT_MANIFEST = "segment.json"
SEGMENT_FORMAT = "hopgraph-segment"
#: the deleted rows of a segment as of a commit: ``seg-000003.del-000012.npy``
DELETES_PATTERN = re.compile(r"(seg-\d{6,})\.del-(\d{6,})\.npy")

# ---- format 3 (read, and removed once a format-4 commit replaces it)
MANIFEST = "manifest.json"
READERS_FILE = "readers.lock"
GEN_PREFIX = "gen-"
GEN_PATTERN = re.compile(r"gen-(\d{6,})")
#: names an index directory of format 1 or 2 held directly (removed when a newer commit replaces it)
LEGACY_NAMES = ("manifest.json", "corpus", "corpus.jsonl", "embeddings.npy", "components", "pipelines")


def commit_name(number: int) -> str:
    """The file name of commit ``number``: ``commit-NNNNNN.json``."""
    return f"{COMMIT_PREFIX}{number:06d}.json"


def commit_number(name: str) -> int | None:
    """The number of a commit file name, None when ``name`` is not one."""
    m = COMMIT_PATTERN.fullmatch(name)
    return int(m.group(1)) if m else None


def segment_name(number: int) -> str:
    """The directory name of segment ``number``: ``seg-NNNNNN``."""
    return f"{SEGMENT_PREFIX}{number:06d}"


def segment_number(name: str) -> int | None:
    """The number of a segment directory name, None when ``name`` is not one."""
    m = SEGMENT_PATTERN.fullmatch(name)
    return int(m.group(1)) if m else None


def deletes_name(segment: str, commit: int) -> str:
    """The file of ``segment``'s deleted rows as of commit ``commit``: ``seg-NNNNNN.del-MMMMMM.npy``."""
    return f"{segment}.del-{commit:06d}.npy"


def generation_number(name: str) -> int | None:
    """The number of a format-3 generation directory name (``gen-NNNNNN``), None when ``name`` is not one."""
    m = GEN_PATTERN.fullmatch(name)
    return int(m.group(1)) if m else None
