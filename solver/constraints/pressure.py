"""Pressure: a closed mesh keeps a target volume.

One global constraint C = V(x) - V*, V the signed volume the triangles
enclose (sum of x0 . (x1 x x2) / 6), V* = ClothParams.pressure_volume times
the rest volume, with its own compliance (pressure_compliance, m^5/N). Its
gradient at a vertex is the sum over its triangles of the opposite edge's
cross product / 6 (area-weighted normals), so one XPBD update moves every
vertex along its normal by w_i dl grad_i. A pressure group scales the
inverse masses the update uses: weight 0 vertices do not move for it.
Over a closed mesh the gradients sum to zero, so the update moves the
centre of mass nowhere and turns the cloth about it not at all (to first
order); weighted by a group they do not, and a free cloth (no kinematic
vertex to push against) would push itself along, and where pressure and
stretch fight it spins. For a free cloth the loop takes the rigid motion
out of each iteration's constraint moves (keep_rigid_motion), and the gas
pushes the painted part out and the rest of the cloth back, as a balloon
does.

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
# times group weight (empty: no pressure); grad: (3, n) scratch; coef: target
# volume V* (m^3), alpha~, and 1 / the cloth's mass where the loop keeps the
# constraints' moves free of rigid motion (keep_rigid_motion; 0: it does
# not); mass: (n,) each vertex's mass, 0 where it is kinematic.
PressureRecord = namedtuple("PressureRecord", "tris w grad coef mass")


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
        self.coef = np.zeros(3, dtype=np.float32)
        self.mass = np.zeros(self.n, dtype=np.float32)
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
        free = self.inv_mass > 0
        self.mass = as_f32(np.where(free, 1.0 / np.where(free, self.inv_mass, 1.0), 0.0))

    def _recentre(self):
        """1 / the cloth's mass where the loop keeps its rigid motion out of
        the constraints' moves (keep_rigid_motion: a cloth with no
        kinematic vertex), else 0."""
        if self.n == 0 or np.any(self.inv_mass == 0):
            return 0.0
        return 1.0 / float(self.mass.astype(np.float64).sum())

    def prepare(self, c, inv_h2):
        if c["use_pressure"] == 0:
            r = PressureRecord(self.tris, self._none, self.grad, self.coef, self.mass)
            return r, r
        if self.open:
            raise SolverError(f"pressure needs a closed mesh, and this one has {self.open} open edge(s) "
                              f"(edges of only one polygon, or of more than two)")
        if abs(self.rest_volume) <= 1e-12:
            raise SolverError("pressure needs a mesh that encloses a volume (its rest volume is 0)")
        self.coef[0] = c["pressure_volume"] * self.rest_volume
        self.coef[1] = c["a_pressure"] * inv_h2
        self.coef[2] = self._recentre()
        r = PressureRecord(self.tris, self.w_active, self.grad, self.coef, self.mass)
        return r, r


@njit(**JIT)
def keep_rigid_motion(pos, ref, mass, inv_total):
    """Take out of the moves pos - ref (each vertex's, since ref was taken)
    the rigid motion they add up to: their mass-weighted mean (a
    translation) and their net turn about the centre of mass (a rotation,
    I^-1 L). Internal constraints move a free cloth's centre of mass and
    turn it about that centre not at all, but only to first order in their
    corrections: where pressure and stretch fight every substep (a balloon
    at a volume its fabric cannot reach without stretching), the second
    order terms of a chiral triangulation add up to a steady spin; and a
    pressure group's weighted push has a net push and turn of its own.
    Neither a translation nor a rotation changes the volume. mass: (n,),
    0 where kinematic (those stay); inv_total: 1 / the sum of mass.
    Float64 sums, in vertex order."""
    n = pos.shape[1]
    px, py, pz = pos[0], pos[1], pos[2]
    qx, qy, qz = ref[0], ref[1], ref[2]
    cx = cy = cz = 0.0
    for i in range(n):
        m = float(mass[i])
        cx += m * float(qx[i])
        cy += m * float(qy[i])
        cz += m * float(qz[i])
    k = float(inv_total)
    cx, cy, cz = cx * k, cy * k, cz * k
    tx = ty = tz = lx = ly = lz = 0.0
    ixx = iyy = izz = ixy = ixz = iyz = 0.0
    for i in range(n):
        m = float(mass[i])
        if m == 0.0:
            continue
        dx = m * (float(px[i]) - float(qx[i]))
        dy = m * (float(py[i]) - float(qy[i]))
        dz = m * (float(pz[i]) - float(qz[i]))
        rx, ry, rz = float(qx[i]) - cx, float(qy[i]) - cy, float(qz[i]) - cz
        tx += dx
        ty += dy
        tz += dz
        lx += ry * dz - rz * dy
        ly += rz * dx - rx * dz
        lz += rx * dy - ry * dx
        ixx += m * (ry * ry + rz * rz)
        iyy += m * (rx * rx + rz * rz)
        izz += m * (rx * rx + ry * ry)
        ixy -= m * rx * ry
        ixz -= m * rx * rz
        iyz -= m * ry * rz
    # omega = I^-1 L (the symmetric 3 x 3 by its adjugate; none if singular).
    a00, a01, a02 = iyy * izz - iyz * iyz, ixz * iyz - ixy * izz, ixy * iyz - ixz * iyy
    a11, a12, a22 = ixx * izz - ixz * ixz, ixy * ixz - ixx * iyz, ixx * iyy - ixy * ixy
    det = ixx * a00 + ixy * a01 + ixz * a02
    ox = oy = oz = 0.0
    if abs(det) > 1e-30 * (ixx + iyy + izz) ** 3:
        ox = (a00 * lx + a01 * ly + a02 * lz) / det
        oy = (a01 * lx + a11 * ly + a12 * lz) / det
        oz = (a02 * lx + a12 * ly + a22 * lz) / det
    tx, ty, tz = tx * k, ty * k, tz * k
    for i in range(n):
        if mass[i] == F0:
            continue
        rx, ry, rz = float(qx[i]) - cx, float(qy[i]) - cy, float(qz[i]) - cz
        px[i] -= np.float32(tx + oy * rz - oz * ry)
        py[i] -= np.float32(ty + oz * rx - ox * rz)
        pz[i] -= np.float32(tz + ox * ry - oy * rx)


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
