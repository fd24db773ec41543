"""A test run leaves no ``.hypothesis/`` in the working directory (the repository root under
``make test``): hypothesis's storage is :data:`conftest.HYPOTHESIS_HOME`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import HYPOTHESIS_HOME

ROOT = Path(__file__).resolve().parents[1]

# a failing property (hypothesis stores its shrunk example) run with the storage the conftest sets,
# under the default profile whether or not the run is on a CI machine
_FAILING_PROPERTY = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from conftest import keep_hypothesis_out_of_tree
keep_hypothesis_out_of_tree(Path(sys.argv[2]))
from hypothesis import given, settings, strategies as st
settings.load_profile("default")  # under CI hypothesis loads its "ci" profile, which keeps no database

@given(st.integers())
def small(x):
    assert x < 10

try:
    small()
except AssertionError:
    print("failed as meant")
"""


def test_the_session_stores_hypothesis_data_outside_the_repository():
    from hypothesis.configuration import storage_directory

    home = storage_directory(intent_to_write=False).home_directory.resolve()
    assert home == HYPOTHESIS_HOME.resolve()
    assert not home.is_relative_to(ROOT), home


def test_a_failing_property_writes_nothing_in_the_working_directory(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", _FAILING_PROPERTY, str(ROOT / "tests"), str(home)], cwd=work,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "failed as meant" in proc.stdout, proc.stdout + proc.stderr
    assert not (work / ".hypothesis").exists() and list(work.iterdir()) == []
    assert any((home / "examples").rglob("*")), "the failing example was not stored where the conftest says"
