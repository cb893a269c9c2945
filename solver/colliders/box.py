"""Box colliders: oriented boxes with optionally rounded edges and corners,
moving and rotating over the step (a table top, a table leg, a crate).

Boxes is the record the caller fills: the centre and orientation (unit
quaternion w, x, y, z) at step start and end, the half extents along the
box's local axes and a rounding radius (the rounded box fits inside the
half extents, as a bevel does). packed() checks it and gives the kernels
(k, 21) rows: centre0, quaternion0, centre1, quaternion1 (same hemisphere
as quaternion0), half extents, rounding radius, rotation vector over the
step. Per substep interpolate_boxes gives (k, 22) rows: centre, rotation
matrix (row-major; its columns are the box's axes in world space), half
extents, rounding radius, linear and angular velocity.

Like the capsules, a vertex's path over a substep is tested against the
box at substep end from its start position carried along with the box (a
box that sweeps or turns past a still vertex is seen): the first point
where the path reaches the (convex) rounded box is found by Newton steps on
the distance along it, and the tangent plane there is the vertex's entry
plane (box_swept_contacts). The projection (project_boxes_into) pushes a
vertex out of every box it is in along the nearest surface, or, for the box
it entered during the substep, back through its entry plane; one the
constraints dragged in from outside enters where its path crossed the
surface. The cloth's edges across a box's edges and corners (both ends
outside) move out along the separating axis back to the side they came
from (project_box_edges_into), never carrying an end into the box, and
a corner that comes through a face between its edges pushes the face off
it (project_box_corners_into).
Distances grow by the margin and each vertex's collider offset, as the
capsules' radii do.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import EPS, F0, F1, FHALF, TRACE_EPS
from ..jit import FLAT, KERNEL as JIT
from ..params import SolverError
from .edges import _barycentric, _triangle_frame, face_contacts_needed, record_push

PACKED = 21
ROW = 22
# How much deeper than its ends (m) an edge's deepest point must be for
# the edge pass to push it.
EDGE_SLACK = np.float32(1e-4)
# The corner pass visits the triangles of the vertices within this many
# longest rest edges (SurfaceEdges.reach) of a corner.
CORNER_REACH = np.float32(2.0)


@njit(inline="always", **JIT)
def box_distance(px, py, pz, b, j, grow):
    """Signed distance from (px, py, pz) to box j of the substep rows b
    (interpolate_boxes), its rounding radius grown by `grow` (margin and
    collider offset), and the outward unit normal (world space).
    Scalars only in the result (see capsule.capsule_row_off)."""
    dx, dy, dz = px - b[j, 0], py - b[j, 1], pz - b[j, 2]
    # Local coordinates: q = R^T (p - c).
    qx = b[j, 3] * dx + b[j, 6] * dy + b[j, 9] * dz
    qy = b[j, 4] * dx + b[j, 7] * dy + b[j, 10] * dz
    qz = b[j, 5] * dx + b[j, 8] * dy + b[j, 11] * dz
    r = b[j, 15]
    rr = r + grow
    ex = abs(qx) - max(b[j, 12] - r, F0)
    ey = abs(qy) - max(b[j, 13] - r, F0)
    ez = abs(qz) - max(b[j, 14] - r, F0)
    ox, oy, oz = max(ex, F0), max(ey, F0), max(ez, F0)
    l2 = ox * ox + oy * oy + oz * oz
    if l2 > EPS * EPS:
        ln = np.sqrt(l2)
        inv = F1 / ln
        lx, ly, lz = ox * inv, oy * inv, oz * inv
        d = ln - rr
    else:
        lx, ly, lz = F0, F0, F0
        if ex >= ey and ex >= ez:
            d = ex - rr
            lx = F1
        elif ey >= ez:
            d = ey - rr
            ly = F1
        else:
            d = ez - rr
            lz = F1
    if qx < F0:
        lx = -lx
    if qy < F0:
        ly = -ly
    if qz < F0:
        lz = -lz
    nx = b[j, 3] * lx + b[j, 4] * ly + b[j, 5] * lz
    ny = b[j, 6] * lx + b[j, 7] * ly + b[j, 8] * lz
    nz = b[j, 9] * lx + b[j, 10] * ly + b[j, 11] * lz
    return d, nx, ny, nz


@njit(inline="always", **JIT)
def box_velocity(px, py, pz, b, j):
    """Velocity of the box's material point at (px, py, pz): v + w x (p - c)."""
    rx, ry, rz = px - b[j, 0], py - b[j, 1], pz - b[j, 2]
    wx, wy, wz = b[j, 19], b[j, 20], b[j, 21]
    return (b[j, 16] + wy * rz - wz * ry, b[j, 17] + wz * rx - wx * rz, b[j, 18] + wx * ry - wy * rx)


@njit(**FLAT)
def interpolate_boxes(boxes, t0, t1, h_step, bx0, bx1):
    """The boxes at substep start (bx0) and end (bx1), rows as in the
    module's docstring: centres interpolated linearly, orientations by
    normalised linear interpolation of the quaternions."""
    for j in range(boxes.shape[0]):
        for tt in range(2):
            t = t0 if tt == 0 else t1
            out = bx0 if tt == 0 else bx1
            s = F1 - t
            for c in range(3):
                out[j, c] = s * boxes[j, c] + t * boxes[j, 7 + c]
            w = s * boxes[j, 3] + t * boxes[j, 10]
            x = s * boxes[j, 4] + t * boxes[j, 11]
            y = s * boxes[j, 5] + t * boxes[j, 12]
            z = s * boxes[j, 6] + t * boxes[j, 13]
            ql = np.sqrt(w * w + x * x + y * y + z * z)
            if ql < EPS:
                w, x, y, z, ql = boxes[j, 10], boxes[j, 11], boxes[j, 12], boxes[j, 13], F1
            inv = F1 / ql
            w, x, y, z = w * inv, x * inv, y * inv, z * inv
            out[j, 3] = F1 - np.float32(2.0) * (y * y + z * z)
            out[j, 4] = np.float32(2.0) * (x * y - w * z)
            out[j, 5] = np.float32(2.0) * (x * z + w * y)
            out[j, 6] = np.float32(2.0) * (x * y + w * z)
            out[j, 7] = F1 - np.float32(2.0) * (x * x + z * z)
            out[j, 8] = np.float32(2.0) * (y * z - w * x)
            out[j, 9] = np.float32(2.0) * (x * z - w * y)
            out[j, 10] = np.float32(2.0) * (y * z + w * x)
            out[j, 11] = F1 - np.float32(2.0) * (x * x + y * y)
            r = boxes[j, 17]
            for c in range(3):
                out[j, 12 + c] = boxes[j, 14 + c]
                r = min(r, boxes[j, 14 + c])
            out[j, 15] = r
            for c in range(3):
                out[j, 16 + c] = (boxes[j, 7 + c] - boxes[j, c]) / h_step
                out[j, 19 + c] = boxes[j, 18 + c] / h_step


@njit(inline="always", **JIT)
def _box_aabb(b, j, grow):
    """World-space axis-aligned box around box j of rows b, grown by grow."""
    hx, hy, hz = b[j, 12] + grow, b[j, 13] + grow, b[j, 14] + grow
    ex = abs(b[j, 3]) * hx + abs(b[j, 4]) * hy + abs(b[j, 5]) * hz
    ey = abs(b[j, 6]) * hx + abs(b[j, 7]) * hy + abs(b[j, 8]) * hz
    ez = abs(b[j, 9]) * hx + abs(b[j, 10]) * hy + abs(b[j, 11]) * hz
    return (b[j, 0] - ex, b[j, 1] - ey, b[j, 2] - ez, b[j, 0] + ex, b[j, 1] + ey, b[j, 2] + ez)


@njit(**FLAT)
def box_bounds_into(bx0, bx1, grow, aabb):
    """aabb (k, 6): min, max around each box at substep start and end,
    grown by grow (margin and the largest collider offset)."""
    for j in range(bx1.shape[0]):
        a = _box_aabb(bx0, j, grow)
        b = _box_aabb(bx1, j, grow)
        for c in range(3):
            aabb[j, c] = min(a[c], b[c])
            aabb[j, 3 + c] = max(a[3 + c], b[3 + c])


@njit(inline="always", **JIT)
def _carried(x0, y0, z0, bx0, bx1, j):
    """A substep-start position carried with box j: its local coordinates
    at substep start (rows bx0), placed in the box at substep end (bx1)."""
    dx, dy, dz = x0 - bx0[j, 0], y0 - bx0[j, 1], z0 - bx0[j, 2]
    lx = bx0[j, 3] * dx + bx0[j, 6] * dy + bx0[j, 9] * dz
    ly = bx0[j, 4] * dx + bx0[j, 7] * dy + bx0[j, 10] * dz
    lz = bx0[j, 5] * dx + bx0[j, 8] * dy + bx0[j, 11] * dz
    return (bx1[j, 0] + bx1[j, 3] * lx + bx1[j, 4] * ly + bx1[j, 5] * lz,
            bx1[j, 1] + bx1[j, 6] * lx + bx1[j, 7] * ly + bx1[j, 8] * lz,
            bx1[j, 2] + bx1[j, 9] * lx + bx1[j, 10] * ly + bx1[j, 11] * lz)


@njit(inline="always", **JIT)
def _entry(sx, sy, sz, ex, ey, ez, d, nx, ny, nz, b, j, grow):
    """Where the path s + u e (u in [0, 1]) from a start outside box j
    (distance d, normal n there) first reaches it: Newton on the convex
    distance along the path from u = 0 (see capsule._newton_entry).
    (found, u, the point, the outward normal there)."""
    u = F0
    hx, hy, hz = sx, sy, sz
    for _ in range(32):
        if d < TRACE_EPS:
            return True, u, hx, hy, hz, nx, ny, nz
        slope = nx * ex + ny * ey + nz * ez
        if slope >= F0:
            break
        u -= d / slope
        if u >= F1:
            break
        hx, hy, hz = sx + u * ex, sy + u * ey, sz + u * ez
        d, nx, ny, nz = box_distance(hx, hy, hz, b, j, grow)
    return False, u, hx, hy, hz, nx, ny, nz


@njit(inline="always", **JIT)
def _write_entry(i, j, hx, hy, hz, nx, ny, nz, bx1, bhit, bentry):
    """bhit[i] = j + 1 and vertex i's entry into box j: point, normal, the
    box's surface velocity there."""
    bhit[i] = j + 1
    bentry[0, i], bentry[1, i], bentry[2, i] = hx, hy, hz
    bentry[3, i], bentry[4, i], bentry[5, i] = nx, ny, nz
    vx, vy, vz = box_velocity(hx, hy, hz, bx1, j)
    bentry[6, i], bentry[7, i], bentry[8, i] = vx, vy, vz


@njit(**FLAT)
def box_swept_contacts(pos, prev, inv_mass, bx0, bx1, margin, cmask, pad, bhit, bentry, aabb):
    """Swept box contacts of this substep (see the module's docstring):
    bhit[i] = 1 + index of the box vertex i's path enters first (0 = none),
    bentry[:, i] = entry point, entry normal, surface velocity there.
    cmask[i] < 0: the vertex ignores colliders but the half-spaces; pad:
    the largest collider offset. aabb: scratch (k, 6)."""
    n = np.uint64(pos.shape[1])
    k = bx1.shape[0]
    box_bounds_into(bx0, bx1, margin + pad, aabb)
    for i in range(n):
        bhit[i] = 0
        if inv_mass[i] == F0 or cmask[i] < F0:
            continue
        x0, y0, z0 = prev[0, i], prev[1, i], prev[2, i]
        x1, y1, z1 = pos[0, i], pos[1, i], pos[2, i]
        grow = margin + cmask[i]
        best = np.float32(2.0)
        for j in range(k):
            if (max(x0, x1) < aabb[j, 0] or min(x0, x1) > aabb[j, 3] or max(y0, y1) < aabb[j, 1]
                    or min(y0, y1) > aabb[j, 4] or max(z0, z1) < aabb[j, 2] or min(z0, z1) > aabb[j, 5]):
                continue
            sx, sy, sz = _carried(x0, y0, z0, bx0, bx1, j)
            ex, ey, ez = x1 - sx, y1 - sy, z1 - sz
            seg = np.sqrt(ex * ex + ey * ey + ez * ez)
            d, nx, ny, nz = box_distance(sx, sy, sz, bx1, j, grow)
            if d > seg:
                continue
            u = F0
            hx, hy, hz = sx, sy, sz
            found = False
            if d < F0:
                # Started inside: a vertex resting on the surface that the
                # box moved into enters where it touched; one deep inside
                # is left to the live push-out.
                thin = min(min(bx1[j, 12], bx1[j, 13]), bx1[j, 14]) + grow
                if d > -FHALF * thin:
                    found = True
                    hx, hy, hz = sx - d * nx, sy - d * ny, sz - d * nz
            elif d < TRACE_EPS:
                found = seg > EPS
            elif seg > EPS:
                found, u, hx, hy, hz, nx, ny, nz = _entry(sx, sy, sz, ex, ey, ez, d, nx, ny, nz, bx1, j, grow)
            if found and u < best:
                best = u
                _write_entry(i, j, hx, hy, hz, nx, ny, nz, bx1, bhit, bentry)


@njit(**FLAT)
def project_boxes_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, pad, bhit, bentry, contact, clist, ccount,
                       aabb):
    """Push every vertex out of the boxes at substep end: along the nearest
    surface, or for the box it entered during the substep (bhit) back
    through its entry plane. contact[:, i] accumulates normal, depth and
    surface velocity, and a vertex pushed for the first time is appended to
    clist (as colliders.project_colliders_into does). Returns the new ccount."""
    n = np.uint64(pos.shape[1])
    k = bx1.shape[0]
    if k == 0:
        return ccount
    box_bounds_into(bx1, bx1, margin + pad, aabb)
    lox = loy = loz = np.float32(3e38)
    hix = hiy = hiz = np.float32(-3e38)
    for j in range(k):
        lox, loy, loz = min(lox, aabb[j, 0]), min(loy, aabb[j, 1]), min(loz, aabb[j, 2])
        hix, hiy, hiz = max(hix, aabb[j, 3]), max(hiy, aabb[j, 4]), max(hiz, aabb[j, 5])
    for i in range(n):
        if inv_mass[i] == F0 or cmask[i] < F0:
            continue
        px, py, pz = pos[0, i], pos[1, i], pos[2, i]
        swept = bhit[i]
        if swept == 0 and (px < lox or px > hix or py < loy or py > hiy or pz < loz or pz > hiz):
            continue
        grow = margin + cmask[i]
        depth = F0
        cnx, cny, cnz = F0, F0, F0
        cvx, cvy, cvz = F0, F0, F0
        for j in range(k):
            if swept == j + 1:
                continue
            if (px < aabb[j, 0] or px > aabb[j, 3] or py < aabb[j, 1] or py > aabb[j, 4]
                    or pz < aabb[j, 2] or pz > aabb[j, 5]):
                continue
            d, nx, ny, nz = box_distance(px, py, pz, bx1, j, grow)
            if d < F0 and swept == 0:
                # Inside a box its predicted path did not enter: the
                # constraints carried it in. From outside at substep start
                # (carried with the box), it goes back out where its path
                # came in, as a swept contact from now on; the nearest face
                # would be a thin slab's far side for a vertex dragged in
                # past the middle.
                sx, sy, sz = _carried(prev[0, i], prev[1, i], prev[2, i], bx0, bx1, j)
                d0, m0x, m0y, m0z = box_distance(sx, sy, sz, bx1, j, grow)
                if d0 > F0:
                    found, _, hx, hy, hz, hnx, hny, hnz = _entry(sx, sy, sz, px - sx, py - sy, pz - sz, d0, m0x,
                                                                  m0y, m0z, bx1, j, grow)
                    if found:
                        swept = j + 1
                        _write_entry(i, j, hx, hy, hz, hnx, hny, hnz, bx1, bhit, bentry)
                        continue
            if d < F0:
                px -= d * nx
                py -= d * ny
                pz -= d * nz
                depth -= d
                cnx, cny, cnz = nx, ny, nz
                cvx, cvy, cvz = box_velocity(px, py, pz, bx1, j)
        if swept != 0:
            nx, ny, nz = bentry[3, i], bentry[4, i], bentry[5, i]
            d = (px - bentry[0, i]) * nx + (py - bentry[1, i]) * ny + (pz - bentry[2, i]) * nz
            if d < F0:
                px -= d * nx
                py -= d * ny
                pz -= d * nz
                depth -= d
                cnx, cny, cnz = nx, ny, nz
                cvx, cvy, cvz = bentry[6, i], bentry[7, i], bentry[8, i]
        if depth > F0:
            pos[0, i], pos[1, i], pos[2, i] = px, py, pz
            ccount = record_push(contact, clist, ccount, i, depth, cnx, cny, cnz, cvx, cvy, cvz)
    return ccount


def box_scratch(n, k):
    """What the box passes write, for n vertices and k boxes, held between
    steps: the boxes at substep start and end (k, 22), their bounds (k, 6),
    the swept hits (n,) and entries (9, n), the edge pass's stamps (n + 1,)."""
    return (np.zeros((k, ROW), np.float32), np.zeros((k, ROW), np.float32), np.zeros((k, 6), np.float32),
            np.zeros(n, np.int32), np.zeros((9, n), np.float32), np.zeros(n + 1, np.int32))


def _quats(name, q, k):
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (k, 4):
        raise SolverError(f"Boxes.{name} must have shape ({k}, 4) (w, x, y, z), got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise SolverError(f"Boxes.{name} contains NaN or Inf")
    ln = np.linalg.norm(q, axis=1)
    if np.any(ln < 1e-12):
        raise SolverError(f"Boxes.{name} has a zero-length quaternion")
    return q / ln[:, None]


def _vec3(name, v, k):
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (k, 3):
        raise SolverError(f"Boxes.{name} must have shape ({k}, 3), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise SolverError(f"Boxes.{name} contains NaN or Inf")
    return v


@dataclass
class Boxes:
    """k oriented boxes, centre and orientation at step start (center0,
    rotation0) and end (center1, rotation1; default: as at the start).

    center0, center1: (k, 3) world space. rotation0, rotation1: (k, 4) unit
    quaternions (w, x, y, z) of the box's axes (normalised here).
    half_extents: (k, 3) > 0, half the box's size along its local x, y, z
    (metres). radius: (k,) >= 0 rounding of its edges and corners, inside
    the half extents (at most the smallest of them; default 0).
    """

    center0: np.ndarray
    rotation0: np.ndarray
    half_extents: np.ndarray
    center1: np.ndarray = None
    rotation1: np.ndarray = None
    radius: np.ndarray = None

    def packed(self):
        """(k, 21) float32 rows, see the module's docstring."""
        c0 = np.asarray(self.center0, dtype=np.float64)
        if c0.ndim != 2 or c0.shape[1] != 3:
            raise SolverError(f"Boxes.center0 must have shape (k, 3), got {c0.shape}")
        k = c0.shape[0]
        c0 = _vec3("center0", c0, k)
        c1 = c0 if self.center1 is None else _vec3("center1", self.center1, k)
        q0 = _quats("rotation0", self.rotation0, k)
        q1 = q0 if self.rotation1 is None else _quats("rotation1", self.rotation1, k)
        half = _vec3("half_extents", self.half_extents, k)
        if np.any(half <= 0):
            raise SolverError("Boxes.half_extents must be > 0")
        r = np.zeros(k) if self.radius is None else np.asarray(self.radius, dtype=np.float64)
        if r.shape != (k,):
            raise SolverError(f"Boxes.radius must have shape ({k},), got {r.shape}")
        if not np.all(np.isfinite(r)):
            raise SolverError("Boxes.radius contains NaN or Inf")
        if np.any(r < 0):
            raise SolverError("Boxes.radius must be >= 0")
        # The shorter way round: q and -q are the same orientation.
        q1 = np.where((np.sum(q0 * q1, axis=1) < 0)[:, None], -q1, q1)
        # Rotation over the step, q1 q0^-1, as a rotation vector.
        w0, v0 = q0[:, 0], -q0[:, 1:]
        w1, v1 = q1[:, 0], q1[:, 1:]
        dw = w1 * w0 - np.sum(v1 * v0, axis=1)
        dv = w1[:, None] * v0 + w0[:, None] * v1 + np.cross(v1, v0)
        s = np.linalg.norm(dv, axis=1)
        angle = 2.0 * np.arctan2(s, dw)
        axis = np.where(s[:, None] > 1e-12, dv / np.maximum(s, 1e-300)[:, None], 0.0)
        out = np.empty((k, PACKED), dtype=np.float32)
        out[:, 0:3] = c0
        out[:, 3:7] = q0
        out[:, 7:10] = c1
        out[:, 10:14] = q1
        out[:, 14:17] = half
        out[:, 17] = np.minimum(r, half.min(axis=1)) if k else r
        out[:, 18:21] = axis * angle[:, None]
        if not np.all(np.isfinite(out)):
            raise SolverError("Boxes do not fit in float32")
        return out


@njit(inline="always", **JIT)
def _support(b, j, nx, ny, nz, hx, hy, hz, rr):
    """How far box j's inner box (half extents h) grown by rr reaches from
    its centre along the unit direction n."""
    return (hx * abs(nx * b[j, 3] + ny * b[j, 6] + nz * b[j, 9])
            + hy * abs(nx * b[j, 4] + ny * b[j, 7] + nz * b[j, 10])
            + hz * abs(nx * b[j, 5] + ny * b[j, 8] + nz * b[j, 11]) + rr)


@njit(inline="always", **JIT)
def _axis_extent(px, py, pz, qx, qy, qz, b, j, k, hx, hy, hz, rr):
    """Separating axis k of an edge p-q and box j of the rows b (0-2: the
    box's face normals, 3-5: the edge direction across box axis k - 3, unit):
    the axis, how far the edge must move along +axis and along -axis to
    clear the box (its inner box grown by rr), and whether the axis is
    usable (a cross axis is not when the edge runs along the box axis)."""
    a = k % 3
    ux, uy, uz = b[j, 3 + a], b[j, 6 + a], b[j, 9 + a]
    if k < 3:
        nx, ny, nz = ux, uy, uz
    else:
        ex, ey, ez = qx - px, qy - py, qz - pz
        nx, ny, nz = ey * uz - ez * uy, ez * ux - ex * uz, ex * uy - ey * ux
        l2 = nx * nx + ny * ny + nz * nz
        if l2 < EPS * EPS * (ex * ex + ey * ey + ez * ez) or l2 < EPS * EPS * EPS:
            return F0, F0, F0, F0, F0, False
        inv = F1 / np.sqrt(l2)
        nx, ny, nz = nx * inv, ny * inv, nz * inv
    reach = _support(b, j, nx, ny, nz, hx, hy, hz, rr)
    mid = nx * b[j, 0] + ny * b[j, 1] + nz * b[j, 2]
    sp = nx * px + ny * py + nz * pz
    sq = nx * qx + ny * qy + nz * qz
    return nx, ny, nz, mid + reach - min(sp, sq), max(sp, sq) - (mid - reach), True


@njit(inline="always", **JIT)
def edge_exit_axis(px, py, pz, qx, qy, qz, p0x, p0y, p0z, q0x, q0y, q0z, cx, cy, cz, b0, b, j, grow):
    """How far the point (cx, cy, cz) of the edge p-q must move, and along
    which unit direction, to leave box j of the substep-end rows b (its
    rounding grown by `grow`). The direction is one of the separating axes
    of a segment and a box (the box's three face normals, the edge across
    each box axis): of those that separated the edge at substep start (p0-q0
    against the rows b0), the one it must move along least to get back to
    the side it came from; when none did, the one over which the edge's and
    the box's extents overlap least. The rounded box is taken as its inner
    box grown by the rounding everywhere (its support along any direction),
    so an edge near a rounded corner may be pushed a little farther than it
    needed. Unlike the distance's gradient at the point, which inside a thin
    slab points to the nearer of its broad faces, this takes an edge draped
    over a table top's edge out around that edge, and one that fell onto
    the slab out of its top. (0, 0, 0, 0) when an axis separates them
    already."""
    r = b[j, 15]
    rr = r + grow
    hx, hy, hz = max(b[j, 12] - r, F0), max(b[j, 13] - r, F0), max(b[j, 14] - r, F0)
    inf = np.float32(np.inf)
    best, bx, by, bz, bs = inf, F0, F0, F0, F0     # least overlap of all
    came, fx, fy, fz, fs = inf, F0, F0, F0, F0  # least, to the side the edge came from
    for k in range(6):
        nx, ny, nz, up, down, ok = _axis_extent(px, py, pz, qx, qy, qz, b, j, k, hx, hy, hz, rr)
        if not ok:
            continue
        if up <= F0 or down <= F0:
            return F0, F0, F0, F0
        if min(up, down) < best:
            best, bx, by, bz, bs = min(up, down), nx, ny, nz, (F1 if up <= down else -F1)
        mx, my, mz, up0, down0, ok0 = _axis_extent(p0x, p0y, p0z, q0x, q0y, q0z, b0, j, k, hx, hy, hz, rr)
        if not ok0 or mx * nx + my * ny + mz * nz <= F0:
            continue
        if up0 <= F0 and up < came:
            came, fx, fy, fz, fs = up, nx, ny, nz, F1
        elif down0 <= F0 and down < came:
            came, fx, fy, fz, fs = down, nx, ny, nz, -F1
    if came < inf:
        bx, by, bz, bs = fx, fy, fz, fs
    elif best == inf:
        return F0, F0, F0, F0
    # The point's own way out along that axis (the whole edge's is at least
    # as far).
    nx, ny, nz = bx * bs, by * bs, bz * bs
    reach = _support(b, j, nx, ny, nz, hx, hy, hz, rr)
    own = nx * b[j, 0] + ny * b[j, 1] + nz * b[j, 2] + reach - (nx * cx + ny * cy + nz * cz)
    return max(own, F0), nx, ny, nz


@njit(inline="always", **JIT)
def _no_push():
    """_box_edge's answer for an edge it leaves alone."""
    return False, F0, F0, F0, F0, F0, F0, F0, F0


@njit(inline="always", **JIT)
def _box_edge(pos, prev, bx0, bx1, j, grow, i, q, wi, wq, d0, n0x, n0y, n0z):
    """The push of edge i-q out of box j (see project_box_edges_into), given
    end i's distance d0 (grown) and normal: (pushed, the moves of i and q
    along the normal, the normal, the contact point)."""
    gr = np.float32(0.618034)
    px, py, pz = pos[0, i], pos[1, i], pos[2, i]
    qx, qy, qz = pos[0, q], pos[1, q], pos[2, q]
    ex, ey, ez = qx - px, qy - py, qz - pz
    d1, n1x, n1y, n1z = box_distance(qx, qy, qz, bx1, j, grow)
    if d0 < -grow or d1 < -grow:
        return _no_push()  # an end deep inside: the vertex projection's
    s0 = n0x * ex + n0y * ey + n0z * ez
    s1 = n1x * ex + n1y * ey + n1z * ez
    if s0 >= F0 or s1 <= F0:
        return _no_push()
    # Both ends over the same face: the distance is linear along the edge
    # (one resting on the top of a table: most of them), its least at an end.
    if n0x * n1x + n0y * n1y + n0z * n1z > np.float32(0.9999):
        return _no_push()
    # Lower bound: where the tangent lines at both ends meet. An
    # edge no deeper between its ends than at them (one resting
    # on a face, the ends at the margin) is the vertex
    # projection's.
    ts = (d1 - s1 - d0) / (s0 - s1)
    if d0 + ts * s0 >= min(min(d0, d1) - EDGE_SLACK, F0):
        return _no_push()
    lo, hi = F0, F1
    a = hi - gr * (hi - lo)
    b = lo + gr * (hi - lo)
    fa, _, _, _ = box_distance(px + a * ex, py + a * ey, pz + a * ez, bx1, j, grow)
    fb, _, _, _ = box_distance(px + b * ex, py + b * ey, pz + b * ez, bx1, j, grow)
    for _ in range(12):
        if fa < fb:
            hi = b
            b, fb = a, fa
            a = hi - gr * (hi - lo)
            fa, _, _, _ = box_distance(px + a * ex, py + a * ey, pz + a * ez, bx1, j, grow)
        else:
            lo = a
            a, fa = b, fb
            b = lo + gr * (hi - lo)
            fb, _, _, _ = box_distance(px + b * ex, py + b * ey, pz + b * ez, bx1, j, grow)
    t = FHALF * (lo + hi)
    cx, cy, cz = px + t * ex, py + t * ey, pz + t * ez
    d, _, _, _ = box_distance(cx, cy, cz, bx1, j, grow)
    if d >= min(min(d0, d1) - EDGE_SLACK, F0):
        return _no_push()
    depth, nx, ny, nz = edge_exit_axis(px, py, pz, qx, qy, qz, prev[0, i], prev[1, i], prev[2, i],
                                       prev[0, q], prev[1, q], prev[2, q], cx, cy, cz, bx0, bx1, j,
                                       grow)
    # Deeper than the edge is long: the edge runs through the box
    # (a vertical edge through a table top's middle), and no
    # push of its own gets it out without dragging an end
    # through; left to the vertex contacts.
    if depth <= F0 or depth * depth > ex * ex + ey * ey + ez * ez:
        return _no_push()
    gi, gq = F1 - t, t
    den = wi * gi * gi + wq * gq * gq
    if den < EPS:
        return _no_push()
    lim = np.float32(2.0)
    ai = min(wi * gi / den, lim) * depth
    aq = min(wq * gq / den, lim) * depth
    # Never an end into or through the box: a vertex inside is
    # left to the next substep's projection, which pushes it out
    # through the nearer face (a thin slab's far side). The end
    # and the middle of its move stay outside, or no deeper than
    # the end was.
    floor = min(d0, d1, F0)
    e0, _, _, _ = box_distance(px + ai * nx, py + ai * ny, pz + ai * nz, bx1, j, grow)
    e1, _, _, _ = box_distance(qx + aq * nx, qy + aq * ny, qz + aq * nz, bx1, j, grow)
    h0, _, _, _ = box_distance(px + FHALF * ai * nx, py + FHALF * ai * ny, pz + FHALF * ai * nz, bx1,
                               j, grow)
    h1, _, _, _ = box_distance(qx + FHALF * aq * nx, qy + FHALF * aq * ny, qz + FHALF * aq * nz, bx1,
                               j, grow)
    if min(e0, e1, h0, h1) < floor:
        return _no_push()
    return True, ai, aq, nx, ny, nz, cx, cy, cz


@njit(**FLAT)
def project_box_edges_into(pos, prev, inv_mass, bx0, bx1, margin, cmask, edge_start, edge_other, contact, clist,
                           ccount, aabb, stamp, again):
    """Move the cloth's edges that cut into a box (draped over a table's
    edge with both ends outside) out of it: the deepest point of the edge
    (the distance is convex along it; a golden-section search) moves out of
    the box along the axis that separates the edge from the box by the
    least motion (edge_exit_axis), shared by the two ends by their weights
    and barycentric coordinates (as colliders.edges does for capsules).
    Most edges stop at a test from the distances and normals at their ends:
    the tangent lines at both ends bound the distance along a convex
    function from below, and an edge resting on a face (normals across it)
    or leaving it is never inside. aabb: box_bounds_into(bx1, bx1, ...),
    as project_boxes_into leaves it. stamp (n + 1,) int32: the vertices this
    pass pushed carry stamp[n]; again: visit only the edges of the vertices
    the pass before pushed (a neighbour's push moves an edge over a table's
    corner back in). Returns the new ccount."""
    k = bx1.shape[0]
    n = np.uint64(pos.shape[1])
    if k == 0:
        return ccount
    if not again:
        if stamp[n] >= np.int32(1 << 30):
            stamp[:] = 0
        stamp[n] += 1
    mark = stamp[n]
    for i in range(n):
        oi = cmask[i]
        if oi < F0 or (again and stamp[i] != mark):
            continue
        wi = inv_mass[i]
        for j in range(k):
            known = False
            base, n0x, n0y, n0z = F0, F0, F0, F0
            for e in range(edge_start[i], edge_start[i + 1]):
                q = edge_other[e]
                if q < i and not (again and stamp[q] != mark):
                    continue  # visited from q
                oq = cmask[q]
                wq = inv_mass[q]
                if oq < F0 or wi + wq == F0:
                    continue
                px, py, pz = pos[0, i], pos[1, i], pos[2, i]
                qx, qy, qz = pos[0, q], pos[1, q], pos[2, q]
                if (max(px, qx) < aabb[j, 0] or min(px, qx) > aabb[j, 3] or max(py, qy) < aabb[j, 1]
                        or min(py, qy) > aabb[j, 4] or max(pz, qz) < aabb[j, 2] or min(pz, qz) > aabb[j, 5]):
                    continue
                if not known:
                    # Vertex i's distance once for all its edges (each
                    # edge's margin and offsets only shift it).
                    base, n0x, n0y, n0z = box_distance(px, py, pz, bx1, j, F0)
                    known = True
                grow = margin + max(oi, oq)
                pushed, ai, aq, nx, ny, nz, cx, cy, cz = _box_edge(pos, prev, bx0, bx1, j, grow, i, q, wi, wq,
                                                                   base - grow, n0x, n0y, n0z)
                if not pushed:
                    continue
                pos[0, i], pos[1, i], pos[2, i] = px + ai * nx, py + ai * ny, pz + ai * nz
                pos[0, q], pos[1, q], pos[2, q] = qx + aq * nx, qy + aq * ny, qz + aq * nz
                known = False
                v = box_velocity(cx, cy, cz, bx1, j)
                if ai > F0:
                    ccount = record_push(contact, clist, ccount, i, ai, nx, ny, nz, v[0], v[1], v[2])
                    stamp[i] = mark
                if aq > F0:
                    ccount = record_push(contact, clist, ccount, q, aq, nx, ny, nz, v[0], v[1], v[2])
                    stamp[q] = mark
    return ccount


@njit(inline="always", **JIT)
def _corner(b, j, sx, sy, sz):
    """World position of the centre of corner (sx, sy, sz) (each +-1) of box
    j of rows b: where its rounding sphere sits (the corner itself for a
    sharp box)."""
    r = b[j, 15]
    lx = sx * max(b[j, 12] - r, F0)
    ly = sy * max(b[j, 13] - r, F0)
    lz = sz * max(b[j, 14] - r, F0)
    return (b[j, 0] + b[j, 3] * lx + b[j, 4] * ly + b[j, 5] * lz,
            b[j, 1] + b[j, 6] * lx + b[j, 7] * ly + b[j, 8] * lz,
            b[j, 2] + b[j, 9] * lx + b[j, 10] * ly + b[j, 11] * lz)


@njit(**FLAT)
def project_box_corners_into(pos, inv_mass, bx1, margin, cmask, tri_start, tri_list, tris, stamp, reach,
                             contact, clist, ccount, vstamp):
    """Keep the boxes' corners out of the cloth's faces: a table's corner
    through the middle of a tablecloth's triangle whose vertices and edges
    are all outside (the cloth then hangs hooked on the corner, the face
    stretched around it). For each corner, the triangles of the vertices
    within CORNER_REACH longest rest edges of it (a face is caught as it
    comes to the corner, before it is stretched around it) whose plane has
    the corner's rounding sphere (grown by the margin and the offsets) less
    than its radius on the side away from the box's centre, the corner
    projecting into the triangle, move along their normal away from the
    centre until the sphere is that radius behind the plane, shared by the
    barycentric weights and the inverse masses. A corner more than its
    radius through a face counts only where the face's point over it is in
    the box (a face beside the box that a far corner projects into is not
    cut by it), and no push carries a vertex deeper into the box. Skipped
    for corners rounded to more than the triangles
    (edges.face_contacts_needed: the edge contacts hold those). tris: (3,
    t) uint32; stamp: the triangles' marks (as edges.project_faces_into).
    vstamp: project_box_edges_into's stamp; the vertices this pass moves
    get its mark (its `again` round then visits their edges). Returns the
    new ccount."""
    k = bx1.shape[0]
    n = np.uint64(pos.shape[1])
    if k == 0:
        return ccount
    last = stamp.shape[0] - 1
    far = reach * CORNER_REACH
    vstamp[n] += 1   # a fresh mark: the edge pass's again round visits only this pass's vertices
    for j in range(k):
        rr0 = bx1[j, 15] + margin
        if not face_contacts_needed(rr0, reach, margin):
            continue
        # One mark per corner (a triangle is visited once a corner).
        if stamp[last] >= np.uint32(0xFFFFFFF0):
            stamp[:] = 0
        base = stamp[last] + np.uint32(1)
        stamp[last] = base + np.uint32(8)
        r_box = bx1[j, 15]
        ex, ey, ez = max(bx1[j, 12] - r_box, F0), max(bx1[j, 13] - r_box, F0), max(bx1[j, 14] - r_box, F0)
        for i in range(n):
            if cmask[i] < F0:
                continue
            px, py, pz = pos[0, i], pos[1, i], pos[2, i]
            # Box-local coordinates: near a corner only within `far` (and
            # the radius) of it along each local axis.
            dx, dy, dz = px - bx1[j, 0], py - bx1[j, 1], pz - bx1[j, 2]
            qx = bx1[j, 3] * dx + bx1[j, 6] * dy + bx1[j, 9] * dz
            qy = bx1[j, 4] * dx + bx1[j, 7] * dy + bx1[j, 10] * dz
            qz = bx1[j, 5] * dx + bx1[j, 8] * dy + bx1[j, 11] * dz
            lim = far + rr0 + cmask[i]
            if abs(abs(qx) - ex) > lim or abs(abs(qy) - ey) > lim or abs(abs(qz) - ez) > lim:
                continue
            for corner in range(8):
                sx = F1 if corner & 1 else -F1
                sy = F1 if corner & 2 else -F1
                sz = F1 if corner & 4 else -F1
                if abs(qx - sx * ex) > lim or abs(qy - sy * ey) > lim or abs(qz - sz * ez) > lim:
                    continue
                tag = base + np.uint32(corner)
                cx, cy, cz = _corner(bx1, j, sx, sy, sz)
                for u in range(tri_start[i], tri_start[i + 1]):
                    tr = tri_list[u]
                    if stamp[tr] == tag:
                        continue
                    stamp[tr] = tag
                    i0, i1, i2 = tris[0, tr], tris[1, tr], tris[2, tr]
                    w0, w1, w2 = inv_mass[i0], inv_mass[i1], inv_mass[i2]
                    if w0 + w1 + w2 == F0 or cmask[i0] < F0 or cmask[i1] < F0 or cmask[i2] < F0:
                        continue
                    rr = rr0 + max(cmask[i0], max(cmask[i1], cmask[i2]))
                    x0, y0, z0, v0, v1, nx, ny, nz = _triangle_frame(pos, i0, i1, i2)
                    nl = np.sqrt(nx * nx + ny * ny + nz * nz)
                    if nl < EPS:
                        continue
                    nx, ny, nz = nx / nl, ny / nl, nz / nl
                    # The normal away from the box's centre.
                    if (bx1[j, 0] - x0) * nx + (bx1[j, 1] - y0) * ny + (bx1[j, 2] - z0) * nz > F0:
                        nx, ny, nz = -nx, -ny, -nz
                    h = (cx - x0) * nx + (cy - y0) * ny + (cz - z0) * nz
                    if h <= -rr:
                        continue
                    if h > rr:
                        # Through the face by more than its radius: only
                        # where the face's point over the corner is in the
                        # box (a face beside the box that a far corner
                        # projects into is the vertex and edge passes').
                        if box_distance(cx - h * nx, cy - h * ny, cz - h * nz, bx1, j, F0)[0] >= F0:
                            continue
                    b0, b1, b2 = _barycentric(x0, y0, z0, v0, v1, cx - h * nx, cy - h * ny, cz - h * nz)
                    if b0 < F0 or b1 < F0 or b2 < F0:
                        continue
                    den = w0 * b0 * b0 + w1 * b1 * b1 + w2 * b2 * b2
                    if den < EPS:
                        continue
                    push = h + rr
                    cap = np.float32(2.0)
                    a0 = min(w0 * b0 / den, cap) * push
                    a1 = min(w1 * b1 / den, cap) * push
                    a2 = min(w2 * b2 / den, cap) * push
                    # Never into the box: a push that would carry a vertex
                    # deeper than it is (a face the box sweeps through) is
                    # the vertex and edge passes'.
                    deeper = False
                    for vi, a in ((i0, a0), (i1, a1), (i2, a2)):
                        if a > F0:
                            grow = margin + cmask[vi]
                            d_now = box_distance(pos[0, vi], pos[1, vi], pos[2, vi], bx1, j, grow)[0]
                            d_new = box_distance(pos[0, vi] + a * nx, pos[1, vi] + a * ny, pos[2, vi] + a * nz, bx1,
                                                 j, grow)[0]
                            if d_new < F0 and d_new < d_now:
                                deeper = True
                    if deeper:
                        continue
                    vx, vy, vz = box_velocity(cx, cy, cz, bx1, j)
                    for vi, a in ((i0, a0), (i1, a1), (i2, a2)):
                        if a > F0:
                            pos[0, vi] += a * nx
                            pos[1, vi] += a * ny
                            pos[2, vi] += a * nz
                            ccount = record_push(contact, clist, ccount, vi, a, nx, ny, nz, vx, vy, vz)
                            vstamp[vi] = vstamp[n]
    return ccount
