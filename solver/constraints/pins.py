"""Soft pins: a vertex with pin weight 0 < w < 1 is drawn to its pin target
(interpolated over the step) by a zero-length distance constraint of
compliance pin_compliance (1 - w) / w. Vertices with w = 1 are kinematic
(inverse mass 0, moved by the integrator).
"""

import numpy as np
from numba import njit

from ..config import F1
from ..jit import KERNEL as JIT


@njit(**JIT)
def solve_soft_pins(pos, soft, soft_alpha, soft_lam, inv_mass, pin_start, pin_end, t1, use_lambda):
    """Zero-length XPBD attachment of each soft-pinned vertex to its target
    (three independent linear constraints, one per axis)."""
    s1 = F1 - t1
    m = np.uint64(soft.shape[0])
    for j in range(m):
        i = soft[j]
        w = inv_mass[i]
        al = soft_alpha[j]
        for ax in range(3):
            target = s1 * pin_start[ax, i] + t1 * pin_end[ax, i]
            c = pos[ax, i] - target
            if use_lambda:
                lm = soft_lam[ax, j]
                dl = -(c + al * lm) / (w + al)
                soft_lam[ax, j] = lm + dl
            else:
                dl = -c / (w + al)
            pos[ax, i] += w * dl
