"""The CPU-specific kernels (solver/hardware.py) and their portable twins, against numpy."""

import numpy as np
import pytest
from numba import njit

from drape.solver import hardware

IMPLEMENTATIONS = [
    pytest.param(hardware._compact_blocks, id="blocks",
                 marks=pytest.mark.skipif(not hardware.COMPRESS_FLAGS, reason="needs AVX-512")),
    pytest.param(hardware._compact_words, id="words"),
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
    return hardware.compact_flags(flags[row, :count], out)


def test_compact_flags_on_a_sliced_row():
    rng = np.random.default_rng(3)
    flags = (rng.random((3, 1024)) < 0.1).astype(np.uint8)
    out = np.empty(1024, np.uint32)
    for row, count in ((0, 1024), (1, 200), (2, 648)):
        got = _compact_row(flags, row, count, out)
        expected = np.flatnonzero(flags[row, :count])
        assert got == expected.size
        np.testing.assert_array_equal(out[:got], expected)


def test_portable_switch_takes_every_portable_twin(tmp_path):
    """DRAPE_PORTABLE=1 compiles for numba's generic CPU (its own cache
    entries) and selects no CPU-specific path, whatever this host has."""
    import os
    import subprocess
    import sys

    code = ("from drape.solver import hardware as h; import numba; "
            "print(h.PORTABLE, h.COMPRESS_FLAGS, h.SLOW_GATHERS, h.X86_RSQRT, numba.config.CPU_NAME, "
            "h.rsqrt.py_func.__name__, h.compact_flags.py_func.__name__)")
    env = dict(os.environ, DRAPE_PORTABLE="1", NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_NAME", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False", "False", "generic", "_rsqrt_portable",
                                  "_compact_words"]


def test_rsqrt_matches_the_portable_twin_to_float32_rounding():
    rsqrt = njit(lambda x: hardware.rsqrt(x))
    twin = njit(lambda x: hardware._rsqrt_portable(x))
    for x in np.float32([1e-12, 1e-6, 0.25, 1.0, 2.0, 3.0, 1e6, 3e30]):
        a, b = rsqrt(x), twin(x)
        assert abs(a - b) <= 4 * np.spacing(np.float32(b)), (x, a, b)
        assert abs(b - 1 / np.sqrt(np.float64(x))) <= 2 * np.spacing(np.float32(b))


def test_this_run_compiles_for_the_cpu_it_was_asked_for():
    """In make test's portable pass (DRAPE_PORTABLE=1) every kernel of this
    process takes the portable twins and compiles for the generic CPU."""
    import os

    import numba

    if not hardware._portable_requested():
        pytest.skip("not the portable run")
    assert hardware.PORTABLE and not hardware.COMPRESS_FLAGS and not hardware.X86_RSQRT
    assert numba.config.CPU_NAME == "generic", os.environ.get("NUMBA_CPU_NAME")
