"""Capsule contacts of the cloth's edges and faces, between its vertices.

The vertex projection (colliders.project_colliders_into) keeps every vertex
out of the capsules, but an edge between two vertices that rest on a
capsule's sides cuts through it (a 5 cm edge sags 7 mm into a 5 cm capsule
it is wrapped around, and a fast collider drags it far deeper), and a capsule
thinner than the triangles pokes its end cap through a face's middle
without touching a vertex or an edge. Per iteration, after the vertex
projection:

- project_edges_into: for each triangle edge near a capsule, the closest
  points of the edge and the capsule's axis; an edge point inside the round
  cone (radius interpolated along the axis, grown by the margin and the
  vertices' collider offsets) is moved to its surface by moving both end
  vertices along the normal, shared by the edge parameter and the inverse
  masses (an XPBD position correction with zero compliance);
- project_faces_into: for each triangle near a capsule's end, an end sphere
  whose centre projects into the triangle and reaches it (or whose axis has
  just poked through it) moves the triangle along its normal, shared by the
  barycentric weights and the inverse masses.

then the edges and the faces of the vertices in contact again, in rounds
until one moves little (loop.CONTACT_ROUNDS: a neighbour's push moves an
edge draped over a fast capsule's end back in, and an edge pushed off a
capsule's side swings a face of its end into the end's sphere). An edge the
constraints drag across a capsule within a substep, or a face they slide
over its end, goes back to the side it came from. Both add their
pushes to the contact records, so the vertices they move get the colliders'
friction. Only vertices the step lists near the capsules (their union box
grown by SurfaceEdges.reach) are visited, and the work stays small where
nothing can cut in: an edge between free vertices too short to sag past the
margin stops at one length test (on a capsule much larger than the
triangles, every edge but the stretched ones), and ends much larger than
the triangles skip the face pass. A face stretched around an end holds it
with every vertex farther than its rest edges from it: the face pass
measures the edges of the vertices up to STRETCHED rest lengths away.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import EPS, F0, F1
from ..jit import FLAT, KERNEL as JIT
from .capsule import capsule_distance_pre, capsule_row_off, swept_box_union

# The face pass looks for triangles stretched up to this many times their
# rest length (SurfaceEdges.reach) around a capsule's end.
STRETCHED = np.float32(8.0)


@dataclass
class SurfaceEdges:
    """The cloth surface as the contact passes read it, for n vertices.

    edge_start (n + 1,) uint32, edge_other (2e,) uint32: the vertices joined
    to vertex i by a triangle edge are edge_other[edge_start[i]:edge_start[i + 1]]
    (each edge listed from both ends). tri_start (n + 1,) uint32, tri_list
    (3t,) uint32: the triangles holding vertex i. tri_stamp (t + 1,) uint32:
    scratch that marks the triangles a face pass has visited (the last item:
    the latest pass's mark). reach [m]: the
    longest triangle edge at rest; a vertex farther than this from a capsule's
    box has no edge or face in contact with it (up to edges stretched past
    twice the rest length of the longest one)."""

    edge_start: np.ndarray
    edge_other: np.ndarray
    tri_start: np.ndarray
    tri_list: np.ndarray
    tri_stamp: np.ndarray
    reach: float

    def arrays(self):
        return (self.edge_start, self.edge_other, self.tri_start, self.tri_list, self.tri_stamp)


def _csr(src, dst, n):
    order = np.argsort(src, kind="stable")
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=start[1:])
    return np.ascontiguousarray(start, dtype=np.uint32), np.ascontiguousarray(dst[order], dtype=np.uint32)


def surface_edges(triangles, rest_positions):
    """SurfaceEdges of a triangle mesh (t, 3) over rest_positions (n, 3)."""
    n = len(rest_positions)
    t = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    a = np.concatenate([t[:, 0], t[:, 1], t[:, 2]])
    b = np.concatenate([t[:, 1], t[:, 2], t[:, 0]])
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pairs = np.unique(lo * n + hi) if len(lo) else np.zeros(0, np.int64)
    lo, hi = pairs // n, pairs % n
    edge_start, edge_other = _csr(np.concatenate([lo, hi]), np.concatenate([hi, lo]), n)
    tri_ids = np.tile(np.arange(len(t), dtype=np.int64), 3)
    tri_start, tri_list = _csr(t.T.reshape(-1), tri_ids, n)
    rest = np.asarray(rest_positions, dtype=np.float64)
    reach = float(np.linalg.norm(rest[lo] - rest[hi], axis=1).max()) if len(lo) else 0.0
    return SurfaceEdges(edge_start, edge_other, tri_start, tri_list, np.zeros(len(t) + 1, np.uint32), reach)


@njit(inline="always", **JIT)
def grown_box(u, r):
    """Box u (a tuple: min xyz, max xyz) grown by r on every side."""
    return (u[0] - r, u[1] - r, u[2] - r, u[3] + r, u[4] + r, u[5] + r)


@njit(inline="always", **JIT)
def sagging_edge_length(radius, margin):
    """The squared length below which an edge whose ends are outside a
    capsule of (grown) radius at least `radius` dips at most margin into it:
    the deepest such chord is one of the sphere of that radius, whose sag is
    R - sqrt(R^2 - L^2 / 4)."""
    return np.float32(4.0) * margin * (np.float32(2.0) * radius - margin)


@njit(inline="always", **JIT)
def face_contacts_needed(radius, reach, margin):
    """Whether an end sphere of this (grown) radius can reach more than
    margin into a triangle whose edges all keep out of it: the plane of a
    triangle cuts the sphere in a disc, which touches no edge only while it
    fits inside the triangle (radius at most its inradius, below 0.29 times
    its longest edge: below reach also for triangles whose longest edge is
    stretched 3.4 times, as cloth draped over a fast capsule's end is). A
    sphere much larger than the triangles cannot reach past the margin
    between their edges: the edge contacts hold it."""
    rho = reach
    return radius < rho or radius - np.sqrt(radius * radius - rho * rho) > margin


@njit(inline="always", **JIT)
def edge_axis_closest(px, py, pz, ex, ey, ez, c):
    """Closest points of the edge p + t e (t in 0..1) and the axis of
    capsule c = capsule_row_off(pre, j, off) (a + s u, s in 0..length):
    returns (t, the offset of the edge point from the axis point)."""
    ux, uy, uz = c[3], c[4], c[5]
    ln = c[6]
    rx, ry, rz = px - c[0], py - c[1], pz - c[2]
    aa = ex * ex + ey * ey + ez * ez
    if aa < EPS * EPS:
        return F0, rx, ry, rz
    cc = ex * rx + ey * ry + ez * rz
    if ln == F0:
        t = min(max(-cc / aa, F0), F1)
        s = F0
    else:
        # u is a unit vector: the axis' own squared length is 1.
        bb = ex * ux + ey * uy + ez * uz
        ff = ux * rx + uy * ry + uz * rz
        den = aa - bb * bb
        t = min(max((bb * ff - cc) / den, F0), F1) if den > EPS * aa else F0
        s = bb * t + ff
        if s < F0:
            s = F0
            t = min(max(-cc / aa, F0), F1)
        elif s > ln:
            s = ln
            t = min(max((bb * ln - cc) / aa, F0), F1)
    return t, rx + t * ex - s * ux, ry + t * ey - s * uy, rz + t * ez - s * uz


@njit(inline="always", **JIT)
def start_row(cap0, j, c):
    """The axis of capsule j at substep start (cap0) in the layout of
    capsule_row_off (end a, unit axis, length; the rest of c, the row at
    substep end, as it is: edge_axis_closest reads only the axis)."""
    ax, ay, az = cap0[j, 0], cap0[j, 1], cap0[j, 2]
    dx, dy, dz = cap0[j, 3] - ax, cap0[j, 4] - ay, cap0[j, 5] - az
    ln = np.sqrt(dx * dx + dy * dy + dz * dz)
    inv = F1 / ln if ln > EPS else F0
    return (ax, ay, az, dx * inv, dy * inv, dz * inv, ln if ln > EPS else F0, inv, c[8], c[9], c[10], c[11])


@njit(inline="always", **JIT)
def _travel(cap0, cap1, j):
    """How far the farther-moving end of capsule j moved this substep."""
    most = F0
    for e in range(0, 6, 3):
        dx, dy, dz = cap1[j, e] - cap0[j, e], cap1[j, e + 1] - cap0[j, e + 1], cap1[j, e + 2] - cap0[j, e + 2]
        most = max(most, dx * dx + dy * dy + dz * dz)
    return np.sqrt(most)


@njit(inline="always", **JIT)
def _moved(prev, i, px, py, pz):
    """How far vertex i moved from its substep start to p."""
    dx, dy, dz = px - prev[0, i], py - prev[1, i], pz - prev[2, i]
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(inline="always", **JIT)
def _went_through(prev, i, k, px, py, pz, qx, qy, qz, cap0, cap1, j, r, cross):
    """Whether the edge i k, from prev to p, q over the substep, came
    nearer than r to the axis of capsule j (cap0 to cap1), both moving
    linearly: at `cross` (the fraction of the substep where its offset
    from the axis changed sides, as the offsets at start and end tell) or
    halfway."""
    if r <= F0:
        return False
    for q in range(2):
        f = min(max(cross, F0), F1) if q == 0 else np.float32(0.5)
        g = F1 - f
        x0 = g * prev[0, i] + f * px
        y0 = g * prev[1, i] + f * py
        z0 = g * prev[2, i] + f * pz
        ax = g * cap0[j, 0] + f * cap1[j, 0]
        ay = g * cap0[j, 1] + f * cap1[j, 1]
        az = g * cap0[j, 2] + f * cap1[j, 2]
        dx = g * cap0[j, 3] + f * cap1[j, 3] - ax
        dy = g * cap0[j, 4] + f * cap1[j, 4] - ay
        dz = g * cap0[j, 5] + f * cap1[j, 5] - az
        ln = np.sqrt(dx * dx + dy * dy + dz * dz)
        inv = F1 / ln if ln > EPS else F0
        row = (ax, ay, az, dx * inv, dy * inv, dz * inv, ln if ln > EPS else F0, inv, r, r, F0, F0)
        _, wx, wy, wz = edge_axis_closest(x0, y0, z0, g * prev[0, k] + f * qx - x0, g * prev[1, k] + f * qy - y0,
                                          g * prev[2, k] + f * qz - z0, row)
        if wx * wx + wy * wy + wz * wz < r * r:
            return True
    return False


@njit(inline="always", **JIT)
def record_push(contact, clist, ccount, i, amount, nx, ny, nz, cvx, cvy, cvz):
    """Add a push of vertex i to its contact record (see
    project_colliders_into; every collider kind's pass records through this);
    returns the new ccount."""
    contact[0, i], contact[1, i], contact[2, i] = nx, ny, nz
    if contact[3, i] == F0:
        clist[ccount] = i
        ccount += 1
    contact[3, i] += amount
    contact[4, i], contact[5, i], contact[6, i] = cvx, cvy, cvz
    return ccount


@njit(**FLAT)
def project_edges_into(pos, prev, inv_mass, cap0, cap1, cmask, cand, count, sel, once, edge_start, edge_other,
                       box, pre, margin, contact, clist, ccount):
    """Move the triangle edges that meet a capsule to its surface (see the
    module's docstring). Visits the edges of the listed vertices cand[:count];
    with once, sel holds their flags, and an edge with both ends listed is
    solved once, from its lower end (else from each listed end: a second
    visit finds it solved, or solves it again after a neighbour moved it).
    Not those of vertices that ignore capsules (cmask < 0).
    An edge the constraints dragged across a capsule's axis during the
    substep would be pushed out of its far side: an edge point whose normal
    opposes the one of the edge at substep start (prev, against the capsule
    then, cap0) is pushed back to the side it came from instead, to the
    plane tangent to the capsule there (the swept entry plane of the vertex
    contacts). An edge between two free vertices (which the vertex
    projection left outside) short against the capsule cannot sag more than
    margin into it (sagging_edge_length) and is skipped: on a capsule much
    larger than the triangles that is every edge but the stretched ones.
    box, pre: as for project_colliders_into. Returns the new ccount."""
    kc = cap1.shape[0]
    if kc == 0:
        return ccount
    ubox = swept_box_union(box)
    # Edges of free vertices no longer than this sag within the margin of
    # every capsule: most edges stop at this test.
    short = np.float32(3e38)
    for j in range(kc):
        short = min(short, sagging_edge_length(min(pre[j, 8], pre[j, 9]), margin))
    for q in range(np.uint64(count)):
        i = cand[q]
        oi = cmask[i]
        if oi < F0:
            continue
        wi = inv_mass[i]
        # Vertex i's position, kept current over its edges (only they move it
        # here) and stored after each.
        px, py, pz = pos[0, i], pos[1, i], pos[2, i]
        for e in range(edge_start[i], edge_start[i + 1]):
            k = edge_other[e]
            if once and k < i and sel[k] != 0:
                continue
            wk = inv_mass[k]
            qx, qy, qz = pos[0, k], pos[1, k], pos[2, k]
            ex, ey, ez = qx - px, qy - py, qz - pz
            if wi != F0 and wk != F0 and ex * ex + ey * ey + ez * ez <= short:
                continue
            ok = cmask[k]
            if ok < F0 or wi + wk == F0:
                continue
            # The edge's box over the substep: one dragged across a capsule
            # may end past it.
            sx, sy, sz = min(prev[0, i], prev[0, k]), min(prev[1, i], prev[1, k]), min(prev[2, i], prev[2, k])
            lox, loy, loz = min(min(px, qx), sx), min(min(py, qy), sy), min(min(pz, qz), sz)
            sx, sy, sz = max(prev[0, i], prev[0, k]), max(prev[1, i], prev[1, k]), max(prev[2, i], prev[2, k])
            hix, hiy, hiz = max(max(px, qx), sx), max(max(py, qy), sy), max(max(pz, qz), sz)
            if (hix < ubox[0] or lox > ubox[3] or hiy < ubox[1] or loy > ubox[4]
                    or hiz < ubox[2] or loz > ubox[5]):
                continue
            off = max(oi, ok)
            free = wi != F0 and wk != F0
            for j in range(kc):
                if free and ex * ex + ey * ey + ez * ez <= sagging_edge_length(min(pre[j, 8], pre[j, 9]), margin):
                    continue
                if (hix < box[j, 0] or lox > box[j, 3] or hiy < box[j, 1] or loy > box[j, 4]
                        or hiz < box[j, 2] or loz > box[j, 5]):
                    continue
                c = capsule_row_off(pre, j, off)
                ex, ey, ez = qx - px, qy - py, qz - pz
                t, vx, vy, vz = edge_axis_closest(px, py, pz, ex, ey, ez, c)
                rmax = max(c[8], c[9])
                ox, oy, oz = prev[0, i], prev[1, i], prev[2, i]
                through = vx * vx + vy * vy + vz * vz >= rmax * rmax
                if through:
                    # Outside at substep end, on the other side of the axis
                    # than at its start, and through the bare capsule on the
                    # way (the constraints dragged the edge across it, or it
                    # swept across the edge): back to the side it came from.
                    _, wx, wy, wz = edge_axis_closest(ox, oy, oz, prev[0, k] - ox, prev[1, k] - oy,
                                                      prev[2, k] - oz, start_row(cap0, j, c))
                    h0 = wx * wx + wy * wy + wz * wz
                    h1 = wx * vx + wy * vy + wz * vz
                    if (h1 >= F0
                            or not _went_through(prev, i, k, px, py, pz, qx, qy, qz, cap0, cap1, j,
                                                 min(c[8], c[9]) - margin - off, h0 / (h0 - h1))):
                        continue
                d, nx, ny, nz, s = capsule_distance_pre(px + t * ex, py + t * ey, pz + t * ez, c)
                if not through and (c[10] != F0 or c[11] != F0):
                    # A round cone (or one end's sphere holding the other):
                    # the closest axis point is not the closest sphere's
                    # centre. One more step towards the closest pair: the
                    # edge point closest to that sphere's centre.
                    sd = s * c[6]
                    cx, cy, cz = c[0] + sd * c[3], c[1] + sd * c[4], c[2] + sd * c[5]
                    aa = ex * ex + ey * ey + ez * ez
                    if aa > EPS * EPS:
                        t2 = min(max(((cx - px) * ex + (cy - py) * ey + (cz - pz) * ez) / aa, F0), F1)
                        d2, nx2, ny2, nz2, s2 = capsule_distance_pre(px + t2 * ex, py + t2 * ey, pz + t2 * ez, c)
                        if d2 < d:
                            d, nx, ny, nz, s, t = d2, nx2, ny2, nz2, s2, t2
                if not through:
                    if d >= F0:
                        continue
                    # The side the edge was on at substep start.
                    _, wx, wy, wz = edge_axis_closest(ox, oy, oz, prev[0, k] - ox, prev[1, k] - oy,
                                                      prev[2, k] - oz, start_row(cap0, j, c))
                back = through or wx * nx + wy * ny + wz * nz < F0
                if back:
                    wl = np.sqrt(wx * wx + wy * wy + wz * wz)
                    if wl > EPS:
                        nx, ny, nz = wx / wl, wy / wl, wz / wl
                        sd = s * c[6]
                        h = ((px + t * ex - c[0] - sd * c[3]) * nx + (py + t * ey - c[1] - sd * c[4]) * ny
                             + (pz + t * ez - c[2] - sd * c[5]) * nz)
                        d = h - (c[8] + (c[9] - c[8]) * s)
                        if d >= F0:
                            continue
                    elif through:
                        continue
                gi, gk = F1 - t, t
                den = wi * gi * gi + wk * gk * gk
                if den < EPS:
                    continue
                # The edge point moves by -d along n: vertex i by wi gi / den
                # of that, k by wk gk / den. Near a pinned end the free one
                # would swing by up to 1/t of it; two depths a substep at
                # most keep the correction from flinging it.
                lim = np.float32(2.0)
                ai = min(wi * gi / den, lim) * (-d)
                ak = min(wk * gk / den, lim) * (-d)
                if back:
                    # Back to the side it came from: no vertex farther than
                    # it and the capsule moved this substep.
                    far = _travel(cap0, cap1, j) + margin
                    ai = min(ai, _moved(prev, i, px, py, pz) + far)
                    ak = min(ak, _moved(prev, k, qx, qy, qz) + far)
                px += ai * nx
                py += ai * ny
                pz += ai * nz
                qx += ak * nx
                qy += ak * ny
                qz += ak * nz
                g = F1 - s
                cvx = g * cap1[j, 8] + s * cap1[j, 11]
                cvy = g * cap1[j, 9] + s * cap1[j, 12]
                cvz = g * cap1[j, 10] + s * cap1[j, 13]
                if ai > F0:
                    ccount = record_push(contact, clist, ccount, i, ai, nx, ny, nz, cvx, cvy, cvz)
                if ak > F0:
                    ccount = record_push(contact, clist, ccount, k, ak, nx, ny, nz, cvx, cvy, cvz)
            pos[0, i], pos[1, i], pos[2, i] = px, py, pz
            pos[0, k], pos[1, k], pos[2, k] = qx, qy, qz
    return ccount


@njit(inline="always", **JIT)
def _barycentric(x0, y0, z0, v0, v1, yx, yy, yz):
    """Barycentric weights (b0, b1, b2) of point y in the triangle x0,
    x0 + v0, x0 + v1 (y in its plane); (-1, -1, -1) for a degenerate one."""
    wx, wy, wz = yx - x0, yy - y0, yz - z0
    d00 = v0[0] * v0[0] + v0[1] * v0[1] + v0[2] * v0[2]
    d01 = v0[0] * v1[0] + v0[1] * v1[1] + v0[2] * v1[2]
    d11 = v1[0] * v1[0] + v1[1] * v1[1] + v1[2] * v1[2]
    d20 = wx * v0[0] + wy * v0[1] + wz * v0[2]
    d21 = wx * v1[0] + wy * v1[1] + wz * v1[2]
    den = d00 * d11 - d01 * d01
    if den <= EPS * EPS:
        return -F1, -F1, -F1
    b1 = (d11 * d20 - d01 * d21) / den
    b2 = (d00 * d21 - d01 * d20) / den
    return F1 - b1 - b2, b1, b2


@njit(inline="always", **JIT)
def _triangle_frame(x, i0, i1, i2):
    """Corner x0 of the triangle i0 i1 i2 of rows x (3, n), its edges v0, v1
    from it and their cross product (not normalised)."""
    x0, y0, z0 = x[0, i0], x[1, i0], x[2, i0]
    v0 = (x[0, i1] - x0, x[1, i1] - y0, x[2, i1] - z0)
    v1 = (x[0, i2] - x0, x[1, i2] - y0, x[2, i2] - z0)
    nx = v0[1] * v1[2] - v0[2] * v1[1]
    ny = v0[2] * v1[0] - v0[0] * v1[2]
    nz = v0[0] * v1[1] - v0[1] * v1[0]
    return x0, y0, z0, v0, v1, nx, ny, nz


# _through_end: the axis went through the triangle, not past a tip.
NEARER = -2


@njit(inline="always", **JIT)
def _through_end(prev, i0, i1, i2, cap0, j, nx, ny, nz, da):
    """How the axis of capsule j came to pierce the triangle i0 i1 i2 (its
    unit normal n at substep end, end a da from it along n) during the
    substep, from their places at its start (prev, cap0): the end (0: a,
    1: b) that went through the face when the whole axis was on one side
    of it; NEARER when the axis crossed the plane outside the triangle then
    (the face slid or swung over a tip: its edges kept out of the capsule)
    or the triangle turned over; -1 when the axis pierced it then too."""
    x0, y0, z0, u, v, mx, my, mz = _triangle_frame(prev, i0, i1, i2)
    ax, ay, az = cap0[j, 0], cap0[j, 1], cap0[j, 2]
    bx, by, bz = cap0[j, 3], cap0[j, 4], cap0[j, 5]
    da0 = (ax - x0) * mx + (ay - y0) * my + (az - z0) * mz
    db0 = (bx - x0) * mx + (by - y0) * my + (bz - z0) * mz
    if (da0 < F0) == (db0 < F0) and da0 != F0 and db0 != F0:
        if mx * nx + my * ny + mz * nz <= F0:
            return NEARER
        return 0 if (da0 < F0) != (da < F0) else 1
    if da0 == db0:
        return -1
    f = da0 / (da0 - db0)
    b0, b1, b2 = _barycentric(x0, y0, z0, u, v, ax + f * (bx - ax), ay + f * (by - ay), az + f * (bz - az))
    if b0 >= F0 and b1 >= F0 and b2 >= F0:
        return -1
    return NEARER


@njit(**FLAT)
def project_faces_into(pos, prev, inv_mass, cap0, cap1, hit, cmask, cand, count, edge_start, edge_other, tri_start,
                       tri_list, tris, stamp, reach, pre, margin, contact, clist, ccount):
    """Keep the capsules' end spheres out of the triangles' interiors (see
    the module's docstring): for the listed vertices cand[:count] within
    reach of a capsule end's sphere, each of their triangles (once: stamp[t]
    = tag marks it visited, tag = stamp[-1], one more every call) against
    each end whose centre projects into it. An end sphere that reaches the
    triangle pushes it away to its radius; one whose axis pierces the
    triangle while the sphere still meets its plane (a tip that poked
    through), or that came to pierce it this substep (prev, cap0: a fast
    tip that went through it, however far, or a face that slid over a tip,
    within how far both moved), carries the triangle past the tip, never a
    vertex farther than it and the capsule moved. Only ends small against
    the triangles are visited (face_contacts_needed; the vertices' collider
    offsets are left out of that test). tris: (3, t) uint32. Returns the
    new ccount."""
    kc = cap1.shape[0]
    needed = False
    for j in range(kc):
        for end in range(2):
            if face_contacts_needed(pre[j, 8 + end], reach, margin):
                needed = True
    if not needed:
        return ccount
    last = stamp.shape[0] - 1
    tag = stamp[last] + np.uint32(1)
    if tag == 0:
        stamp[:] = 0
        tag = np.uint32(1)
    stamp[last] = tag
    for q in range(np.uint64(count)):
        i = cand[q]
        if cmask[i] < F0:
            continue
        px, py, pz = pos[0, i], pos[1, i], pos[2, i]
        near = False
        # The longest edge at vertex i now, measured only for a vertex
        # farther from an end than its rest edges reach: a triangle whose
        # edges are stretched around a capsule's end holds the sphere with
        # all its vertices that far from it (every vertex of a triangle is
        # within its longest edge of any point of it, and that edge is one
        # of the vertex's own or of both other vertices, which then list it).
        longest = F0
        for j in range(kc):
            ln = pre[j, 6]
            for end in range(2):
                if near or not face_contacts_needed(pre[j, 8 + end], reach, margin):
                    continue
                sd = ln * np.float32(end)
                ex = pre[j, 0] + sd * pre[j, 3]
                ey = pre[j, 1] + sd * pre[j, 4]
                ez = pre[j, 2] + sd * pre[j, 5]
                # (Grown by how far the end moved this substep: a tip that
                # went through a face is that far past it.)
                tx = cap1[j, 3 * end] - cap0[j, 3 * end]
                ty = cap1[j, 3 * end + 1] - cap0[j, 3 * end + 1]
                tz = cap1[j, 3 * end + 2] - cap0[j, 3 * end + 2]
                r = pre[j, 8 + end] + cmask[i] + np.sqrt(tx * tx + ty * ty + tz * tz)
                dx, dy, dz = abs(px - ex), abs(py - ey), abs(pz - ez)
                if dx <= r + reach and dy <= r + reach and dz <= r + reach:
                    near = True
                elif dx <= r + STRETCHED * reach and dy <= r + STRETCHED * reach and dz <= r + STRETCHED * reach:
                    if longest == F0:
                        for e in range(edge_start[i], edge_start[i + 1]):
                            k = edge_other[e]
                            qx, qy, qz = pos[0, k] - px, pos[1, k] - py, pos[2, k] - pz
                            longest = max(longest, qx * qx + qy * qy + qz * qz)
                        longest = np.sqrt(longest)
                    if dx <= r + longest and dy <= r + longest and dz <= r + longest:
                        near = True
        if not near:
            continue
        for u in range(tri_start[i], tri_start[i + 1]):
            tr = tri_list[u]
            if stamp[tr] == tag:
                continue
            stamp[tr] = tag
            i0, i1, i2 = tris[0, tr], tris[1, tr], tris[2, tr]
            w0, w1, w2 = inv_mass[i0], inv_mass[i1], inv_mass[i2]
            if w0 + w1 + w2 == F0 or cmask[i0] < F0 or cmask[i1] < F0 or cmask[i2] < F0:
                continue
            off = max(cmask[i0], max(cmask[i1], cmask[i2]))
            for j in range(kc):
                # A vertex that entered the capsule this substep holds its
                # triangle on the swept entry plane: only a tip that went
                # through the face moves it.
                held = hit[i0] == j + 1 or hit[i1] == j + 1 or hit[i2] == j + 1
                x0, y0, z0, v0, v1, nx, ny, nz = _triangle_frame(pos, i0, i1, i2)
                nl = np.sqrt(nx * nx + ny * ny + nz * nz)
                if nl < EPS:
                    continue
                nx, ny, nz = nx / nl, ny / nl, nz / nl
                c = capsule_row_off(pre, j, off)
                ln = c[6]
                ax, ay, az = c[0], c[1], c[2]
                bx, by, bz = ax + ln * c[3], ay + ln * c[4], az + ln * c[5]
                da = (ax - x0) * nx + (ay - y0) * ny + (az - z0) * nz
                db = (bx - x0) * nx + (by - y0) * ny + (bz - z0) * nz
                # mode 1 / 2: the whole cone is the sphere at a / at b.
                use_a = c[11] != np.float32(2.0)
                use_b = c[11] != F1 and ln > F0
                push, sx, sy, sz, sgn, s = F0, F0, F0, F0, F0, F0
                back = False
                if use_a and use_b and (da < F0) != (db < F0) and da != db:
                    # The axis crosses the triangle's plane: if inside the
                    # triangle, the nearer end is a tip that poked through.
                    f = da / (da - db)
                    b0, b1, b2 = _barycentric(x0, y0, z0, v0, v1, ax + f * (bx - ax), ay + f * (by - ay),
                                              az + f * (bz - az))
                    if b0 >= F0 and b1 >= F0 and b2 >= F0:
                        nearer = 0 if abs(da) < abs(db) else 1
                        tip = nearer
                        if held or abs(da if tip == 0 else db) >= (c[8] if tip == 0 else c[9]):
                            # Its sphere off the plane: a tip that went
                            # through the face this substep (the whole
                            # capsule on one side of it at substep start)
                            # is the end that changed sides, however far; a
                            # face that slid over a tip goes back over the
                            # nearer one, if it can have come from there.
                            tip = _through_end(prev, i0, i1, i2, cap0, j, nx, ny, nz, da)
                            back = True
                            if tip == NEARER:
                                tip = nearer
                                # Within how far the face and the capsule moved.
                                moved = F0
                                for vi in (i0, i1, i2):
                                    moved = max(moved, _moved(prev, vi, pos[0, vi], pos[1, vi], pos[2, vi]))
                                moved += _travel(cap0, cap1, j)
                                if abs(da if tip == 0 else db) > (c[8] if tip == 0 else c[9]) + moved:
                                    tip = -1
                        if tip >= 0:
                            dt, rt = (da, c[8]) if tip == 0 else (db, c[9])
                            push = abs(dt) + rt
                            sgn = F1 if dt > F0 else -F1
                            s = np.float32(tip)
                            sx, sy, sz = b0, b1, b2
                        use_a = use_b = False
                for end in range(2):
                    if held or push > F0 or not (use_a if end == 0 else use_b):
                        continue
                    de = da if end == 0 else db
                    re = c[8] if end == 0 else c[9]
                    if abs(de) >= re:
                        continue
                    ex, ey, ez = (ax, ay, az) if end == 0 else (bx, by, bz)
                    b0, b1, b2 = _barycentric(x0, y0, z0, v0, v1, ex - de * nx, ey - de * ny, ez - de * nz)
                    if b0 >= F0 and b1 >= F0 and b2 >= F0:
                        push = re - abs(de)
                        sgn = -F1 if de > F0 else F1
                        s = np.float32(end)
                        sx, sy, sz = b0, b1, b2
                if push <= F0:
                    continue
                den = w0 * sx * sx + w1 * sy * sy + w2 * sz * sz
                if den < EPS:
                    continue
                lim = np.float32(2.0)
                a0 = min(w0 * sx / den, lim) * push
                a1 = min(w1 * sy / den, lim) * push
                a2 = min(w2 * sz / den, lim) * push
                if back:
                    # As an edge sent back (project_edges_into).
                    far = _travel(cap0, cap1, j) + margin
                    a0 = min(a0, _moved(prev, i0, pos[0, i0], pos[1, i0], pos[2, i0]) + far)
                    a1 = min(a1, _moved(prev, i1, pos[0, i1], pos[1, i1], pos[2, i1]) + far)
                    a2 = min(a2, _moved(prev, i2, pos[0, i2], pos[1, i2], pos[2, i2]) + far)
                nx, ny, nz = sgn * nx, sgn * ny, sgn * nz
                g = F1 - s
                cvx = g * cap1[j, 8] + s * cap1[j, 11]
                cvy = g * cap1[j, 9] + s * cap1[j, 12]
                cvz = g * cap1[j, 10] + s * cap1[j, 13]
                for vi, a in ((i0, a0), (i1, a1), (i2, a2)):
                    if a > F0:
                        pos[0, vi] += a * nx
                        pos[1, vi] += a * ny
                        pos[2, vi] += a * nz
                        ccount = record_push(contact, clist, ccount, vi, a, nx, ny, nz, cvx, cvy, cvz)
    return ccount
