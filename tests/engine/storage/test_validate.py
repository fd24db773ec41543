"""Stored-array checks: the kernels' checks (one implementation) raising IndexFormatError naming the file."""
import numpy as np
import pytest

from hopgraph.engine.errors import IndexFormatError, InputError
from hopgraph.engine.storage import check_finite, check_ids, check_indptr
from hopgraph.kernels import checks


@pytest.mark.parametrize("arr, bound, length, message", [
    (np.array([0, 3, 7, 1]), 5, None, r"f\.npy: values must hold ids in \[0, 5\); values\[2\] = 7"),
    (np.array([0, -1]), 5, None, r"values\[1\] = -1"),
    (np.array([0.0, 1.0]), 5, None, "must be an integer array"),
    (np.zeros((2, 2), np.int64), 5, None, r"shape \[2, 2\], expected \['\*'\]"),
    (np.array([0, 1]), 5, 3, r"shape \[2\], expected \[3\]"),
])
def test_stored_ids(arr, bound, length, message):
    with pytest.raises(IndexFormatError, match=message):
        check_ids(arr, bound, "f.npy", length)
    assert np.array_equal(check_ids(np.array([0, 4]), 5, "f.npy"), [0, 4])


@pytest.mark.parametrize("arr, message", [
    (np.array([0, 2, 1, 3]), r"f\.npy: row offsets must never decrease; row offsets\[2\] = 1"),
    (np.array([1, 2, 2, 3]), "must start at 0"),
    (np.array([0, 1, 2, 2]), r"must end at 3"),
    (np.array([0, 1, 3]), r"must have shape \(4,\)"),
])
def test_stored_row_offsets(arr, message):
    with pytest.raises(IndexFormatError, match=message):
        check_indptr(arr, 3, 3, "f.npy")


def test_stored_floats():
    with pytest.raises(IndexFormatError, match=r"f\.npy: values must be finite .*values\[1, 0\] = nan"):
        check_finite(np.array([[0.0], [np.nan]]), "f.npy")
    with pytest.raises(IndexFormatError, match="expected floats"):
        check_finite(np.array([1, 2]), "f.npy")
    assert check_finite(np.array([-1.0, 2.0]), "f.npy", (2,)).shape == (2,)  # negative values are fine


def test_one_implementation_two_errors():
    """The kernels raise InputError and the stored-array checks IndexFormatError, with one message."""
    bad = np.array([0, 9])
    with pytest.raises(InputError) as kernel:
        checks.check_ids(bad, "values", 5, "f.npy")
    with pytest.raises(IndexFormatError) as stored:
        check_ids(bad, 5, "f.npy")
    assert str(kernel.value) == str(stored.value)
    assert not isinstance(stored.value, InputError)
