"""Pressure: a closed mesh keeps a target volume.

One global constraint C = V(x) - V*, V the signed volume the triangles
enclose (sum of x0 . (x1 x x2) / 6), V* = ClothParams.pressure_volume times
the rest volume, with its own compliance (pressure_compliance, m^5/N). Its
gradient at a vertex is the sum over its triangles of the opposite edge's
cross product / 6 (area-weighted normals), so one XPBD update moves every
vertex along its normal by w_i dl grad_i. A pressure group scales the
inverse masses the update uses: weight 0 vertices do not move for it.

Build: PressureConstraint (checks the mesh is closed, the rest volume).
Solve: solve_pressure.
"""

from collections import namedtuple

import numpy as np
from numba import njit

from ..config import F0, as_f32
from ..jit import KERNEL as JIT
from ..params import SolverError

# tris: (4, q) the triangles in pairs (pair_triangles); w: (n,) inverse mass
# times group weight (empty: no pressure); grad: (3, n) scratch; coef: target volume V* (m^3), alpha~.
PressureRecord = namedtuple("PressureRecord", "tris w grad coef")


def open_edges(triangles):
    """The number of triangle edges not shared by exactly two triangles."""
    t = np.asarray(triangles, dtype=np.int64)
    if len(t) == 0:
        return 0
    a = np.concatenate([t[:, 0], t[:, 1], t[:, 2]])
    b = np.concatenate([t[:, 1], t[:, 2], t[:, 0]])
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    _, counts = np.unique(lo * (t.max() + 1) + hi, return_counts=True)
    return int(np.count_nonzero(counts != 2))


# pair_triangles' fourth corner of a triangle left on its own.
LONE = np.uint32(0xFFFFFFFF)


def pair_triangles(tris_soa):
    """(3, t) triangle corners -> (4, q) uint32: consecutive triangles
    (a, b, c), (a, c, d) (a quad or a fan as the model triangulates them)
    as one column (a, b, c, d), the others as (a, b, c, LONE). Two
    triangles' normals then cost four corners' updates, not six. Along a
    run of such triangles (a fan) they pair from its start: the first with
    the second, the third with the fourth."""
    t = np.asarray(tris_soa, dtype=np.int64)
    m = t.shape[1]
    joins = np.zeros(m, dtype=bool)   # joins[i]: triangle i + 1 is (a, c, d) of triangle i
    joins[:-1] = (t[0, 1:] == t[0, :-1]) & (t[1, 1:] == t[2, :-1])
    # Each triangle's place in its run of joins; a pair starts at even places.
    idx = np.arange(m)
    starts = np.ones(m, dtype=bool)
    starts[1:] = ~joins[:-1]
    run_start = np.maximum.accumulate(np.where(starts, idx, 0))
    first = joins & ((idx - run_start) % 2 == 0)
    second = np.zeros(m, dtype=bool)
    second[1:] = first[:-1]
    keep = ~second
    out = np.empty((4, int(keep.sum())), dtype=np.uint32)
    out[:3] = t[:, keep]
    d = np.full(m, int(LONE), dtype=np.int64)
    d[first] = t[2, np.flatnonzero(first) + 1]
    out[3] = d[keep]
    return out


def signed_volume(positions, triangles):
    """The volume (m^3) the triangles enclose, of (n, 3) positions."""
    p = np.asarray(positions, dtype=np.float64)
    t = np.asarray(triangles, dtype=np.int64)
    if len(t) == 0:
        return 0.0
    ref = p.mean(axis=0)
    a, b, c = p[t[:, 0]] - ref, p[t[:, 1]] - ref, p[t[:, 2]] - ref
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0)


class PressureConstraint:
    """The volume constraint of one model (inactive until switched on)."""

    def __init__(self, rest_positions, triangles, tris_soa):
        self.n = len(rest_positions)
        self.triangles = np.asarray(triangles)
        self.tris = pair_triangles(tris_soa)
        self.open = open_edges(triangles)
        self.rest_volume = signed_volume(rest_positions, triangles)
        self.weight = np.ones(self.n, dtype=np.float32)
        self.inv_mass = np.zeros(self.n, dtype=np.float32)
        self.w_active = np.zeros(self.n, dtype=np.float32)
        self.grad = np.zeros((3, self.n), dtype=np.float32)
        self.coef = np.zeros(2, dtype=np.float32)
        self._none = np.zeros(0, dtype=np.float32)

    def set_weight(self, weight):
        w = np.asarray(weight, dtype=np.float32).ravel()
        if w.shape != (self.n,) or not np.all(np.isfinite(w)) or w.min() < 0:
            raise SolverError(f"pressure weights must be ({self.n},) finite values >= 0")
        self.weight = as_f32(w)
        self.w_active = as_f32(self.inv_mass * self.weight)

    def set_inverse_masses(self, inv_mass):
        self.inv_mass = as_f32(inv_mass)
        self.w_active = as_f32(self.inv_mass * self.weight)

    def prepare(self, c, inv_h2):
        if c["use_pressure"] == 0:
            r = PressureRecord(self.tris, self._none, self.grad, self.coef)
            return r, r
        if self.open:
            raise SolverError(f"pressure needs a closed mesh, and this one has {self.open} open edge(s) "
                              f"(edges of only one polygon, or of more than two)")
        if abs(self.rest_volume) <= 1e-12:
            raise SolverError("pressure needs a mesh that encloses a volume (its rest volume is 0)")
        self.coef[0] = c["pressure_volume"] * self.rest_volume
        self.coef[1] = c["a_pressure"] * inv_h2
        r = PressureRecord(self.tris, self.w_active, self.grad, self.coef)
        return r, r


@njit(inline="always", **JIT)
def _terms(px, py, pz, gx, gy, gz, w, i, ox, oy, oz):
    """Vertex i's terms of sum w |grad|^2 and of 3 x 6 V (float64)."""
    x, y, z = gx[i], gy[i], gz[i]
    return (float(w[i]) * float(x * x + y * y + z * z),
            float((px[i] - ox) * x + (py[i] - oy) * y + (pz[i] - oz) * z))


@njit(**JIT)
def solve_pressure(pos, tris, w, grad, coef):
    """One XPBD update of the volume constraint of the closed triangles
    (tris: pair_triangles' columns).

    On a closed mesh the volume's gradient at a vertex, the sum over its
    triangles of the opposite corners' cross product b x c, equals the sum
    of those triangles' edge normals (b - a) x (c - a) (the difference,
    a x the sum of its ring's edges, is zero around a closed ring): one
    cross product per triangle, of short edges (float32 keeps their
    digits), serves all three corners. The volume follows from the
    gradients, 6 V = sum x . grad / 3 (each triangle's a . (b x c) counted
    once per corner), in the same pass over the vertices as sum w |grad|^2,
    on four running sums (a fixed order: the same bits on any CPU)."""
    n = pos.shape[1]
    px, py, pz = pos[0], pos[1], pos[2]
    gx, gy, gz = grad[0], grad[1], grad[2]
    for i in range(n):
        gx[i] = F0
        gy[i] = F0
        gz[i] = F0
    for t in range(tris.shape[1]):
        a, b, c, d = tris[0, t], tris[1, t], tris[2, t], tris[3, t]
        ax, ay, az = px[a], py[a], pz[a]
        ux, uy, uz = px[b] - ax, py[b] - ay, pz[b] - az
        vx, vy, vz = px[c] - ax, py[c] - ay, pz[c] - az
        nx, ny, nz = uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx
        gx[b] += nx
        gy[b] += ny
        gz[b] += nz
        if d != LONE:   # the pair's second triangle (a, c, d)
            wx, wy, wz = px[d] - ax, py[d] - ay, pz[d] - az
            mx, my, mz = vy * wz - vz * wy, vz * wx - vx * wz, vx * wy - vy * wx
            gx[d] += mx
            gy[d] += my
            gz[d] += mz
            nx += mx
            ny += my
            nz += mz
        gx[a] += nx
        gy[a] += ny
        gz[a] += nz
        gx[c] += nx
        gy[c] += ny
        gz[c] += nz
    # Relative to one vertex: the volume's terms stay small in float32.
    ox, oy, oz = px[0], py[0], pz[0]
    s0 = s1 = s2 = s3 = 0.0
    v0 = v1 = v2 = v3 = 0.0
    m = n - n % 4
    for i in range(0, m, 4):
        a0, b0 = _terms(px, py, pz, gx, gy, gz, w, i, ox, oy, oz)
        a1, b1 = _terms(px, py, pz, gx, gy, gz, w, i + 1, ox, oy, oz)
        a2, b2 = _terms(px, py, pz, gx, gy, gz, w, i + 2, ox, oy, oz)
        a3, b3 = _terms(px, py, pz, gx, gy, gz, w, i + 3, ox, oy, oz)
        s0 += a0
        s1 += a1
        s2 += a2
        s3 += a3
        v0 += b0
        v1 += b1
        v2 += b2
        v3 += b3
    for i in range(m, n):
        a0, b0 = _terms(px, py, pz, gx, gy, gz, w, i, ox, oy, oz)
        s0 += a0
        v0 += b0
    s = (s0 + s1) + (s2 + s3)
    vol = ((v0 + v1) + (v2 + v3)) / 3.0
    # C and its gradient both carry the factor 6: dl = -6 C6 / (s6 + 36 alpha~)
    # with C6 = 6 C and s6 = 36 sum w |grad|^2, written in the 6-scaled terms.
    c6 = vol - 6.0 * float(coef[0])
    den = s + 36.0 * float(coef[1])
    if den <= 0.0:
        return
    f = np.float32(-c6 / den)
    for i in range(n):
        wi = w[i] * f
        px[i] += wi * gx[i]
        py[i] += wi * gy[i]
        pz[i] += wi * gz[i]
