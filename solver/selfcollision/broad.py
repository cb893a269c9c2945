"""The broad phase, once per step: which triangle pairs can make contacts.

Every triangle gets a fat swept box (its corners at step start and at the
predicted end, relative to the cloth's mean motion, grown by half the
thickness plus the margin); pairs whose boxes overlap, not near (see
SelfCollision: no shared corner, no short edge between corners) and not
rejected by their bounding spheres or separating planes, go to the narrow
phase (narrow.narrow_pair). Two broad phases give the same contacts:
`detect_patches` (the default: patches with normal cones, sweep and prune)
and `detect_grid` (a uniform grid over the triangle boxes).
"""

import numpy as np
from numba import njit, prange

from ..atomics import fetch_add
from ..hardware import prefer_scalar_loads
from ..jit import EXACT_FLAT, NoAliasCompiler
from .constants import F32_INF, F32_ONE, F32_TINY, F32_TWO, F32_ZERO, HELPER, JIT, MODE_OFF, SLACK, SLACK_ABS
from .geometry import edges_cross, sphere_gap
from .narrow import narrow_pair
from .records import Contacts, Mesh, Patches, PatchWork, Regions, Sweep, ThreadWork

@njit(**EXACT_FLAT)   # no fastmath: it may assume no NaN
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


@njit(**JIT)
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


@njit(inline="always", **JIT)
def _grow_swept(x0, x1, x2, r0, r1, r2, cons, lo0, lo1, lo2, hi0, hi1, hi2):
    """A box (lo, hi) grown by a point x and its swept end x + cons * r."""
    e0 = x0 + cons * r0
    e1 = x1 + cons * r1
    e2 = x2 + cons * r2
    return (min(lo0, x0, e0), min(lo1, x1, e1), min(lo2, x2, e2),
            max(hi0, x0, e0), max(hi1, x1, e1), max(hi2, x2, e2))


@njit(**HELPER)
def _put_box(box, row, pad, lo0, lo1, lo2, hi0, hi1, hi2):
    """box[row] = (lo - pad, hi + pad)."""
    box[row, 0] = lo0 - pad
    box[row, 1] = lo1 - pad
    box[row, 2] = lo2 - pad
    box[row, 3] = hi0 + pad
    box[row, 4] = hi1 + pad
    box[row, 5] = hi2 + pad


@njit(inline="always", **HELPER)
def _tri_box(pos, rel, triangles, t, pad, cons, box):
    """Fat swept box of triangle t into box[t]: its corners at step start and
    at start + cons * rel, grown by pad. float32 bounds: np.inf made the
    whole box float64, a conversion per corner coordinate (this helper, a
    call then, was 8% of the 32x32 sheet's detection); the float32 result
    is the same."""
    lo0 = lo1 = lo2 = F32_INF
    hi0 = hi1 = hi2 = -F32_INF
    for k in range(3):
        v = np.uint64(triangles[t, k])
        lo0, lo1, lo2, hi0, hi1, hi2 = _grow_swept(pos[0, v], pos[1, v], pos[2, v], rel[0, v], rel[1, v],
                                                   rel[2, v], cons, lo0, lo1, lo2, hi0, hi1, hi2)
    _put_box(box, np.uint64(t), pad, lo0, lo1, lo2, hi0, hi1, hi2)


@njit(**JIT)
def _swept_boxes(pos, disp, triangles, tri_region, region_pad, region_cons, box):
    """Fat swept boxes of the triangles, relative to the mean displacement.

    Returns the relative displacement (3, n) as well. box: (t, 6) out.
    """
    rel = _relative(disp)
    for t in range(triangles.shape[0]):
        r = tri_region[t]
        _tri_box(pos, rel, triangles, t, region_pad[r], region_cons[r], box)
    return rel


@njit(**JIT)
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


@njit(inline="always", **HELPER)
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
    r2 = F32_ZERO
    m2 = F32_ZERO
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


@njit(**JIT)
def _tri_spheres(pos, rel, triangles, sph):
    """_tri_sphere for every triangle. sph: (t, 8) out."""
    for t in range(triangles.shape[0]):
        _tri_sphere(pos, rel, triangles, t, sph)


@njit(inline="always", **HELPER)
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
    d2, motion = sphere_gap(sa, sb)
    # |d| - r_a - r_b - cons motion > slack reach, squared (one root).
    # float32 throughout (max_reach, max_cons are): float64 literals here
    # converted every operand of the test (~3% of the 100x100 detection).
    far = max_reach * SLACK + SLACK_ABS + sa[3] + sb[3] + max_cons * motion
    return (d2 > far * far, (max_reach + max_cons * motion) * SLACK + SLACK_ABS)


@njit(inline="always", **HELPER)
def _sphere_row(sph, t):
    """Row t of the triangle spheres (_tri_sphere) as an 8-tuple."""
    return (sph[t, 0], sph[t, 1], sph[t, 2], sph[t, 3], sph[t, 4], sph[t, 5], sph[t, 6], sph[t, 7])


@njit(inline="always", **HELPER)
def _tri_points(pos, triangles, t):
    """Corners of triangle t as 9 scalars."""
    i0 = triangles[t, 0]
    i1 = triangles[t, 1]
    i2 = triangles[t, 2]
    return (pos[0, i0], pos[1, i0], pos[2, i0], pos[0, i1], pos[1, i1], pos[2, i1],
            pos[0, i2], pos[1, i2], pos[2, i2])


@njit(inline="always", **HELPER)
def _plane_row(pl, t):
    """Row t of the plane table as a 16-tuple."""
    return (pl[t, 0], pl[t, 1], pl[t, 2], pl[t, 3], pl[t, 4], pl[t, 5], pl[t, 6], pl[t, 7],
            pl[t, 8], pl[t, 9], pl[t, 10], pl[t, 11], pl[t, 12], pl[t, 13], pl[t, 14], pl[t, 15])


@njit(**JIT)
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
    if lm2 < F32_TINY:
        return F32_ZERO, F32_ZERO, F32_ZERO, F32_ZERO
    inv = F32_ONE / np.sqrt(lm2)
    mx *= inv
    my *= inv
    mz *= inv
    return mx, my, mz, mx * ax + my * ay + mz * az


@njit(inline="always", **JIT)
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
    ux, uy, uz, wx, wy, wz, nx, ny, nz = edges_cross(x0, y0, z0, x1, y1, z1, x2, y2, z2)
    ln2 = nx * nx + ny * ny + nz * nz
    if ln2 < F32_TINY:
        z = F32_ZERO
        return (z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)
    inv = F32_ONE / np.sqrt(ln2)
    nx *= inv
    ny *= inv
    nz *= inv
    m0 = _edge_plane(x0, y0, z0, x1, y1, z1, nx, ny, nz)
    m1 = _edge_plane(x1, y1, z1, x2, y2, z2, nx, ny, nz)
    m2 = _edge_plane(x2, y2, z2, x0, y0, z0, nx, ny, nz)
    return (nx, ny, nz, nx * x0 + ny * y0 + nz * z0, m0[0], m0[1], m0[2], m0[3], m1[0], m1[1], m1[2], m1[3],
            m2[0], m2[1], m2[2], m2[3])


@njit(inline="always", **JIT)
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


@njit(inline="always", **JIT)
def _box_misses(a0, a1, a2, a3, a4, a5, boxf, b6):
    """Whether box (a0..a2 min, a3..a5 max) and the box at boxf[b6:b6 + 6]
    of a flat box array are apart, without branches (for the loops that
    count overlaps into a list); branch-free, so the reference counts of
    boxf are pruned."""
    return ((a0 > boxf[b6 + 3]) | (boxf[b6] > a3) | (a1 > boxf[b6 + 4])
            | (boxf[b6 + 1] > a4) | (a2 > boxf[b6 + 5]) | (boxf[b6 + 2] > a5))


@njit(**JIT)
def detect_grid(pos, disp, mesh, regions, out, stats):
    """detect_patches with a uniform grid over the triangle boxes for its
    broad phase: the same contacts (the triangle pairs visited in another
    order), for comparison and as a check of the patch rejects."""
    mesh, regions, out = Mesh(*mesh), Regions(*regions), Contacts(*out)
    triangles, tri_region, ring_start, ring = mesh.triangles, mesh.tri_region, mesh.ring_start, mesh.ring
    region_thick, region_cons, margin, mode_matrix = (regions.thickness, regions.conservativeness, regions.margin,
                                                      regions.modes)
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
    count = np.int64(0)
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
                        count = narrow_pair(np.int32(A), np.int32(B), mode, pos, rel, box, sph, mesh, regions, out,
                                            count)
    stats[0] = overlaps
    stats[1] = narrow
    return count


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
# Triangles that are not near are more than two rings apart where one of the
# two patches has only short edges at its vertices; elsewhere (a coarse
# mesh) they need only share no corner, one altitude apart by the argument
# below (Patches.flat_alt: 2 or 1 per patch, the larger of the two taken).
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


@njit(inline="always", **JIT)
def _patches_adjacent(p, q, nstart, nbr):
    for j in range(nstart[p], nstart[p + 1]):
        if nbr[j] == q:
            return True
    return False


@njit(**JIT)
def _patch_boxes(p, pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box, ready):
    """The swept boxes of patch p's triangles (on first use in a step)."""
    for j in range(np.uint64(pstart[p]), np.uint64(pstart[p + 1])):
        t = np.uint64(ptris[j])
        r = tri_region[t]
        _tri_box(pos, rel, triangles, t, region_pad[r], region_cons[r], box)
    ready[p] = 1


@njit(pipeline_class=NoAliasCompiler, **HELPER)
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
    ax = F32_ZERO
    ay = F32_ZERO
    az = F32_ZERO
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
        ux, uy, uz, wx, wy, wz, nx, ny, nz = edges_cross(px[i0], py[i0], pz[i0], px[i1], py[i1], pz[i1],
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
        ok = n2 > F32_TINY
        # 1 / sqrt, not rsqrt's x86 intrinsic: that one is scalar.
        inv = F32_ONE / np.sqrt(n2 if ok else F32_ONE)
        rn = inv * inv
        nx = nx * inv if ok else nx
        ny = ny * inv if ok else ny
        nz = nz * inv if ok else nz
        ta2[j] = n2 / emax if ok else F32_ZERO
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
        cross = F32_TWO * uw * d12
        lip = (quad - cross + np.float32(1e-5) * (quad + np.abs(cross))) * rn
        tlip[j] = lip if ok else F32_INF
        tnx[j] = nx
        tny[j] = ny
        tnz[j] = nz
        ax += nx
        ay += ny
        az += nz
    return ax, ay, az


def patch_work(n, nt, npatch):
    """Scratch for detect_patches, allocated once per cloth (fresh large
    arrays every step cost page faults)."""
    return PatchWork(
        box=np.empty((nt, 6), np.float32), sph=np.empty((nt, 8), np.float32), planes=np.empty((nt, 16), np.float32),
        trows=np.empty((7, nt), np.float32), pbox=np.empty((npatch, 6), np.float32),
        pcone=np.empty((npatch, 4), np.float32), palt=np.empty(npatch, np.float32),
        pmot=np.empty((npatch, 4), np.float32), plip=np.empty(npatch, np.float32),
        ready=np.zeros(npatch + 2 * nt, np.uint8), seg_q=np.empty(npatch, np.int64),
        seg_start=np.empty(npatch + 1, np.int64), seg_tri=np.empty(nt, np.int64), mark=np.zeros(n, np.int64),
        hits=np.empty(nt, np.int32), qlist=np.empty(npatch, np.int64))


@njit(**JIT)
def detect_patches(pos, disp, mesh, regions, patches, work, out, stats):
    """Broad phase (patches) + narrow phase: the contacts into out (a
    Contacts record); returns their number, which may exceed out's
    capacity: then call again with more room. mesh: Mesh, regions: Regions,
    patches: Patches, work: patch_work(), scratch reused from step to step.
    stats[0] = candidate pairs whose boxes overlap, stats[1] = narrow-phase
    pairs.

    Every patch gets its box, cone, altitude and motion from its own
    vertices and triangles (_patch_bounds); the patches are swept along x
    in order of their boxes' low ends, each meets the patches its box
    overlaps that are not a flat union with it (_patch_partners), and its
    triangles meet theirs (_patch_pairs). Triangle boxes and spheres are
    computed only for the patches and triangles a surviving pair reaches (on
    smooth cloth most patches meet only flat neighbours and need neither).

    The records may come as plain tuples in their fields' order: numba
    types a plain tuple of arrays at a call faster than a namedtuple, so
    SelfCollision passes plain ones."""
    mesh, regions, patches = Mesh(*mesh), Regions(*regions), Patches(*patches)
    work, out = PatchWork(*work), Contacts(*out)
    sweep = _sweep(pos, disp, regions)
    work.ready[:] = 0
    work.mark[:] = 0
    npatch = patches.start.shape[0] - 1
    _patch_bounds(sweep, mesh, patches, work, 0, npatch)
    order = np.argsort(work.pbox[:, 0])
    count, overlaps, narrow = _sweep_patches(order, 0, npatch, sweep, mesh, regions, patches, work, out, 0)
    stats[0] = overlaps
    stats[1] = narrow
    return count


# The threaded detection (detect_patches_threaded): patches per block of the
# bounds pass and per chunk of the sweep, the chunks handed out one at a
# time (a patch's cost varies by hundreds of times: the ones a collider or
# a fold reaches meet many partners).
BOUNDS_BLOCK = 32
SWEEP_CHUNK = 4


def thread_work(n, nt, npatch, threads, capacity):
    """Per-worker scratch and contact buffers of detect_patches_threaded
    for `threads` workers, its chunk table and claim counter."""
    t = int(threads)
    chunks = (npatch + SWEEP_CHUNK - 1) // SWEEP_CHUNK
    return ThreadWork(
        ready=np.zeros((t, npatch + 2 * nt), np.uint8), seg_q=np.empty((t, npatch), np.int64),
        seg_start=np.empty((t, npatch + 1), np.int64), seg_tri=np.empty((t, nt), np.int64),
        mark=np.zeros((t, n), np.int64), hits=np.empty((t, nt), np.int32), qlist=np.empty((t, npatch), np.int64),
        vertex=np.empty((t, capacity, 4), np.int32), kind=np.empty((t, capacity), np.int8),
        normal=np.empty((t, capacity, 3), np.float32), frame=np.empty((t, capacity), np.int32),
        target=np.empty((t, capacity), np.float32), friction=np.empty((t, capacity), np.float32),
        fill=np.zeros(t, np.int64), chunk=np.zeros((chunks, 5), np.int64), claim=np.zeros(t, np.int64))


def _detect_patches_threaded(pos, disp, mesh, regions, patches, work, tw, out, stats):
    """detect_patches with the patches' bounds split over numba's threads
    in blocks, and the sweep in chunks of SWEEP_CHUNK patches of its order:
    each worker runs the serial code on the chunks it claims with its own
    scratch and contact buffer (tw: thread_work(), its ready, fill and
    claim zeroed by the caller), then the chunks' contacts are copied into out in the sweep's
    order. The contacts, their order and the stats are those of
    detect_patches, bit for bit, for any thread count: the per-triangle
    boxes, spheres and planes a thread makes on first use are the same
    numbers whichever thread makes them (a thread reads only those it has
    made itself, or the same values written over them by another).
    The records stay plain tuples here: a namedtuple that a prange body
    sees does not survive numba's outlining of it."""
    sweep = _sweep_plain(pos, disp, regions)
    npatch = patches[0].shape[0] - 1
    blocks = (npatch + BOUNDS_BLOCK - 1) // BOUNDS_BLOCK
    for b in prange(blocks):
        _bounds_block(sweep, mesh, patches, work, b)
    order = np.argsort(work[4][:, 0])   # PatchWork.pbox
    chunks = (npatch + SWEEP_CHUNK - 1) // SWEEP_CHUNK
    # One worker per row of tw (numba's threads). Worker w sweeps the w-th
    # of `workers` runs of consecutive chunks (neighbours in the sweep, so
    # mostly the same partner patches, whose boxes it makes once), taking
    # the next chunk of its run as it comes free, and then helps with the
    # other runs in turn. Whichever thread runs a worker, and in whatever
    # order, every chunk is swept once; the worker's row is its scratch.
    # (numba's own dynamic schedule and thread ids call into the threading
    # layer through pointers that its disk cache cannot keep.)
    workers = tw[13].shape[0]   # ThreadWork.fill
    for w in prange(workers):
        for k in range(workers):
            run = (w + k) % workers
            first = run * chunks // workers
            size = (run + 1) * chunks // workers - first
            while True:
                c = fetch_add(tw[15], run, 1)   # ThreadWork.claim: chunks of each run handed out
                if c >= size:
                    break
                _sweep_chunk(order, first + c, w, sweep, mesh, regions, patches, work, tw)
    return _merge_chunks(ThreadWork(*tw), Contacts(*out), chunks, stats)


@njit(**JIT)
def _sweep_plain(pos, disp, regions):
    """_sweep's record as a plain tuple."""
    s = _sweep(pos, disp, Regions(*regions))
    return s.pos, s.rel, s.region_pad, s.region_cons, s.max_reach, s.max_cons


@njit(**HELPER)
def _bounds_block(sweep, mesh, patches, work, b):
    """_patch_bounds of block b (BOUNDS_BLOCK patches)."""
    patches = Patches(*patches)
    npatch = patches.start.shape[0] - 1
    _patch_bounds(Sweep(*sweep), Mesh(*mesh), patches, PatchWork(*work), b * BOUNDS_BLOCK,
                  min(npatch, (b + 1) * BOUNDS_BLOCK))


@njit(**HELPER)
def _sweep_chunk(order, c, t, sweep, mesh, regions, patches, work, tw):
    """_sweep_patches of chunk c (SWEEP_CHUNK patches of the sweep order)
    by worker t: its scratch rows and contact buffer; the chunk's place in
    that buffer and its stats into tw.chunk[c]."""
    patches, work, tw = Patches(*patches), PatchWork(*work), ThreadWork(*tw)
    npatch = patches.start.shape[0] - 1
    own = PatchWork(work.box, work.sph, work.planes, work.trows, work.pbox, work.pcone, work.palt, work.pmot,
                    work.plip, tw.ready[t], tw.seg_q[t], tw.seg_start[t], tw.seg_tri[t], tw.mark[t], tw.hits[t],
                    tw.qlist[t])
    buf = Contacts(tw.vertex[t], tw.kind[t], tw.normal[t], tw.frame[t], tw.target[t], tw.friction[t])
    start = tw.fill[t]
    count, overlaps, narrow = _sweep_patches(order, c * SWEEP_CHUNK, min(npatch, (c + 1) * SWEEP_CHUNK),
                                             Sweep(*sweep), Mesh(*mesh), Regions(*regions), patches, own, buf,
                                             start)
    tw.fill[t] = count
    tw.chunk[c, 0] = t
    tw.chunk[c, 1] = start
    tw.chunk[c, 2] = count - start
    tw.chunk[c, 3] = overlaps
    tw.chunk[c, 4] = narrow


@njit(**HELPER)
def _merge_chunks(tw, out, chunks, stats):
    """The chunks' contacts into out in chunk order (as far as out and the
    threads' buffers hold them); returns their number."""
    total = np.int64(0)
    overlaps = np.int64(0)
    narrow = np.int64(0)
    cap = out.kind.shape[0]
    room = tw.kind.shape[1]
    for c in range(chunks):
        t, start, k = tw.chunk[c, 0], tw.chunk[c, 1], tw.chunk[c, 2]
        if total + k <= cap and start + k <= room:
            for j in range(k):
                src = start + j
                dst = total + j
                out.kind[dst] = tw.kind[t, src]
                for q in range(4):
                    out.vertex[dst, q] = tw.vertex[t, src, q]
                for q in range(3):
                    out.normal[dst, q] = tw.normal[t, src, q]
                out.frame[dst] = tw.frame[t, src]
                out.target[dst] = tw.target[t, src]
                out.friction[dst] = tw.friction[t, src]
        total += k
        overlaps += tw.chunk[c, 3]
        narrow += tw.chunk[c, 4]
    stats[0] = overlaps
    stats[1] = narrow
    return total


# Compiled the first time a cloth detects on several threads
# (SelfCollision.detect with threads > 1), in the background
# (solver.threads.start_compile).
detect_patches_threaded = njit(parallel=True, **JIT)(_detect_patches_threaded)


@njit(**JIT)
def _sweep(pos, disp, regions):
    """The step's Sweep: positions, the displacement relative to its mean,
    each region's box pad and conservativeness, and the largest reach and
    conservativeness of any region (float32 throughout)."""
    thick = regions.thickness
    margin = regions.margin
    max_reach = F32_ZERO
    max_cons = F32_ZERO
    region_pad = np.empty(thick.shape[0], np.float32)
    for r in range(thick.shape[0]):
        max_reach = max(max_reach, np.float32(thick[r] * (F32_ONE + margin)))
        max_cons = max(max_cons, regions.conservativeness[r])
        region_pad[r] = 0.5 * thick[r] * (1.0 + margin)
    return Sweep(pos, _relative(disp), region_pad, regions.conservativeness, max_reach, max_cons)


@njit(**HELPER)
def _patch_bounds(sweep, mesh, patches, work, p0, p1):
    """The fat swept box, normal cone (axis, cos of its half angle),
    smallest triangle altitude, Lipschitz bound of its motion and the
    centre and spread of that motion (work.pbox, pcone, palt, plip, pmot)
    of patches p0 to p1 - 1, each from its own triangles and vertices
    (each writes only its own rows)."""
    pos, rel, region_pad, region_cons = sweep.pos, sweep.rel, sweep.region_pad, sweep.region_cons
    tri_region = mesh.tri_region
    trif = mesh.triangles.reshape(mesh.triangles.size)
    pstart, ptris, pvstart, pverts = patches.start, patches.tris, patches.vert_start, patches.verts
    pbox, pcone, palt, pmot, plip, trows = work.pbox, work.pcone, work.palt, work.pmot, work.plip, work.trows
    # Rows taken once.
    px, py, pz = pos[0], pos[1], pos[2]
    rx, ry, rz = rel[0], rel[1], rel[2]
    # Per-triangle rows of _patch_triangles.
    tnx, tny, tnz, ta2, tlip, tpad, tcons = trows[0], trows[1], trows[2], trows[3], trows[4], trows[5], trows[6]
    for p in range(p0, p1):
        # float32 throughout, like the positions: float64 literals made
        # every product here promote (the pass was 20% slower).
        j0 = np.uint64(pstart[p])
        j1 = np.uint64(pstart[p + 1])
        ax, ay, az = _patch_triangles(j0, j1, ptris, trif, px, py, pz, rx, ry, rz, tri_region, region_pad,
                                      region_cons, tnx, tny, tnz, ta2, tlip, tpad, tcons)
        a2min = F32_INF
        l2max = F32_ZERO
        pad = F32_ZERO
        cons = F32_ZERO
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
        lo0 = lo1 = lo2 = F32_INF
        hi0 = hi1 = hi2 = -F32_INF
        rmx = F32_ZERO
        rmy = F32_ZERO
        rmz = F32_ZERO
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
        inv_cnt = F32_ONE / np.float32(max(pvstart[p + 1] - pvstart[p], 1))
        rmx *= inv_cnt
        rmy *= inv_cnt
        rmz *= inv_cnt
        dev = F32_ZERO
        for j in range(np.uint64(pvstart[p]), np.uint64(pvstart[p + 1])):
            v = np.uint64(pverts[j])
            dx = rel[0, v] - rmx
            dy = rel[1, v] - rmy
            dz = rel[2, v] - rmz
            dev = max(dev, dx * dx + dy * dy + dz * dz)
        _put_box(pbox, np.uint64(p), pad, lo0, lo1, lo2, hi0, hi1, hi2)
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


@njit(**HELPER)
def _sweep_patches(order, i0, i1, sweep, mesh, regions, patches, work, out, count):
    """Patch after patch of the sweep order from i0 to i1 - 1: its
    partners, then its triangle pairs, the contacts written into out from
    `count` on. Returns (contacts, overlapping triangle pairs, narrow-phase
    pairs). One call a step (or a chunk of the threaded detection): the
    records are passed once, and the two pieces inlined here take their
    fields without reference counts."""
    count = np.int64(count)
    overlaps = 0
    narrow = 0
    for ii in range(np.int64(i0), np.int64(i1)):
        nseg, own = _patch_partners(np.uint64(ii), order, sweep, mesh, patches, work)
        if nseg == 0 and not own:
            continue
        count, o, w = _patch_pairs(np.uint64(order[ii]), nseg, own, sweep, mesh, regions, patches, work, out, count)
        overlaps += o
        narrow += w
    return count, overlaps, narrow


@njit(inline="always", **HELPER)
def _patch_partners(ii, order, sweep, mesh, patches, work):
    """The patches patch p = order[ii] meets: p itself (own, unless its
    union with itself is flat) and the later patches in the sweep whose
    boxes overlap p's and whose union with p is not flat, each as a segment
    of work.seg_tri (its triangles inside p's box; segment k is patch
    seg_q[k], seg_tri[seg_start[k]:seg_start[k + 1]]). Returns (nseg, own)."""
    pos, rel, region_pad, region_cons = sweep.pos, sweep.rel, sweep.region_pad, sweep.region_cons
    max_reach, max_cons = sweep.max_reach, sweep.max_cons
    triangles, tri_region = mesh.triangles, mesh.tri_region
    pstart, ptris, nstart, nbr, flat_cos = patches.start, patches.tris, patches.nbr_start, patches.nbr, patches.flat_cos
    flat_alt = patches.flat_alt
    box, pbox, pcone, palt, pmot, plip = work.box, work.pbox, work.pcone, work.palt, work.pmot, work.plip
    seg_q, seg_start, seg_tri, qlist = work.seg_q, work.seg_start, work.seg_tri, work.qlist
    npatch = pstart.shape[0] - 1
    box_ready = work.ready[:npatch]
    # The triangle boxes flat, for the box-test loop: box[b, k] of a (nt, 6)
    # array multiplies b by the row length read from the array (an imul
    # from the stack each test); boxf[6 * b + k] is an lea.
    boxf = box.reshape(box.size)
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
                    # closest far pair, k * alt * lip (k: Patches.flat_alt).
                    alt = min(palt[p], palt[q])
                    k = max(flat_alt[p], flat_alt[q])
                    motion = min(motion, k * alt * max(plip[p], plip[q]))
                    if k * alt * cu > max_reach * 1.01 + 1e-6 + max_cons * motion:
                        continue
        if p == q:
            # p's own pairs: the static list of those that are not near.
            own = True
            continue
        # Only q's triangles inside p's box can meet p's (and the other way).
        # (Calls guarded here: every call with arrays costs atomic
        # reference count updates.)
        if box_ready[q] == 0:
            _patch_boxes(np.uint64(q), pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box,
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
    return nseg, own


@njit(inline="always", **HELPER)
def _patch_pairs(p, nseg, own, sweep, mesh, regions, patches, work, out, count):
    """Patch p's triangle pairs: each of its triangles stamps its ring (the
    vertices near its corners) once and meets its own patch's far pairs
    (when own) and the triangles of every segment _patch_partners listed;
    the pairs that survive the box, ring, sphere and plane tests go to the
    narrow phase. Returns (count,
    overlapping pairs, narrow-phase pairs)."""
    pos, rel, region_pad, region_cons = sweep.pos, sweep.rel, sweep.region_pad, sweep.region_cons
    max_reach, max_cons = sweep.max_reach, sweep.max_cons
    triangles, tri_region, vtri_start, vtri = mesh.triangles, mesh.tri_region, mesh.vtri_start, mesh.vtri
    ring_start, ring = mesh.ring_start, mesh.ring
    modes = regions.modes
    pstart, ptris, patch_of = patches.start, patches.tris, patches.patch_of
    fstart, fpair = patches.far_start, patches.far
    box, sph, pl, pbox, mark, hits = work.box, work.sph, work.planes, work.pbox, work.mark, work.hits
    seg_q, seg_start, seg_tri = work.seg_q, work.seg_start, work.seg_tri
    npatch = pstart.shape[0] - 1
    nt = triangles.shape[0]
    box_ready = work.ready[:npatch]
    sph_ready = work.ready[npatch:npatch + nt]
    pl_ready = work.ready[npatch + nt:]
    boxf = box.reshape(box.size)
    trif = triangles.reshape(triangles.size)   # likewise for the two-ring test
    overlaps = 0
    narrow = 0
    if box_ready[p] == 0:
        _patch_boxes(np.uint64(p), pstart, ptris, pos, rel, triangles, tri_region, region_pad, region_cons, box,
                     box_ready)
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
                mode = modes[max(rA, rB), min(rA, rB)]
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
                count = narrow_pair(A, B, mode, pos, rel, box, sph, mesh, regions, out, count)
    return count, overlaps, narrow
