"""Load-time checks leave no pages of memory-mapped index arrays in the resident set."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from hopgraph.engine.storage import check_ids, check_indptr

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")


def resident_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path``."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.rstrip().endswith(str(path))
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.parametrize("check", ["ids", "indptr"])
def test_checks_release_the_pages_they_read(tmp_path, check):
    f = tmp_path / "a.npy"
    np.save(f, np.arange(1 << 20, dtype=np.int64))  # 8 MiB
    arr = np.load(f, mmap_mode="r")
    int(np.asarray(arr).sum())  # every page resident
    assert resident_kb(f) > 4000
    if check == "ids":
        got = check_ids(arr, 1 << 20, "a.npy")
    else:
        got = check_indptr(arr, (1 << 20) - 1, (1 << 20) - 1, "a.npy")
    assert resident_kb(f) < 1000, "the checked pages stayed resident"
    assert int(got[-1]) == (1 << 20) - 1  # still readable: the pages fault back in from the page cache
    del arr, got
    os.remove(f)
