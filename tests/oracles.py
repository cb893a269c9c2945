"""Independent checks, written apart from the solver (no solver imports).

Other rooms may append functions here.
"""

import numpy as np


def point_capsule_distance(p, a, b, ra, rb):
    """Exact signed distance from point p to a round cone (capsule with radius
    ra at a and rb at b: the union of spheres along the segment): see
    point_capsule_distances."""
    return float(point_capsule_distances(np.reshape(p, (1, 3)), a, b, ra, rb)[0])


def point_capsule_distances(points, a, b, ra, rb):
    """Exact signed distances from every row of points (m, 3) to a round cone
    (radius ra at a, rb at b), by golden-section minimisation of
    |p - c(s)| - r(s) over s in [0, 1] (a convex function of s), in float64,
    run on all the points at once."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)

    def f(s):
        c = a + s[:, None] * (b - a)
        return np.linalg.norm(p - c, axis=1) - (ra + s * (rb - ra))

    g = (np.sqrt(5.0) - 1.0) / 2.0
    lo, hi = np.zeros(len(p)), np.ones(len(p))
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(80):
        left = f1 < f2
        # left: the minimum is in [lo, x2]; else in [x1, hi].
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        nx1 = np.where(left, hi - g * (hi - lo), x2)
        nx2 = np.where(left, x1, lo + g * (hi - lo))
        fn = f(np.where(left, nx1, nx2))
        f1, f2 = np.where(left, fn, f2), np.where(left, f1, fn)
        x1, x2 = nx1, nx2
    return np.minimum.reduce([f(np.zeros(len(p))), f(np.ones(len(p))), f1, f2])


def edge_strain(positions, edges, rest_positions):
    """Per-edge strain |x_i - x_j| / |X_i - X_j| - 1 (0 = rest length)."""
    x = np.asarray(positions, dtype=np.float64)
    r = np.asarray(rest_positions, dtype=np.float64)
    e = np.asarray(edges, dtype=np.int64)
    cur = np.linalg.norm(x[e[:, 0]] - x[e[:, 1]], axis=1)
    rest = np.linalg.norm(r[e[:, 0]] - r[e[:, 1]], axis=1)
    return cur / rest - 1.0


def hinge_fold_curvature(x0, x1, x2, x3):
    """2 |e| sin(theta / 2) for the hinge (edge x0-x1, wings x2 and x3), theta
    the angle between the two triangle normals: the size of the discrete
    mean-curvature normal of an isometric fold, from the normals alone."""
    x0, x1, x2, x3 = (np.asarray(v, dtype=np.float64) for v in (x0, x1, x2, x3))
    n_a = np.cross(x1 - x0, x2 - x0)
    n_b = np.cross(x3 - x0, x1 - x0)
    n_a /= np.linalg.norm(n_a)
    n_b /= np.linalg.norm(n_b)
    cos = np.clip(np.dot(n_a, n_b), -1.0, 1.0)
    theta = np.arccos(cos)
    return 2.0 * np.linalg.norm(x1 - x0) * np.sin(theta / 2.0)


def grid_sheet(nx, ny, size=1.0, plane="xz"):
    """A regular quad sheet: rest (n, 3), face_indices, face_sizes; the top
    row (highest z for 'xz', highest y for 'xy') comes first."""
    us = np.linspace(0.0, size, nx + 1)
    vs = np.linspace(size, 0.0, ny + 1)
    u, v = np.meshgrid(us, vs)
    if plane == "xz":
        rest = np.stack([u.ravel(), np.zeros(u.size), v.ravel()], axis=1)
    else:
        rest = np.stack([u.ravel(), v.ravel(), np.zeros(u.size)], axis=1)
    idx = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    quads = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], axis=-1)
    return rest, quads.reshape(-1).astype(np.int64), np.full(nx * ny, 4, dtype=np.int64)


# ---------------------------------------------------------------------------
# Exact triangle-triangle intersection (written apart from solver/selfcollision).
#
# Two triangles in general position intersect iff an edge of one crosses the
# other: the edge's end points lie strictly on opposite sides of the
# triangle's plane (orient3d signs) and the line through the edge passes
# strictly inside the triangle (the three orient3d signs of the edge against
# the triangle's edges agree). Coordinates are float32 from the solver, so
# differences are exact in float64 and the sign tests are as good as exact;
# touching (a sign of exactly 0) does not count as intersecting.

import numba as _nb


@_nb.njit(cache=True)
def _orient3d(a, b, c, d):
    adx = a[0] - d[0]
    ady = a[1] - d[1]
    adz = a[2] - d[2]
    bdx = b[0] - d[0]
    bdy = b[1] - d[1]
    bdz = b[2] - d[2]
    cdx = c[0] - d[0]
    cdy = c[1] - d[1]
    cdz = c[2] - d[2]
    return (adx * (bdy * cdz - bdz * cdy) + bdx * (cdy * adz - cdz * ady) + cdx * (ady * bdz - adz * bdy))


@_nb.njit(cache=True)
def _segment_crosses_triangle(p, q, a, b, c):
    sp = _orient3d(a, b, c, p)
    sq = _orient3d(a, b, c, q)
    if not ((sp > 0.0 and sq < 0.0) or (sp < 0.0 and sq > 0.0)):
        return False
    s1 = _orient3d(p, q, a, b)
    s2 = _orient3d(p, q, b, c)
    s3 = _orient3d(p, q, c, a)
    return (s1 > 0.0 and s2 > 0.0 and s3 > 0.0) or (s1 < 0.0 and s2 < 0.0 and s3 < 0.0)


@_nb.njit(cache=True)
def triangles_intersect(t1, t2):
    """t1, t2: (3, 3) float64 corner rows. True if they cross (non-coplanar)."""
    for k in range(3):
        if _segment_crosses_triangle(t1[k], t1[(k + 1) % 3], t2[0], t2[1], t2[2]):
            return True
        if _segment_crosses_triangle(t2[k], t2[(k + 1) % 3], t1[0], t1[1], t1[2]):
            return True
    return False


@_nb.njit(cache=True)
def _intersecting_pairs(x, tri):
    nt = tri.shape[0]
    lo = np.empty((nt, 3))
    hi = np.empty((nt, 3))
    for t in range(nt):
        for a in range(3):
            lo[t, a] = min(x[tri[t, 0], a], x[tri[t, 1], a], x[tri[t, 2], a])
            hi[t, a] = max(x[tri[t, 0], a], x[tri[t, 1], a], x[tri[t, 2], a])
    order = np.argsort(lo[:, 0])
    out = []
    t1 = np.empty((3, 3))
    t2 = np.empty((3, 3))
    for ii in range(nt):
        i = order[ii]
        for jj in range(ii + 1, nt):
            j = order[jj]
            if lo[j, 0] > hi[i, 0]:
                break
            if lo[j, 1] > hi[i, 1] or lo[i, 1] > hi[j, 1] or lo[j, 2] > hi[i, 2] or lo[i, 2] > hi[j, 2]:
                continue
            shared = False
            for a in range(3):
                for b in range(3):
                    if tri[i, a] == tri[j, b]:
                        shared = True
            if shared:
                continue
            for a in range(3):
                for c in range(3):
                    t1[a, c] = x[tri[i, a], c]
                    t2[a, c] = x[tri[j, a], c]
            if triangles_intersect(t1, t2):
                out.append((min(i, j), max(i, j)))
    res = np.empty((len(out), 2), np.int64)
    for k in range(len(out)):
        res[k, 0] = out[k][0]
        res[k, 1] = out[k][1]
    return res


def intersecting_triangle_pairs(positions, triangles):
    """(k, 2) indices of triangle pairs that share no vertex and intersect.

    positions: (n, 3) (any float; taken as float64), triangles: (t, 3) ints.
    Broad phase: sweep along x over the exact (unfattened) bounding boxes.
    """
    x = np.ascontiguousarray(np.asarray(positions, dtype=np.float64))
    tri = np.ascontiguousarray(np.asarray(triangles, dtype=np.int64))
    if len(tri) == 0:
        return np.zeros((0, 2), np.int64)
    return _intersecting_pairs(x, tri)


def point_triangle_distance(p, a, b, c):
    """Distance from points p (n, 3) to one triangle, by projecting onto the
    plane and falling back to the three edges (not the solver's algorithm)."""
    n = np.cross(b - a, c - a)
    n = n / np.linalg.norm(n)
    h = (p - a) @ n
    q = p - np.outer(h, n)
    inside = np.ones(len(p), bool)
    for u, v in ((a, b), (b, c), (c, a)):
        inside &= (np.cross(v - u, q - u) @ n) >= 0
    best = np.where(inside, np.abs(h), np.inf)
    for u, v in ((a, b), (b, c), (c, a)):
        t = np.clip(((p - u) @ (v - u)) / ((v - u) @ (v - u)), 0, 1)
        best = np.minimum(best, np.linalg.norm(p - (u + np.outer(t, v - u)), axis=1))
    return best


def segment_segment_distance(p0, p1, q0, q1):
    """Distance between segments p0p1 and q0q1 (each (n, 3)): the smaller
    of the interior critical point of |p(s) - q(t)|^2 (when it lies in the
    unit square) and the four end point to segment distances (not the
    solver's clamping algorithm)."""
    def point_segment(x, a, b):
        ab = b - a
        den = np.einsum("ij,ij->i", ab, ab)
        t = np.clip(np.einsum("ij,ij->i", x - a, ab) / np.where(den > 0, den, 1.0), 0.0, 1.0)
        return np.linalg.norm(x - (a + t[:, None] * ab), axis=1)
    best = np.minimum.reduce([point_segment(p0, q0, q1), point_segment(p1, q0, q1),
                              point_segment(q0, p0, p1), point_segment(q1, p0, p1)])
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a = np.einsum("ij,ij->i", d1, d1)
    b = np.einsum("ij,ij->i", d1, d2)
    e = np.einsum("ij,ij->i", d2, d2)
    c = np.einsum("ij,ij->i", d1, r)
    f = np.einsum("ij,ij->i", d2, r)
    den = a * e - b * b
    ok = den > 1e-12 * np.maximum(a * e, 1e-300)
    s = np.where(ok, (b * f - c * e) / np.where(ok, den, 1.0), -1.0)
    t = np.where(ok, (a * f - b * c) / np.where(ok, den, 1.0), -1.0)
    inside = ok & (s >= 0) & (s <= 1) & (t >= 0) & (t <= 1)
    interior = np.linalg.norm((p0 + s[:, None] * d1) - (q0 + t[:, None] * d2), axis=1)
    return np.where(inside, np.minimum(best, interior), best)
