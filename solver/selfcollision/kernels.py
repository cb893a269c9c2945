"""numba kernels for self and cloth-cloth collision (predictive contacts).

Detection runs once per step (serial, so its output order is canonical);
the solve is Jacobi in two passes: every contact computes the corrections of
its own vertices from the positions as they were when the pass started, then
every vertex sums its corrections in a fixed order. Neither pass writes what
another iteration of the same pass reads, so the result is bit-identical for
any thread count.

Contact kinds (`KIND_*`), vertex slots in `contact_vertex[k, 0:4]`:
  point-point    (v, w, -, -)  normal n stored (world, from w to v at step start)
  vertex-triangle (v, a, b, c) side +-1 stored in contact_normal[k, 0]; the
                 triangle's live normal is used in the solve
  edge-edge      (a, b, c, d)  normal stored in the frame of the triangle
                 `contact_frame[k]` (the first edge's owner), so it turns with
                 the cloth when contacts are cached over many steps
"""

import numpy as np
from numba import njit, prange

from ..jit import FAST
from ..hardware import compact_flags, prefer_scalar_loads
from ..jit import NoAliasCompiler, renamed

KIND_POINT_POINT = 0
KIND_VERTEX_TRIANGLE = 1
KIND_EDGE_EDGE = 2

MODE_OFF = 0
MODE_POINT_POINT = 1
MODE_FULL = 2

# A vertex-triangle contact pushes while the vertex is over the triangle or
# beside it by at most this many thicknesses.
VT_REACH = 1.0
# An edge-edge contact pushes while its closest points are apart across its
# normal by at most this many thicknesses. At 2 (68f8d40, against the demo
# skirt's thrown hem) the 64x64 sheet crushed into a pile against a wall
# lost the edge contacts between its stacked layers and tangled: 557 ->
# 16,896 crossing pairs in its worst frame, unnoticed behind that scenario's
# expected failure. At 4 the pile is back (491) and the demo's skirts are
# as at 2 (crossings over the walk, four gravity nudges: 121-177 / 38-60
# against 91-166 / 49-56); with no limit the skirts crease more (74-634).
EE_REACH = 4.0

# Between layered regions the layer order decides a contact's side only while
# the vertex (or edge) is less than this many thicknesses on the wrong side;
# deeper, the side at step start holds. Forcing deep ones across a whole
# layer in one solve tore the demo's skirts apart (edge strain 4.9, 1,877
# crossing pairs at frame 72); at 1.0 the skirts stay whole, 0.5 and 2.0
# measured worse (the demo's skirts with a layer order, crossing pairs
# between the layers summed over every 6th frame of 72: 7,041 and 3,692
# against 1,667).
LAYER_DEPTH = 1.0

# A vertex-triangle or edge-edge contact whose vertex (edge) is more than this
# many thicknesses behind its frozen normal while the contact is not acting
# (beside the triangle, or the edges slid apart) has gone around, not
# through: it stays off (STALE) until the feature is back within that depth.
# Otherwise sliding over the triangle from far behind switched the contact on
# at full depth: on the demo's skirts at 10 substeps a hem vertex 13 cm
# behind a triangle of its own skirt was thrown 10 cm in one substep (20 m/s),
# and the skirts tangled for good (19,267 crossing pairs within the skirt
# summed over every 6th frame).
CONTACT_DEPTH = 2.0
# slot_active values: the contact's state, kept from substep to substep.
SLOT_OFF = 0
SLOT_ON = 1
SLOT_STALE = 2

_JIT = FAST
# Helpers that allocate nothing compile without numba's reference counting
# (_nrt=False): called with arrays, each call otherwise made an atomic
# increment and decrement per array argument, a quarter of the detection
# time on the demo's layered skirts (perf: `lock incq`/`lock decq`).
# _narrow_pair is a plain call for the same reason (inlined, its twenty
# array arguments were counted on every triangle pair). The small per-pair
# and per-triangle helpers (_tri_box, _tri_sphere, _spheres_apart, ...) are
# inlined as well: a call passes each array as its whole struct, and
# inlining them made detection ~10% faster on the 32x32 and 100x100 sheets.
_HELPER = dict(_JIT, _nrt=False)
_F32_TINY = np.float32(1e-30)
_F32_ONE = np.float32(1.0)
_F32_TWO = np.float32(2.0)
_F32_ZERO = np.float32(0.0)
_F32_INF = np.float32(np.inf)
# The reject tests' slack for rounding: 1% and 1 um.
_SLACK = np.float32(1.01)
_SLACK_ABS = np.float32(1e-6)


# ---------------------------------------------------------------- geometry


@njit(**_JIT)
def _closest_on_triangle(px, py, pz, ax, ay, az, bx, by, bz, cx, cy, cz):
    """Barycentrics (u, v, w) of the point of triangle abc closest to p
    (Ericson, Real-Time Collision Detection 5.1.5)."""
    abx, aby, abz = bx - ax, by - ay, bz - az
    acx, acy, acz = cx - ax, cy - ay, cz - az
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= 0.0 and d2 <= 0.0:
        return 1.0, 0.0, 0.0
    bpx, bpy, bpz = px - bx, py - by, pz - bz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= 0.0 and d4 <= d3:
        return 0.0, 1.0, 0.0
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        t = d1 / (d1 - d3)
        return 1.0 - t, t, 0.0
    cpx, cpy, cpz = px - cx, py - cy, pz - cz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= 0.0 and d5 <= d6:
        return 0.0, 0.0, 1.0
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        t = d2 / (d2 - d6)
        return 1.0 - t, 0.0, t
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        t = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return 0.0, 1.0 - t, t
    den = va + vb + vc
    if den <= 1e-30:
        return 1.0, 0.0, 0.0
    v = vb / den
    w = vc / den
    return 1.0 - v - w, v, w


@njit(inline="always", **_JIT)
def _segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """For segments ab and cd: |b-a|^2, (b-a).(d-c), (b-a).(a-c), |d-c|^2,
    (d-c).(a-c) (Ericson's a, b, c, e, f)."""
    d1x, d1y, d1z = bx - ax, by - ay, bz - az
    d2x, d2y, d2z = dx - cx, dy - cy, dz - cz
    rx, ry, rz = ax - cx, ay - cy, az - cz
    return (d1x * d1x + d1y * d1y + d1z * d1z, d1x * d2x + d1y * d2y + d1z * d2z,
            d1x * rx + d1y * ry + d1z * rz, d2x * d2x + d2y * d2y + d2z * d2z, d2x * rx + d2y * ry + d2z * rz)


@njit(inline="always", **_JIT)
def _edges_cross(ax, ay, az, bx, by, bz, cx, cy, cz):
    """Triangle abc's edges u = b - a, w = c - a and m = u x w (scalars in
    and out: for the scalar and the vectorised passes alike)."""
    ux, uy, uz = bx - ax, by - ay, bz - az
    wx, wy, wz = cx - ax, cy - ay, cz - az
    return ux, uy, uz, wx, wy, wz, uy * wz - uz * wy, uz * wx - ux * wz, ux * wy - uy * wx


@njit(**_JIT)
def _closest_segments(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """Parameters (s, t) of the closest points a + s(b-a), c + t(d-c)
    (Ericson 5.1.9), clamped to the segments."""
    a, b, c, e, f = _segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz)
    eps = 1e-20
    if a <= eps and e <= eps:
        return 0.0, 0.0
    if a <= eps:
        return 0.0, min(max(f / e, 0.0), 1.0)
    if e <= eps:
        return min(max(-c / a, 0.0), 1.0), 0.0
    den = a * e - b * b
    if den > 1e-12 * a * e:
        s = min(max((b * f - c * e) / den, 0.0), 1.0)
    else:
        s = 0.0
    t = (b * s + f) / e
    if t < 0.0:
        t = 0.0
        s = min(max(-c / a, 0.0), 1.0)
    elif t > 1.0:
        t = 1.0
        s = min(max((b - c) / a, 0.0), 1.0)
    return s, t


@njit(**_HELPER)
def _tri_frame(x, a, b, c):
    """Orthonormal frame (u, v, n) of triangle abc at positions x (3, n)."""
    ux = x[0, b] - x[0, a]
    uy = x[1, b] - x[1, a]
    uz = x[2, b] - x[2, a]
    wx = x[0, c] - x[0, a]
    wy = x[1, c] - x[1, a]
    wz = x[2, c] - x[2, a]
    nx = uy * wz - uz * wy
    ny = uz * wx - ux * wz
    nz = ux * wy - uy * wx
    ln = np.sqrt(nx * nx + ny * ny + nz * nz)
    lu = np.sqrt(ux * ux + uy * uy + uz * uz)
    if ln < 1e-30 or lu < 1e-30:
        return 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    nx /= ln
    ny /= ln
    nz /= ln
    ux /= lu
    uy /= lu
    uz /= lu
    vx = ny * uz - nz * uy
    vy = nz * ux - nx * uz
    vz = nx * uy - ny * ux
    return ux, uy, uz, vx, vy, vz, nx, ny, nz


# ---------------------------------------------------------------- broad phase helpers


@njit(cache=True, error_model="numpy", nogil=True)   # no fastmath: it may assume no NaN
def step_displacement(pos, vel, dt, gx, gy, gz, disp):
    """disp = vel * dt + g * dt^2, the displacement detection sweeps. False
    when pos or vel holds a NaN or Inf (disp is then not to be used)."""
    n = pos.shape[1]
    g = (gx * dt * dt, gy * dt * dt, gz * dt * dt)
    ok = True
    for c in range(3):
        gc = g[c]
        for i in range(n):
            d = vel[c, i] * dt + gc
            disp[c, i] = d
            ok &= (abs(d) < np.inf) & (abs(pos[c, i]) < np.inf)
    return ok


@njit(**_JIT)
def _relative(disp):
    """The displacement relative to its mean over all vertices, (3, n)."""
    n = disp.shape[1]
    mx = 0.0
    my = 0.0
    mz = 0.0
    for i in range(n):
        mx += disp[0, i]
        my += disp[1, i]
        mz += disp[2, i]
    if n > 0:
        mx /= n
        my /= n
        mz /= n
    rel = np.empty((3, n), np.float32)
    for i in range(n):
        rel[0, i] = disp[0, i] - mx
        rel[1, i] = disp[1, i] - my
        rel[2, i] = disp[2, i] - mz
    return rel


@njit(inline="always", **_JIT)
def _grow_swept(x0, x1, x2, r0, r1, r2, cons, lo0, lo1, lo2, hi0, hi1, hi2):
    """A box (lo, hi) grown by a point x and its swept end x + cons * r."""
    e0 = x0 + cons * r0
    e1 = x1 + cons * r1
    e2 = x2 + cons * r2
    return (min(lo0, x0, e0), min(lo1, x1, e1), min(lo2, x2, e2),
            max(hi0, x0, e0), max(hi1, x1, e1), max(hi2, x2, e2))


@njit(**_HELPER)
def _put_box(box, row, pad, lo0, lo1, lo2, hi0, hi1, hi2):
    """box[row] = (lo - pad, hi + pad)."""
    box[row, 0] = lo0 - pad
    box[row, 1] = lo1 - pad
    box[row, 2] = lo2 - pad
    box[row, 3] = hi0 + pad
    box[row, 4] = hi1 + pad
    box[row, 5] = hi2 + pad


@njit(inline="always", **_HELPER)
def _tri_box(pos, rel, triangles, t, pad, cons, box):
    """Fat swept box of triangle t into box[t]: its corners at step start and
    at start + cons * rel, grown by pad. float32 bounds: np.inf made the
    whole box float64, a conversion per corner coordinate (this helper, a
    call then, was 8% of the 32x32 sheet's detection); the float32 result
    is the same."""
    lo0 = lo1 = lo2 = _F32_INF
    hi0 = hi1 = hi2 = -_F32_INF
    for k in range(3):
        v = np.uint64(triangles[t, k])
        lo0, lo1, lo2, hi0, hi1, hi2 = _grow_swept(pos[0, v], pos[1, v], pos[2, v], rel[0, v], rel[1, v],
                                                   rel[2, v], cons, lo0, lo1, lo2, hi0, hi1, hi2)
    _put_box(box, t, pad, lo0, lo1, lo2, hi0, hi1, hi2)


@njit(**_JIT)
def _swept_boxes(pos, disp, triangles, tri_region, region_pad, region_cons, box):
    """Fat swept boxes of the triangles, relative to the mean displacement.

    Returns the relative displacement (3, n) as well. box: (t, 6) out.
    """
    rel = _relative(disp)
    for t in range(triangles.shape[0]):
        r = tri_region[t]
        _tri_box(pos, rel, triangles, t, region_pad[r], region_cons[r], box)
    return rel


@njit(**_JIT)
def _grid_build(box, max_cells_factor):
    """Uniform grid over the boxes: each box is listed in every cell it overlaps.

    Cell size is twice the mean box extent (grown when the grid would get too
    many cells), so an outlier box (a fast-moving triangle) does not blow up
    the cell size for everyone.
    """
    t = box.shape[0]
    lo = np.full(3, np.inf)
    hi = np.full(3, -np.inf)
    ext = 0.0
    for i in range(t):
        for a in range(3):
            lo[a] = min(lo[a], box[i, a])
            hi[a] = max(hi[a], box[i, 3 + a])
        ext += max(box[i, 3] - box[i, 0], box[i, 4] - box[i, 1], box[i, 5] - box[i, 2])
    cell = 2.0 * ext / max(t, 1)
    if not (cell > 1e-9):
        cell = 1e-9
    max_cells = max_cells_factor * t + 64
    dims = np.empty(3, np.int64)
    while True:
        total = 1
        for a in range(3):
            dims[a] = int((hi[a] - lo[a]) / cell) + 1
            total *= dims[a]
        if total <= max_cells:
            break
        cell *= 1.5
    inv = 1.0 / cell
    cmin = np.empty((t, 3), np.int32)
    cmax = np.empty((t, 3), np.int32)
    counts = np.zeros(total + 1, np.int64)
    for i in range(t):
        for a in range(3):
            c0 = int((box[i, a] - lo[a]) * inv)
            c1 = int((box[i, 3 + a] - lo[a]) * inv)
            cmin[i, a] = min(max(c0, 0), dims[a] - 1)
            cmax[i, a] = min(max(c1, 0), dims[a] - 1)
        for cz in range(cmin[i, 2], cmax[i, 2] + 1):
            for cy in range(cmin[i, 1], cmax[i, 1] + 1):
                for cx in range(cmin[i, 0], cmax[i, 0] + 1):
                    counts[(cz * dims[1] + cy) * dims[0] + cx + 1] += 1
    for c in range(total):
        counts[c + 1] += counts[c]
    fill = counts[:-1].copy()
    items = np.empty(counts[total], np.int32)
    for i in range(t):
        for cz in range(cmin[i, 2], cmax[i, 2] + 1):
            for cy in range(cmin[i, 1], cmax[i, 1] + 1):
                for cx in range(cmin[i, 0], cmax[i, 0] + 1):
                    c = (cz * dims[1] + cy) * dims[0] + cx
                    items[fill[c]] = i
                    fill[c] += 1
    return counts, items, cmin, cmax, dims


@njit(inline="always", **_HELPER)
def _tri_sphere(pos, rel, triangles, t, sph):
    """Triangle t's bounding sphere at step start (centroid, radius) and its
    motion (mean relative displacement of the corners, largest deviation of a
    corner from it) into sph[t, 0:8]. Unsigned indices (no negative-index
    fix-ups)."""
    t = np.uint64(t)
    i0 = np.uint64(triangles[t, 0])
    i1 = np.uint64(triangles[t, 1])
    i2 = np.uint64(triangles[t, 2])
    # float32 like the positions (sph is float32: the tests that read it
    # carry 1 % + 1 um of slack).
    third = np.float32(1.0 / 3.0)
    cx = (pos[0, i0] + pos[0, i1] + pos[0, i2]) * third
    cy = (pos[1, i0] + pos[1, i1] + pos[1, i2]) * third
    cz = (pos[2, i0] + pos[2, i1] + pos[2, i2]) * third
    mx = (rel[0, i0] + rel[0, i1] + rel[0, i2]) * third
    my = (rel[1, i0] + rel[1, i1] + rel[1, i2]) * third
    mz = (rel[2, i0] + rel[2, i1] + rel[2, i2]) * third
    r2 = _F32_ZERO
    m2 = _F32_ZERO
    for k in range(3):
        v = np.uint64(triangles[t, k])
        dx = pos[0, v] - cx
        dy = pos[1, v] - cy
        dz = pos[2, v] - cz
        r2 = max(r2, dx * dx + dy * dy + dz * dz)
        dx = rel[0, v] - mx
        dy = rel[1, v] - my
        dz = rel[2, v] - mz
        m2 = max(m2, dx * dx + dy * dy + dz * dz)
    sph[t, 0] = cx
    sph[t, 1] = cy
    sph[t, 2] = cz
    sph[t, 3] = np.sqrt(r2)
    sph[t, 4] = mx
    sph[t, 5] = my
    sph[t, 6] = mz
    sph[t, 7] = np.sqrt(m2)


@njit(**_JIT)
def _tri_spheres(pos, rel, triangles, sph):
    """_tri_sphere for every triangle. sph: (t, 8) out."""
    for t in range(triangles.shape[0]):
        _tri_sphere(pos, rel, triangles, t, sph)


@njit(inline="always", **_HELPER)
def _spheres_apart(sph, a, b, max_cons, max_reach):
    """(apart, lim). apart: no feature of triangle a can come within
    max_reach of one of b during the step: the gap between their bounding
    spheres exceeds the reach plus their relative motion (scaled by the
    largest conservativeness). A lower bound on every feature pair's
    distance and closing speed, so a pair with a contact is never rejected
    (the exactly-once rule relies on that). lim: the distance at step start
    beyond which the two can make no contact (for the plane tests). Both
    with 1% + 1 um slack for rounding."""
    sa = _sphere_row(sph, a)
    sb = _sphere_row(sph, b)
    d2, motion = _sphere_gap(sa, sb)
    # |d| - r_a - r_b - cons motion > slack reach, squared (one root).
    # float32 throughout (max_reach, max_cons are): float64 literals here
    # converted every operand of the test (~3% of the 100x100 detection).
    far = max_reach * _SLACK + _SLACK_ABS + sa[3] + sb[3] + max_cons * motion
    return (d2 > far * far, (max_reach + max_cons * motion) * _SLACK + _SLACK_ABS)


@njit(inline="always", **_HELPER)
def _sphere_row(sph, t):
    """Row t of the triangle spheres (_tri_sphere) as an 8-tuple."""
    return (sph[t, 0], sph[t, 1], sph[t, 2], sph[t, 3], sph[t, 4], sph[t, 5], sph[t, 6], sph[t, 7])


@njit(inline="always", **_JIT)
def _sphere_gap(sa, sb):
    """Two moving bounding spheres as 8-tuples (centre, radius, mean motion,
    largest deviation from it: _tri_sphere, _edge_sphere): the squared
    distance of the centres and the bound on their relative motion. The
    triangle and edge rejects both test |d| - r_a - r_b - cons motion >
    slack reach with them."""
    dx = sa[0] - sb[0]
    dy = sa[1] - sb[1]
    dz = sa[2] - sb[2]
    mx = sa[4] - sb[4]
    my = sa[5] - sb[5]
    mz = sa[6] - sb[6]
    return dx * dx + dy * dy + dz * dz, np.sqrt(mx * mx + my * my + mz * mz) + sa[7] + sb[7]


@njit(inline="always", **_HELPER)
def _tri_points(pos, triangles, t):
    """Corners of triangle t as 9 scalars."""
    i0 = triangles[t, 0]
    i1 = triangles[t, 1]
    i2 = triangles[t, 2]
    return (pos[0, i0], pos[1, i0], pos[2, i0], pos[0, i1], pos[1, i1], pos[2, i1],
            pos[0, i2], pos[1, i2], pos[2, i2])


@njit(inline="always", **_HELPER)
def _plane_row(pl, t):
    """Row t of the plane table as a 16-tuple."""
    return (pl[t, 0], pl[t, 1], pl[t, 2], pl[t, 3], pl[t, 4], pl[t, 5], pl[t, 6], pl[t, 7],
            pl[t, 8], pl[t, 9], pl[t, 10], pl[t, 11], pl[t, 12], pl[t, 13], pl[t, 14], pl[t, 15])


@njit(**_JIT)
def _edge_plane(ax, ay, az, bx, by, bz, nx, ny, nz):
    """The plane through edge a -> b perpendicular to a triangle with unit
    normal n, outward (e x n points out of the triangle for counter-clockwise
    corners about n): unit normal and offset, all zero for a null edge."""
    ex = bx - ax
    ey = by - ay
    ez = bz - az
    mx = ey * nz - ez * ny
    my = ez * nx - ex * nz
    mz = ex * ny - ey * nx
    lm2 = mx * mx + my * my + mz * mz
    if lm2 < _F32_TINY:
        return _F32_ZERO, _F32_ZERO, _F32_ZERO, _F32_ZERO
    inv = _F32_ONE / np.sqrt(lm2)
    mx *= inv
    my *= inv
    mz *= inv
    return mx, my, mz, mx * ax + my * ay + mz * az


@njit(inline="always", **_JIT)
def _tri_plane(c):
    """A triangle's plane and the three planes through its edges
    perpendicular to it, outward (unit normal, offset), from its corners c
    (9 scalars): a 16-tuple, all zero for a degenerate triangle (then every
    plane test passes: no reject). Scalars only: no allocation per call.
    float32 like the corners (the tests carry 1 % + 1 um of slack): in
    float64 its square roots and divisions were a fifth of detection."""
    x0, y0, z0 = c[0], c[1], c[2]
    x1, y1, z1 = c[3], c[4], c[5]
    x2, y2, z2 = c[6], c[7], c[8]
    ux, uy, uz, wx, wy, wz, nx, ny, nz = _edges_cross(x0, y0, z0, x1, y1, z1, x2, y2, z2)
    ln2 = nx * nx + ny * ny + nz * nz
    if ln2 < _F32_TINY:
        z = _F32_ZERO
        return (z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)
    inv = _F32_ONE / np.sqrt(ln2)
    nx *= inv
    ny *= inv
    nz *= inv
    m0 = _edge_plane(x0, y0, z0, x1, y1, z1, nx, ny, nz)
    m1 = _edge_plane(x1, y1, z1, x2, y2, z2, nx, ny, nz)
    m2 = _edge_plane(x2, y2, z2, x0, y0, z0, nx, ny, nz)
    return (nx, ny, nz, nx * x0 + ny * y0 + nz * z0, m0[0], m0[1], m0[2], m0[3], m1[0], m1[1], m1[2], m1[3],
            m2[0], m2[1], m2[2], m2[3])


@njit(inline="always", **_JIT)
def _separated(P, c, lim):
    """True when a plane of triangle A (P: its _tri_plane row) has all of
    triangle B (c: its corners, 9 scalars) farther than lim on its outer side
    (its own plane: on either side): then no point of B is within lim of A.
    Degenerate triangles never separate."""
    nx = P[0]
    ny = P[1]
    nz = P[2]
    d = P[3]
    h0 = nx * c[0] + ny * c[1] + nz * c[2] - d
    h1 = nx * c[3] + ny * c[4] + nz * c[5] - d
    h2 = nx * c[6] + ny * c[7] + nz * c[8] - d
    if (nx != 0.0 or ny != 0.0 or nz != 0.0) and (min(h0, h1, h2) > lim or max(h0, h1, h2) < -lim):
        return True
    for k in range(3):
        mx = P[4 + 4 * k]
        my = P[5 + 4 * k]
        mz = P[6 + 4 * k]
        if mx == 0.0 and my == 0.0 and mz == 0.0:
            continue
        d = P[7 + 4 * k]
        if (mx * c[0] + my * c[1] + mz * c[2] - d > lim
                and mx * c[3] + my * c[4] + mz * c[5] - d > lim
                and mx * c[6] + my * c[7] + mz * c[8] - d > lim):
            return True
    return False


# ---------------------------------------------------------------- narrow phase


@njit(**_HELPER)
def _share_vertex(triangles, A, B):
    for i in range(3):
        for j in range(3):
            if triangles[A, i] == triangles[B, j]:
                return True
    return False


@njit(**_HELPER)
def _emit(out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, count,
          kind, i0, i1, i2, i3, n0, n1, n2, frame, target, friction):
    if count < out_kind.shape[0]:
        out_kind[count] = kind
        out_vertex[count, 0] = i0
        out_vertex[count, 1] = i1
        out_vertex[count, 2] = i2
        out_vertex[count, 3] = i3
        out_normal[count, 0] = n0
        out_normal[count, 1] = n1
        out_normal[count, 2] = n2
        out_frame[count] = frame
        out_target[count] = target
        out_friction[count] = friction
    return count + 1


@njit(**_HELPER)
def _edge_sphere(pos, rel, edges, e):
    """Edge e's bounding sphere at step start (midpoint, half length) and its
    motion (mean relative displacement of its ends, half their difference):
    an 8-tuple. Unsigned indices (no negative-index fix-ups)."""
    a = np.uint64(edges[e, 0])
    b = np.uint64(edges[e, 1])
    hx = pos[0, b] - pos[0, a]
    hy = pos[1, b] - pos[1, a]
    hz = pos[2, b] - pos[2, a]
    gx = rel[0, b] - rel[0, a]
    gy = rel[1, b] - rel[1, a]
    gz = rel[2, b] - rel[2, a]
    return (0.5 * (pos[0, a] + pos[0, b]), 0.5 * (pos[1, a] + pos[1, b]), 0.5 * (pos[2, a] + pos[2, b]),
            0.5 * np.sqrt(hx * hx + hy * hy + hz * hz),
            0.5 * (rel[0, a] + rel[0, b]), 0.5 * (rel[1, a] + rel[1, b]), 0.5 * (rel[2, a] + rel[2, b]),
            0.5 * np.sqrt(gx * gx + gy * gy + gz * gz))


@njit(**_HELPER)
def _rest_vt(rest, v, a, b, c):
    u, vv, w = _closest_on_triangle(
        rest[v, 0], rest[v, 1], rest[v, 2], rest[a, 0], rest[a, 1], rest[a, 2],
        rest[b, 0], rest[b, 1], rest[b, 2], rest[c, 0], rest[c, 1], rest[c, 2])
    dx = rest[v, 0] - (u * rest[a, 0] + vv * rest[b, 0] + w * rest[c, 0])
    dy = rest[v, 1] - (u * rest[a, 1] + vv * rest[b, 1] + w * rest[c, 1])
    dz = rest[v, 2] - (u * rest[a, 2] + vv * rest[b, 2] + w * rest[c, 2])
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(**_HELPER)
def _rest_ee(rest, a, b, c, d):
    s, t = _closest_segments(
        rest[a, 0], rest[a, 1], rest[a, 2], rest[b, 0], rest[b, 1], rest[b, 2],
        rest[c, 0], rest[c, 1], rest[c, 2], rest[d, 0], rest[d, 1], rest[d, 2])
    dx = (rest[a, 0] + s * (rest[b, 0] - rest[a, 0])) - (rest[c, 0] + t * (rest[d, 0] - rest[c, 0]))
    dy = (rest[a, 1] + s * (rest[b, 1] - rest[a, 1])) - (rest[c, 1] + t * (rest[d, 1] - rest[c, 1]))
    dz = (rest[a, 2] + s * (rest[b, 2] - rest[a, 2])) - (rest[c, 2] + t * (rest[d, 2] - rest[c, 2]))
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(**_HELPER)
def _near_triangles(triangles, t, T, adj_start, adj):
    """Triangles within two rings: a corner of one equals or neighbours a
    corner of the other."""
    for i in range(3):
        v = triangles[t, i]
        for k in range(3):
            w = triangles[T, k]
            if v == w:
                return True
            for j in range(adj_start[v], adj_start[v + 1]):
                if adj[j] == w:
                    return True
    return False


@njit(inline="always", **_JIT)
def _box_misses(a0, a1, a2, a3, a4, a5, boxf, b6):
    """Whether box (a0..a2 min, a3..a5 max) and the box at boxf[b6:b6 + 6]
    of a flat box array are apart, without branches (for the loops that
    count overlaps into a list); branch-free, so the reference counts of
    boxf are pruned."""
    return ((a0 > boxf[b6 + 3]) | (boxf[b6] > a3) | (a1 > boxf[b6 + 4])
            | (boxf[b6 + 1] > a4) | (a2 > boxf[b6 + 5]) | (boxf[b6 + 2] > a5))


@njit(**_HELPER)
def _boxes_overlap(box, a, b):
    return not (box[a, 0] > box[b, 3] or box[b, 0] > box[a, 3] or box[a, 1] > box[b, 4]
                or box[b, 1] > box[a, 4] or box[a, 2] > box[b, 5] or box[b, 2] > box[a, 5])


@njit(**_HELPER)
def _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, adj_start, adj, apart):
    """P is the lowest triangle around v that shares no vertex with T (among
    those the broad phase pairs with T). apart: v and T lie in different
    connected components, so no triangle around v is near T and boxes alone
    decide (no ring tests)."""
    for j in range(vtri_start[v], vtri_start[v + 1]):
        t = vtri[j]
        if t >= P:
            return True
        if (apart or not _near_triangles(triangles, t, T, adj_start, adj)) and _boxes_overlap(box, t, T):
            return False
    return True


@njit(**_HELPER)
def _pair_before(t1, t2, A, B):
    lo = min(t1, t2)
    hi = max(t1, t2)
    return lo < A or (lo == A and hi < B)


@njit(**_HELPER)
def _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, adj_start, adj, apart):
    """(A, B) is the lowest pair of triangles around the two edges that
    share no vertex (apart: as in _canonical_vt)."""
    for i in range(edge_tris.shape[1]):
        t1 = edge_tris[ea, i]
        if t1 < 0:
            continue
        for j in range(edge_tris.shape[1]):
            t2 = edge_tris[eb, j]
            if t2 < 0:
                continue
            if (_pair_before(t1, t2, A, B) and (apart or not _near_triangles(triangles, t1, t2, adj_start, adj))
                    and _boxes_overlap(box, t1, t2)):
                return False
    return True


@njit(**_HELPER)
def _canonical_pp(A, B, v, w, triangles, vtri_start, vtri, box, adj_start, adj):
    for i in range(vtri_start[v], vtri_start[v + 1]):
        t1 = vtri[i]
        for j in range(vtri_start[w], vtri_start[w + 1]):
            t2 = vtri[j]
            if (_pair_before(t1, t2, A, B) and not _near_triangles(triangles, t1, t2, adj_start, adj)
                    and _boxes_overlap(box, t1, t2)):
                return False
    return True


@njit(**_HELPER)
def _narrow_pair(A, B, mode, pos, rel, rest, triangles, tri_edges, edges, edge_tris,
                 region_thick, region_fric, region_cons, region_layer, tri_region, tri_comp, margin,
                 vtri_start, vtri, box, adj_start, adj, sph,
                 out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, count):
    """Every feature pair of triangles A and B (which share no vertex), each
    emitted exactly once.

    A feature pair is found from every pair of triangles around its features
    that share no vertex; it is emitted only by the lowest such triangle pair
    (canonical ordering, checked after the distance test so it costs only
    for contacts). Features are excluded only when no such triangle pair
    exists (a vertex on the triangle, edges sharing an end): neighbours two
    rings apart still get contacts, so the cloth cannot crumple through itself
    at the scale of one element; they rarely come within the thickness, and
    pairs that were that close at rest are held at their rest distance.

    Between two connected components (tri_comp: layers, separate cloths) no
    triangle pair is near, so the canonical test is box tests alone and runs
    before the distance test: each feature pair's distance is then computed
    once, not once per triangle pair around it (two layers within reach
    everywhere: the live layered detection ~0.7x). Within a component the
    canonical test (ring tests) costs more than the distance test and runs
    only for contacts.
    """
    rA = tri_region[A]
    rB = tri_region[B]
    thick = 0.5 * (region_thick[rA] + region_thick[rB])
    fric = np.sqrt(region_fric[rA] * region_fric[rB])
    cons = max(region_cons[rA], region_cons[rB])
    reach = thick + margin * thick
    layA = region_layer[rA]
    layB = region_layer[rB]
    layered = layA >= 0 and layB >= 0 and layA != layB
    apart = tri_comp[A] != tri_comp[B]
    if mode == MODE_POINT_POINT:
        for k in range(3):
            v = triangles[A, k]
            px = pos[0, v]
            py = pos[1, v]
            pz = pos[2, v]
            for m in range(3):
                w = triangles[B, m]
                dx = px - pos[0, w]
                dy = py - pos[1, w]
                dz = pz - pos[2, w]
                d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
                if d0 > 1e-12:
                    nx, ny, nz = dx / d0, dy / d0, dz / d0
                else:
                    nx, ny, nz = 0.0, 0.0, 1.0
                close = (rel[0, v] - rel[0, w]) * nx + (rel[1, v] - rel[1, w]) * ny + (rel[2, v] - rel[2, w]) * nz
                if d0 < reach or d0 + cons * close < reach:
                    if not _canonical_pp(A, B, v, w, triangles, vtri_start, vtri, box, adj_start, adj):
                        continue
                    rx = rest[v, 0] - rest[w, 0]
                    ry = rest[v, 1] - rest[w, 1]
                    rz = rest[v, 2] - rest[w, 2]
                    target = min(thick, np.sqrt(rx * rx + ry * ry + rz * rz))
                    count = _emit(out_vertex, out_kind, out_normal, out_frame, out_target, out_friction,
                                  count, KIND_POINT_POINT, v, w, -1, -1, nx, ny, nz, -1, target, fric)
        return count
    for side in range(2):
        T = B if side == 0 else A
        P = A if side == 0 else B
        a = np.uint64(triangles[T, 0])
        b = np.uint64(triangles[T, 1])
        c = np.uint64(triangles[T, 2])
        for k in range(3):
            v = np.uint64(triangles[P, k])
            px = pos[0, v]
            py = pos[1, v]
            pz = pos[2, v]
            # Cheap reject: the vertex against T's bounding sphere and motion
            # (|s| - r - cons (|m| + dev) > slack reach, squared: one root).
            sx = px - sph[T, 0]
            sy = py - sph[T, 1]
            sz = pz - sph[T, 2]
            mx = rel[0, v] - sph[T, 4]
            my = rel[1, v] - sph[T, 5]
            mz = rel[2, v] - sph[T, 6]
            lim = reach * 1.01 + 1e-6 + sph[T, 3] + cons * (np.sqrt(mx * mx + my * my + mz * mz) + sph[T, 7])
            if sx * sx + sy * sy + sz * sz > lim * lim:
                continue
            if apart and not _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, adj_start, adj, True):
                continue
            u, vv, ww = _closest_on_triangle(px, py, pz, pos[0, a], pos[1, a], pos[2, a],
                                             pos[0, b], pos[1, b], pos[2, b], pos[0, c], pos[1, c], pos[2, c])
            qx = u * pos[0, a] + vv * pos[0, b] + ww * pos[0, c]
            qy = u * pos[1, a] + vv * pos[1, b] + ww * pos[1, c]
            qz = u * pos[2, a] + vv * pos[2, b] + ww * pos[2, c]
            dx = px - qx
            dy = py - qy
            dz = pz - qz
            d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
            if d0 > reach + cons * (abs(rel[0, v]) + abs(rel[1, v]) + abs(rel[2, v])
                                    + abs(rel[0, a]) + abs(rel[1, a]) + abs(rel[2, a])
                                    + abs(rel[0, b]) + abs(rel[1, b]) + abs(rel[2, b])
                                    + abs(rel[0, c]) + abs(rel[1, c]) + abs(rel[2, c])):
                continue
            # T's normal only where it is needed: a vertex on the triangle,
            # or a contact (most pairs that get here are neither).
            framed = d0 <= 1e-12
            tnx = tny = tnz = 0.0
            if framed:
                _, _, _, _, _, _, tnx, tny, tnz = _tri_frame(pos, a, b, c)
                nx, ny, nz = tnx, tny, tnz
            else:
                nx, ny, nz = dx / d0, dy / d0, dz / d0
            rqx = u * rel[0, a] + vv * rel[0, b] + ww * rel[0, c]
            rqy = u * rel[1, a] + vv * rel[1, b] + ww * rel[1, c]
            rqz = u * rel[2, a] + vv * rel[2, b] + ww * rel[2, c]
            close = (rel[0, v] - rqx) * nx + (rel[1, v] - rqy) * ny + (rel[2, v] - rqz) * nz
            if d0 < reach or d0 + cons * close < reach:
                if not apart and not _canonical_vt(P, T, v, triangles, vtri_start, vtri, box, adj_start, adj,
                                                   False):
                    continue
                if not framed:
                    _, _, _, _, _, _, tnx, tny, tnz = _tri_frame(pos, a, b, c)
                facing = False
                if layered:
                    # The layer order holds where the two layers face the same
                    # way; where the inner one is folded back under the outer
                    # (their normals disagree), forcing the outer vertex to its
                    # normal side would push it through the fold: the side at
                    # step start decides there, as for unlayered cloth.
                    _, _, _, _, _, _, pnx, pny, pnz = _tri_frame(pos, triangles[P, 0], triangles[P, 1],
                                                                 triangles[P, 2])
                    facing = pnx * tnx + pny * tny + pnz * tnz > 0.0
                h = dx * tnx + dy * tny + dz * tnz
                if h == 0.0:
                    # In the plane: it came from the side it is moving away from.
                    h = -((rel[0, v] - rqx) * tnx + (rel[1, v] - rqy) * tny + (rel[2, v] - rqz) * tnz)
                sgn = 1.0 if h >= 0.0 else -1.0
                if facing:
                    # Outer layer (higher order) stays on the normal side of the inner layer.
                    want = 1.0 if region_layer[tri_region[P]] > region_layer[tri_region[T]] else -1.0
                    if want * h > -LAYER_DEPTH * thick:
                        sgn = want
                target = min(thick, _rest_vt(rest, v, a, b, c))
                count = _emit(out_vertex, out_kind, out_normal, out_frame, out_target, out_friction,
                              count, KIND_VERTEX_TRIANGLE, v, a, b, c, sgn, 0.0, 0.0, T, target, fric)
    if mode != MODE_FULL:
        return count
    # edge-edge. Each edge's bounding sphere and motion once per pair (not
    # once per edge pair: nine pairs share six edges).
    eA = (_edge_sphere(pos, rel, edges, tri_edges[A, 0]), _edge_sphere(pos, rel, edges, tri_edges[A, 1]),
          _edge_sphere(pos, rel, edges, tri_edges[A, 2]))
    eB = (_edge_sphere(pos, rel, edges, tri_edges[B, 0]), _edge_sphere(pos, rel, edges, tri_edges[B, 1]),
          _edge_sphere(pos, rel, edges, tri_edges[B, 2]))
    slack = reach * 1.01 + 1e-6
    for ka in range(3):
        ea = tri_edges[A, ka]
        a = np.uint64(edges[ea, 0])
        b = np.uint64(edges[ea, 1])
        sa = eA[ka]
        for kb in range(3):
            eb = tri_edges[B, kb]
            c = np.uint64(edges[eb, 0])
            d = np.uint64(edges[eb, 1])
            sb = eB[kb]
            # Cheap reject: the edges' bounding spheres and motions
            # (|s| - r_a - r_b - cons (|m| + dev_a + dev_b) > slack reach,
            # squared: one root).
            d2, motion = _sphere_gap(sa, sb)
            lim = slack + sa[3] + sb[3] + cons * motion
            if d2 > lim * lim:
                continue
            if apart and not _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, adj_start, adj, True):
                continue
            s, t = _closest_segments(pos[0, a], pos[1, a], pos[2, a], pos[0, b], pos[1, b], pos[2, b],
                                     pos[0, c], pos[1, c], pos[2, c], pos[0, d], pos[1, d], pos[2, d])
            dx = (pos[0, a] + s * (pos[0, b] - pos[0, a])) - (pos[0, c] + t * (pos[0, d] - pos[0, c]))
            dy = (pos[1, a] + s * (pos[1, b] - pos[1, a])) - (pos[1, c] + t * (pos[1, d] - pos[1, c]))
            dz = (pos[2, a] + s * (pos[2, b] - pos[2, a])) - (pos[2, c] + t * (pos[2, d] - pos[2, c]))
            d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
            rdx = (rel[0, a] + s * (rel[0, b] - rel[0, a])) - (rel[0, c] + t * (rel[0, d] - rel[0, c]))
            rdy = (rel[1, a] + s * (rel[1, b] - rel[1, a])) - (rel[1, c] + t * (rel[1, d] - rel[1, c]))
            rdz = (rel[2, a] + s * (rel[2, b] - rel[2, a])) - (rel[2, c] + t * (rel[2, d] - rel[2, c]))
            if d0 > 1e-12:
                nx, ny, nz = dx / d0, dy / d0, dz / d0
            else:
                # Crossing edges: the direction across both.
                e1x = pos[0, b] - pos[0, a]
                e1y = pos[1, b] - pos[1, a]
                e1z = pos[2, b] - pos[2, a]
                e2x = pos[0, d] - pos[0, c]
                e2y = pos[1, d] - pos[1, c]
                e2z = pos[2, d] - pos[2, c]
                nx = e1y * e2z - e1z * e2y
                ny = e1z * e2x - e1x * e2z
                nz = e1x * e2y - e1y * e2x
                ln = np.sqrt(nx * nx + ny * ny + nz * nz)
                if ln < 1e-20:
                    continue
                nx /= ln
                ny /= ln
                nz /= ln
            close = rdx * nx + rdy * ny + rdz * nz
            if d0 < reach or d0 + cons * close < reach:
                if not apart and not _canonical_ee(A, B, ea, eb, triangles, edge_tris, box, adj_start, adj,
                                                   False):
                    continue
                ux_, uy_, uz_, vx_, vy_, vz_, fnx, fny, fnz = _tri_frame(
                    pos, triangles[A, 0], triangles[A, 1], triangles[A, 2])
                if layered:
                    # Edge of A outside B's layer: the normal points the way A's
                    # layer lies from B's (B's face normal, with the layer's
                    # sign), where the layers face the same way (see above)
                    # and the edge is less than LAYER_DEPTH thicknesses on the
                    # wrong side.
                    sgn = 1.0 if layA > layB else -1.0
                    _, _, _, _, _, _, bnx, bny, bnz = _tri_frame(
                        pos, triangles[B, 0], triangles[B, 1], triangles[B, 2])
                    side = (nx * bnx + ny * bny + nz * bnz) * sgn
                    if (fnx * bnx + fny * bny + fnz * bnz > 0.0 and side < 0.0
                            and side * d0 > -LAYER_DEPTH * thick):
                        # B's normal, not the closest points' direction
                        # reversed: edges apart mostly along the layers
                        # (side near 0) had a gap of -d0 along the reversed
                        # one, and were pulled across the whole distance (a
                        # contact predicted 17 cm away moved its edge 9 cm
                        # in one substep on the demo's skirts).
                        nx, ny, nz = sgn * bnx, sgn * bny, sgn * bnz
                # Stored in A's frame, so a cached contact turns with the cloth.
                cu = nx * ux_ + ny * uy_ + nz * uz_
                cv = nx * vx_ + ny * vy_ + nz * vz_
                cn = nx * fnx + ny * fny + nz * fnz
                target = min(thick, _rest_ee(rest, a, b, c, d))
                count = _emit(out_vertex, out_kind, out_normal, out_frame, out_target, out_friction,
                              count, KIND_EDGE_EDGE, a, b, c, d, cu, cv, cn, A, target, fric)
    return count


@njit(**_JIT)
def detect_grid(pos, disp, rest, triangles, tri_edges, edges, edge_tris, tri_region, tri_comp, vtri_start,
                vtri, adj_start, adj, ring_start, ring, mode_matrix, region_thick, region_fric, region_cons, region_layer, margin,
                out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, stats):
    """Broad phase (uniform grid) + narrow phase. Returns the number of contacts
    found (may exceed the out arrays' capacity: then call again with more room).

    stats[0] = candidate pairs whose boxes overlap, stats[1] = narrow-phase pairs.
    """
    nt = triangles.shape[0]
    n = pos.shape[1]
    region_pad = np.empty(region_thick.shape[0], np.float32)
    for r in range(region_thick.shape[0]):
        region_pad[r] = 0.5 * region_thick[r] * (1.0 + margin)
    box = np.empty((nt, 6), np.float32)
    rel = _swept_boxes(pos, disp, triangles, tri_region, region_pad, region_cons, box)
    sph = np.empty((nt, 8), np.float32)
    _tri_spheres(pos, rel, triangles, sph)
    counts, items, cmin, cmax, dims = _grid_build(box, 4)
    lo0 = np.inf
    lo1 = np.inf
    lo2 = np.inf
    for i in range(nt):
        lo0 = min(lo0, box[i, 0])
        lo1 = min(lo1, box[i, 1])
        lo2 = min(lo2, box[i, 2])
    mark = np.zeros(n, np.int64)
    stamped = -1
    count = 0
    overlaps = 0
    narrow = 0
    for A in range(nt):
        rA = tri_region[A]
        for cz in range(cmin[A, 2], cmax[A, 2] + 1):
            for cy in range(cmin[A, 1], cmax[A, 1] + 1):
                for cx in range(cmin[A, 0], cmax[A, 0] + 1):
                    c = (cz * dims[1] + cy) * dims[0] + cx
                    for j in range(counts[c], counts[c + 1]):
                        B = items[j]
                        if B <= A:
                            continue
                        if (box[A, 0] > box[B, 3] or box[B, 0] > box[A, 3] or box[A, 1] > box[B, 4]
                                or box[B, 1] > box[A, 4] or box[A, 2] > box[B, 5] or box[B, 2] > box[A, 5]):
                            continue
                        # Report the pair only in the lowest cell both overlap.
                        if (max(cmin[A, 0], cmin[B, 0]) != cx or max(cmin[A, 1], cmin[B, 1]) != cy
                                or max(cmin[A, 2], cmin[B, 2]) != cz):
                            continue
                        overlaps += 1
                        rB = tri_region[B]
                        mode = mode_matrix[max(rA, rB), min(rA, rB)]
                        if mode == MODE_OFF:
                            continue
                        if stamped != A:
                            for q_ in range(ring_start[A], ring_start[A + 1]):
                                mark[np.uint64(ring[q_])] = A + 1
                            stamped = A
                        if (mark[np.uint64(triangles[B, 0])] == A + 1 or mark[np.uint64(triangles[B, 1])] == A + 1
                                or mark[np.uint64(triangles[B, 2])] == A + 1):
                            continue
                        narrow += 1
                        count = _narrow_pair(A, B, mode, pos, rel, rest, triangles, tri_edges, edges,
                                             edge_tris, region_thick, region_fric, region_cons, region_layer,
                                             tri_region, tri_comp, margin, vtri_start, vtri, box, adj_start, adj, sph,
                                             out_vertex, out_kind, out_normal, out_frame,
                                             out_target, out_friction, count)
    stats[0] = overlaps
    stats[1] = narrow
    return count


# ---------------------------------------------------------------- BVH broad phase (for comparison)


@njit(**_JIT)
def bvh_refit(order, box, node_box, n_leaves):
    """Implicit complete binary tree over triangles in `order` (leaf l = order[l]).
    node i has children 2i+1, 2i+2; leaves start at n_internal = size - n_leaves."""
    size = node_box.shape[0]
    first_leaf = size - n_leaves
    for l in range(n_leaves):
        t = order[l]
        for a in range(6):
            node_box[first_leaf + l, a] = box[t, a]
    for i in range(first_leaf - 1, -1, -1):
        L = 2 * i + 1
        R = 2 * i + 2
        for a in range(3):
            lo = node_box[L, a]
            hi = node_box[L, 3 + a]
            if R < size:
                lo = min(lo, node_box[R, a])
                hi = max(hi, node_box[R, 3 + a])
            node_box[i, a] = lo
            node_box[i, 3 + a] = hi


@njit(**_JIT)
def detect_bvh(pos, disp, rest, triangles, tri_edges, edges, edge_tris, tri_region, tri_comp, vtri_start,
               vtri, adj_start, adj, ring_start, ring, mode_matrix, region_thick, region_fric, region_cons, region_layer, margin,
               order, node_box, out_vertex, out_kind, out_normal, out_frame, out_target, out_friction,
               stats):
    """Same contract as detect_grid, with a refitted BVH (built once at rest)."""
    nt = triangles.shape[0]
    n = pos.shape[1]
    region_pad = np.empty(region_thick.shape[0], np.float32)
    for r in range(region_thick.shape[0]):
        region_pad[r] = 0.5 * region_thick[r] * (1.0 + margin)
    box = np.empty((nt, 6), np.float32)
    rel = _swept_boxes(pos, disp, triangles, tri_region, region_pad, region_cons, box)
    sph = np.empty((nt, 8), np.float32)
    _tri_spheres(pos, rel, triangles, sph)
    bvh_refit(order, box, node_box, nt)
    size = node_box.shape[0]
    first_leaf = size - nt
    stack = np.empty(128, np.int64)
    mark = np.zeros(n, np.int64)
    stamped = -1
    count = 0
    overlaps = 0
    narrow = 0
    for A in range(nt):
        rA = tri_region[A]
        sp = 0
        stack[0] = 0
        sp = 1
        while sp > 0:
            sp -= 1
            node = stack[sp]
            if (box[A, 0] > node_box[node, 3] or node_box[node, 0] > box[A, 3]
                    or box[A, 1] > node_box[node, 4] or node_box[node, 1] > box[A, 4]
                    or box[A, 2] > node_box[node, 5] or node_box[node, 2] > box[A, 5]):
                continue
            if node >= first_leaf:
                B = order[node - first_leaf]
                if B <= A:
                    continue
                overlaps += 1
                rB = tri_region[B]
                mode = mode_matrix[max(rA, rB), min(rA, rB)]
                if mode == MODE_OFF:
                    continue
                if stamped != A:
                    for q_ in range(ring_start[A], ring_start[A + 1]):
                        mark[np.uint64(ring[q_])] = A + 1
                    stamped = A
                if (mark[np.uint64(triangles[B, 0])] == A + 1 or mark[np.uint64(triangles[B, 1])] == A + 1
                        or mark[np.uint64(triangles[B, 2])] == A + 1):
                    continue
                narrow += 1
                count = _narrow_pair(A, B, mode, pos, rel, rest, triangles, tri_edges, edges,
                                     edge_tris, region_thick, region_fric, region_cons, region_layer,
                                     tri_region, tri_comp, margin, vtri_start, vtri, box, adj_start, adj, sph,
                                             out_vertex, out_kind, out_normal, out_frame,
                                     out_target, out_friction, count)
            else:
                L = 2 * node + 1
                if L + 1 < size:
                    stack[sp] = L + 1
                    sp += 1
                stack[sp] = L
                sp += 1
    stats[0] = overlaps
    stats[1] = narrow
    return count


# ---------------------------------------------------------------- solve



def _solve_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work,
                vertex_list, vertex_slot_start, vertex_slot):
    _pass1_parallel(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                    triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work, True)
    _gather(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot)


# A listed contact's own tests decide; the filter skips only contacts its
# tests would skip too, with this much room for the two compilations'
# rounding (vectorised here, scalar there).
_FILTER_ROOM = np.float32(1.001)
_DEPTH2 = np.float32(CONTACT_DEPTH * CONTACT_DEPTH)


_ROOM2 = _FILTER_ROOM * _FILTER_ROOM
_REACH2 = np.float32(VT_REACH * VT_REACH)
# Only triangles whose corner angle at corner 1 has sin^2 above this take
# the filter's beside test: a sliver's normal (from either corner order)
# is rounding, and pass 1 decides for it.
_WELL_SHAPED = np.float32(1e-4)


@njit(inline="always", **_JIT)
def _plane_flag(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3, k, side, target, slot_active, sel):
    """_plane_flags' tests for contact k: vertex (x0, y0, z0), triangle
    corners 1..3 in the order side[k] is given for.

    Besides the plane tests, a vertex-triangle contact whose vertex lies
    beside its triangle (beyond one of its edges by more than pass 1's
    reach) is left here: pass 1 would switch it off, or to SLOT_STALE when
    it is deep behind the plane, and so does this test, where both
    answers are sure (the room again). On the cached layered bench this
    leaves 264 of the 690 contacts a substep that the plane tests list:
    a vertex lies over one or two of its strip's three triangles."""
    ux, uy, uz, wx, wy, wz, mx_, my_, mz_ = _edges_cross(x1, y1, z1, x2, y2, z2, x3, y3, z3)
    dx, dy, dz = x0 - x1, y0 - y1, z0 - z1
    # side 0 (other kinds): hh = 0, never clear nor deep: listed.
    sk = np.float32(side[k])
    hh = sk * (dx * mx_ + dy * my_ + dz * mz_)
    tg = target[k]
    m2 = mx_ * mx_ + my_ * my_ + mz_ * mz_
    lim = _FILTER_ROOM * (tg * tg) * m2
    clear = (hh > _F32_ZERO) & (hh * hh >= lim)
    behind = hh < _F32_ZERO
    deep = behind & (hh * hh > _DEPTH2 * lim)
    maybe_deep = behind & (hh * hh * _ROOM2 > _DEPTH2 * lim)
    stale_deep = (slot_active[k] == SLOT_STALE) & deep
    # Beyond an edge: (p - a) . (e x m) > 0 for the edge from a along e (e x m
    # points out of the triangle in its plane), by more than the reach when
    # its square exceeds reach^2 |e|^2 |m|^2. With m = u x w and d = p - p1
    # the three are, by the triple product expansion, s1 = (d.u)(u.w) -
    # (d.w)(u.u) (edge u), s3 = (d.w)(u.w) - (d.u)(w.w) (edge -w) and
    # s2 = -s1 - s3 - |m|^2 (edge w - u): five dot products.
    du = dx * ux + dy * uy + dz * uz
    dw = dx * wx + dy * wy + dz * wz
    uu = ux * ux + uy * uy + uz * uz
    ww = wx * wx + wy * wy + wz * wz
    uw = ux * wx + uy * wy + uz * wz
    s1 = du * uw - dw * uu
    s3 = dw * uw - du * ww
    s2 = -s1 - s3 - m2
    limb = _REACH2 * lim
    beside = (sk != _F32_ZERO) & (m2 > _WELL_SHAPED * uu * ww) & (
        ((s1 > _F32_ZERO) & (s1 * s1 > limb * uu))
        | ((s2 > _F32_ZERO) & (s2 * s2 > limb * (uu + ww - uw - uw)))
        | ((s3 > _F32_ZERO) & (s3 * s3 > limb * ww)))
    off = clear | (beside & ~maybe_deep)
    stale = beside & deep
    slot_active[k] = SLOT_OFF if off else (SLOT_STALE if stale else slot_active[k])
    sel[k] = 0 if off | stale | stale_deep else 1


@njit(pipeline_class=NoAliasCompiler, **_JIT)
def _strip_flags(x, y, z, fv, f0, f1, f2, f3, f4, side, target, slot_active, sel):
    """_plane_flags for the strip fans' contacts (the first 3 F, see
    strip_fans): a fan's vertex and five corners read once for its three
    contacts, f, F + f and 2 F + f, whose sides are given for the corner
    orders (c0, c1, c2), (c1, c2, c3), (c2, c3, c4). Half the gathers of
    three separate contacts (18 instead of 36): on the cached layered bench
    (1,242 fans of 1,250 vertices) 10.8 -> 7.8 us a substep."""
    prefer_scalar_loads()
    nf = np.uint64(fv.shape[0])
    for f in range(nf):
        v = np.uint64(fv[f])
        i0 = np.uint64(f0[f])
        i1 = np.uint64(f1[f])
        i2 = np.uint64(f2[f])
        i3 = np.uint64(f3[f])
        i4 = np.uint64(f4[f])
        xv, yv, zv = x[v], y[v], z[v]
        x0, y0, z0 = x[i0], y[i0], z[i0]
        x1, y1, z1 = x[i1], y[i1], z[i1]
        x2, y2, z2 = x[i2], y[i2], z[i2]
        x3, y3, z3 = x[i3], y[i3], z[i3]
        x4, y4, z4 = x[i4], y[i4], z[i4]
        _plane_flag(xv, yv, zv, x0, y0, z0, x1, y1, z1, x2, y2, z2, f, side, target, slot_active, sel)
        _plane_flag(xv, yv, zv, x1, y1, z1, x2, y2, z2, x3, y3, z3, nf + f, side, target, slot_active, sel)
        _plane_flag(xv, yv, zv, x2, y2, z2, x3, y3, z3, x4, y4, z4, nf + nf + f, side, target, slot_active,
                    sel)


@njit(pipeline_class=NoAliasCompiler, **_JIT)
def _plane_flags(x, y, z, r0, r1, r2, r3, side, target, slot_active, sel, start):
    """sel[k] = 0 for a vertex-triangle contact that pass 1 would leave at
    once: its vertex clearly on its side of the triangle's plane (switched
    off here), or a stale contact still deep behind it (left as it is);
    else 1. r0..r3, side: the rows of filter_rows (contiguous: only x, y, z
    are gathered). The tests of pass 1, branch-free, on 1-D rows: LLVM
    vectorises it (AVX-512 gathers). On the cached layered bench 60% of the
    contacts end at the first test and a quarter are stale; pass 1 took
    that three-way split one contact at a time, this pass in ~4 ns per
    contact. Contacts from `start` on (the strip fans' come first)."""
    prefer_scalar_loads()
    nc = np.uint64(target.shape[0])
    for k in range(np.uint64(start), nc):
        i0 = np.uint64(r0[k])
        i1 = np.uint64(r1[k])
        i2 = np.uint64(r2[k])
        i3 = np.uint64(r3[k])
        _plane_flag(x[i0], y[i0], z[i0], x[i1], y[i1], z[i1], x[i2], y[i2], z[i2], x[i3], y[i3], z[i3], k,
                    side, target, slot_active, sel)


@njit(**_JIT)
def filter_rows(contact_vertex, contact_kind, contact_normal):
    """(5, nc) int32 for _plane_flags, once per detect: the four vertex
    slots as rows, and the side (+-1) of each vertex-triangle contact (0
    for the other kinds, whose slots 2 and 3 repeat 0 and 1: valid
    indices, read but unused)."""
    nc = contact_kind.shape[0]
    out = np.empty((5, nc), np.int32)
    for k in range(nc):
        vt = contact_kind[k] == KIND_VERTEX_TRIANGLE
        out[0, k] = contact_vertex[k, 0]
        out[1, k] = contact_vertex[k, 1]
        out[2, k] = contact_vertex[k, 2] if vt else contact_vertex[k, 0]
        out[3, k] = contact_vertex[k, 3] if vt else contact_vertex[k, 1]
        out[4, k] = (1 if contact_normal[k, 0] > 0.0 else -1) if vt else 0
    return out


_VT_REACH = np.float32(VT_REACH)
_EE_REACH = np.float32(EE_REACH)
_SEG_EPS = np.float32(1e-20)
_SEG_DEN = np.float32(1e-12)
_DEPTH = np.float32(CONTACT_DEPTH)
_WSUM_MIN = np.float32(1e-20)
_TL_MIN = np.float32(1e-12)
_VT_UNCHANGED = np.uint8(3)
# Listed contacts per call of a row pass (_vt_rows, _ee_rows, _pp_rows): a
# parallel pass 1 hands each thread whole chunks.
_ROWS_CHUNK = 256


@njit(inline="always", **_JIT)
def _pick(cond, u, v, w, nu, nv, nw):
    """(nu, nv, nw) where cond holds, else (u, v, w): selects, no branch."""
    return (nu if cond else u), (nv if cond else v), (nw if cond else w)


@njit(inline="always", **_JIT)
def _closest_rows(px, py, pz, ax, ay, az, bx, by, bz, cx, cy, cz):
    """_closest_on_triangle without branches (for vectorised loops): every
    region's answer is computed and the first region that holds, in
    Ericson's order, is selected. float32 throughout."""
    abx, aby, abz = bx - ax, by - ay, bz - az
    acx, acy, acz = cx - ax, cy - ay, cz - az
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    bpx, bpy, bpz = px - bx, py - by, pz - bz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    cpx, cpy, cpz = px - cx, py - cy, pz - cz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    # Inside (or a degenerate triangle: its first corner).
    den = va + vb + vc
    inner = den > _F32_TINY
    rden = _F32_ONE / (den if inner else _F32_ONE)
    v = vb * rden if inner else _F32_ZERO
    w = vc * rden if inner else _F32_ZERO
    u = _F32_ONE - v - w
    # Edge bc.
    e43 = d4 - d3
    e56 = d5 - d6
    sbc = e43 + e56
    tbc = e43 / (sbc if sbc > _F32_ZERO else _F32_ONE)
    u, v, w = _pick((va <= _F32_ZERO) & (e43 >= _F32_ZERO) & (e56 >= _F32_ZERO), u, v, w,
                    _F32_ZERO, _F32_ONE - tbc, tbc)
    # Edge ac.
    sac = d2 - d6
    tac = d2 / (sac if sac > _F32_ZERO else _F32_ONE)
    u, v, w = _pick((vb <= _F32_ZERO) & (d2 >= _F32_ZERO) & (d6 <= _F32_ZERO), u, v, w,
                    _F32_ONE - tac, _F32_ZERO, tac)
    # Corner c.
    u, v, w = _pick((d6 >= _F32_ZERO) & (d5 <= d6), u, v, w, _F32_ZERO, _F32_ZERO, _F32_ONE)
    # Edge ab.
    sab = d1 - d3
    tab = d1 / (sab if sab > _F32_ZERO else _F32_ONE)
    u, v, w = _pick((vc <= _F32_ZERO) & (d1 >= _F32_ZERO) & (d3 <= _F32_ZERO), u, v, w,
                    _F32_ONE - tab, tab, _F32_ZERO)
    # Corner b.
    u, v, w = _pick((d3 >= _F32_ZERO) & (d4 <= d3), u, v, w, _F32_ZERO, _F32_ONE, _F32_ZERO)
    # Corner a.
    u, v, w = _pick((d1 <= _F32_ZERO) & (d2 <= _F32_ZERO), u, v, w, _F32_ONE, _F32_ZERO, _F32_ZERO)
    return u, v, w


@njit(inline="always", **_JIT)
def _lane_vertices(cv, k, x, y, z):
    """A contact lane's four vertex indices (unsigned) and their positions,
    (x0, y0, z0, ..., z3); cv: contact_vertex flattened."""
    i0 = np.uint64(cv[4 * k])
    i1 = np.uint64(cv[4 * k + 1])
    i2 = np.uint64(cv[4 * k + 2])
    i3 = np.uint64(cv[4 * k + 3])
    return (i0, i1, i2, i3), (x[i0], y[i0], z[i0], x[i1], y[i1], z[i1], x[i2], y[i2], z[i2], x[i3], y[i3], z[i3])


@njit(inline="always", **_JIT)
def _push_rows(p, xp, yp, zp, i, inv_mass, c, n, tg, mu):
    """The correction of one contact lane (_vt_rows, _ee_rows, _pp_rows):
    p = (x0, y0, z0, ..., z3) its four vertices (indices i), contact points
    sum c_j p_j, normal n, target gap tg, friction mu. Returns (whether the
    contact pushes: violated, with a movable vertex; then the corrections
    of its four vertices, x, y, z each): pass 1's arithmetic for every
    kind, branch-free. Tuples in and out: numba inlines no call with ~30
    separate arguments, and with the stores to dl inside the helper LLVM
    left the calling loops scalar."""
    x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
    i0, i1, i2, i3 = i
    c0, c1, c2, c3 = c
    nx, ny, nz = n
    gap = c0 * (x0 * nx + y0 * ny + z0 * nz) + c1 * (x1 * nx + y1 * ny + z1 * nz) \
        + c2 * (x2 * nx + y2 * ny + z2 * nz) + c3 * (x3 * nx + y3 * ny + z3 * nz)
    C = gap - tg
    w0 = inv_mass[i0]
    w1 = inv_mass[i1]
    w2 = inv_mass[i2]
    w3 = inv_mass[i3]
    wsum = w0 * c0 * c0 + w1 * c1 * c1 + w2 * c2 * c2 + w3 * c3 * c3
    rw = _F32_ONE / (wsum if wsum > _WSUM_MIN else _F32_ONE)
    lam = -C * rw
    # Friction: the contact points' relative tangential motion over this substep.
    ddx = c0 * (x0 - xp[i0]) + c1 * (x1 - xp[i1]) + c2 * (x2 - xp[i2]) + c3 * (x3 - xp[i3])
    ddy = c0 * (y0 - yp[i0]) + c1 * (y1 - yp[i1]) + c2 * (y2 - yp[i2]) + c3 * (y3 - yp[i3])
    ddz = c0 * (z0 - zp[i0]) + c1 * (z1 - zp[i1]) + c2 * (z2 - zp[i2]) + c3 * (z3 - zp[i3])
    dn = ddx * nx + ddy * ny + ddz * nz
    fx = ddx - dn * nx
    fy = ddy - dn * ny
    fz = ddz - dn * nz
    tl = np.sqrt(fx * fx + fy * fy + fz * fz)
    limit = mu * (-C)
    slide = (mu > _F32_ZERO) & (tl > _TL_MIN)
    scale = _F32_ONE if tl <= limit else limit / (tl if tl > _TL_MIN else _F32_ONE)
    scale = scale * rw if slide else _F32_ZERO
    gx = lam * nx - fx * scale
    gy = lam * ny - fy * scale
    gz = lam * nz - fz * scale
    # No vertex moves farther than the gap the contact closes: a contact
    # point near a pinned end (an edge hanging from a waist) otherwise moves
    # the free end |C| / s, on a lever (0.12 m in one substep on the demo's
    # skirts). The contact resolves over a few substeps.
    a0, a1, a2, a3 = abs(w0 * c0), abs(w1 * c1), abs(w2 * c2), abs(w3 * c3)
    lever = max(max(a0, a1), max(a2, a3))
    r = wsum / lever if lever > wsum else _F32_ONE
    gx *= r
    gy *= r
    gz *= r
    return ((C < _F32_ZERO) & (wsum > _WSUM_MIN),
            w0 * c0 * gx, w0 * c0 * gy, w0 * c0 * gz, w1 * c1 * gx, w1 * c1 * gy, w1 * c1 * gz,
            w2 * c2 * gx, w2 * c2 * gy, w2 * c2 * gz, w3 * c3 * gx, w3 * c3 * gy, w3 * c3 * gz)


@njit(inline="always", **_JIT)
def _closest_segments_rows(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """_closest_segments without branches (for vectorised loops), float32."""
    a, b, c, e, f = _segment_dots(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz)
    pa = a > _SEG_EPS
    pe = e > _SEG_EPS
    ra = _F32_ONE / (a if pa else _F32_ONE)
    re = _F32_ONE / (e if pe else _F32_ONE)
    den = a * e - b * b
    skew = den > _SEG_DEN * a * e
    s = min(max((b * f - c * e) / (den if skew else _F32_ONE), _F32_ZERO), _F32_ONE) if skew else _F32_ZERO
    t = (b * s + f) * re
    s_lo = min(max(-c * ra, _F32_ZERO), _F32_ONE)
    s_hi = min(max((b - c) * ra, _F32_ZERO), _F32_ONE)
    s = s_lo if t < _F32_ZERO else (s_hi if t > _F32_ONE else s)
    t = min(max(t, _F32_ZERO), _F32_ONE)
    # A point for a segment: clamp the other's parameter alone.
    s = s if pe else s_lo
    t = t if pe else _F32_ZERO
    t = t if pa else min(max(f * re, _F32_ZERO), _F32_ONE)
    s = s if pa else _F32_ZERO
    return s, t


@njit(pipeline_class=NoAliasCompiler, **_JIT)
def _ee_rows(ee, start, end, x, y, z, xp, yp, zp, cv, nrm, frame, tri, target, friction, inv_mass, slot_active,
             st, dl):
    """_vt_rows for the listed edge-edge contacts ee[start:end]: the stored
    normal turned with its frame triangle, the closest points of the two
    edges, the stale and reach tests, the correction. tri: the triangles
    flattened (3 corners per triangle)."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(ee[q])
        i, p = _lane_vertices(cv, k, x, y, z)
        x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
        tg = target[k]
        # The frame of the owner triangle (_tri_frame), the normal in it.
        f = np.uint64(frame[k])
        fa = np.uint64(tri[3 * f])
        fb = np.uint64(tri[3 * f + 1])
        fc = np.uint64(tri[3 * f + 2])
        ux, uy, uz, wx, wy, wz, mx_, my_, mz_ = _edges_cross(x[fa], y[fa], z[fa], x[fb], y[fb], z[fb],
                                                             x[fc], y[fc], z[fc])
        ln = np.sqrt(mx_ * mx_ + my_ * my_ + mz_ * mz_)
        lu = np.sqrt(ux * ux + uy * uy + uz * uz)
        flat = (ln < _F32_TINY) | (lu < _F32_TINY)
        rn = _F32_ONE / (_F32_ONE if flat else ln)
        ru = _F32_ONE / (_F32_ONE if flat else lu)
        tnx = _F32_ZERO if flat else mx_ * rn
        tny = _F32_ZERO if flat else my_ * rn
        tnz = _F32_ONE if flat else mz_ * rn
        ux = _F32_ONE if flat else ux * ru
        uy = _F32_ZERO if flat else uy * ru
        uz = _F32_ZERO if flat else uz * ru
        vx = tny * uz - tnz * uy
        vy = tnz * ux - tnx * uz
        vz = tnx * uy - tny * ux
        a_ = nrm[3 * k]
        b_ = nrm[3 * k + 1]
        n_ = nrm[3 * k + 2]
        nx = a_ * ux + b_ * vx + n_ * tnx
        ny = a_ * uy + b_ * vy + n_ * tny
        nz = a_ * uz + b_ * vz + n_ * tnz
        s, t = _closest_segments_rows(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3)
        c0 = _F32_ONE - s
        c2 = t - _F32_ONE
        ex = c0 * x0 + s * x1 + c2 * x2 - t * x3
        ey = c0 * y0 + s * y1 + c2 * y2 - t * y3
        ez = c0 * z0 + s * z1 + c2 * z2 - t * z3
        eh = ex * nx + ey * ny + ez * nz
        # Like a vertex beside its triangle: closest points apart by more
        # than the reach across the frozen normal make a stale contact (the
        # edges slid apart sideways since detection), however negative the
        # gap along that normal looks.
        deep = eh < -_DEPTH * tg
        keep_stale = (slot_active[k] == SLOT_STALE) & deep
        tol = _EE_REACH * tg
        beside = ex * ex + ey * ey + ez * ez - eh * eh > tol * tol
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            p, xp, yp, zp, i, inv_mass, (c0, s, c2, -t), (nx, ny, nz), tg, friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        on = ~keep_stale & ~beside & ok
        state = SLOT_ON if on else (SLOT_STALE if beside & deep else SLOT_OFF)
        st[q] = _VT_UNCHANGED if keep_stale else np.uint8(state)


@njit(pipeline_class=NoAliasCompiler, **_JIT)
def _vt_rows(vt, start, end, x, y, z, xp, yp, zp, cv, nrm, target, friction, inv_mass, slot_active, st, dl):
    """Pass 1 for the listed vertex-triangle contacts vt[start:end], one
    lane each, branch-free (LLVM vectorises it; one contact at a time, the
    branches of the closest-point regions and of the early outs
    mispredicted: ~50 ns a contact on the cached layered bench). Writes the
    lane's new slot state st[q] (SLOT_OFF, SLOT_ON, SLOT_STALE, or
    _VT_UNCHANGED for a stale contact still deep behind its plane) and its
    vertices' corrections dl[3 j + axis, q]. x, y, z and xp, yp, zp: the
    rows of pos and prev_pos; cv, nrm: contact_vertex and contact_normal
    flattened."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(vt[q])
        i, p = _lane_vertices(cv, k, x, y, z)
        x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3 = p
        s = nrm[3 * k]
        tg = target[k]
        # The height over the triangle's plane (times |m|): clear of it, or deep behind it.
        e1x, e1y, e1z, e2x, e2y, e2z, mx_, my_, mz_ = _edges_cross(x1, y1, z1, x2, y2, z2, x3, y3, z3)
        hh = s * ((x0 - x1) * mx_ + (y0 - y1) * my_ + (z0 - z1) * mz_)
        m2 = mx_ * mx_ + my_ * my_ + mz_ * mz_
        clear = (hh > _F32_ZERO) & (hh * hh >= tg * tg * m2)
        deep = (hh < _F32_ZERO) & (hh * hh > (_DEPTH * tg) * (_DEPTH * tg) * m2)
        keep_stale = (slot_active[k] == SLOT_STALE) & deep
        # Only while the vertex is over the triangle (within the reach beside
        # it): beside it (in the plane, as in cloth squeezed flat) the
        # triangle's normal is the wrong way to push; the neighbouring
        # triangle's contact or the edge-edge contacts hold it there.
        u, v, w = _closest_rows(x0, y0, z0, x1, y1, z1, x2, y2, z2, x3, y3, z3)
        dx = x0 - (u * x1 + v * x2 + w * x3)
        dy = y0 - (u * y1 + v * y2 + w * y3)
        dz = z0 - (u * z1 + v * z2 + w * z3)
        ln = np.sqrt(m2)
        lu2 = e1x * e1x + e1y * e1y + e1z * e1z
        flat = (ln < _F32_TINY) | (lu2 < _F32_TINY * _F32_TINY)
        rl = _F32_ONE / (_F32_ONE if flat else ln)
        tnx = _F32_ZERO if flat else mx_ * rl
        tny = _F32_ZERO if flat else my_ * rl
        tnz = _F32_ONE if flat else mz_ * rl
        h = dx * tnx + dy * tny + dz * tnz
        tx = dx - h * tnx
        ty = dy - h * tny
        tz = dz - h * tnz
        tol = _VT_REACH * tg
        beside = tx * tx + ty * ty + tz * tz > tol * tol
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            p, xp, yp, zp, i, inv_mass, (_F32_ONE, -u, -v, -w), (s * tnx, s * tny, s * tnz), tg, friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        on = ~clear & ~keep_stale & ~beside & ok
        state = SLOT_ON if on else (SLOT_STALE if beside & deep else SLOT_OFF)
        st[q] = _VT_UNCHANGED if keep_stale else np.uint8(state)


@njit(pipeline_class=NoAliasCompiler, **_JIT)
def _pp_rows(pp, start, end, x, y, z, xp, yp, zp, cv, nrm, target, friction, inv_mass, st, dl):
    """_vt_rows for the listed point-point contacts pp[start:end]: the
    stored normal, no reach test (the rows' last two vertices are the
    first two again, with weight 0)."""
    prefer_scalar_loads()
    for q in range(np.uint64(start), np.uint64(end)):
        k = np.uint64(pp[q])
        i0 = np.uint64(cv[4 * k])
        i1 = np.uint64(cv[4 * k + 1])
        x0, y0, z0 = x[i0], y[i0], z[i0]
        x1, y1, z1 = x[i1], y[i1], z[i1]
        ok, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11 = _push_rows(
            (x0, y0, z0, x1, y1, z1, x0, y0, z0, x1, y1, z1), xp, yp, zp, (i0, i1, i0, i1), inv_mass,
            (_F32_ONE, -_F32_ONE, _F32_ZERO, _F32_ZERO), (nrm[3 * k], nrm[3 * k + 1], nrm[3 * k + 2]),
            target[k], friction[k])
        dl[0, q], dl[1, q], dl[2, q], dl[3, q], dl[4, q], dl[5, q] = d0, d1, d2, d3, d4, d5
        dl[6, q], dl[7, q], dl[8, q], dl[9, q], dl[10, q], dl[11, q] = d6, d7, d8, d9, d10, d11
        st[q] = SLOT_ON if ok else SLOT_OFF


@njit(cache=True)
def solve_work(nc):
    """The solve's scratch for nc contacts (SelfCollision makes it with
    every new set of contacts; pass 1 allocates nothing): sel (the filter's
    flags, zero-padded to whole words), todo (the listed contacts), rows
    (them by kind), place (where each listed contact is in rows), st and dl
    (the rows' new slot states and corrections, (12, nc)). todo is as long
    as sel (compact_flags writes past the listed contacts)."""
    room = (nc + 7) // 8 * 8
    return (np.zeros(room, np.uint8), np.empty(room, np.uint32), np.empty(nc, np.uint32),
            np.empty(nc, np.uint32), np.empty(nc, np.uint8), np.empty((12, nc), np.float32))


def _pass1_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active, frows, fans, work,
                keep_slots):
    # Pass 1: every contact computes its own vertices' corrections from `pos`
    # as it is now (nobody writes pos during this pass). slot_active[k] also
    # carries the contact's state from the last substep (SLOT_STALE).
    # Only the listed contacts (_plane_flags) can change their slot or
    # correction; pass 2 reads the active ones among them.
    # Returns (todo, count, vt_only): the listed contacts, and whether all
    # of them are vertex-triangle (then row q of st and dl is item q's and
    # place is not written). work: solve_work(nc).
    # keep_slots: also write the listed contacts' new slot states and copy
    # the active ones' corrections into slot_delta (the parallel gather
    # reads them there; the serial scatter writes the states itself and
    # reads the rows, dl, through place).
    sel, todo, rows, place, st, dl = work
    nf = fans.shape[1]
    if nf > 0:
        _strip_flags(pos[0], pos[1], pos[2], fans[0], fans[1], fans[2], fans[3], fans[4], fans[5], frows[4],
                     contact_target, slot_active, sel)
    _plane_flags(pos[0], pos[1], pos[2], frows[0], frows[1], frows[2], frows[3], frows[4], contact_target,
                 slot_active, sel, 3 * nf)
    nt = compact_flags(sel, todo)
    # The listed contacts by kind, each kind through its vectorised pass:
    # rows[:nv] vertex-triangle (_vt_rows), rows[nv:nv + ne] edge-edge
    # (_ee_rows), the rest point-point (_pp_rows).
    nv = 0
    ne = 0
    for q in range(nt):
        kind = contact_kind[todo[q]]
        nv += 1 if kind == KIND_VERTEX_TRIANGLE else 0
        ne += 1 if kind == KIND_EDGE_EDGE else 0
    npp = nt - nv - ne
    vt_only = nv == nt
    if vt_only:
        # Vertex-triangle only (cached layers): the list is the rows already
        # (place is not written: the scatter reads row q for item q).
        rows = todo
    else:
        at_v = 0
        at_e = nv
        at_p = nv + ne
        for q in range(nt):
            k = todo[q]
            kind = contact_kind[k]
            is_vt = kind == KIND_VERTEX_TRIANGLE
            is_ee = kind == KIND_EDGE_EDGE
            r = at_v if is_vt else (at_e if is_ee else at_p)
            rows[r] = k
            place[q] = r
            at_v += 1 if is_vt else 0
            at_e += 1 if is_ee else 0
            at_p += 0 if is_vt or is_ee else 1
    cvf = contact_vertex.reshape(contact_vertex.size)
    nrf = contact_normal.reshape(contact_normal.size)
    for c in prange((nv + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _vt_rows(rows, c * _ROWS_CHUNK, min(nv, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_target, contact_friction,
                 inv_mass, slot_active, st, dl)
    for c in prange((ne + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _ee_rows(rows, nv + c * _ROWS_CHUNK, nv + min(ne, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_frame, triangles.reshape(triangles.size),
                 contact_target, contact_friction, inv_mass, slot_active, st, dl)
    for c in prange((npp + _ROWS_CHUNK - 1) // _ROWS_CHUNK):
        _pp_rows(rows, nv + ne + c * _ROWS_CHUNK, nv + ne + min(npp, (c + 1) * _ROWS_CHUNK), pos[0], pos[1], pos[2],
                 prev_pos[0], prev_pos[1], prev_pos[2], cvf, nrf, contact_target, contact_friction, inv_mass,
                 st, dl)
    if keep_slots:
        # The parallel solve: the listed contacts' new slot states, and the
        # active ones' corrections where _gather reads them (the serial
        # _scatter writes the states as it goes and reads dl itself).
        for q in prange(nt):
            k = rows[q]
            state = st[q]
            if state != _VT_UNCHANGED:
                slot_active[k] = state
            if state == SLOT_ON:
                for j in range(4):
                    slot_delta[k, j, 0] = dl[3 * j, q]
                    slot_delta[k, j, 1] = dl[3 * j + 1, q]
                    slot_delta[k, j, 2] = dl[3 * j + 2, q]
    return todo, nt, vt_only


_pass1_serial = njit(**_HELPER)(_pass1_impl)
_pass1_parallel = njit(parallel=True, **_JIT)(renamed(_pass1_impl, "_pass1_parallel_impl"))


def _gather_impl(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot):
    # Pass 2: every vertex averages its active contacts' corrections, in the
    # fixed order of its slot list.
    for q in prange(vertex_list.shape[0]):
        i = vertex_list[q]
        sx = _F32_ZERO
        sy = _F32_ZERO
        sz = _F32_ZERO
        nact = _F32_ZERO
        for j in range(vertex_slot_start[q], vertex_slot_start[q + 1]):
            code = vertex_slot[j]
            k = code >> 2
            if slot_active[k] != SLOT_ON:
                continue
            sl = code & 3
            sx += slot_delta[k, sl, 0]
            sy += slot_delta[k, sl, 1]
            sz += slot_delta[k, sl, 2]
            nact += _F32_ONE
        if nact > _F32_ZERO:
            inv = _F32_ONE / nact
            pos[0, i] += sx * inv
            pos[1, i] += sy * inv
            pos[2, i] += sz * inv


@njit(**_HELPER)
def _scatter(pos, dl, st, place, cvf, contact_kind, acc, touched, todo, nt, slot_active, vt_only):
    """Pass 2, serial: the same sums as _gather (each vertex adds its active
    contacts' float32 corrections in contact order, in float32), but reading
    only the contacts pass 1 listed (todo[:nt], in order; no other can be
    active), instead of every vertex's slot list, and their corrections
    where pass 1 left them (row place[q] of st and dl, see solve_work; row
    q when vt_only, every listed contact vertex-triangle), not
    copied into slot_delta. The vertices they touch
    are listed as they are first met (touched, (n + 1,) scratch), and only those
    are moved: on the cached layered bench ~310 of the 1,250 vertices with
    contacts, which the loop over all of them had visited every substep.
    touched needs n + 1 items: each slot's vertex is written before the
    branch-free count decides whether it stays. cvf: contact_vertex
    flattened; acc: (4 n,) float32, each vertex's x, y, z sums and count
    (zero between calls). Indices unsigned: no negative-index fix-ups on
    the read-modify-writes. Sums in float32 (they were float64): the
    sums half the size, no conversions. With the unsigned indices the
    cached layered bench's contact solve took 29.7 us a substep instead of
    31.0 (its recorded substeps). The corrections are float32, and a vertex
    sums a few of them; _gather sums the same way. It also writes the
    listed contacts' new slot states (st, see _pass1_impl's keep_slots):
    one pass over them fewer."""
    nv = np.uint64(0)
    for q in range(np.uint64(nt)):
        r = q if vt_only else np.uint64(place[q])
        k = np.uint64(todo[q])
        s = st[r]
        if s != _VT_UNCHANGED:
            slot_active[k] = s
        if s != SLOT_ON:
            continue
        m = np.uint64(4) if vt_only or contact_kind[k] != KIND_POINT_POINT else np.uint64(2)
        for sl in range(m):
            i = np.uint64(cvf[np.uint64(4) * k + sl])
            b = np.uint64(4) * i
            touched[nv] = i
            nv += np.uint64(1) if acc[b + np.uint64(3)] == _F32_ZERO else np.uint64(0)
            j = np.uint64(3) * sl
            acc[b] += dl[j, r]
            acc[b + np.uint64(1)] += dl[j + np.uint64(1), r]
            acc[b + np.uint64(2)] += dl[j + np.uint64(2), r]
            acc[b + np.uint64(3)] += _F32_ONE
    for q in range(nv):
        i = np.uint64(touched[q])
        b = np.uint64(4) * i
        inv = _F32_ONE / acc[b + np.uint64(3)]
        pos[0, i] += acc[b] * inv
        pos[1, i] += acc[b + np.uint64(1)] * inv
        pos[2, i] += acc[b + np.uint64(2)] * inv
        acc[b] = _F32_ZERO
        acc[b + np.uint64(1)] = _F32_ZERO
        acc[b + np.uint64(2)] = _F32_ZERO
        acc[b + np.uint64(3)] = _F32_ZERO


_gather = njit(parallel=True, **_JIT)(_gather_impl)
# The passes it calls are the parallel ones; the wrapper itself has no loop
# to split (parallel=True on it only raised NumbaPerformanceWarning).
solve_parallel = njit(**_JIT)(_solve_impl)


def _solve_serial_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                       triangles, contact_target, contact_friction, slot_delta, slot_active, frows,
                       fans, work, touched, acc):
    todo, nt, vt_only = _pass1_serial(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal,
                                      contact_frame, triangles, contact_target, contact_friction, slot_delta,
                                      slot_active, frows, fans, work, False)
    _, _, _, place, st, dl = work
    _scatter(pos, dl, st, place, contact_vertex.reshape(contact_vertex.size), contact_kind, acc, touched, todo, nt,
             slot_active, vt_only)


solve_serial = njit(**_HELPER)(_solve_serial_impl)


@njit(**_JIT)
def build_vertex_slots(contact_vertex, contact_kind, n):
    """CSR from vertex to the (contact, slot) codes touching it, in contact order."""
    nc = contact_kind.shape[0]
    deg = np.zeros(n + 1, np.int64)
    for k in range(nc):
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for s in range(m):
            deg[contact_vertex[k, s]] += 1
    nv = 0
    for i in range(n):
        if deg[i] > 0:
            nv += 1
    vertex_list = np.empty(nv, np.int32)
    start = np.empty(nv + 1, np.int64)
    local = np.full(n, -1, np.int64)
    q = 0
    acc = 0
    for i in range(n):
        if deg[i] > 0:
            vertex_list[q] = i
            start[q] = acc
            local[i] = q
            acc += deg[i]
            q += 1
    start[nv] = acc
    fill = start[:-1].copy()
    slots = np.empty(acc, np.int64)
    for k in range(nc):
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for s in range(m):
            qq = local[contact_vertex[k, s]]
            slots[fill[qq]] = k * 4 + s
            fill[qq] += 1
    return vertex_list, start, slots


# ---------------------------------------------------------------- topology (once per model)


@njit(cache=True)
def _root(parent, a):
    """Union-find root of a, halving the path on the way."""
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


@njit(cache=True)
def triangle_components(triangles, n):
    """Each triangle's connected component (over shared vertices): the
    label of a union-find root, int32. Triangles of different components
    are never within two rings of each other."""
    parent = np.arange(n)
    for t in range(triangles.shape[0]):
        for k in (1, 2):
            a = _root(parent, triangles[t, 0])
            b = _root(parent, triangles[t, k])
            parent[max(a, b)] = min(a, b)
    comp = np.empty(triangles.shape[0], np.int32)
    for t in range(triangles.shape[0]):
        comp[t] = _root(parent, triangles[t, 0])
    return comp


@njit(cache=True)
def triangle_rings(triangles, adj_start, adj, n):
    """Per triangle, every vertex equal or adjacent to one of its corners (CSR).

    A triangle whose corners are all outside this set shares no vertex and no
    edge-neighbour vertex with it: the two are more than two rings apart."""
    nt = triangles.shape[0]
    mark = np.full(n, -1, np.int64)
    start = np.zeros(nt + 1, np.int64)
    for t in range(nt):
        cnt = 0
        for k in range(3):
            v = triangles[t, k]
            if mark[v] != t:
                mark[v] = t
                cnt += 1
            for j in range(adj_start[v], adj_start[v + 1]):
                w = adj[j]
                if mark[w] != t:
                    mark[w] = t
                    cnt += 1
        start[t + 1] = start[t] + cnt
    mark[:] = -1
    ring = np.empty(start[nt], np.int32)
    for t in range(nt):
        q = start[t]
        for k in range(3):
            v = triangles[t, k]
            if mark[v] != t:
                mark[v] = t
                ring[q] = v
                q += 1
            for j in range(adj_start[v], adj_start[v + 1]):
                w = adj[j]
                if mark[w] != t:
                    mark[w] = t
                    ring[q] = w
                    q += 1
    return start, ring


# ---------------------------------------------------------------- patch broad phase (default)
#
# Triangles are grouped once into small connected patches (breadth-first over
# shared edges). Every step each patch gets a fat swept box, a normal cone and
# its smallest triangle altitude. Patch pairs are found by sweep and prune on
# x. A patch with itself, or two patches sharing a vertex, whose union is flat
# (all normals within a cone) is a height field over the cone's axis, and its
# triangles more than two rings apart are at least two triangle altitudes
# apart (FLAT_ALTITUDES), so when that distance (tilted) exceeds the contact
# distance plus the patches' relative motion the whole pair is skipped. That
# removes the neighbour pairs that otherwise dominate the cost on smooth
# cloth; folds, separate layers and separate objects are never skipped.
#
# Why two altitudes: give every vertex its edge distance d from triangle A's
# corners and interpolate d linearly over each triangle. d is 0 on A and at
# least 2 on a triangle B beyond A's two rings (none of B's corners is a
# corner of A or a neighbour of one). Corners of one triangle differ in d by
# at most 1, and a linear function that varies by at most 1 over a triangle
# has a gradient of at most 1 / (its smallest altitude), the triangle's
# smallest width. So any path from A to B inside the (projected) union has
# length at least 2 * the smallest altitude. Measured on the 100x100 hanging
# sheet: the overlapping triangle pairs per step fell from 113,000 with one
# altitude to 24,000, the same contacts found (the broad phases' agreement
# test checks this on a folded sheet).
FLAT_ALTITUDES = 2.0


@njit(cache=True)
def build_patches(triangles, tri_edges, n_edges, n, seed_order, cell, max_size, min_size):
    """Patches: connected triangles of one cell of a grid over the rest
    shape (cell: per triangle), grown breadth-first from seeds in
    seed_order, at most max_size triangles each; a patch under min_size
    (a sliver a cell boundary cut off) joins the smallest patch it shares an
    edge with. Returns pstart, ptris (CSR of triangles per patch) and
    nstart, nbr (CSR of the patches sharing a vertex with each, sorted,
    itself excluded)."""
    nt = triangles.shape[0]
    # edge -> triangles CSR
    deg = np.zeros(n_edges + 1, np.int64)
    for t in range(nt):
        for k in range(3):
            deg[tri_edges[t, k] + 1] += 1
    for e in range(n_edges):
        deg[e + 1] += deg[e]
    fill = deg[:-1].copy()
    etri = np.empty(deg[n_edges], np.int64)
    for t in range(nt):
        for k in range(3):
            e = tri_edges[t, k]
            etri[fill[e]] = t
            fill[e] += 1
    patch_of = np.full(nt, -1, np.int64)
    ptris = np.empty(nt, np.int32)
    pstart = np.zeros(nt + 1, np.int64)
    queue = np.empty(nt, np.int64)
    np_ = 0
    q = 0
    for s in range(nt):
        seed = seed_order[s]
        if patch_of[seed] >= 0:
            continue
        head = 0
        tail = 0
        queue[tail] = seed
        tail += 1
        patch_of[seed] = np_
        size = 0
        cs = cell[seed]
        while head < tail and size < max_size:
            t = queue[head]
            head += 1
            ptris[q] = t
            q += 1
            size += 1
            for k in range(3):
                e = tri_edges[t, k]
                for j in range(deg[e], deg[e + 1]):
                    u = etri[j]
                    if patch_of[u] < 0 and cell[u] == cs and tail - head + size < max_size:
                        patch_of[u] = np_
                        queue[tail] = u
                        tail += 1
        # Queued but not taken (cannot happen with the bound above, kept safe).
        for j in range(head, tail):
            patch_of[queue[j]] = -1
        np_ += 1
        pstart[np_] = q
    # Slivers join a neighbour across an edge (one pass, smallest first).
    size_of = np.diff(pstart[:np_ + 1])
    label = np.arange(np_)
    for p in np.argsort(size_of, kind="mergesort"):
        if size_of[p] >= min_size:
            break
        best = -1
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            for k in range(3):
                e = tri_edges[t, k]
                for i in range(deg[e], deg[e + 1]):
                    o = patch_of[etri[i]]
                    while label[o] != o:   # where that patch went, if it joined another
                        o = label[o]
                    if o != p and (best < 0 or size_of[o] < size_of[best]):
                        best = o
        if best >= 0:
            label[p] = best
            size_of[best] += size_of[p]
            size_of[p] = 0
    # Follow chains (a sliver joined one that joined another), renumber
    # densely, regroup the triangles keeping their breadth-first order.
    for p in range(np_):
        r = p
        while label[r] != r:
            r = label[r]
        label[p] = r
    dense = np.full(np_, -1, np.int64)
    m = 0
    for p in range(np_):
        if label[p] == p:
            dense[p] = m
            m += 1
    cnt = np.zeros(m + 1, np.int64)
    for t in range(nt):
        patch_of[t] = dense[label[patch_of[t]]]
        cnt[patch_of[t] + 1] += 1
    for p in range(m):
        cnt[p + 1] += cnt[p]
    old = ptris[:q].copy()
    fill2 = cnt[:m].copy()
    for j in range(q):
        t = old[j]
        ptris[fill2[patch_of[t]]] = t
        fill2[patch_of[t]] += 1
    np_ = m
    pstart[:m + 1] = cnt
    # patch neighbours: patches sharing a vertex (CSR, sorted, self excluded)
    vdeg = np.zeros(n + 1, np.int64)
    for t in range(nt):
        for k in range(3):
            vdeg[triangles[t, k] + 1] += 1
    for v in range(n):
        vdeg[v + 1] += vdeg[v]
    vfill = vdeg[:-1].copy()
    vtri = np.empty(vdeg[n], np.int64)
    for t in range(nt):
        for k in range(3):
            v = triangles[t, k]
            vtri[vfill[v]] = t
            vfill[v] += 1
    mark = np.full(np_, -1, np.int64)
    nstart = np.zeros(np_ + 1, np.int64)
    tmp = np.empty(0, np.int64)
    lists = []
    for p in range(np_):
        found = []
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            for k in range(3):
                v = triangles[t, k]
                for i in range(vdeg[v], vdeg[v + 1]):
                    o = patch_of[vtri[i]]
                    if o != p and mark[o] != p:
                        mark[o] = p
                        found.append(o)
        arr = np.array(found, dtype=np.int64) if len(found) else tmp
        arr = np.sort(arr)
        lists.append(arr)
        nstart[p + 1] = nstart[p] + arr.shape[0]
    nbr = np.empty(nstart[np_], np.int32)
    for p in range(np_):
        nbr[nstart[p]:nstart[p + 1]] = lists[p]
    return pstart[:np_ + 1].copy(), ptris, nstart, nbr


@njit(cache=True)
def patch_far_pairs(pstart, ptris, triangles, ring_start, ring, n):
    """For every triangle slot ja of a patch (an index into ptris), the later
    slots jb of the same patch whose triangle is more than two rings from
    its own (CSR over slots: fpair[fstart[ja]:fstart[ja + 1]]). Only these
    pairs can make contacts inside a patch, and they are a small part of its
    pairs: detection walks them instead of box-testing every pair of the
    patch and rejecting the neighbours one by one."""
    npatch = pstart.shape[0] - 1
    ns = ptris.shape[0]
    mark = np.full(n, -1, np.int64)
    fstart = np.zeros(ns + 1, np.int64)
    for rep in range(2):
        if rep == 1:
            for j in range(ns):
                fstart[j + 1] += fstart[j]
            fpair = np.empty(fstart[ns], np.int32)   # slots (< 2**31): half the memory
        for p in range(npatch):
            for ja in range(pstart[p], pstart[p + 1]):
                a = ptris[ja]
                for q_ in range(ring_start[a], ring_start[a + 1]):
                    mark[ring[q_]] = a
                m = fstart[ja] if rep == 1 else 0
                for jb in range(ja + 1, pstart[p + 1]):
                    b = ptris[jb]
                    if mark[triangles[b, 0]] != a and mark[triangles[b, 1]] != a and mark[triangles[b, 2]] != a:
                        if rep == 1:
                            fpair[m] = jb
                        m += 1
                if rep == 0:
                    fstart[ja + 1] = m
    return fstart, fpair


@njit(cache=True)
def patch_vertices(pstart, ptris, triangles, n):
    """Per patch its distinct vertices (CSR: pverts[pvstart[p]:pvstart[p + 1]])
    and per triangle its patch."""
    npatch = pstart.shape[0] - 1
    nt = triangles.shape[0]
    patch_of = np.empty(nt, np.int32)
    mark = np.full(n, -1, np.int64)
    pvstart = np.zeros(npatch + 1, np.int64)
    pverts = np.empty(3 * ptris.shape[0], np.int32)
    q = 0
    for p in range(npatch):
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            patch_of[t] = p
            for k in range(3):
                v = triangles[t, k]
                if mark[v] != p:
                    mark[v] = p
                    pverts[q] = v
                    q += 1
        pvstart[p + 1] = q
    return pvstart, pverts[:q].copy(), patch_of


@njit(inline="always", **_JIT)
def _patches_adjacent(p, q, nstart, nbr):
    for j in range(nstart[p], nstart[p + 1]):
        if nbr[j] == q:
            return True
    return False


@njit(**_JIT)
def _patch_boxes(p, pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box, ready):
    """The swept boxes of patch p's triangles (on first use in a step)."""
    for j in range(np.uint64(pstart[p]), np.uint64(pstart[p + 1])):
        t = np.uint64(ptris[j])
        r = tri_region[t]
        _tri_box(pos, rel, triangles, t, region_pad[r], region_cons[r], box)
    ready[p] = 1


@njit(cache=True)
def patch_work(n, nt, npatch):
    """Scratch for detect_patches, allocated once per cloth (fresh large
    arrays every step cost page faults)."""
    return (np.empty((nt, 6), np.float32), np.empty((nt, 8), np.float32), np.empty((nt, 16), np.float32),
            np.empty((7, nt), np.float32), np.empty((npatch, 6), np.float32), np.empty((npatch, 4), np.float32),
            np.empty(npatch, np.float32), np.empty((npatch, 4), np.float32), np.empty(npatch, np.float32),
            np.zeros(npatch + 2 * nt, np.uint8), np.empty(npatch, np.int64), np.empty(npatch + 1, np.int64),
            np.empty(nt, np.int64), np.zeros(n, np.int64))


@njit(pipeline_class=NoAliasCompiler, **_HELPER)
def _patch_triangles(j0, j1, ptris, trif, px, py, pz, rx, ry, rz, tri_region, region_pad, region_cons,
                     tnx, tny, tnz, ta2, tlip, tpad, tcons):
    """detect_patches' pass over one patch's triangles ptris[j0:j1], into
    rows indexed by j: unit normal (tnx, tny, tnz), squared altitude over
    longest edge (ta2), squared Lipschitz bound of rel (tlip), its region's
    pad and conservativeness; returns the sum of the normals. Branch-free,
    float32, no reduction but sums, so LLVM vectorises it (gathers); the
    caller takes the minima and maxima in a short scalar loop (numba's min
    and max, or a select, kept such a loop scalar). With a branch and two
    divisions per triangle this pass had been a quarter of the 32x32
    sheet's detection. A degenerate triangle (n2 <= tiny) keeps its
    unnormalised normal, altitude 0 and an infinite Lipschitz bound. Only
    the conservative rejects read these (1% slack)."""
    prefer_scalar_loads()
    ax = _F32_ZERO
    ay = _F32_ZERO
    az = _F32_ZERO
    # Unsigned indices: numba adds a negative-index fix-up to every signed one.
    for j in range(j0, j1):
        t = np.uint64(ptris[j])
        r = np.uint64(tri_region[t])
        tpad[j] = region_pad[r]
        tcons[j] = region_cons[r]
        t3 = np.uint64(3) * t
        i0 = np.uint64(trif[t3])
        i1 = np.uint64(trif[t3 + np.uint64(1)])
        i2 = np.uint64(trif[t3 + np.uint64(2)])
        ux, uy, uz, wx, wy, wz, nx, ny, nz = _edges_cross(px[i0], py[i0], pz[i0], px[i1], py[i1], pz[i1],
                                                          px[i2], py[i2], pz[i2])
        gx = wx - ux
        gy = wy - uy
        gz = wz - uz
        n2 = nx * nx + ny * ny + nz * nz
        e1 = ux * ux + uy * uy + uz * uz
        e2 = wx * wx + wy * wy + wz * wz
        e3 = gx * gx + gy * gy + gz * gz
        emax = e1 if e1 > e2 else e2
        emax = emax if emax > e3 else e3
        r0x, r0y, r0z = rx[i0], ry[i0], rz[i0]
        d1x = rx[i1] - r0x
        d1y = ry[i1] - r0y
        d1z = rz[i1] - r0z
        d2x = rx[i2] - r0x
        d2y = ry[i2] - r0y
        d2z = rz[i2] - r0z
        ok = n2 > _F32_TINY
        # 1 / sqrt, not rsqrt's x86 intrinsic: that one is scalar.
        inv = _F32_ONE / np.sqrt(n2 if ok else _F32_ONE)
        rn = inv * inv
        nx = nx * inv if ok else nx
        ny = ny * inv if ok else ny
        nz = nz * inv if ok else nz
        ta2[j] = n2 / emax if ok else _F32_ZERO
        # Squared Lipschitz bound of rel over the triangle: the Frobenius
        # norm of its gradient J (J u = d1, J w = d2), which bounds the
        # operator norm: |J|_F^2 = trace(D G^-1 D^T) with D = [d1 d2] and G
        # the Gram matrix of u, w (det G = n2), so
        # (|w|^2 |d1|^2 - 2 (u.w)(d1.d2) + |u|^2 |d2|^2) / n2, plus
        # 1e-5 of its terms' magnitude for float32 rounding (a positive
        # form: the cancellation is bounded by that). The former bound,
        # 2 (|d1|^2 + |d2|^2) * longest edge^2 / n2 (|J| <= (|d1| + |d2|) /
        # smallest altitude), is up to 4x this one on the sheets' right
        # triangles: with it the flat test failed on ~200 neighbouring patch
        # pairs a step of the 100x100 sheet, and their triangle pairs were
        # ~80% of those tested (detection now 0.58-0.6x, the same contacts).
        dd1 = d1x * d1x + d1y * d1y + d1z * d1z
        dd2 = d2x * d2x + d2y * d2y + d2z * d2z
        d12 = d1x * d2x + d1y * d2y + d1z * d2z
        uw = ux * wx + uy * wy + uz * wz
        quad = e2 * dd1 + e1 * dd2
        cross = _F32_TWO * uw * d12
        lip = (quad - cross + np.float32(1e-5) * (quad + np.abs(cross))) * rn
        tlip[j] = lip if ok else _F32_INF
        tnx[j] = nx
        tny[j] = ny
        tnz[j] = nz
        ax += nx
        ay += ny
        az += nz
    return ax, ay, az


@njit(**_JIT)
def detect_patches(pos, disp, rest, triangles, tri_edges, edges, edge_tris, tri_region, tri_comp, vtri_start,
                   vtri, adj_start, adj, ring_start, ring, mode_matrix, region_thick, region_fric, region_cons, region_layer, margin,
                   pstart, ptris, nstart, nbr, fstart, fpair, pvstart, pverts, patch_of, flat_cos, work,
                   out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, stats):
    """Same contract as detect_grid, with the patch broad phase. fstart,
    fpair: patch_far_pairs; pvstart, pverts, patch_of: patch_vertices;
    work: patch_work(), scratch reused from step to step.

    Every patch gets its box, cone, altitude and motion from its own
    vertices and triangles; triangle boxes and spheres are computed only for
    the patches and triangles a surviving pair reaches (on smooth cloth most
    patches meet only flat neighbours and need neither)."""
    nt = triangles.shape[0]
    n = pos.shape[1]
    npatch = pstart.shape[0] - 1
    nreg = region_thick.shape[0]
    max_reach = _F32_ZERO
    max_cons = _F32_ZERO
    region_pad = np.empty(nreg, np.float32)
    for r in range(nreg):
        max_reach = max(max_reach, np.float32(region_thick[r] * (_F32_ONE + margin)))
        max_cons = max(max_cons, region_cons[r])
        region_pad[r] = 0.5 * region_thick[r] * (1.0 + margin)
    rel = _relative(disp)
    # pcone: axis, cos of half angle; pmot: centre of rel, max deviation
    box, sph, pl, trows, pbox, pcone, palt, pmot, plip, ready, seg_q, seg_start, seg_tri, mark = work
    # The triangle boxes flat, for the two box-test loops: box[b, k] of a
    # (nt, 6) array multiplies b by the row length read from the array
    # (an imul from the stack each test); boxf[6 * b + k] is an lea.
    boxf = box.reshape(box.size)
    trif = triangles.reshape(triangles.size)   # likewise for the two-ring test
    # Rows taken once (a view made in a loop costs reference counts).
    px, py, pz = pos[0], pos[1], pos[2]
    rx, ry, rz = rel[0], rel[1], rel[2]
    # Per-triangle rows of _patch_triangles.
    tnx, tny, tnz, ta2, tlip, tpad, tcons = trows[0], trows[1], trows[2], trows[3], trows[4], trows[5], trows[6]
    ready[:] = 0
    mark[:] = 0
    box_ready = ready[:npatch]
    sph_ready = ready[npatch:npatch + nt]
    pl_ready = ready[npatch + nt:]
    for p in range(npatch):
        # float32 throughout, like the positions: float64 literals made
        # every product here promote (the pass was 20% slower).
        j0 = np.uint64(pstart[p])
        j1 = np.uint64(pstart[p + 1])
        ax, ay, az = _patch_triangles(j0, j1, ptris, trif, px, py, pz, rx, ry, rz, tri_region, region_pad,
                                      region_cons, tnx, tny, tnz, ta2, tlip, tpad, tcons)
        a2min = _F32_INF
        l2max = _F32_ZERO
        pad = _F32_ZERO
        cons = _F32_ZERO
        for j in range(j0, j1):
            a2min = min(a2min, ta2[j])
            l2max = max(l2max, tlip[j])
            pad = max(pad, tpad[j])
            cons = max(cons, tcons[j])
        la = np.sqrt(ax * ax + ay * ay + az * az)
        cmin = -1.0
        if la > 1e-30:
            ax /= la
            ay /= la
            az /= la
            cmin = 1.0
            for j in range(np.uint64(pstart[p]), np.uint64(pstart[p + 1])):
                cmin = min(cmin, ax * tnx[j] + ay * tny[j] + az * tnz[j])
        # Box, centre and spread of the motion from the patch's own vertices
        # (a superset of its triangles' boxes: the largest pad and
        # conservativeness of its regions).
        lo0 = lo1 = lo2 = _F32_INF
        hi0 = hi1 = hi2 = -_F32_INF
        rmx = _F32_ZERO
        rmy = _F32_ZERO
        rmz = _F32_ZERO
        for j in range(np.uint64(pvstart[p]), np.uint64(pvstart[p + 1])):
            v = np.uint64(pverts[j])
            x0 = pos[0, v]
            x1 = pos[1, v]
            x2 = pos[2, v]
            r0 = rel[0, v]
            r1 = rel[1, v]
            r2 = rel[2, v]
            lo0, lo1, lo2, hi0, hi1, hi2 = _grow_swept(x0, x1, x2, r0, r1, r2, cons, lo0, lo1, lo2, hi0, hi1, hi2)
            rmx += r0
            rmy += r1
            rmz += r2
        inv_cnt = _F32_ONE / np.float32(max(pvstart[p + 1] - pvstart[p], 1))
        rmx *= inv_cnt
        rmy *= inv_cnt
        rmz *= inv_cnt
        dev = _F32_ZERO
        for j in range(np.uint64(pvstart[p]), np.uint64(pvstart[p + 1])):
            v = np.uint64(pverts[j])
            dx = rel[0, v] - rmx
            dy = rel[1, v] - rmy
            dz = rel[2, v] - rmz
            dev = max(dev, dx * dx + dy * dy + dz * dz)
        _put_box(pbox, p, pad, lo0, lo1, lo2, hi0, hi1, hi2)
        pcone[p, 0] = ax
        pcone[p, 1] = ay
        pcone[p, 2] = az
        pcone[p, 3] = cmin
        palt[p] = np.sqrt(a2min)
        plip[p] = np.sqrt(l2max)
        pmot[p, 0] = rmx
        pmot[p, 1] = rmy
        pmot[p, 2] = rmz
        pmot[p, 3] = np.sqrt(dev)
    order = np.argsort(pbox[:, 0])
    hits = np.empty_like(ptris)
    qlist = np.empty_like(order)
    # Per patch p: the patches q it must be tested against (segments of
    # seg_tri: q's triangles inside p's box), then each triangle of p stamps
    # its two rings once and meets every listed triangle.
    count = 0
    overlaps = 0
    narrow = 0
    for ii in range(npatch):
        p = order[ii]
        nseg = 0
        fill = 0
        seg_start[0] = 0
        own = False
        # p itself, then the patches whose boxes meet p's (sorted by their
        # low x: the sweep ends at the first one past p's high x), listed
        # without a branch on the y and z tests (they mispredicted).
        qlist[0] = p
        nq = 1
        for jj in range(np.uint64(ii + 1), np.uint64(npatch)):
            q = np.uint64(order[jj])
            if pbox[q, 0] > pbox[p, 3]:
                break
            qlist[nq] = q
            nq += not ((pbox[q, 1] > pbox[p, 4]) | (pbox[p, 1] > pbox[q, 4]) | (pbox[q, 2] > pbox[p, 5])
                       | (pbox[p, 2] > pbox[q, 5]))
        for jq in range(nq):
            q = qlist[jq]
            if p == q or _patches_adjacent(p, q, nstart, nbr):
                # Flat union: one cone around the mean of the two axes.
                bx = pcone[p, 0] + pcone[q, 0]
                by = pcone[p, 1] + pcone[q, 1]
                bz = pcone[p, 2] + pcone[q, 2]
                lb = np.sqrt(bx * bx + by * by + bz * bz)
                if lb > 1e-20 and pcone[p, 3] > 0.0 and pcone[q, 3] > 0.0:
                    bx /= lb
                    by /= lb
                    bz /= lb
                    cp = min(bx * pcone[p, 0] + by * pcone[p, 1] + bz * pcone[p, 2], 1.0)
                    cq = min(bx * pcone[q, 0] + by * pcone[q, 1] + bz * pcone[q, 2], 1.0)
                    # cos(a + b) = cos a cos b - sin a sin b, per side
                    cpp = pcone[p, 3]
                    cqq = pcone[q, 3]
                    c1 = cp * cpp - np.sqrt(max(0.0, 1.0 - cp * cp)) * np.sqrt(max(0.0, 1.0 - cpp * cpp))
                    c2 = cq * cqq - np.sqrt(max(0.0, 1.0 - cq * cq)) * np.sqrt(max(0.0, 1.0 - cqq * cqq))
                    cu = min(c1, c2)
                    if cu >= flat_cos:
                        dmx = pmot[p, 0] - pmot[q, 0]
                        dmy = pmot[p, 1] - pmot[q, 1]
                        dmz = pmot[p, 2] - pmot[q, 2]
                        motion = pmot[p, 3] + pmot[q, 3] + np.sqrt(dmx * dmx + dmy * dmy + dmz * dmz)
                        # Relative motion of two points of the union: at most
                        # `motion`, and at most the steepest triangle's
                        # Lipschitz bound times the surface path between
                        # them (<= their projected distance / cu); so at the
                        # closest far pair, FLAT_ALTITUDES * alt * lip.
                        alt = min(palt[p], palt[q])
                        motion = min(motion, FLAT_ALTITUDES * alt * max(plip[p], plip[q]))
                        if FLAT_ALTITUDES * alt * cu > max_reach * 1.01 + 1e-6 + max_cons * motion:
                            continue
            if p == q:
                # p's own pairs: the static list of those beyond two rings.
                own = True
                continue
            # Only q's triangles inside p's box can meet p's (and the other way).
            # (Calls guarded here: every call with arrays costs atomic
            # reference count updates.)
            if box_ready[q] == 0:
                _patch_boxes(q, pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box,
                             box_ready)
            start = fill
            p0, p1, p2, p3, p4, p5 = pbox[p, 0], pbox[p, 1], pbox[p, 2], pbox[p, 3], pbox[p, 4], pbox[p, 5]
            for jb in range(pstart[q], pstart[q + 1]):
                # Branch-free, unsigned (see the triangle pairs' box tests).
                b6 = np.uint64(6) * np.uint64(ptris[jb])
                seg_tri[fill] = jb
                fill += not ((boxf[b6] > p3) | (p0 > boxf[b6 + 3]) | (boxf[b6 + 1] > p4)
                             | (p1 > boxf[b6 + 4]) | (boxf[b6 + 2] > p5) | (p2 > boxf[b6 + 5]))
            if fill > start:
                seg_q[nseg] = q
                nseg += 1
                seg_start[nseg] = fill
        if nseg == 0 and not own:
            continue
        if box_ready[p] == 0:
            _patch_boxes(p, pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box, box_ready)
        for ja in range(np.uint64(pstart[p]), np.uint64(pstart[p + 1])):
            a = ptris[ja]
            ua = np.uint64(a)
            stamped = False
            a0, a1, a2, a3, a4, a5 = box[ua, 0], box[ua, 1], box[ua, 2], box[ua, 3], box[ua, 4], box[ua, 5]
            # Segment 0: a's own patch (its far pairs); then the listed
            # patches, segment kk at seg_q[kk - 1] (unsigned: no
            # negative-index fix-ups).
            for kk in range(np.uint64(nseg + 1)):
                if kk == 0:
                    if not own:
                        continue
                    lo = fstart[ja]
                    hi = fstart[ja + np.uint64(1)]
                else:
                    q = np.uint64(seg_q[kk - np.uint64(1)])
                    if ((a0 > pbox[q, 3]) | (pbox[q, 0] > a3) | (a1 > pbox[q, 4])
                            | (pbox[q, 1] > a4) | (a2 > pbox[q, 5]) | (pbox[q, 2] > a5)):
                        continue
                    lo = seg_start[kk - np.uint64(1)]
                    hi = seg_start[kk]
                # The box tests first, without a branch: the triangles whose
                # boxes meet a's, in order, into hits (about half the tests
                # pass, and a branch on each mispredicted), with unsigned
                # indices (numba adds a negative-index fix-up to every
                # signed one). Detection on the 32x32 sheet ~7% faster.
                nhit = np.uint64(0)
                # Two loops, one per source of candidates, rather than a
                # test of kk in each iteration. Each indexes its own array:
                # rebinding an array variable costs two atomic reference
                # count updates (they were 16% of the detection time on the
                # 32x32 sheet).
                if kk == 0:
                    for iq in range(np.uint64(lo), np.uint64(hi)):
                        b = ptris[np.uint64(fpair[iq])]
                        hits[nhit] = b
                        nhit += np.uint64(not _box_misses(a0, a1, a2, a3, a4, a5, boxf, np.uint64(6) * np.uint64(b)))
                else:
                    for iq in range(np.uint64(lo), np.uint64(hi)):
                        b = ptris[np.uint64(seg_tri[iq])]
                        hits[nhit] = b
                        nhit += np.uint64(not _box_misses(a0, a1, a2, a3, a4, a5, boxf, np.uint64(6) * np.uint64(b)))
                for ih in range(nhit):
                    b = hits[ih]
                    overlaps += 1
                    # Two rings first: most overlapping pairs end here.
                    if not stamped:
                        for q_ in range(np.uint64(ring_start[ua]), np.uint64(ring_start[ua + np.uint64(1)])):
                            mark[np.uint64(ring[q_])] = a + 1
                        stamped = True
                    b3 = np.uint64(3) * np.uint64(b)
                    if ((mark[np.uint64(trif[b3])] == a + 1) | (mark[np.uint64(trif[b3 + 1])] == a + 1)
                            | (mark[np.uint64(trif[b3 + 2])] == a + 1)):
                        continue
                    A = min(a, b)
                    B = max(a, b)
                    rA = tri_region[A]
                    rB = tri_region[B]
                    mode = mode_matrix[max(rA, rB), min(rA, rB)]
                    if mode == MODE_OFF:
                        continue
                    # Spheres and planes only for the triangles that reach
                    # those tests.
                    for t in (a, b):
                        if sph_ready[t] == 0:
                            _tri_sphere(pos, rel, triangles, t, sph)
                            sph_ready[t] = 1
                    apart, lim = _spheres_apart(sph, a, b, max_cons, max_reach)
                    if apart:
                        continue
                    ca = _tri_points(pos, triangles, a)
                    cb = _tri_points(pos, triangles, b)
                    for t, ct in ((a, ca), (b, cb)):
                        if pl_ready[t] == 0:
                            row = _tri_plane(ct)
                            for j in range(16):
                                pl[t, j] = row[j]
                            pl_ready[t] = 1
                    if _separated(_plane_row(pl, a), cb, lim) or _separated(_plane_row(pl, b), ca, lim):
                        continue
                    narrow += 1
                    # The exactly-once rules compare boxes of the triangles
                    # around both: their patches' boxes must be there.
                    for t in (A, B):
                        for k_ in range(3):
                            v = np.uint64(triangles[t, k_])
                            for j in range(np.uint64(vtri_start[v]), np.uint64(vtri_start[v + np.uint64(1)])):
                                o = np.uint64(patch_of[vtri[j]])
                                if box_ready[o] == 0:
                                    _patch_boxes(o, pstart, ptris, pos, rel, triangles, tri_region,
                                                 region_pad, region_cons, box, box_ready)
                    count = _narrow_pair(A, B, mode, pos, rel, rest, triangles, tri_edges, edges,
                                         edge_tris, region_thick, region_fric, region_cons, region_layer,
                                         tri_region, tri_comp, margin, vtri_start, vtri, box, adj_start, adj, sph,
                                         out_vertex, out_kind, out_normal, out_frame,
                                         out_target, out_friction, count)
    stats[0] = overlaps
    stats[1] = narrow
    return count


@njit(**_JIT)
def vt_distances(pos, contact_vertex, contact_kind):
    """Distance from the vertex to the triangle of every vertex-triangle
    contact at positions pos (3, n); inf for other kinds."""
    nc = contact_kind.shape[0]
    out = np.full(nc, np.inf, np.float64)
    for k in range(nc):
        if contact_kind[k] != KIND_VERTEX_TRIANGLE:
            continue
        v = contact_vertex[k, 0]
        a = contact_vertex[k, 1]
        b = contact_vertex[k, 2]
        c = contact_vertex[k, 3]
        u, vv, w = _closest_on_triangle(pos[0, v], pos[1, v], pos[2, v], pos[0, a], pos[1, a], pos[2, a],
                                        pos[0, b], pos[1, b], pos[2, b], pos[0, c], pos[1, c], pos[2, c])
        dx = pos[0, v] - (u * pos[0, a] + vv * pos[0, b] + w * pos[0, c])
        dy = pos[1, v] - (u * pos[1, a] + vv * pos[1, b] + w * pos[1, c])
        dz = pos[2, v] - (u * pos[2, a] + vv * pos[2, b] + w * pos[2, c])
        out[k] = np.sqrt(dx * dx + dy * dy + dz * dz)
    return out


# No strip fans (the solve's `fans` argument when there are none).
NO_FANS = np.zeros((6, 0), dtype=np.int32)


@njit(**_HELPER)
def _shared_corners(contact_vertex, k, m):
    """How many corners the triangles of vertex-triangle contacts k and m share."""
    s = 0
    for i in range(1, 4):
        for j in range(1, 4):
            s += 1 if contact_vertex[k, i] == contact_vertex[m, j] else 0
    return s


@njit(**_HELPER)
def _other_corner(contact_vertex, k, a, b):
    """The corner of contact k's triangle that is neither a nor b."""
    for i in range(1, 4):
        c = contact_vertex[k, i]
        if c != a and c != b:
            return c
    return -1


@njit(**_HELPER)
def _winding(contact_vertex, k, a, b):
    """+1 if (a, b, ...) runs the way contact k's triangle does, else -1."""
    for i in range(3):
        if contact_vertex[k, 1 + i] == a:
            return 1 if contact_vertex[k, 1 + (i + 1) % 3] == b else -1
    return 0


@njit(cache=True)
def strip_fans(contact_vertex, contact_kind, n):
    """Vertices whose vertex-triangle contacts are exactly three, against
    triangles that make a strip: (c0, c1, c2), (c1, c2, c3), (c2, c3, c4)
    (any three triangles joined edge to edge, as a vertex's three nearest
    triangles of a facing layer are). The filter then reads five corners
    for the vertex's three contacts instead of nine (_strip_flags).

    Returns (fans (6, F) int32: the vertex and c0..c4 of each fan; order
    (3F,) int64: the fans' contacts, first the (c0, c1, c2) one of every
    fan, then the (c1, c2, c3) ones, then the (c2, c3, c4) ones; sign (3F,)
    int32: +1 where that corner order runs the way the contact's triangle
    does, -1 where it runs against it). Fans are in vertex order."""
    nc = contact_kind.shape[0]
    start = np.zeros(n + 1, np.int64)
    for k in range(nc):
        if contact_kind[k] == KIND_VERTEX_TRIANGLE:
            start[contact_vertex[k, 0] + 1] += 1
    for v in range(n):
        start[v + 1] += start[v]
    fill = start[:n].copy()
    ks = np.empty(start[n], np.int64)
    for k in range(nc):
        if contact_kind[k] == KIND_VERTEX_TRIANGLE:
            v = contact_vertex[k, 0]
            ks[fill[v]] = k
            fill[v] += 1
    fans = np.empty((6, n), np.int32)
    cols = np.empty((3, n), np.int64)
    signs = np.empty((3, n), np.int32)
    nf = 0
    for v in range(n):
        if start[v + 1] - start[v] != 3:
            continue
        k0, k1, k2 = ks[start[v]], ks[start[v] + 1], ks[start[v] + 2]
        # The middle triangle shares an edge (two corners) with each other one.
        s01 = _shared_corners(contact_vertex, k0, k1)
        s02 = _shared_corners(contact_vertex, k0, k2)
        s12 = _shared_corners(contact_vertex, k1, k2)
        if s01 == 2 and s02 == 2 and s12 < 2:
            ka, km, kc = k1, k0, k2
        elif s01 == 2 and s12 == 2 and s02 < 2:
            ka, km, kc = k0, k1, k2
        elif s02 == 2 and s12 == 2 and s01 < 2:
            ka, km, kc = k0, k2, k1
        else:
            continue
        # c2: the middle triangle's corner on both shared edges; c1, c3:
        # the other ends of the edges shared with ka and kc; c0, c4: the
        # outer corners.
        c2 = -1
        for i in range(1, 4):
            c = contact_vertex[km, i]
            in_a = False
            in_c = False
            for j in range(1, 4):
                in_a = in_a or contact_vertex[ka, j] == c
                in_c = in_c or contact_vertex[kc, j] == c
            if in_a and in_c:
                c2 = c
        if c2 < 0:
            continue
        c1 = -1
        c3 = -1
        for i in range(1, 4):
            c = contact_vertex[km, i]
            if c == c2:
                continue
            for j in range(1, 4):
                if contact_vertex[ka, j] == c:
                    c1 = c
                if contact_vertex[kc, j] == c:
                    c3 = c
        if c1 < 0 or c3 < 0 or c1 == c3:
            continue
        c0 = _other_corner(contact_vertex, ka, c1, c2)
        c4 = _other_corner(contact_vertex, kc, c2, c3)
        if c0 < 0 or c4 < 0 or c0 == c4:
            continue
        fans[0, nf] = v
        fans[1, nf] = c0
        fans[2, nf] = c1
        fans[3, nf] = c2
        fans[4, nf] = c3
        fans[5, nf] = c4
        cols[0, nf] = ka
        cols[1, nf] = km
        cols[2, nf] = kc
        signs[0, nf] = _winding(contact_vertex, ka, c0, c1)
        signs[1, nf] = _winding(contact_vertex, km, c1, c2)
        signs[2, nf] = _winding(contact_vertex, kc, c2, c3)
        nf += 1
    order = np.empty(3 * nf, np.int64)
    sign = np.empty(3 * nf, np.int32)
    for s in range(3):
        for f in range(nf):
            order[s * nf + f] = cols[s, f]
            sign[s * nf + f] = signs[s, f]
    return fans[:, :nf].copy(), order, sign
