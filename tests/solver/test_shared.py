"""The kernels' shared pieces (solver/shared.py), against numpy."""

import numpy as np
import pytest
from numba import njit

from drape.solver import shared

IMPLEMENTATIONS = [
    pytest.param(shared._compact_blocks, id="blocks",
                 marks=pytest.mark.skipif(not shared.COMPRESS_FLAGS, reason="needs AVX-512")),
    pytest.param(shared._compact_words, id="words"),
]


@pytest.mark.parametrize("compact", IMPLEMENTATIONS)
def test_compact_flags_lists_the_set_flags_in_order(compact):
    """Every length around the 8- and 64-flag blocks, sparse to full, and
    runs (as a capsule's box makes): the indices np.flatnonzero gives."""
    rng = np.random.default_rng(7)
    for n in (0, 8, 56, 64, 72, 120, 128, 136, 1000, 3744, 10208):
        cases = [(rng.random(n) < d).astype(np.uint8) for d in (0.0, 0.02, 0.3, 0.9, 1.0)]
        run = np.zeros(n, np.uint8)
        run[n // 3:n // 2] = 1
        cases.append(run)
        for sel in cases:
            out = np.full(n, 12345, np.uint32)
            count = compact(sel, out)
            expected = np.flatnonzero(sel)
            assert count == expected.size
            np.testing.assert_array_equal(out[:count], expected)


@njit
def _compact_row(flags, row, count, out):
    # As the capsule sweep calls it: a row of a 2-D block, sliced.
    return shared.compact_flags(flags[row, :count], out)


def test_compact_flags_on_a_sliced_row():
    rng = np.random.default_rng(3)
    flags = (rng.random((3, 1024)) < 0.1).astype(np.uint8)
    out = np.empty(1024, np.uint32)
    for row, count in ((0, 1024), (1, 200), (2, 648)):
        got = _compact_row(flags, row, count, out)
        expected = np.flatnonzero(flags[row, :count])
        assert got == expected.size
        np.testing.assert_array_equal(out[:got], expected)
