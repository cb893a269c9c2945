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
it entered during the substep, back through its entry plane.
Distances grow by the margin and each vertex's collider offset, as the
capsules' radii do.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import EPS, F0, F1, FHALF, TRACE_EPS
from ..jit import FLAT, KERNEL as JIT
from ..params import SolverError
from .edges import record_push

PACKED = 21
ROW = 22


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
            # The start carried with the box: local coordinates at substep
            # start, placed in the box at substep end.
            dx, dy, dz = x0 - bx0[j, 0], y0 - bx0[j, 1], z0 - bx0[j, 2]
            lx = bx0[j, 3] * dx + bx0[j, 6] * dy + bx0[j, 9] * dz
            ly = bx0[j, 4] * dx + bx0[j, 7] * dy + bx0[j, 10] * dz
            lz = bx0[j, 5] * dx + bx0[j, 8] * dy + bx0[j, 11] * dz
            sx = bx1[j, 0] + bx1[j, 3] * lx + bx1[j, 4] * ly + bx1[j, 5] * lz
            sy = bx1[j, 1] + bx1[j, 6] * lx + bx1[j, 7] * ly + bx1[j, 8] * lz
            sz = bx1[j, 2] + bx1[j, 9] * lx + bx1[j, 10] * ly + bx1[j, 11] * lz
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
                # Newton on the convex distance along the path from u = 0
                # (see capsule._newton_entry).
                for _ in range(32):
                    if d < TRACE_EPS:
                        found = True
                        break
                    slope = nx * ex + ny * ey + nz * ez
                    if slope >= F0:
                        break
                    u -= d / slope
                    if u >= F1:
                        break
                    hx, hy, hz = sx + u * ex, sy + u * ey, sz + u * ez
                    d, nx, ny, nz = box_distance(hx, hy, hz, bx1, j, grow)
            if found and u < best:
                best = u
                bhit[i] = j + 1
                bentry[0, i], bentry[1, i], bentry[2, i] = hx, hy, hz
                bentry[3, i], bentry[4, i], bentry[5, i] = nx, ny, nz
                vx, vy, vz = box_velocity(hx, hy, hz, bx1, j)
                bentry[6, i], bentry[7, i], bentry[8, i] = vx, vy, vz


@njit(**FLAT)
def project_boxes_into(pos, inv_mass, bx1, margin, cmask, pad, bhit, bentry, contact, clist, ccount, aabb):
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
    the swept hits (n,) and entries (9, n)."""
    return (np.zeros((k, ROW), np.float32), np.zeros((k, ROW), np.float32), np.zeros((k, 6), np.float32),
            np.zeros(n, np.int32), np.zeros((9, n), np.float32))


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



@njit(**FLAT)
def project_box_edges_into(pos, inv_mass, bx1, margin, cmask, edge_start, edge_other, contact, clist, ccount,
                           aabb):
    """Move the cloth's edges that cut into a box (draped over a table's
    edge with both ends outside) out of it: the deepest point of the edge
    (the distance is convex along it; a golden-section search) moves out
    along the box's normal there, shared by the two ends by their weights
    and barycentric coordinates (as colliders.edges does for capsules).
    Most edges stop at a test from the distances and normals at their ends:
    the tangent lines at both ends bound the distance along a convex
    function from below, and an edge resting on a face (normals across it)
    or leaving it is never inside; nor is an edge whose ends lie on opposite
    faces pushed, or one whose deepest point's normal faces away from its
    ends' (see below). aabb: box_bounds_into(bx1, bx1, ...),
    as project_boxes_into leaves it. Returns the new ccount."""
    k = bx1.shape[0]
    n = np.uint64(pos.shape[1])
    if k == 0:
        return ccount
    gr = np.float32(0.618034)
    for i in range(n):
        oi = cmask[i]
        if oi < F0:
            continue
        wi = inv_mass[i]
        for e in range(edge_start[i], edge_start[i + 1]):
            q = edge_other[e]
            if q < i:
                continue
            oq = cmask[q]
            wq = inv_mass[q]
            if oq < F0 or wi + wq == F0:
                continue
            grow = margin + max(oi, oq)
            for j in range(k):
                px, py, pz = pos[0, i], pos[1, i], pos[2, i]
                qx, qy, qz = pos[0, q], pos[1, q], pos[2, q]
                if (max(px, qx) < aabb[j, 0] or min(px, qx) > aabb[j, 3] or max(py, qy) < aabb[j, 1]
                        or min(py, qy) > aabb[j, 4] or max(pz, qz) < aabb[j, 2] or min(pz, qz) > aabb[j, 5]):
                    continue
                ex, ey, ez = qx - px, qy - py, qz - pz
                d0, n0x, n0y, n0z = box_distance(px, py, pz, bx1, j, grow)
                d1, n1x, n1y, n1z = box_distance(qx, qy, qz, bx1, j, grow)
                if d0 < -grow or d1 < -grow:
                    continue  # an end deep inside: the vertex projection's
                s0 = n0x * ex + n0y * ey + n0z * ez
                s1 = n1x * ex + n1y * ey + n1z * ez
                if s0 >= F0 or s1 <= F0:
                    continue
                # Ends on opposite faces (normals 150 degrees apart or more):
                # the edge runs through the box, and pushing its deepest
                # point out of the nearer face would drag the far end in.
                # Left to the vertex contacts. An edge over a thin slab's
                # edge (top to a hanging end below the slab) stays in.
                mx, my, mz = n0x + n1x, n0y + n1y, n0z + n1z
                if mx * mx + my * my + mz * mz < np.float32(0.25):
                    continue
                # Lower bound: where the tangent lines at both ends meet.
                ts = (d1 - s1 - d0) / (s0 - s1)
                if d0 + ts * s0 >= F0:
                    continue
                lo, hi = F0, F1
                a = hi - gr * (hi - lo)
                b = lo + gr * (hi - lo)
                fa, _, _, _ = box_distance(px + a * ex, py + a * ey, pz + a * ez, bx1, j, grow)
                fb, _, _, _ = box_distance(px + b * ex, py + b * ey, pz + b * ez, bx1, j, grow)
                for _ in range(18):
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
                d, nx, ny, nz = box_distance(cx, cy, cz, bx1, j, grow)
                if d >= F0 or nx * mx + ny * my + nz * mz <= F0:
                    continue
                gi, gq = F1 - t, t
                den = wi * gi * gi + wq * gq * gq
                if den < EPS:
                    continue
                lim = np.float32(2.0)
                ai = min(wi * gi / den, lim) * (-d)
                aq = min(wq * gq / den, lim) * (-d)
                pos[0, i], pos[1, i], pos[2, i] = px + ai * nx, py + ai * ny, pz + ai * nz
                pos[0, q], pos[1, q], pos[2, q] = qx + aq * nx, qy + aq * ny, qz + aq * nz
                v = box_velocity(cx, cy, cz, bx1, j)
                if ai > F0:
                    ccount = record_push(contact, clist, ccount, i, ai, nx, ny, nz, v[0], v[1], v[2])
                if aq > F0:
                    ccount = record_push(contact, clist, ccount, q, aq, nx, ny, nz, v[0], v[1], v[2])
    return ccount
