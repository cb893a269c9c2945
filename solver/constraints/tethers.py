"""Tethers: each free vertex may not move farther from its nearest pinned
vertex (geodesic over the mesh) than tether_scale times their rest path
length. Unilateral, solved after the other constraints.

Build: Tethers (from topology.geodesic_tethers, rebuilt when the pins
change). Solve: solve_tethers (general, with damping) and
solve_tethers_fast4 (undamped, on the x, y, z, 0 records).
"""

from collections import namedtuple

import numpy as np
from numba import njit

from .. import topology
from ..config import F0, F1
from ..hardware import rsqrt
from ..jit import FLAT, KERNEL as JIT

# vertex, anchor: (m,) uint32; length (m,); w: the vertex's inverse mass;
# coef = w / (w + alpha~) for the undamped kernel; vertex_rec, anchor_rec:
# record offsets (4 x index) for solve_tethers_fast4.
TetherRecord = namedtuple("TetherRecord", "vertex anchor length w coef vertex_rec anchor_rec")


class Tethers:
    """The tethers of one set of pins."""

    def __init__(self, rest_positions, graph_edges, kinematic, inv_mass, triangles=None):
        """triangles: the rest mesh's, for lengths straight across its flat
        parts (topology.geodesic_tethers); None: along the edges."""
        tv, ta, tl = topology.geodesic_tethers(rest_positions, graph_edges, kinematic.astype(np.int64),
                                               triangles=triangles)
        self.vertex = np.ascontiguousarray(tv, dtype=np.uint32)
        self.anchor = np.ascontiguousarray(ta, dtype=np.uint32)
        self.vertex_rec = np.ascontiguousarray(tv * 4, dtype=np.uint32)
        self.anchor_rec = np.ascontiguousarray(ta * 4, dtype=np.uint32)
        self.length = np.ascontiguousarray(tl, dtype=np.float32)
        # The modelled lengths; length is these times a garment's growth
        # (shrink.RestScale: a cloth that grows is not held at its size).
        self.base_length = self.length.copy()
        self.w = np.ascontiguousarray(inv_mass[tv], dtype=np.float32)

    def __len__(self):
        return len(self.vertex)

    def prepare(self, c, inv_h2):
        """(record, record) for the step's config record c and 1/h^2: both
        loops take the whole TetherRecord."""
        rec = self.record(np.float32(c["a_tether"] * inv_h2))
        return rec, rec

    def record(self, alpha_tilde):
        """A TetherRecord with coef for alpha~ (float32, as the kernels use it)."""
        den = self.w + np.float32(alpha_tilde)
        coef = np.where(den > 0, self.w / np.where(den > 0, den, 1), 0).astype(np.float32)
        return TetherRecord(self.vertex, self.anchor, self.length, self.w, coef, self.vertex_rec, self.anchor_rec)



@njit(**JIT)
def solve_tethers(pos, prev, v, anchor, length, w, alpha, gamma, scale):
    """Unilateral long-range attachments: only pull in when over-extended.
    Anchors are kinematic, so each tether writes one vertex and needs no
    colouring; no multiplier (inactive most of the time)."""
    px, py, pz = pos[0], pos[1], pos[2]
    ox, oy, oz = prev[0], prev[1], prev[2]
    one_g = F1 + gamma
    m = np.uint64(v.shape[0])
    for i in range(m):
        iv = v[i]
        ia = anchor[i]
        dx = px[iv] - px[ia]
        dy = py[iv] - py[ia]
        dz = pz[iv] - pz[ia]
        d2 = dx * dx + dy * dy + dz * dz
        lim = length[i] * scale
        if d2 <= lim * lim:
            continue
        dist = np.sqrt(d2)
        inv = F1 / dist
        nx, ny, nz = dx * inv, dy * inv, dz * inv
        c = dist - lim
        damp = F0
        if gamma != F0:
            damp = gamma * (nx * (px[iv] - ox[iv]) + ny * (py[iv] - oy[iv]) + nz * (pz[iv] - oz[iv]))
            if damp < F0:
                damp = F0
        wi = w[i]
        dl = -(c + damp) / (one_g * wi + alpha)
        s = wi * dl
        px[iv] += s * nx
        py[iv] += s * ny
        pz[iv] += s * nz


@njit(**FLAT)
def solve_tethers_fast4(p4, v, anchor, length, coef, scale):
    """solve_tethers without damping on x, y, z, 0 records, branch-free:
    most tethers are slightly over-extended after each predict, so a branch
    on it mispredicts about half the time (it cost 20 ns per tether). An
    inactive tether computes a zero correction. coef = w / (w + alpha~);
    v, anchor: record offsets (4 x vertex index)."""
    m = np.uint64(v.shape[0])
    for i in range(m):
        iv = np.uint64(v[i])
        ia = np.uint64(anchor[i])
        dx = p4[iv] - p4[ia]
        dy = p4[iv + 1] - p4[ia + 1]
        dz = p4[iv + 2] - p4[ia + 2]
        dw = p4[iv + 3] - p4[ia + 3]
        # A vertex on its anchor (d2 = 0) gets a huge 1/|d| and f = 0.
        d2 = max(dx * dx + dy * dy + dz * dz, np.float32(1e-30))
        f = coef[i] * max(F0, F1 - length[i] * scale * rsqrt(d2))
        p4[iv] -= f * dx
        p4[iv + 1] -= f * dy
        p4[iv + 2] -= f * dz
        p4[iv + 3] -= f * dw
