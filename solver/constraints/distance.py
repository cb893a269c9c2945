"""Distance constraints C = |xa - xb| - rest: stretch (the mesh's edges),
shear (quad diagonals) and the unilateral long-range stretch limits.

Build: DistanceConstraints (colour-ordered pairs, inverse-mass copies, the
fast kernels' precomputed coefficients). Solve: solve_distance (general
XPBD with lambdas and damping), solve_distance_fast (undamped, one
iteration, coefficients precomputed) and solve_distance_fast4 (the same on
the x, y, z, 0 records of integrate.to_aos4).
"""

from collections import namedtuple

import numpy as np
from numba import njit, prange

from .. import topology
from ..config import as_f32, as_u32, EPS, F0, F1
from ..hardware import rsqrt
from ..jit import FLAT, KERNEL as JIT

# What the kernels read of one class: the general kernel's per-constraint
# arrays (a, b, wa, wb, rest, lam) and the fast ones' flat index pairs
# (ab), coefficient records (coef: ca, cb, rest, 0) and record offsets
# (ab_rec: 4 x index).
# The compiled loop is called with plain tuples of these arrays (numba
# dispatches a plain tuple of arrays about twice as fast as a named one) and
# names them inside; the default loop takes only the fast kernels' two.
DistanceRecord = namedtuple("DistanceRecord", "a b wa wb rest lam ab coef ab_rec")
FastDistanceRecord = namedtuple("FastDistanceRecord", "ab_rec coef")




class DistanceConstraints:
    """One class of distance constraints in colour order (stable-sorted by
    colour; batch c is [offsets[c], offsets[c+1]))."""

    def __init__(self, pairs, rest_positions, rest=None, relaxation=1.0, compliance="a_stretch", scale=None,
                 switch=None):
        """rest: (m,) rest lengths in the order of `pairs` (default: their
        distance in rest_positions). relaxation: the fraction of the XPBD
        correction the fast kernels apply (1 = all of it). compliance: the
        CONFIG field of its compliance; scale: a CONFIG field that scales
        the rest lengths (None: none); switch: a CONFIG flag turned off
        when there are no constraints (see prepare)."""
        self.relaxation = float(relaxation)
        self.compliance, self.scale, self.switch = compliance, scale, switch
        n = len(rest_positions)
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        order, self.offsets = topology.colour_order(pairs, n)
        pairs = pairs[order]
        self.a = as_u32(pairs[:, 0])
        self.b = as_u32(pairs[:, 1])
        if rest is None:
            r = rest_positions.astype(np.float64)
            self.rest = as_f32(np.linalg.norm(r[pairs[:, 0]] - r[pairs[:, 1]], axis=1))
        else:
            self.rest = as_f32(np.asarray(rest, dtype=np.float64)[order])
        self.lam = np.zeros(len(pairs), dtype=np.float32)
        self.wa = np.zeros(len(pairs), dtype=np.float32)
        self.wb = np.zeros(len(pairs), dtype=np.float32)
        # The fast kernel reads one record per constraint (flat, 16-byte
        # stride: ca, cb, rest, pad) and one index pair: two base pointers
        # instead of five, so the loop keeps everything in registers.
        self.ab = as_u32(pairs.reshape(-1))
        # The same pairs as offsets of the x, y, z, 0 records (4 x index):
        # the record kernels index with them as they are (no shift per
        # vertex; 0.93x on the 100x100 sheet's stretch, timed alone).
        self.ab_rec = as_u32(pairs.reshape(-1) * 4)
        self.coef = np.zeros((len(pairs), 4), dtype=np.float32)
        self.coef[:, 2] = self.rest
        self.ca = self.coef[:, 0]
        self.cb = self.coef[:, 1]
        self._coef_alpha = None
        # Per-constraint factor on the compliance (painted stiffness, warp and
        # weft; None = 1): read by the fast kernels' coefficients only.
        self.alpha_scale = None

    def __len__(self):
        return len(self.a)

    @property
    def pairs(self):
        return np.stack([self.a, self.b], axis=1).astype(np.int64)

    def set_inverse_masses(self, inv_mass):
        # Per-constraint copies: unit-stride loads instead of gathers.
        self.wa[:] = inv_mass[self.a]
        self.wb[:] = inv_mass[self.b]
        self._coef_alpha = None

    def refresh_coefficients(self, alpha_tilde):
        """ca = w_a / (w_a + w_b + alpha~), cb likewise, for the fast kernel;
        recomputed only when alpha~ or the masses changed."""
        if self._coef_alpha == alpha_tilde:
            return
        wa = self.wa.astype(np.float64)
        wb = self.wb.astype(np.float64)
        den = wa + wb + (alpha_tilde if self.alpha_scale is None else alpha_tilde * self.alpha_scale)
        den[den == 0] = 1.0
        self.ca[:] = self.relaxation * wa / den
        self.cb[:] = self.relaxation * wb / den
        self._coef_alpha = alpha_tilde

    def packed(self):
        """The arrays the kernels read, as a DistanceRecord."""
        return DistanceRecord(self.a, self.b, self.wa, self.wb, self.rest, self.lam, self.ab,
                              self.coef.reshape(-1), self.ab_rec)

    def packed_fast(self):
        """The fast kernels' arrays, as a FastDistanceRecord."""
        return FastDistanceRecord(self.ab_rec, self.coef.reshape(-1))

    @property
    def colour_offsets(self):
        """Where each colour's constraints start, and the end (int64): what
        solve_distance_colours splits."""
        return self.offsets.astype(np.int64)

    def prepare(self, c, inv_h2):
        """(record, fast record) for the step's config record c and 1/h^2
        (float32, as the kernels compute alpha~)."""
        self.refresh_coefficients(float(c[self.compliance] * inv_h2))
        if self.scale is not None:
            self.coef[:, 2] = self.rest * c[self.scale]
        if self.switch is not None and len(self) == 0:
            c[self.switch] = 0.0
        return self.packed(), self.packed_fast()



@njit(**JIT)
def solve_distance(pos, prev, a, b, wa, wb, rest, lam, alpha, gamma, use_lambda):
    """XPBD distance constraints C = |xb - xa| - rest, in array order (which
    is colour order: within a colour no two share a vertex)."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(a.shape[0])
    for i in range(m):
        ia = a[i]
        ib = b[i]
        dx = px[ib] - px[ia]
        dy = py[ib] - py[ia]
        dz = pz[ib] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        w_a = wa[i]
        w_b = wb[i]
        wsum = w_a + w_b
        if d2 < EPS * EPS or wsum == F0:
            continue
        dist = np.sqrt(d2)
        inv = F1 / dist
        nx, ny, nz = dx * inv, dy * inv, dz * inv
        c = dist - rest[i]
        damp = F0
        if gamma != F0:
            damp = gamma * (nx * (dx - (ox[ib] - ox[ia])) + ny * (dy - (oy[ib] - oy[ia]))
                            + nz * (dz - (oz[ib] - oz[ia])))
        if use_lambda:
            lm = lam[i]
            dl = -(c + alpha * lm + damp) / (one_g * wsum + alpha)
            lam[i] = lm + dl
        else:
            dl = -(c + damp) / (one_g * wsum + alpha)
        sa = w_a * dl
        sb = w_b * dl
        px[ia] -= sa * nx
        py[ia] -= sa * ny
        pz[ia] -= sa * nz
        px[ib] += sb * nx
        py[ib] += sb * ny
        pz[ib] += sb * nz


@njit(**JIT)
def _distance_fast(pos, ab, coef, unilateral):
    """solve_distance for one iteration without damping (lambda = 0), with
    the denominators folded into per-constraint coefficients
    ca = w_a / (w_a + w_b + alpha~) (cb likewise): the correction is
    -/+ c (1 - rest/|d|) d, one sqrt and one division. unilateral: only
    when longer than rest (the stretch limits).
    ab: flat index pairs (2m,); coef: flat records (4m,) [ca, cb, rest, -]."""
    px, py, pz = pos[0], pos[1], pos[2]
    m = np.uint64(ab.shape[0]) >> np.uint64(1)
    for i in range(m):
        ia = ab[2 * i]
        ib = ab[2 * i + 1]
        e = 4 * i
        dx = px[ib] - px[ia]
        dy = py[ib] - py[ia]
        dz = pz[ib] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 < EPS * EPS:
            continue
        f = F1 - coef[e + 2] / np.sqrt(d2)
        if unilateral:
            f = max(f, F0)
        dx, dy, dz = dx * f, dy * f, dz * f
        sa = coef[e]
        sb = coef[e + 1]
        px[ia] += sa * dx
        py[ia] += sa * dy
        pz[ia] += sa * dz
        px[ib] -= sb * dx
        py[ib] -= sb * dy
        pz[ib] -= sb * dz


@njit(**JIT)
def solve_distance_fast(pos, ab, coef, unilateral):
    """_distance_fast with `unilateral` a constant in each call, so LLVM
    compiles two specialised loops (see solve_distance_fast4)."""
    if unilateral:
        _distance_fast(pos, ab, coef, True)
    else:
        _distance_fast(pos, ab, coef, False)


@njit(**FLAT)
def _distance_fast4(p4, ab, coef, unilateral):
    """solve_distance_fast on x, y, z, 0 records (the same arithmetic per lane);
    ab: record offsets (4 x vertex index, DistanceConstraints.ab_rec).
    unilateral: only pull together pairs farther apart than their rest length
    (the stretch limits)."""
    m = np.uint64(ab.shape[0]) >> np.uint64(1)
    for i in range(m):
        ia = np.uint64(ab[2 * i])
        ib = np.uint64(ab[2 * i + 1])
        e = 4 * i
        dx = p4[ib] - p4[ia]
        dy = p4[ib + 1] - p4[ia + 1]
        dz = p4[ib + 2] - p4[ia + 2]
        dw = p4[ib + 3] - p4[ia + 3]
        # dw = 0: the fourth term keeps the dot product one 4-wide operation.
        d2 = (dx * dx + dy * dy) + (dz * dz + dw * dw)
        if d2 < EPS * EPS:
            continue
        f = F1 - coef[e + 2] * rsqrt(d2)
        if unilateral:
            f = max(f, F0)
        dx, dy, dz, dw = dx * f, dy * f, dz * f, dw * f
        sa = coef[e]
        sb = coef[e + 1]
        p4[ia] += sa * dx
        p4[ia + 1] += sa * dy
        p4[ia + 2] += sa * dz
        p4[ia + 3] += sa * dw
        p4[ib] -= sb * dx
        p4[ib + 1] -= sb * dy
        p4[ib + 2] -= sb * dz
        p4[ib + 3] -= sb * dw


@njit(**FLAT)
def solve_distance_fast4(p4, ab, coef, unilateral):
    """_distance_fast4 with `unilateral` a constant in each call. A runtime
    flag inside the loop compiled to a per-constraint mask blend (sete into a
    byte register, kmov, masked move) that doubled the cost of every
    constraint (5.6 -> 2.7 ns on the 100x100 sheet's stretch); with a
    constant, LLVM inlines _distance_fast4 here and drops the dead path."""
    if unilateral:
        _distance_fast4(p4, ab, coef, True)
    else:
        _distance_fast4(p4, ab, coef, False)


# Constraints per block of solve_distance_colours / solve_bending_colours:
# a fixed partition of each colour, the same for any thread count.
COLOUR_BLOCK = 2048


def _distance_colours_impl(p4, ab, coef, offsets, unilateral):
    for c in range(offsets.shape[0] - 1):
        start, end = offsets[c], offsets[c + 1]
        blocks = (end - start + COLOUR_BLOCK - 1) // COLOUR_BLOCK
        for b in prange(blocks):
            lo = start + b * COLOUR_BLOCK
            hi = min(end, lo + COLOUR_BLOCK)
            if unilateral:
                _distance_fast4(p4, ab[2 * lo:2 * hi], coef[4 * lo:4 * hi], True)
            else:
                _distance_fast4(p4, ab[2 * lo:2 * hi], coef[4 * lo:4 * hi], False)


# solve_distance_fast4 with the constraints of each colour split over numba's
# threads in blocks of COLOUR_BLOCK: no two constraints of a colour share a
# vertex, so the blocks are independent and each runs the serial kernel on
# its slice, and the result is bit-identical to solve_distance_fast4's for
# any thread count (tests/solver/test_threads.py). offsets: colour_offsets.
solve_distance_colours = njit(parallel=True, **JIT)(_distance_colours_impl)
