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

# tris: (3, t) corners; w: (n,) inverse mass times group weight (empty: no
# pressure); grad: (3, n) scratch; coef: target volume V* (m^3), alpha~.
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
        self.tris = tris_soa
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


@njit(**JIT)
def solve_pressure(pos, tris, w, grad, coef):
    """One XPBD update of the volume constraint of the closed triangles."""
    n = pos.shape[1]
    px, py, pz = pos[0], pos[1], pos[2]
    gx, gy, gz = grad[0], grad[1], grad[2]
    # Relative to one vertex: the volume's terms stay small in float32.
    ox, oy, oz = px[0], py[0], pz[0]
    for i in range(n):
        gx[i] = F0
        gy[i] = F0
        gz[i] = F0
    vol = 0.0
    for t in range(tris.shape[1]):
        a, b, c = tris[0, t], tris[1, t], tris[2, t]
        ax, ay, az = px[a] - ox, py[a] - oy, pz[a] - oz
        bx, by, bz = px[b] - ox, py[b] - oy, pz[b] - oz
        cx, cy, cz = px[c] - ox, py[c] - oy, pz[c] - oz
        # b x c, c x a, a x b: each corner's gradient (times 6).
        bcx, bcy, bcz = by * cz - bz * cy, bz * cx - bx * cz, bx * cy - by * cx
        cax, cay, caz = cy * az - cz * ay, cz * ax - cx * az, cx * ay - cy * ax
        abx, aby, abz = ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx
        vol += float(ax * bcx + ay * bcy + az * bcz)
        gx[a] += bcx
        gy[a] += bcy
        gz[a] += bcz
        gx[b] += cax
        gy[b] += cay
        gz[b] += caz
        gx[c] += abx
        gy[c] += aby
        gz[c] += abz
    s = 0.0
    for i in range(n):
        s += float(w[i]) * float(gx[i] * gx[i] + gy[i] * gy[i] + gz[i] * gz[i])
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
