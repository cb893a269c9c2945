"""Isometric bending (Bergou et al.): C = |sum_i k_i x_i| over the four
vertices of each pair of triangles that share an edge, cotangent weights k.

Build: BendingConstraints (elements from topology.bending_elements, colour
order, the fast kernels' records). Solve: solve_bending (general),
solve_bending_fast and solve_bending_fast4 (undamped, one iteration).
"""

from collections import namedtuple

import numpy as np
from numba import njit, prange

from .. import topology
from ..config import as_f32, as_u32, EPS, F0, F1
from ..jit import FLAT, KERNEL as JIT
from .distance import COLOUR_BLOCK

# idx (4, m) vertices, k (4, m) weights, wk = w k, swk2 = sum w k^2, rest
# norms, lam; the fast kernels' flat indices (idx4), records (coef: k1, k2,
# k3, rest, c0..c3) and record offsets (idx_rec).
BendingRecord = namedtuple("BendingRecord", "idx k wk swk2 rest lam idx4 coef idx_rec")
FastBendingRecord = namedtuple("FastBendingRecord", "idx_rec coef")




class BendingConstraints:
    def __init__(self, rest_positions, triangles):
        n = len(rest_positions)
        idx, k, rest_norm = topology.bending_elements(rest_positions, triangles)
        order, self.offsets = topology.colour_order(idx, n)
        self.idx_aos = idx[order]
        self.k64 = k[order]
        self.rest64 = rest_norm[order]
        self.idx = as_u32(self.idx_aos.T)
        self.k = as_f32(self.k64.T)
        self.wk = np.zeros_like(self.k)
        self.swk2 = np.zeros(len(idx), dtype=np.float32)
        self.rest = as_f32(self.rest64)
        self.lam = np.zeros(len(idx), dtype=np.float32)
        # Fast-kernel records (flat, 32-byte stride): k1, k2, k3, rest, c0..c3,
        # plus the four vertex indices: two base pointers instead of nine.
        self.idx4 = as_u32(self.idx_aos.reshape(-1))
        self.idx_rec = as_u32(self.idx_aos.reshape(-1) * 4)   # record offsets (see DistanceConstraints)
        self.coef = np.zeros((len(idx), 8), dtype=np.float32)
        self.coef[:, 0:3] = self.k[1:4].T
        self.coef[:, 3] = self.rest
        self.c = self.coef[:, 4:8].T
        self._coef_alpha = None
        self.alpha_scale = None   # per-element factor on the compliance (painted stiffness; None = 1)

    def __len__(self):
        return len(self.rest)

    def set_inverse_masses(self, inv_mass):
        w = inv_mass[self.idx_aos].T.astype(np.float64)
        self.wk[:] = w * self.k64.T
        self.swk2[:] = np.sum(w * self.k64.T ** 2, axis=0)
        self._coef_alpha = None

    def refresh_coefficients(self, alpha_tilde):
        """c_j = w_j k_j / (sum_j w_j k_j^2 + alpha~) for the fast kernel."""
        if self._coef_alpha == alpha_tilde:
            return
        den = self.swk2.astype(np.float64) + (alpha_tilde if self.alpha_scale is None
                                              else alpha_tilde * self.alpha_scale)
        den[den == 0] = 1.0
        self.c[:] = self.wk.astype(np.float64) / den
        self._coef_alpha = alpha_tilde

    def energy(self, positions, compliance=1.0):
        """Bending energy of (n, 3) positions, sum 0.5 C^2 / compliance."""
        return topology.bending_energy(positions, self.idx_aos, self.k64, self.rest64, compliance)

    def packed(self):
        """The arrays the kernels read, as a BendingRecord."""
        return BendingRecord(self.idx, self.k, self.wk, self.swk2, self.rest, self.lam, self.idx4,
                             self.coef.reshape(-1), self.idx_rec)

    def packed_fast(self):
        """The fast kernels' arrays, as a FastBendingRecord."""
        return FastBendingRecord(self.idx_rec, self.coef.reshape(-1))

    @property
    def colour_offsets(self):
        """Where each colour's elements start, and the end (int64): what
        solve_bending_colours splits."""
        return self.offsets.astype(np.int64)

    def prepare(self, c, inv_h2):
        """(record, fast record) for the step's config record c and 1/h^2;
        sets c's bend_curved flag (a curved rest shape needs the kernels'
        rest term)."""
        self.refresh_coefficients(float(c["a_bend"] * inv_h2))
        c["bend_curved"] = 1.0 if np.any(self.rest != 0) else 0.0
        return self.packed(), self.packed_fast()



@njit(**JIT)
def solve_bending_fast(pos, idx4, coef):
    """solve_bending for one iteration without damping: dx_j = -c_j (1 -
    rest/|L|) L with c_j = w_j k_j / (sum w k^2 + alpha~) precomputed; a flat
    rest pose (rest = 0) needs no sqrt and no division at all.
    idx4: flat vertex quadruples (4m,); coef: flat records (8m,)
    [k1, k2, k3, rest, c0, c1, c2, c3]."""
    px, py, pz = pos[0], pos[1], pos[2]
    m = np.uint64(idx4.shape[0]) >> np.uint64(2)
    for i in range(m):
        q = 4 * i
        e = 8 * i
        i0 = idx4[q]
        i1 = idx4[q + 1]
        i2 = idx4[q + 2]
        i3 = idx4[q + 3]
        k1 = coef[e]
        k2 = coef[e + 1]
        k3 = coef[e + 2]
        x0, y0, z0 = px[i0], py[i0], pz[i0]
        lx = k1 * (px[i1] - x0) + k2 * (px[i2] - x0) + k3 * (px[i3] - x0)
        ly = k1 * (py[i1] - y0) + k2 * (py[i2] - y0) + k3 * (py[i3] - y0)
        lz = k1 * (pz[i1] - z0) + k2 * (pz[i2] - z0) + k3 * (pz[i3] - z0)
        r = coef[e + 3]
        if r != F0:
            l2 = lx * lx + ly * ly + lz * lz
            if l2 < EPS * EPS:
                continue
            f = F1 - r / np.sqrt(l2)
            lx, ly, lz = lx * f, ly * f, lz * f
        s = coef[e + 4]
        px[i0] = x0 - s * lx
        py[i0] = y0 - s * ly
        pz[i0] = z0 - s * lz
        s = coef[e + 5]
        px[i1] -= s * lx
        py[i1] -= s * ly
        pz[i1] -= s * lz
        s = coef[e + 6]
        px[i2] -= s * lx
        py[i2] -= s * ly
        pz[i2] -= s * lz
        s = coef[e + 7]
        px[i3] -= s * lx
        py[i3] -= s * ly
        pz[i3] -= s * lz


@njit(**JIT)
def solve_bending(pos, prev, idx, k, wk, swk2, rest, lam, alpha, gamma, use_lambda):
    """Bergou isometric bending, C = |L| - |L_rest|, L = sum_j k_j x_j.
    grad_j C = k_j L/|L|, so |grad|^2 weighted = sum_j w_j k_j^2 = swk2
    (precomputed): the element is dot products and multiplies, no trig."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(rest.shape[0])
    for i in range(m):
        i0 = idx[0, i]
        i1 = idx[1, i]
        i2 = idx[2, i]
        i3 = idx[3, i]
        k1 = k[1, i]
        k2 = k[2, i]
        k3 = k[3, i]
        # sum k = 0, so L = sum_{j>0} k_j (x_j - x_0): better float32 precision.
        x0, y0, z0 = px[i0], py[i0], pz[i0]
        lx = k1 * (px[i1] - x0) + k2 * (px[i2] - x0) + k3 * (px[i3] - x0)
        ly = k1 * (py[i1] - y0) + k2 * (py[i2] - y0) + k3 * (py[i3] - y0)
        lz = k1 * (pz[i1] - z0) + k2 * (pz[i2] - z0) + k3 * (pz[i3] - z0)
        l2 = lx * lx + ly * ly + lz * lz
        if l2 < EPS * EPS:
            continue
        r = rest[i]
        if r == F0 and gamma == F0 and not use_lambda:
            # Flat rest pose: C grad C = k_j L, the energy is quadratic and
            # the update linear, dx_j = -w_j k_j L / (swk2 + alpha): no sqrt,
            # one division.
            sc = -F1 / (swk2[i] + alpha)
            dx, dy, dz = lx * sc, ly * sc, lz * sc
        else:
            ln = np.sqrt(l2)
            inv = F1 / ln
            ux, uy, uz = lx * inv, ly * inv, lz * inv
            c = ln - r
            damp = F0
            if gamma != F0:
                k0 = k[0, i]
                dvx = (k0 * (x0 - ox[i0]) + k1 * (px[i1] - ox[i1]) + k2 * (px[i2] - ox[i2])
                       + k3 * (px[i3] - ox[i3]))
                dvy = (k0 * (y0 - oy[i0]) + k1 * (py[i1] - oy[i1]) + k2 * (py[i2] - oy[i2])
                       + k3 * (py[i3] - oy[i3]))
                dvz = (k0 * (z0 - oz[i0]) + k1 * (pz[i1] - oz[i1]) + k2 * (pz[i2] - oz[i2])
                       + k3 * (pz[i3] - oz[i3]))
                damp = gamma * (ux * dvx + uy * dvy + uz * dvz)
            if use_lambda:
                lm = lam[i]
                dl = -(c + alpha * lm + damp) / (one_g * swk2[i] + alpha)
                lam[i] = lm + dl
            else:
                dl = -(c + damp) / (one_g * swk2[i] + alpha)
            dx, dy, dz = ux * dl, uy * dl, uz * dl
        s = wk[0, i]
        px[i0] = x0 + s * dx
        py[i0] = y0 + s * dy
        pz[i0] = z0 + s * dz
        s = wk[1, i]
        px[i1] += s * dx
        py[i1] += s * dy
        pz[i1] += s * dz
        s = wk[2, i]
        px[i2] += s * dx
        py[i2] += s * dy
        pz[i2] += s * dz
        s = wk[3, i]
        px[i3] += s * dx
        py[i3] += s * dy
        pz[i3] += s * dz


@njit(**FLAT)
def solve_bending_fast4(p4, idx4, coef, curved):
    """solve_bending_fast on x, y, z, 0 records (the same arithmetic per lane);
    idx4: record offsets (4 x vertex index, BendingConstraints.idx_rec).
    curved: some element has a curved rest shape (cfg.bend_curved); a
    constant in each call, as in solve_distance_fast4: a sheet that is flat
    at rest skips the rest-norm test, 3 of the ~33 instructions an element
    costs (the loop runs at the core's instruction throughput)."""
    if curved:
        _bending_fast4(p4, idx4, coef, True)
    else:
        _bending_fast4(p4, idx4, coef, False)


@njit(**FLAT)
def _bending_fast4(p4, idx4, coef, curved):
    m = np.uint64(idx4.shape[0]) >> np.uint64(2)
    for i in range(m):
        q = 4 * i
        e = 8 * i
        i0 = np.uint64(idx4[q])
        i1 = np.uint64(idx4[q + 1])
        i2 = np.uint64(idx4[q + 2])
        i3 = np.uint64(idx4[q + 3])
        k1 = coef[e]
        k2 = coef[e + 1]
        k3 = coef[e + 2]
        x0, y0, z0, w0 = p4[i0], p4[i0 + 1], p4[i0 + 2], p4[i0 + 3]
        lx = k1 * (p4[i1] - x0) + k2 * (p4[i2] - x0) + k3 * (p4[i3] - x0)
        ly = k1 * (p4[i1 + 1] - y0) + k2 * (p4[i2 + 1] - y0) + k3 * (p4[i3 + 1] - y0)
        lz = k1 * (p4[i1 + 2] - z0) + k2 * (p4[i2 + 2] - z0) + k3 * (p4[i3 + 2] - z0)
        lw = k1 * (p4[i1 + 3] - w0) + k2 * (p4[i2 + 3] - w0) + k3 * (p4[i3 + 3] - w0)
        r = coef[e + 3]
        if curved and r != F0:
            l2 = lx * lx + ly * ly + lz * lz
            if l2 < EPS * EPS:
                continue
            f = F1 - r / np.sqrt(l2)
            lx, ly, lz, lw = lx * f, ly * f, lz * f, lw * f
        s = coef[e + 4]
        p4[i0] = x0 - s * lx
        p4[i0 + 1] = y0 - s * ly
        p4[i0 + 2] = z0 - s * lz
        p4[i0 + 3] = w0 - s * lw
        s = coef[e + 5]
        p4[i1] -= s * lx
        p4[i1 + 1] -= s * ly
        p4[i1 + 2] -= s * lz
        p4[i1 + 3] -= s * lw
        s = coef[e + 6]
        p4[i2] -= s * lx
        p4[i2 + 1] -= s * ly
        p4[i2 + 2] -= s * lz
        p4[i2 + 3] -= s * lw
        s = coef[e + 7]
        p4[i3] -= s * lx
        p4[i3 + 1] -= s * ly
        p4[i3 + 2] -= s * lz
        p4[i3 + 3] -= s * lw


def _bending_colours_impl(p4, idx4, coef, offsets, curved):
    for c in range(offsets.shape[0] - 1):
        start, end = offsets[c], offsets[c + 1]
        blocks = (end - start + COLOUR_BLOCK - 1) // COLOUR_BLOCK
        for b in prange(blocks):
            lo = start + b * COLOUR_BLOCK
            hi = min(end, lo + COLOUR_BLOCK)
            if curved:
                _bending_fast4(p4, idx4[4 * lo:4 * hi], coef[8 * lo:8 * hi], True)
            else:
                _bending_fast4(p4, idx4[4 * lo:4 * hi], coef[8 * lo:8 * hi], False)


# solve_bending_fast4 split over numba's threads as solve_distance_colours
# (distance.py) splits the distance constraints: bit-identical to it.
solve_bending_colours = njit(parallel=True, **JIT)(_bending_colours_impl)
