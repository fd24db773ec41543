"""Names of an index directory's files (format version 3)."""
from __future__ import annotations

import re

FORMAT_NAME = "hopgraph-index"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
CURRENT = "CURRENT"
LOCK_FILE = "write.lock"
READERS_FILE = "readers.lock"
GEN_PREFIX = "gen-"
GEN_PATTERN = re.compile(r"gen-(\d{6,})")
#: names an index directory of format 1 or 2 held directly (removed when a v3 generation replaces it)
LEGACY_NAMES = ("manifest.json", "corpus", "corpus.jsonl", "embeddings.npy", "components", "pipelines")
