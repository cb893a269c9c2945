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

KIND_POINT_POINT = 0
KIND_VERTEX_TRIANGLE = 1
KIND_EDGE_EDGE = 2

MODE_OFF = 0
MODE_POINT_POINT = 1
MODE_FULL = 2

# A vertex-triangle contact pushes while the vertex is over the triangle or
# beside it by at most this many thicknesses.
VT_REACH = 1.0

# Broad phases (SelfCollision's broad_phase).
BROAD_PATCH = 0
BROAD_GRID = 1
BROAD_BVH = 2

_JIT = dict(cache=True, fastmath=True, error_model="numpy", nogil=True)


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


@njit(**_JIT)
def _closest_segments(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    """Parameters (s, t) of the closest points a + s(b-a), c + t(d-c)
    (Ericson 5.1.9), clamped to the segments."""
    d1x, d1y, d1z = bx - ax, by - ay, bz - az
    d2x, d2y, d2z = dx - cx, dy - cy, dz - cz
    rx, ry, rz = ax - cx, ay - cy, az - cz
    a = d1x * d1x + d1y * d1y + d1z * d1z
    e = d2x * d2x + d2y * d2y + d2z * d2z
    f = d2x * rx + d2y * ry + d2z * rz
    eps = 1e-20
    if a <= eps and e <= eps:
        return 0.0, 0.0
    if a <= eps:
        return 0.0, min(max(f / e, 0.0), 1.0)
    c = d1x * rx + d1y * ry + d1z * rz
    if e <= eps:
        return min(max(-c / a, 0.0), 1.0), 0.0
    b = d1x * d2x + d1y * d2y + d1z * d2z
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


@njit(**_JIT)
def _frame(ax, ay, az, bx, by, bz, cx, cy, cz):
    """Orthonormal frame (u, v, n) of triangle abc (u along ab, n its normal)."""
    ux = bx - ax
    uy = by - ay
    uz = bz - az
    wx = cx - ax
    wy = cy - ay
    wz = cz - az
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


# ---------------------------------------------------------------- detection
#
# Hot loops here call only helpers that take scalars: a numba helper that
# takes an array costs reference-count updates (atomic) on every call that
# LLVM cannot remove once the helper branches, which made these loops tens
# of times slower. Array reads and writes stay in the loop bodies.
#
# A triangle pair is a candidate when `_pair_near` says so. That test
# depends only on the two triangles, not on how the broad phase found them or
# on any reference motion, and it bounds every feature pair's distance and
# closing motion from below: every feature pair that meets the contact rule
# lies in a candidate pair, whichever broad phase runs, and the exactly-once
# rule (`_canonical`) asks the same question of the alternatives.

# Per-triangle data at step start (td columns): the box of its corners,
# bounding sphere centre and radius, mean relative motion of the corners and
# the corners' largest deviation from it, unit normal, smallest altitude.
TD_LO = 0
TD_HI = 3
TD_C = 6
TD_R = 9
TD_M = 10
TD_DEV = 13
TD_N = 14
TD_ALT = 17
TD_SIZE = 20

# Slack on every conservative reject: 1% + 1 um (rounding).
_REL_SLACK = 1.01
_ABS_SLACK = 1e-6


@njit(**_JIT)
def _pair_near(alx, aly, alz, ahx, ahy, ahz, acx, acy, acz, ar, amx, amy, amz, adev,
               blx, bly, blz, bhx, bhy, bhz, bcx, bcy, bcz, br, bmx, bmy, bmz, bdev, max_cons, max_reach):
    """Whether triangles a and b are a candidate pair: some feature of one
    may come within max_reach of one of the other during the step. Two lower
    bounds on the distance of any of their feature pairs at step start (the
    gap between their corner boxes, and between their bounding spheres)
    against the reach plus a bound on the pair's relative motion (the
    difference of the corners' mean motions plus both deviations, scaled by
    the largest conservativeness), with slack for rounding."""
    mx = amx - bmx
    my = amy - bmy
    mz = amz - bmz
    lim = max_reach * _REL_SLACK + _ABS_SLACK + max_cons * (np.sqrt(mx * mx + my * my + mz * mz) + adev + bdev)
    gx = max(blx - ahx, alx - bhx, 0.0)
    gy = max(bly - ahy, aly - bhy, 0.0)
    gz = max(blz - ahz, alz - bhz, 0.0)
    if gx * gx + gy * gy + gz * gz > lim * lim:
        return False
    dx = acx - bcx
    dy = acy - bcy
    dz = acz - bcz
    return np.sqrt(dx * dx + dy * dy + dz * dz) - ar - br <= lim


@njit(**_JIT)
def _all_finite(x):
    """No NaN or Inf in the float32 array x, from its bits (fastmath may
    assume floats are finite, and so drop a float test once inlined)."""
    bits = x.reshape(-1).view(np.uint32)
    bad = 0
    for i in range(bits.shape[0]):
        bad |= (bits[i] & 0x7F800000) == 0x7F800000
    return bad == 0


@njit(**_JIT)
def _relative_motion(pos, vel, dt, gx, gy, gz, rel):
    """rel = the step's predicted displacement (vel dt + g dt^2) less the
    rigid motion (translation + small rotation) that fits it best. False when
    pos or vel hold NaN or Inf.

    A rigid motion closes no gap: for displacements t + w x p, the closing
    speed of two points along the line between them, (r_x - r_y).(x - y),
    loses only (w x (x - y)).(x - y) = 0. So every contact test gives the same
    answer with rel as with the displacement, while the motion bounds of the
    broad phase shrink to what bends or stretches the cloth: a cape carried
    or swung as a whole makes almost no candidates.
    """
    if not (_all_finite(pos) and _all_finite(vel)):
        return False
    n = pos.shape[1]
    if n == 0:
        return True
    dt32 = np.float32(dt)
    dt2 = np.float32(dt * dt)
    ax = np.float32(gx) * dt2
    ay = np.float32(gy) * dt2
    az = np.float32(gz) * dt2
    sx = 0.0
    sy = 0.0
    sz = 0.0
    cx = 0.0
    cy = 0.0
    cz = 0.0
    for i in range(n):
        dx = vel[0, i] * dt32 + ax
        dy = vel[1, i] * dt32 + ay
        dz = vel[2, i] * dt32 + az
        rel[0, i] = dx
        rel[1, i] = dy
        rel[2, i] = dz
        sx += dx
        sy += dy
        sz += dz
        cx += pos[0, i]
        cy += pos[1, i]
        cz += pos[2, i]
    inv = 1.0 / n
    mx = sx * inv
    my = sy * inv
    mz = sz * inv
    cx *= inv
    cy *= inv
    cz *= inv
    # Least-squares rotation w: (sum |p|^2 I - p p^T) w = sum p x r (p about the centre).
    lx = 0.0
    ly = 0.0
    lz = 0.0
    ixx = 0.0
    iyy = 0.0
    izz = 0.0
    ixy = 0.0
    ixz = 0.0
    iyz = 0.0
    for i in range(n):
        px = pos[0, i] - cx
        py = pos[1, i] - cy
        pz = pos[2, i] - cz
        rx = rel[0, i] - mx
        ry = rel[1, i] - my
        rz = rel[2, i] - mz
        lx += py * rz - pz * ry
        ly += pz * rx - px * rz
        lz += px * ry - py * rx
        ixx += py * py + pz * pz
        iyy += px * px + pz * pz
        izz += px * px + py * py
        ixy -= px * py
        ixz -= px * pz
        iyz -= py * pz
    # Cramer's rule; a (near) singular tensor (a line of points) keeps w = 0.
    c00 = iyy * izz - iyz * iyz
    c01 = ixz * iyz - ixy * izz
    c02 = ixy * iyz - ixz * iyy
    det = ixx * c00 + ixy * c01 + ixz * c02
    wx = 0.0
    wy = 0.0
    wz = 0.0
    scale = ixx + iyy + izz
    if det > 1e-9 * scale * scale * scale and scale > 0.0:
        c11 = ixx * izz - ixz * ixz
        c12 = ixy * ixz - ixx * iyz
        c22 = ixx * iyy - ixy * ixy
        wx = (c00 * lx + c01 * ly + c02 * lz) / det
        wy = (c01 * lx + c11 * ly + c12 * lz) / det
        wz = (c02 * lx + c12 * ly + c22 * lz) / det
    for i in range(n):
        px = pos[0, i] - cx
        py = pos[1, i] - cy
        pz = pos[2, i] - cz
        rel[0, i] -= mx + (wy * pz - wz * py)
        rel[1, i] -= my + (wz * px - wx * pz)
        rel[2, i] -= mz + (wx * py - wy * px)
    return True


@njit(**_JIT)
def _triangle_data(pos, rel, triangles, td):
    for t in range(triangles.shape[0]):
        i0 = triangles[t, 0]
        i1 = triangles[t, 1]
        i2 = triangles[t, 2]
        p0x = np.float64(pos[0, i0])
        p0y = np.float64(pos[1, i0])
        p0z = np.float64(pos[2, i0])
        p1x = np.float64(pos[0, i1])
        p1y = np.float64(pos[1, i1])
        p1z = np.float64(pos[2, i1])
        p2x = np.float64(pos[0, i2])
        p2y = np.float64(pos[1, i2])
        p2z = np.float64(pos[2, i2])
        r0x = np.float64(rel[0, i0])
        r0y = np.float64(rel[1, i0])
        r0z = np.float64(rel[2, i0])
        r1x = np.float64(rel[0, i1])
        r1y = np.float64(rel[1, i1])
        r1z = np.float64(rel[2, i1])
        r2x = np.float64(rel[0, i2])
        r2y = np.float64(rel[1, i2])
        r2z = np.float64(rel[2, i2])
        cx = (p0x + p1x + p2x) * (1.0 / 3.0)
        cy = (p0y + p1y + p2y) * (1.0 / 3.0)
        cz = (p0z + p1z + p2z) * (1.0 / 3.0)
        mx = (r0x + r1x + r2x) * (1.0 / 3.0)
        my = (r0y + r1y + r2y) * (1.0 / 3.0)
        mz = (r0z + r1z + r2z) * (1.0 / 3.0)
        r2 = max((p0x - cx) ** 2 + (p0y - cy) ** 2 + (p0z - cz) ** 2,
                 (p1x - cx) ** 2 + (p1y - cy) ** 2 + (p1z - cz) ** 2,
                 (p2x - cx) ** 2 + (p2y - cy) ** 2 + (p2z - cz) ** 2)
        m2 = max((r0x - mx) ** 2 + (r0y - my) ** 2 + (r0z - mz) ** 2,
                 (r1x - mx) ** 2 + (r1y - my) ** 2 + (r1z - mz) ** 2,
                 (r2x - mx) ** 2 + (r2y - my) ** 2 + (r2z - mz) ** 2)
        ux = p1x - p0x
        uy = p1y - p0y
        uz = p1z - p0z
        wx = p2x - p0x
        wy = p2y - p0y
        wz = p2z - p0z
        gx = p2x - p1x
        gy = p2y - p1y
        gz = p2z - p1z
        nx = uy * wz - uz * wy
        ny = uz * wx - ux * wz
        nz = ux * wy - uy * wx
        ln = np.sqrt(nx * nx + ny * ny + nz * nz)
        emax = max(ux * ux + uy * uy + uz * uz, wx * wx + wy * wy + wz * wz, gx * gx + gy * gy + gz * gz)
        alt = 0.0
        if ln > 1e-30:
            nx /= ln
            ny /= ln
            nz /= ln
            alt = ln / np.sqrt(emax)
        td[t, 0] = min(p0x, p1x, p2x)
        td[t, 1] = min(p0y, p1y, p2y)
        td[t, 2] = min(p0z, p1z, p2z)
        td[t, 3] = max(p0x, p1x, p2x)
        td[t, 4] = max(p0y, p1y, p2y)
        td[t, 5] = max(p0z, p1z, p2z)
        td[t, 6] = cx
        td[t, 7] = cy
        td[t, 8] = cz
        td[t, 9] = np.sqrt(r2)
        td[t, 10] = mx
        td[t, 11] = my
        td[t, 12] = mz
        td[t, 13] = np.sqrt(m2)
        td[t, 14] = nx
        td[t, 15] = ny
        td[t, 16] = nz
        td[t, 17] = alt


@njit(**_JIT)
def _reach(region_thick, region_cons, margin):
    max_reach = 0.0
    max_cons = 0.0
    for r in range(region_thick.shape[0]):
        max_reach = max(max_reach, region_thick[r] * (1.0 + margin))
        max_cons = max(max_cons, region_cons[r])
    return max_reach, max_cons


@njit(**_JIT)
def _global_boxes(td, max_cons, max_reach, box):
    """Each triangle's corner box grown by half the reach and its motion
    relative to the global mean (0), float32 rounded outwards, for the grid
    and the BVH: a candidate pair's boxes overlap (see _broad_patches)."""
    half = 0.5 * (max_reach * _REL_SLACK + _ABS_SLACK)
    for t in range(td.shape[0]):
        e = half + max_cons * (np.sqrt(td[t, 10] ** 2 + td[t, 11] ** 2 + td[t, 12] ** 2) + td[t, 13])
        e = e * (1.0 + 1e-6) + 1e-7
        for a in range(3):
            box[t, a] = td[t, a] - e
            box[t, 3 + a] = td[t, 3 + a] + e


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


@njit(**_JIT)
def _broad_grid(td, box, triangles, tri_region, mode_matrix, ring_start, ring, n, max_cons, max_reach,
                pairs, stats):
    """Candidate pairs from a uniform grid over the global balls (each pair
    reported in the lowest cell both boxes overlap). Returns their count
    (may exceed pairs' capacity)."""
    nt = triangles.shape[0]
    counts, items, cmin, cmax, dims = _grid_build(box, 4)
    mark = np.zeros(n, np.int64)
    stamped = -1
    npairs = 0
    tested = 0
    cap = pairs.shape[0]
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
                        if (max(cmin[A, 0], cmin[B, 0]) != cx or max(cmin[A, 1], cmin[B, 1]) != cy
                                or max(cmin[A, 2], cmin[B, 2]) != cz):
                            continue
                        rB = tri_region[B]
                        mode = mode_matrix[max(rA, rB), min(rA, rB)]
                        if mode == MODE_OFF:
                            continue
                        if stamped != A:
                            for q_ in range(ring_start[A], ring_start[A + 1]):
                                mark[ring[q_]] = A + 1
                            stamped = A
                        if (mark[triangles[B, 0]] == A + 1 or mark[triangles[B, 1]] == A + 1
                                or mark[triangles[B, 2]] == A + 1):
                            continue
                        tested += 1
                        if not _pair_near(td[A, 0], td[A, 1], td[A, 2], td[A, 3], td[A, 4], td[A, 5], td[A, 6],
                                          td[A, 7], td[A, 8], td[A, 9], td[A, 10], td[A, 11], td[A, 12], td[A, 13],
                                          td[B, 0], td[B, 1], td[B, 2], td[B, 3], td[B, 4], td[B, 5], td[B, 6],
                                          td[B, 7], td[B, 8], td[B, 9], td[B, 10], td[B, 11], td[B, 12], td[B, 13],
                                          max_cons, max_reach):
                            continue
                        if npairs < cap:
                            pairs[npairs, 0] = A
                            pairs[npairs, 1] = B
                            pairs[npairs, 2] = mode
                        npairs += 1
    stats[0] = tested
    return npairs


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
def _broad_bvh(td, box, order, node_box, triangles, tri_region, mode_matrix, ring_start, ring, n,
               max_cons, max_reach, pairs, stats):
    """Candidate pairs from a refitted BVH over the global balls (built once at rest)."""
    nt = triangles.shape[0]
    bvh_refit(order, box, node_box, nt)
    size = node_box.shape[0]
    first_leaf = size - nt
    stack = np.empty(128, np.int64)
    mark = np.zeros(n, np.int64)
    stamped = -1
    npairs = 0
    tested = 0
    cap = pairs.shape[0]
    for A in range(nt):
        rA = tri_region[A]
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
                rB = tri_region[B]
                mode = mode_matrix[max(rA, rB), min(rA, rB)]
                if mode == MODE_OFF:
                    continue
                if stamped != A:
                    for q_ in range(ring_start[A], ring_start[A + 1]):
                        mark[ring[q_]] = A + 1
                    stamped = A
                if (mark[triangles[B, 0]] == A + 1 or mark[triangles[B, 1]] == A + 1
                        or mark[triangles[B, 2]] == A + 1):
                    continue
                tested += 1
                if not _pair_near(td[A, 0], td[A, 1], td[A, 2], td[A, 3], td[A, 4], td[A, 5], td[A, 6],
                                  td[A, 7], td[A, 8], td[A, 9], td[A, 10], td[A, 11], td[A, 12], td[A, 13],
                                  td[B, 0], td[B, 1], td[B, 2], td[B, 3], td[B, 4], td[B, 5], td[B, 6],
                                  td[B, 7], td[B, 8], td[B, 9], td[B, 10], td[B, 11], td[B, 12], td[B, 13],
                                  max_cons, max_reach):
                    continue
                if npairs < cap:
                    pairs[npairs, 0] = A
                    pairs[npairs, 1] = B
                    pairs[npairs, 2] = mode
                npairs += 1
            else:
                L = 2 * node + 1
                if L + 1 < size:
                    stack[sp] = L + 1
                    sp += 1
                stack[sp] = L
                sp += 1
    stats[0] = tested
    return npairs


# Patch broad phase (default). Triangles are grouped once into small
# connected patches (breadth-first over shared edges). Every step each patch
# takes its own reference motion M (the mean of its triangles'), and each of
# its triangles a ball: its bounding sphere widened by half the reach and by
# its motion relative to M. Two triangles of patches p and q can be a
# candidate only if their balls come within cons |M_p - M_q| of each other,
# so a patch is tested against another through the box around its balls:
# a cloth pushed in one place by a collider moves its patches apart from the
# global mean, not from their neighbours, and makes few candidates. Patch
# pairs are found by sweep and prune on x over those boxes grown by
# cons |M_p| (the global mean is 0), which contains every pair the exact
# test keeps.
#
# A patch with itself, or two patches sharing a vertex, whose union is flat
# (all normals within a cone) is a height field over the cone's axis: its
# triangles more than two rings apart are at least one triangle altitude
# apart, so when that altitude (tilted) exceeds the contact distance plus the
# patches' relative motion the whole pair is skipped. That removes the
# neighbour pairs that otherwise dominate the cost on smooth cloth; folds,
# separate layers and separate objects are never skipped.
PD_LO = 0
PD_HI = 3
PD_M = 6
PD_DEV = 9
PD_AXIS = 10
PD_COS = 13
PD_ALT = 14
PD_SIZE = 16


@njit(**_JIT)
def _broad_patches(td, triangles, tri_region, mode_matrix, ring_start, ring, n, pstart, ptris, nstart, nbr,
                   flat_cos, max_cons, max_reach, pd, pairs, stats):
    npatch = pstart.shape[0] - 1
    half = 0.5 * (max_reach * _REL_SLACK + _ABS_SLACK)
    slo = np.empty(npatch, np.float64)
    for p in range(npatch):
        j0 = pstart[p]
        j1 = pstart[p + 1]
        Mx = 0.0
        My = 0.0
        Mz = 0.0
        ax = 0.0
        ay = 0.0
        az = 0.0
        amin = np.inf
        for j in range(j0, j1):
            t = ptris[j]
            Mx += td[t, 10]
            My += td[t, 11]
            Mz += td[t, 12]
            ax += td[t, 14]
            ay += td[t, 15]
            az += td[t, 16]
            amin = min(amin, td[t, 17])
        inv = 1.0 / max(j1 - j0, 1)
        Mx *= inv
        My *= inv
        Mz *= inv
        la = np.sqrt(ax * ax + ay * ay + az * az)
        cmin = -1.0
        if la > 1e-30:
            ax /= la
            ay /= la
            az /= la
            cmin = 1.0
        lo0 = lo1 = lo2 = np.inf
        hi0 = hi1 = hi2 = -np.inf
        dev = 0.0
        for j in range(j0, j1):
            t = ptris[j]
            if la > 1e-30:
                cmin = min(cmin, ax * td[t, 14] + ay * td[t, 15] + az * td[t, 16])
            dx = td[t, 10] - Mx
            dy = td[t, 11] - My
            dz = td[t, 12] - Mz
            d = np.sqrt(dx * dx + dy * dy + dz * dz) + td[t, 13]
            dev = max(dev, d)
            e = half + max_cons * d
            td[t, 18] = e
            lo0 = min(lo0, td[t, 0] - e)
            lo1 = min(lo1, td[t, 1] - e)
            lo2 = min(lo2, td[t, 2] - e)
            hi0 = max(hi0, td[t, 3] + e)
            hi1 = max(hi1, td[t, 4] + e)
            hi2 = max(hi2, td[t, 5] + e)
        pd[p, 0] = lo0
        pd[p, 1] = lo1
        pd[p, 2] = lo2
        pd[p, 3] = hi0
        pd[p, 4] = hi1
        pd[p, 5] = hi2
        pd[p, 6] = Mx
        pd[p, 7] = My
        pd[p, 8] = Mz
        pd[p, 9] = dev
        pd[p, 10] = ax
        pd[p, 11] = ay
        pd[p, 12] = az
        pd[p, 13] = cmin
        pd[p, 14] = amin
        # growth for the sweep: cons |M_p - 0|, rounded up
        pd[p, 15] = (max_cons * np.sqrt(Mx * Mx + My * My + Mz * Mz)) * (1.0 + 1e-9) + 1e-12
        slo[p] = lo0 - pd[p, 15]
    order = np.argsort(slo)
    partner = np.empty(npatch, np.int64)
    plim = np.empty(npatch, np.float64)
    pbeg = np.empty(npatch + 1, np.int64)
    blist = np.empty(triangles.shape[0], np.int64)
    mark = np.zeros(n, np.int64)
    npairs = 0
    tested = 0
    cap = pairs.shape[0]
    for ii in range(npatch):
        p = order[ii]
        gp = pd[p, 15]
        # The patches p may meet (itself first), each with the triangles of
        # it that come within reach of p's box.
        npart = 0
        nb = 0
        for jj in range(ii, npatch):
            q = order[jj]
            if jj > ii:
                gq = pd[q, 15]
                g = gp + gq
                if pd[q, 0] - gq > pd[p, 3] + gp:
                    break
                if (pd[q, 1] > pd[p, 4] + g or pd[p, 1] > pd[q, 4] + g or pd[q, 2] > pd[p, 5] + g
                        or pd[p, 2] > pd[q, 5] + g or pd[q, 0] > pd[p, 3] + g or pd[p, 0] > pd[q, 3] + g):
                    continue
            # The relative motion of the two references, and the boxes' gap.
            dmx = pd[p, 6] - pd[q, 6]
            dmy = pd[p, 7] - pd[q, 7]
            dmz = pd[p, 8] - pd[q, 8]
            dm = np.sqrt(dmx * dmx + dmy * dmy + dmz * dmz)
            lim = max_cons * dm * (1.0 + 1e-9) + 1e-12
            if p != q:
                gx = max(pd[q, 0] - pd[p, 3], pd[p, 0] - pd[q, 3], 0.0)
                gy = max(pd[q, 1] - pd[p, 4], pd[p, 1] - pd[q, 4], 0.0)
                gz = max(pd[q, 2] - pd[p, 5], pd[p, 2] - pd[q, 5], 0.0)
                if gx * gx + gy * gy + gz * gz > lim * lim:
                    continue
            adjacent = p == q
            if not adjacent:
                for j in range(nstart[p], nstart[p + 1]):
                    if nbr[j] == q:
                        adjacent = True
                        break
            if adjacent and pd[p, 13] > 0.0 and pd[q, 13] > 0.0:
                # Flat union: one cone around the mean of the two axes.
                bx = pd[p, 10] + pd[q, 10]
                by = pd[p, 11] + pd[q, 11]
                bz = pd[p, 12] + pd[q, 12]
                lb = np.sqrt(bx * bx + by * by + bz * bz)
                if lb > 1e-20:
                    bx /= lb
                    by /= lb
                    bz /= lb
                    cp = min(bx * pd[p, 10] + by * pd[p, 11] + bz * pd[p, 12], 1.0)
                    cq = min(bx * pd[q, 10] + by * pd[q, 11] + bz * pd[q, 12], 1.0)
                    # cos(a + b) = cos a cos b - sin a sin b, per side
                    cpp = pd[p, 13]
                    cqq = pd[q, 13]
                    c1 = cp * cpp - np.sqrt(max(0.0, 1.0 - cp * cp)) * np.sqrt(max(0.0, 1.0 - cpp * cpp))
                    c2 = cq * cqq - np.sqrt(max(0.0, 1.0 - cq * cq)) * np.sqrt(max(0.0, 1.0 - cqq * cqq))
                    cu = min(c1, c2)
                    if cu >= flat_cos:
                        motion = pd[p, 9] + pd[q, 9] + dm
                        if min(pd[p, 14], pd[q, 14]) * cu > max_reach + max_cons * motion:
                            continue
            pbeg[npart] = nb
            if p != q:
                for j in range(pstart[q], pstart[q + 1]):
                    b = ptris[j]
                    e = td[b, 18]
                    gx = max(pd[p, 0] - td[b, 3] - e, td[b, 0] - e - pd[p, 3], 0.0)
                    gy = max(pd[p, 1] - td[b, 4] - e, td[b, 1] - e - pd[p, 4], 0.0)
                    gz = max(pd[p, 2] - td[b, 5] - e, td[b, 2] - e - pd[p, 5], 0.0)
                    if gx * gx + gy * gy + gz * gz <= lim * lim:
                        blist[nb] = b
                        nb += 1
                if nb == pbeg[npart]:
                    continue
            partner[npart] = q
            plim[npart] = lim
            npart += 1
        pbeg[npart] = nb
        if npart == 0:
            continue
        for ja in range(pstart[p], pstart[p + 1]):
            a = ptris[ja]
            for q_ in range(ring_start[a], ring_start[a + 1]):
                mark[ring[q_]] = a + 1
            rA = tri_region[a]
            for k in range(npart):
                q = partner[k]
                if q == p:
                    j0 = ja + 1
                    j1 = pstart[p + 1]
                else:
                    lim = plim[k]
                    e = td[a, 18]
                    gx = max(pd[q, 0] - td[a, 3] - e, td[a, 0] - e - pd[q, 3], 0.0)
                    gy = max(pd[q, 1] - td[a, 4] - e, td[a, 1] - e - pd[q, 4], 0.0)
                    gz = max(pd[q, 2] - td[a, 5] - e, td[a, 2] - e - pd[q, 5], 0.0)
                    if gx * gx + gy * gy + gz * gz > lim * lim:
                        continue
                    j0 = pbeg[k]
                    j1 = pbeg[k + 1]
                for jb in range(j0, j1):
                    b = ptris[jb] if q == p else blist[jb]
                    if (mark[triangles[b, 0]] == a + 1 or mark[triangles[b, 1]] == a + 1
                            or mark[triangles[b, 2]] == a + 1):
                        continue
                    rB = tri_region[b]
                    mode = mode_matrix[max(rA, rB), min(rA, rB)]
                    if mode == MODE_OFF:
                        continue
                    tested += 1
                    if not _pair_near(td[a, 0], td[a, 1], td[a, 2], td[a, 3], td[a, 4], td[a, 5], td[a, 6],
                                      td[a, 7], td[a, 8], td[a, 9], td[a, 10], td[a, 11], td[a, 12], td[a, 13],
                                      td[b, 0], td[b, 1], td[b, 2], td[b, 3], td[b, 4], td[b, 5], td[b, 6],
                                      td[b, 7], td[b, 8], td[b, 9], td[b, 10], td[b, 11], td[b, 12], td[b, 13],
                                      max_cons, max_reach):
                        continue
                    if npairs < cap:
                        pairs[npairs, 0] = min(a, b)
                        pairs[npairs, 1] = max(a, b)
                        pairs[npairs, 2] = mode
                    npairs += 1
    stats[0] = tested
    return npairs



@njit(**_JIT)
def _narrow(pairs, npairs, pos, rel, rest, triangles, tri_edges, edges, td, tri_region, region_thick,
            region_fric, region_cons, region_layer, margin, max_cons, max_reach,
            out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, out_pair, stats):
    """Every feature pair of the candidate triangle pairs that meets the
    contact rule, written to the out arrays with the triangle pair that found
    it (out_pair: A, B, and the vertex's and triangle's or the two edges'
    ids) for `_canonical`. Returns the count (may exceed the capacity).

    A pair first goes through a separating-plane reject: each triangle's
    plane and its three edge planes (computed once per triangle, when first
    needed) against the other's corners, limit = reach + relative motion
    bound. That rejects in-plane neighbours three rings apart that the
    sphere test cannot.
    """
    nt = triangles.shape[0]
    pl = np.empty((nt, 16), np.float64)
    have = np.zeros(nt, np.uint8)
    cap = out_kind.shape[0]
    count = 0
    narrow = 0
    for ip in range(npairs):
        A = pairs[ip, 0]
        B = pairs[ip, 1]
        mode = pairs[ip, 2]
        # Planes of A and B at step start (once per triangle).
        for side in range(2):
            t = A if side == 0 else B
            if have[t] != 0:
                continue
            have[t] = 1
            nx = td[t, 14]
            ny = td[t, 15]
            nz = td[t, 16]
            i0 = triangles[t, 0]
            pl[t, 0] = nx
            pl[t, 1] = ny
            pl[t, 2] = nz
            pl[t, 3] = nx * pos[0, i0] + ny * pos[1, i0] + nz * pos[2, i0]
            if nx == 0.0 and ny == 0.0 and nz == 0.0:
                for j in range(4, 16):
                    pl[t, j] = 0.0   # degenerate: no plane separates
                continue
            for k in range(3):
                a = triangles[t, k]
                b = triangles[t, (k + 1) % 3]
                ex = pos[0, b] - pos[0, a]
                ey = pos[1, b] - pos[1, a]
                ez = pos[2, b] - pos[2, a]
                # e x n points out of the triangle for counter-clockwise corners about n
                mx = ey * nz - ez * ny
                my = ez * nx - ex * nz
                mz = ex * ny - ey * nx
                lm = np.sqrt(mx * mx + my * my + mz * mz)
                if lm < 1e-30:
                    mx = my = mz = 0.0
                    lm = 1.0
                mx /= lm
                my /= lm
                mz /= lm
                pl[t, 4 + 4 * k] = mx
                pl[t, 5 + 4 * k] = my
                pl[t, 6 + 4 * k] = mz
                pl[t, 7 + 4 * k] = mx * pos[0, a] + my * pos[1, a] + mz * pos[2, a]
        # Distance at step start beyond which A and B can make no contact.
        dmx = td[A, 10] - td[B, 10]
        dmy = td[A, 11] - td[B, 11]
        dmz = td[A, 12] - td[B, 12]
        motion = np.sqrt(dmx * dmx + dmy * dmy + dmz * dmz) + td[A, 13] + td[B, 13]
        lim = (max_reach + max_cons * motion) * _REL_SLACK + _ABS_SLACK
        separated = False
        for side in range(2):
            S = A if side == 0 else B
            O = B if side == 0 else A
            o0 = triangles[O, 0]
            o1 = triangles[O, 1]
            o2 = triangles[O, 2]
            x0 = pos[0, o0]
            y0 = pos[1, o0]
            z0 = pos[2, o0]
            x1 = pos[0, o1]
            y1 = pos[1, o1]
            z1 = pos[2, o1]
            x2 = pos[0, o2]
            y2 = pos[1, o2]
            z2 = pos[2, o2]
            nx = pl[S, 0]
            ny = pl[S, 1]
            nz = pl[S, 2]
            d = pl[S, 3]
            h0 = nx * x0 + ny * y0 + nz * z0 - d
            h1 = nx * x1 + ny * y1 + nz * z1 - d
            h2 = nx * x2 + ny * y2 + nz * z2 - d
            if (nx != 0.0 or ny != 0.0 or nz != 0.0) and (min(h0, h1, h2) > lim or max(h0, h1, h2) < -lim):
                separated = True
                break
            for k in range(3):
                mx = pl[S, 4 + 4 * k]
                my = pl[S, 5 + 4 * k]
                mz = pl[S, 6 + 4 * k]
                if mx == 0.0 and my == 0.0 and mz == 0.0:
                    continue
                d = pl[S, 7 + 4 * k]
                if (mx * x0 + my * y0 + mz * z0 - d > lim and mx * x1 + my * y1 + mz * z1 - d > lim
                        and mx * x2 + my * y2 + mz * z2 - d > lim):
                    separated = True
                    break
            if separated:
                break
        if separated:
            continue
        narrow += 1

        rA = tri_region[A]
        rB = tri_region[B]
        thick = 0.5 * (region_thick[rA] + region_thick[rB])
        fric = np.sqrt(region_fric[rA] * region_fric[rB])
        cons = max(region_cons[rA], region_cons[rB])
        reach = thick + margin * thick
        layA = region_layer[rA]
        layB = region_layer[rB]
        layered = layA >= 0 and layB >= 0 and layA != layB
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
                    close = ((rel[0, v] - rel[0, w]) * nx + (rel[1, v] - rel[1, w]) * ny
                             + (rel[2, v] - rel[2, w]) * nz)
                    if d0 < reach or d0 + cons * close < reach:
                        rx = rest[v, 0] - rest[w, 0]
                        ry = rest[v, 1] - rest[w, 1]
                        rz = rest[v, 2] - rest[w, 2]
                        if count < cap:
                            out_kind[count] = KIND_POINT_POINT
                            out_vertex[count, 0] = v
                            out_vertex[count, 1] = w
                            out_vertex[count, 2] = -1
                            out_vertex[count, 3] = -1
                            out_normal[count, 0] = nx
                            out_normal[count, 1] = ny
                            out_normal[count, 2] = nz
                            out_frame[count] = -1
                            out_target[count] = min(thick, np.sqrt(rx * rx + ry * ry + rz * rz))
                            out_friction[count] = fric
                            out_pair[count, 0] = A
                            out_pair[count, 1] = B
                            out_pair[count, 2] = v
                            out_pair[count, 3] = w
                        count += 1
            continue
        for side in range(2):
            T = B if side == 0 else A
            P = A if side == 0 else B
            a = triangles[T, 0]
            b = triangles[T, 1]
            c = triangles[T, 2]
            ax = pos[0, a]
            ay = pos[1, a]
            az = pos[2, a]
            bx = pos[0, b]
            by = pos[1, b]
            bz = pos[2, b]
            cx = pos[0, c]
            cy = pos[1, c]
            cz = pos[2, c]
            rax = rel[0, a]
            ray = rel[1, a]
            raz = rel[2, a]
            rbx = rel[0, b]
            rby = rel[1, b]
            rbz = rel[2, b]
            rcx = rel[0, c]
            rcy = rel[1, c]
            rcz = rel[2, c]
            tri_motion = abs(rax) + abs(ray) + abs(raz) + abs(rbx) + abs(rby) + abs(rbz) \
                + abs(rcx) + abs(rcy) + abs(rcz)
            for k in range(3):
                v = triangles[P, k]
                px = pos[0, v]
                py = pos[1, v]
                pz = pos[2, v]
                rvx = rel[0, v]
                rvy = rel[1, v]
                rvz = rel[2, v]
                # Cheap reject: the vertex against T's bounding sphere and motion.
                sx = px - td[T, 6]
                sy = py - td[T, 7]
                sz = pz - td[T, 8]
                mx = rvx - td[T, 10]
                my = rvy - td[T, 11]
                mz = rvz - td[T, 12]
                if (np.sqrt(sx * sx + sy * sy + sz * sz) - td[T, 9]
                        - cons * (np.sqrt(mx * mx + my * my + mz * mz) + td[T, 13]) > reach * 1.01 + 1e-6):
                    continue
                u, vv, ww = _closest_on_triangle(px, py, pz, ax, ay, az, bx, by, bz, cx, cy, cz)
                dx = px - (u * ax + vv * bx + ww * cx)
                dy = py - (u * ay + vv * by + ww * cy)
                dz = pz - (u * az + vv * bz + ww * cz)
                d0 = np.sqrt(dx * dx + dy * dy + dz * dz)
                if d0 > reach + cons * (abs(rvx) + abs(rvy) + abs(rvz) + tri_motion):
                    continue
                ux_, uy_, uz_, vx_, vy_, vz_, tnx, tny, tnz = _frame(ax, ay, az, bx, by, bz, cx, cy, cz)
                if d0 > 1e-12:
                    nx, ny, nz = dx / d0, dy / d0, dz / d0
                else:
                    nx, ny, nz = tnx, tny, tnz
                rqx = u * rax + vv * rbx + ww * rcx
                rqy = u * ray + vv * rby + ww * rcy
                rqz = u * raz + vv * rbz + ww * rcz
                close = (rvx - rqx) * nx + (rvy - rqy) * ny + (rvz - rqz) * nz
                if d0 < reach or d0 + cons * close < reach:
                    if layered:
                        # Outer layer (higher order) stays on the normal side of the inner layer.
                        sgn = 1.0 if region_layer[tri_region[P]] > region_layer[tri_region[T]] else -1.0
                    else:
                        h = dx * tnx + dy * tny + dz * tnz
                        if h == 0.0:
                            # In the plane: it came from the side it is moving away from.
                            h = -((rvx - rqx) * tnx + (rvy - rqy) * tny + (rvz - rqz) * tnz)
                        sgn = 1.0 if h >= 0.0 else -1.0
                    u2, v2, w2 = _closest_on_triangle(
                        rest[v, 0], rest[v, 1], rest[v, 2], rest[a, 0], rest[a, 1], rest[a, 2],
                        rest[b, 0], rest[b, 1], rest[b, 2], rest[c, 0], rest[c, 1], rest[c, 2])
                    ex = rest[v, 0] - (u2 * rest[a, 0] + v2 * rest[b, 0] + w2 * rest[c, 0])
                    ey = rest[v, 1] - (u2 * rest[a, 1] + v2 * rest[b, 1] + w2 * rest[c, 1])
                    ez = rest[v, 2] - (u2 * rest[a, 2] + v2 * rest[b, 2] + w2 * rest[c, 2])
                    if count < cap:
                        out_kind[count] = KIND_VERTEX_TRIANGLE
                        out_vertex[count, 0] = v
                        out_vertex[count, 1] = a
                        out_vertex[count, 2] = b
                        out_vertex[count, 3] = c
                        out_normal[count, 0] = sgn
                        out_normal[count, 1] = 0.0
                        out_normal[count, 2] = 0.0
                        out_frame[count] = T
                        out_target[count] = min(thick, np.sqrt(ex * ex + ey * ey + ez * ez))
                        out_friction[count] = fric
                        out_pair[count, 0] = A
                        out_pair[count, 1] = B
                        out_pair[count, 2] = P
                        out_pair[count, 3] = T
                    count += 1
        if mode != MODE_FULL:
            continue
        # edge-edge
        for ka in range(3):
            ea = tri_edges[A, ka]
            a = edges[ea, 0]
            b = edges[ea, 1]
            ax = pos[0, a]
            ay = pos[1, a]
            az = pos[2, a]
            bx = pos[0, b]
            by = pos[1, b]
            bz = pos[2, b]
            rax = rel[0, a]
            ray = rel[1, a]
            raz = rel[2, a]
            rbx = rel[0, b]
            rby = rel[1, b]
            rbz = rel[2, b]
            h1x = bx - ax
            h1y = by - ay
            h1z = bz - az
            g1x = rbx - rax
            g1y = rby - ray
            g1z = rbz - raz
            l1 = np.sqrt(h1x * h1x + h1y * h1y + h1z * h1z)
            k1 = np.sqrt(g1x * g1x + g1y * g1y + g1z * g1z)
            for kb in range(3):
                eb = tri_edges[B, kb]
                c = edges[eb, 0]
                d = edges[eb, 1]
                cx = pos[0, c]
                cy = pos[1, c]
                cz = pos[2, c]
                dx_ = pos[0, d]
                dy_ = pos[1, d]
                dz_ = pos[2, d]
                rcx = rel[0, c]
                rcy = rel[1, c]
                rcz = rel[2, c]
                rdx_ = rel[0, d]
                rdy_ = rel[1, d]
                rdz_ = rel[2, d]
                # Cheap reject: the edges' bounding spheres and motions.
                sx = 0.5 * ((ax + bx) - (cx + dx_))
                sy = 0.5 * ((ay + by) - (cy + dy_))
                sz = 0.5 * ((az + bz) - (cz + dz_))
                h2x = dx_ - cx
                h2y = dy_ - cy
                h2z = dz_ - cz
                mx = 0.5 * ((rax + rbx) - (rcx + rdx_))
                my = 0.5 * ((ray + rby) - (rcy + rdy_))
                mz = 0.5 * ((raz + rbz) - (rcz + rdz_))
                g2x = rdx_ - rcx
                g2y = rdy_ - rcy
                g2z = rdz_ - rcz
                lo = np.sqrt(sx * sx + sy * sy + sz * sz) - 0.5 * (l1 + np.sqrt(h2x * h2x + h2y * h2y + h2z * h2z))
                mot = np.sqrt(mx * mx + my * my + mz * mz) + 0.5 * (k1 + np.sqrt(g2x * g2x + g2y * g2y + g2z * g2z))
                if lo - cons * mot > reach * 1.01 + 1e-6:
                    continue
                s, t = _closest_segments(ax, ay, az, bx, by, bz, cx, cy, cz, dx_, dy_, dz_)
                ddx = (ax + s * h1x) - (cx + t * h2x)
                ddy = (ay + s * h1y) - (cy + t * h2y)
                ddz = (az + s * h1z) - (cz + t * h2z)
                d0 = np.sqrt(ddx * ddx + ddy * ddy + ddz * ddz)
                rdx = (rax + s * g1x) - (rcx + t * g2x)
                rdy = (ray + s * g1y) - (rcy + t * g2y)
                rdz = (raz + s * g1z) - (rcz + t * g2z)
                if d0 > 1e-12:
                    nx, ny, nz = ddx / d0, ddy / d0, ddz / d0
                else:
                    # Crossing edges: the direction across both.
                    nx = h1y * h2z - h1z * h2y
                    ny = h1z * h2x - h1x * h2z
                    nz = h1x * h2y - h1y * h2x
                    ln = np.sqrt(nx * nx + ny * ny + nz * nz)
                    if ln < 1e-20:
                        continue
                    nx /= ln
                    ny /= ln
                    nz /= ln
                close = rdx * nx + rdy * ny + rdz * nz
                if d0 < reach or d0 + cons * close < reach:
                    f0 = triangles[A, 0]
                    f1 = triangles[A, 1]
                    f2 = triangles[A, 2]
                    ux_, uy_, uz_, vx_, vy_, vz_, fnx, fny, fnz = _frame(
                        pos[0, f0], pos[1, f0], pos[2, f0], pos[0, f1], pos[1, f1], pos[2, f1],
                        pos[0, f2], pos[1, f2], pos[2, f2])
                    if layered:
                        # Edge of A outside B's layer: the normal points the way A's
                        # layer lies from B's (A's face normal, with the layer's sign).
                        sgn = 1.0 if layA > layB else -1.0
                        f0 = triangles[B, 0]
                        f1 = triangles[B, 1]
                        f2 = triangles[B, 2]
                        _, _, _, _, _, _, bnx, bny, bnz = _frame(
                            pos[0, f0], pos[1, f0], pos[2, f0], pos[0, f1], pos[1, f1], pos[2, f1],
                            pos[0, f2], pos[1, f2], pos[2, f2])
                        if (nx * bnx + ny * bny + nz * bnz) * sgn < 0.0:
                            nx, ny, nz = -nx, -ny, -nz
                    s2, t2 = _closest_segments(
                        rest[a, 0], rest[a, 1], rest[a, 2], rest[b, 0], rest[b, 1], rest[b, 2],
                        rest[c, 0], rest[c, 1], rest[c, 2], rest[d, 0], rest[d, 1], rest[d, 2])
                    ex = (rest[a, 0] + s2 * (rest[b, 0] - rest[a, 0])) - (rest[c, 0] + t2 * (rest[d, 0] - rest[c, 0]))
                    ey = (rest[a, 1] + s2 * (rest[b, 1] - rest[a, 1])) - (rest[c, 1] + t2 * (rest[d, 1] - rest[c, 1]))
                    ez = (rest[a, 2] + s2 * (rest[b, 2] - rest[a, 2])) - (rest[c, 2] + t2 * (rest[d, 2] - rest[c, 2]))
                    if count < cap:
                        out_kind[count] = KIND_EDGE_EDGE
                        out_vertex[count, 0] = a
                        out_vertex[count, 1] = b
                        out_vertex[count, 2] = c
                        out_vertex[count, 3] = d
                        # Stored in A's frame, so a cached contact turns with the cloth.
                        out_normal[count, 0] = nx * ux_ + ny * uy_ + nz * uz_
                        out_normal[count, 1] = nx * vx_ + ny * vy_ + nz * vz_
                        out_normal[count, 2] = nx * fnx + ny * fny + nz * fnz
                        out_frame[count] = A
                        out_target[count] = min(thick, np.sqrt(ex * ex + ey * ey + ez * ez))
                        out_friction[count] = fric
                        out_pair[count, 0] = A
                        out_pair[count, 1] = B
                        out_pair[count, 2] = ea
                        out_pair[count, 3] = eb
                    count += 1
    stats[1] = narrow
    return count


@njit(**_JIT)
def _canonical(count, triangles, td, tri_region, mode_matrix, ring_start, ring, vtri_start, vtri, edge_tris,
               max_cons, max_reach, out_vertex, out_kind, out_normal, out_frame, out_target, out_friction,
               out_pair, scratch):
    """Keep each contact only from the lowest triangle pair that finds it
    (compacting the out arrays in place); returns the new count.

    A feature pair is found from every candidate pair of triangles around
    its features: the vertex-triangle pair (v, T) from every triangle around
    v against T, the edge pair from the triangles around the two edges, the
    point pair from the triangles around the two points. A triangle pair
    counts when it is a candidate (`_pair_near`, more than two rings
    apart, the regions' mode makes this kind): every such pair finds the
    contact too, since the narrow phase's rejects are conservative, so the
    lowest (A, B) in (min, max) order keeps it and the others drop it.
    """
    kept = 0
    for k in range(count):
        kind = out_kind[k]
        A = out_pair[k, 0]
        B = out_pair[k, 1]
        # Gather the alternative pairs that come before (A, B).
        ns = 0
        if kind == KIND_VERTEX_TRIANGLE:
            v = out_vertex[k, 0]
            P = out_pair[k, 2]
            T = out_pair[k, 3]
            need = MODE_FULL
            for j in range(vtri_start[v], vtri_start[v + 1]):
                t = vtri[j]
                if t >= P:
                    break
                scratch[ns, 0] = t
                scratch[ns, 1] = T
                ns += 1
        elif kind == KIND_EDGE_EDGE:
            ea = out_pair[k, 2]
            eb = out_pair[k, 3]
            need = MODE_FULL
            for i in range(edge_tris.shape[1]):
                t1 = edge_tris[ea, i]
                if t1 < 0:
                    continue
                for j in range(edge_tris.shape[1]):
                    t2 = edge_tris[eb, j]
                    if t2 < 0:
                        continue
                    lo = min(t1, t2)
                    hi = max(t1, t2)
                    if lo < A or (lo == A and hi < B):
                        scratch[ns, 0] = t1
                        scratch[ns, 1] = t2
                        ns += 1
        else:
            v = out_pair[k, 2]
            w = out_pair[k, 3]
            need = MODE_POINT_POINT
            for i in range(vtri_start[v], vtri_start[v + 1]):
                t1 = vtri[i]
                for j in range(vtri_start[w], vtri_start[w + 1]):
                    t2 = vtri[j]
                    lo = min(t1, t2)
                    hi = max(t1, t2)
                    if lo < A or (lo == A and hi < B):
                        scratch[ns, 0] = t1
                        scratch[ns, 1] = t2
                        ns += 1
        first = True
        for s in range(ns):
            t1 = scratch[s, 0]
            t2 = scratch[s, 1]
            r1 = tri_region[t1]
            r2 = tri_region[t2]
            if mode_matrix[max(r1, r2), min(r1, r2)] != need:
                continue
            near = False
            c0 = triangles[t2, 0]
            c1 = triangles[t2, 1]
            c2 = triangles[t2, 2]
            for j in range(ring_start[t1], ring_start[t1 + 1]):
                x = ring[j]
                if x == c0 or x == c1 or x == c2:
                    near = True
                    break
            if near:
                continue
            if _pair_near(td[t1, 0], td[t1, 1], td[t1, 2], td[t1, 3], td[t1, 4], td[t1, 5], td[t1, 6],
                          td[t1, 7], td[t1, 8], td[t1, 9], td[t1, 10], td[t1, 11], td[t1, 12], td[t1, 13],
                          td[t2, 0], td[t2, 1], td[t2, 2], td[t2, 3], td[t2, 4], td[t2, 5], td[t2, 6],
                          td[t2, 7], td[t2, 8], td[t2, 9], td[t2, 10], td[t2, 11], td[t2, 12], td[t2, 13],
                          max_cons, max_reach):
                first = False
                break
        if not first:
            continue
        if kept != k:
            out_kind[kept] = kind
            for j in range(4):
                out_vertex[kept, j] = out_vertex[k, j]
            for j in range(3):
                out_normal[kept, j] = out_normal[k, j]
            out_frame[kept] = out_frame[k]
            out_target[kept] = out_target[k]
            out_friction[kept] = out_friction[k]
        kept += 1
    return kept


@njit(**_JIT)
def detect(pos, vel, dt, gx, gy, gz, broad, rest, triangles, tri_edges, edges, edge_tris, tri_region,
           vtri_start, vtri, ring_start, ring, mode_matrix, region_thick, region_fric, region_cons,
           region_layer, margin, pstart, ptris, nstart, nbr, flat_cos, bvh_order, bvh_nodes, td, pd, box,
           pairs, scratch, out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, out_pair,
           stats):
    """Find the step's contacts: broad phase (`broad` = BROAD_PATCH, _GRID or
    _BVH) into `pairs`, narrow phase into the out arrays, then keep each
    contact once. Returns the contact count, or -1 when pos or vel hold NaN
    or Inf. stats: [candidate pairs sphere-tested, pairs through the narrow
    phase, candidate pairs kept, contacts found before the exactly-once
    rule]; when stats[2] exceeds len(pairs) or stats[3] the out arrays'
    length, nothing is valid: grow them and call again.
    """
    n = pos.shape[1]
    rel = np.empty((3, n), np.float32)
    if not _relative_motion(pos, vel, dt, gx, gy, gz, rel):
        return -1
    max_reach, max_cons = _reach(region_thick, region_cons, margin)
    _triangle_data(pos, rel, triangles, td)
    if broad == BROAD_PATCH:
        npairs = _broad_patches(td, triangles, tri_region, mode_matrix, ring_start, ring, n, pstart, ptris,
                                nstart, nbr, flat_cos, max_cons, max_reach, pd, pairs, stats)
    else:
        _global_boxes(td, max_cons, max_reach, box)
        if broad == BROAD_GRID:
            npairs = _broad_grid(td, box, triangles, tri_region, mode_matrix, ring_start, ring, n,
                                 max_cons, max_reach, pairs, stats)
        else:
            npairs = _broad_bvh(td, box, bvh_order, bvh_nodes, triangles, tri_region, mode_matrix,
                                ring_start, ring, n, max_cons, max_reach, pairs, stats)
    stats[2] = npairs
    stats[3] = 0
    if npairs > pairs.shape[0]:
        return 0
    found = _narrow(pairs, npairs, pos, rel, rest, triangles, tri_edges, edges, td, tri_region, region_thick,
                    region_fric, region_cons, region_layer, margin, max_cons, max_reach,
                    out_vertex, out_kind, out_normal, out_frame, out_target, out_friction, out_pair, stats)
    stats[3] = found
    if found > out_kind.shape[0]:
        return 0
    return _canonical(found, triangles, td, tri_region, mode_matrix, ring_start, ring, vtri_start, vtri,
                      edge_tris, max_cons, max_reach, out_vertex, out_kind, out_normal, out_frame, out_target,
                      out_friction, out_pair, scratch)



# ---------------------------------------------------------------- solve


def _solve_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active,
                vertex_list, vertex_slot_start, vertex_slot):
    _pass1_parallel(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                    triangles, contact_target, contact_friction, slot_delta, slot_active)
    _gather(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot)


def _pass1_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                triangles, contact_target, contact_friction, slot_delta, slot_active):
    # Pass 1: every contact computes its own vertices' corrections from `pos`
    # as it is now (nobody writes pos during this pass).
    nc = contact_kind.shape[0]
    for k in prange(nc):
        kind = contact_kind[k]
        i0 = contact_vertex[k, 0]
        i1 = contact_vertex[k, 1]
        i2 = contact_vertex[k, 2]
        i3 = contact_vertex[k, 3]
        c0 = 0.0
        c1 = 0.0
        c2 = 0.0
        c3 = 0.0
        nx = 0.0
        ny = 0.0
        nz = 0.0
        active = True
        if kind == KIND_POINT_POINT:
            nx = contact_normal[k, 0]
            ny = contact_normal[k, 1]
            nz = contact_normal[k, 2]
            c0 = 1.0
            c1 = -1.0
        elif kind == KIND_VERTEX_TRIANGLE:
            s = contact_normal[k, 0]
            # Early out: the gap along the normal is the height over the
            # triangle's plane; most frozen contacts are not violated, and
            # this needs no square root.
            e1x = pos[0, i2] - pos[0, i1]
            e1y = pos[1, i2] - pos[1, i1]
            e1z = pos[2, i2] - pos[2, i1]
            e2x = pos[0, i3] - pos[0, i1]
            e2y = pos[1, i3] - pos[1, i1]
            e2z = pos[2, i3] - pos[2, i1]
            mx_ = e1y * e2z - e1z * e2y
            my_ = e1z * e2x - e1x * e2z
            mz_ = e1x * e2y - e1y * e2x
            hh = s * ((pos[0, i0] - pos[0, i1]) * mx_ + (pos[1, i0] - pos[1, i1]) * my_
                      + (pos[2, i0] - pos[2, i1]) * mz_)
            tg = contact_target[k]
            if hh > 0.0 and hh * hh >= tg * tg * (mx_ * mx_ + my_ * my_ + mz_ * mz_):
                slot_active[k] = 0
                continue
            ux, uy, uz, vx, vy, vz, tnx, tny, tnz = _frame(
                pos[0, i1], pos[1, i1], pos[2, i1], pos[0, i2], pos[1, i2], pos[2, i2],
                pos[0, i3], pos[1, i3], pos[2, i3])
            px = pos[0, i0]
            py = pos[1, i0]
            pz = pos[2, i0]
            u, v, w = _closest_on_triangle(px, py, pz, pos[0, i1], pos[1, i1], pos[2, i1],
                                           pos[0, i2], pos[1, i2], pos[2, i2], pos[0, i3], pos[1, i3], pos[2, i3])
            qx = u * pos[0, i1] + v * pos[0, i2] + w * pos[0, i3]
            qy = u * pos[1, i1] + v * pos[1, i2] + w * pos[1, i3]
            qz = u * pos[2, i1] + v * pos[2, i2] + w * pos[2, i3]
            dx = px - qx
            dy = py - qy
            dz = pz - qz
            h = dx * tnx + dy * tny + dz * tnz
            # Only while the vertex is over the triangle: beside it (in the
            # plane, as in cloth squeezed flat) the triangle's normal is the
            # wrong way to push; the neighbouring triangle's contact or the
            # edge-edge contacts hold it there.
            tx = dx - h * tnx
            ty = dy - h * tny
            tz = dz - h * tnz
            tol = VT_REACH * contact_target[k]
            if tx * tx + ty * ty + tz * tz > tol * tol:
                active = False
            nx = s * tnx
            ny = s * tny
            nz = s * tnz
            c0 = 1.0
            c1 = -u
            c2 = -v
            c3 = -w
        else:
            f = contact_frame[k]
            f0 = triangles[f, 0]
            f1 = triangles[f, 1]
            f2 = triangles[f, 2]
            ux, uy, uz, vx, vy, vz, tnx, tny, tnz = _frame(
                pos[0, f0], pos[1, f0], pos[2, f0], pos[0, f1], pos[1, f1], pos[2, f1],
                pos[0, f2], pos[1, f2], pos[2, f2])
            a_ = contact_normal[k, 0]
            b_ = contact_normal[k, 1]
            n_ = contact_normal[k, 2]
            nx = a_ * ux + b_ * vx + n_ * tnx
            ny = a_ * uy + b_ * vy + n_ * tny
            nz = a_ * uz + b_ * vz + n_ * tnz
            s, t = _closest_segments(pos[0, i0], pos[1, i0], pos[2, i0], pos[0, i1], pos[1, i1], pos[2, i1],
                                     pos[0, i2], pos[1, i2], pos[2, i2], pos[0, i3], pos[1, i3], pos[2, i3])
            c0 = 1.0 - s
            c1 = s
            c2 = -(1.0 - t)
            c3 = -t
        # Relative position along n of the contact points.
        gap = c0 * (pos[0, i0] * nx + pos[1, i0] * ny + pos[2, i0] * nz) \
            + c1 * (pos[0, i1] * nx + pos[1, i1] * ny + pos[2, i1] * nz)
        if kind != KIND_POINT_POINT:
            gap += c2 * (pos[0, i2] * nx + pos[1, i2] * ny + pos[2, i2] * nz) \
                + c3 * (pos[0, i3] * nx + pos[1, i3] * ny + pos[2, i3] * nz)
        C = gap - contact_target[k]
        w0 = inv_mass[i0]
        w1 = inv_mass[i1]
        w2 = 0.0
        w3 = 0.0
        if kind != KIND_POINT_POINT:
            w2 = inv_mass[i2]
            w3 = inv_mass[i3]
        wsum = w0 * c0 * c0 + w1 * c1 * c1 + w2 * c2 * c2 + w3 * c3 * c3
        if C >= 0.0 or not active or wsum <= 1e-20:
            slot_active[k] = 0
            continue
        slot_active[k] = 1
        lam = -C / wsum
        # Friction: relative tangential motion of the contact points over this substep.
        mu = contact_friction[k]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        if mu > 0.0:
            dx = c0 * (pos[0, i0] - prev_pos[0, i0]) + c1 * (pos[0, i1] - prev_pos[0, i1])
            dy = c0 * (pos[1, i0] - prev_pos[1, i0]) + c1 * (pos[1, i1] - prev_pos[1, i1])
            dz = c0 * (pos[2, i0] - prev_pos[2, i0]) + c1 * (pos[2, i1] - prev_pos[2, i1])
            if kind != KIND_POINT_POINT:
                dx += c2 * (pos[0, i2] - prev_pos[0, i2]) + c3 * (pos[0, i3] - prev_pos[0, i3])
                dy += c2 * (pos[1, i2] - prev_pos[1, i2]) + c3 * (pos[1, i3] - prev_pos[1, i3])
                dz += c2 * (pos[2, i2] - prev_pos[2, i2]) + c3 * (pos[2, i3] - prev_pos[2, i3])
            dn = dx * nx + dy * ny + dz * nz
            tx = dx - dn * nx
            ty = dy - dn * ny
            tz = dz - dn * nz
            tl = np.sqrt(tx * tx + ty * ty + tz * tz)
            limit = mu * (-C)
            if tl > 1e-12:
                scale = 1.0 if tl <= limit else limit / tl
                fx = -tx * scale / wsum
                fy = -ty * scale / wsum
                fz = -tz * scale / wsum
        gx = lam * nx + fx
        gy = lam * ny + fy
        gz = lam * nz + fz
        slot_delta[k, 0, 0] = w0 * c0 * gx
        slot_delta[k, 0, 1] = w0 * c0 * gy
        slot_delta[k, 0, 2] = w0 * c0 * gz
        slot_delta[k, 1, 0] = w1 * c1 * gx
        slot_delta[k, 1, 1] = w1 * c1 * gy
        slot_delta[k, 1, 2] = w1 * c1 * gz
        slot_delta[k, 2, 0] = w2 * c2 * gx
        slot_delta[k, 2, 1] = w2 * c2 * gy
        slot_delta[k, 2, 2] = w2 * c2 * gz
        slot_delta[k, 3, 0] = w3 * c3 * gx
        slot_delta[k, 3, 1] = w3 * c3 * gy
        slot_delta[k, 3, 2] = w3 * c3 * gz


_pass1_serial = njit(**_JIT)(_pass1_impl)
_pass1_parallel = njit(parallel=True, **_JIT)(_pass1_impl)


def _gather_impl(pos, slot_delta, slot_active, vertex_list, vertex_slot_start, vertex_slot):
    # Pass 2: every vertex averages its active contacts' corrections, in the
    # fixed order of its slot list.
    for q in prange(vertex_list.shape[0]):
        i = vertex_list[q]
        sx = 0.0
        sy = 0.0
        sz = 0.0
        nact = 0
        for j in range(vertex_slot_start[q], vertex_slot_start[q + 1]):
            code = vertex_slot[j]
            k = code >> 2
            if slot_active[k] == 0:
                continue
            sl = code & 3
            sx += slot_delta[k, sl, 0]
            sy += slot_delta[k, sl, 1]
            sz += slot_delta[k, sl, 2]
            nact += 1
        if nact > 0:
            inv = 1.0 / nact
            pos[0, i] += sx * inv
            pos[1, i] += sy * inv
            pos[2, i] += sz * inv


@njit(**_JIT)
def _scatter(pos, slot_delta, slot_active, contact_vertex, contact_kind, acc):
    """Pass 2, serial: the same sums as _gather (each vertex adds its active
    contacts' float32 corrections in contact order, in float64), reading only
    the contacts, in order, instead of every vertex's slot list; then each
    touched vertex moves by its mean correction and its sum is cleared."""
    nc = contact_kind.shape[0]
    for k in range(nc):
        if slot_active[k] == 0:
            continue
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for sl in range(m):
            i = contact_vertex[k, sl]
            acc[i, 0] += slot_delta[k, sl, 0]
            acc[i, 1] += slot_delta[k, sl, 1]
            acc[i, 2] += slot_delta[k, sl, 2]
            acc[i, 3] += 1.0
    for k in range(nc):
        if slot_active[k] == 0:
            continue
        m = 2 if contact_kind[k] == KIND_POINT_POINT else 4
        for sl in range(m):
            i = contact_vertex[k, sl]
            if acc[i, 3] > 0.0:
                inv = 1.0 / acc[i, 3]
                pos[0, i] += acc[i, 0] * inv
                pos[1, i] += acc[i, 1] * inv
                pos[2, i] += acc[i, 2] * inv
                acc[i, 0] = 0.0
                acc[i, 1] = 0.0
                acc[i, 2] = 0.0
                acc[i, 3] = 0.0


_gather = njit(parallel=True, **_JIT)(_gather_impl)
solve_parallel = njit(parallel=True, **_JIT)(_solve_impl)


def _solve_serial_impl(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                       triangles, contact_target, contact_friction, slot_delta, slot_active, acc):
    _pass1_serial(pos, prev_pos, inv_mass, contact_vertex, contact_kind, contact_normal, contact_frame,
                  triangles, contact_target, contact_friction, slot_delta, slot_active)
    _scatter(pos, slot_delta, slot_active, contact_vertex, contact_kind, acc)


# One Jacobi pass over the frozen contacts, single-threaded; pos (3, n)
# float32 is updated in place. Callable from Python or from another njit
# function, with SelfCollision.solve_args() (re-read after every detect):
#     solve_serial(pos, prev_pos, *sc.solve_args())
# Arguments after pos, prev_pos: inv_mass (n,) float32; contact_vertex
# (c, 4) int32; contact_kind (c,) int8; contact_normal (c, 3) float32;
# contact_frame (c,) int32; triangles (t, 3) int32; contact_target (c,)
# float32; contact_friction (c,) float32; slot_delta (c, 4, 3) float32 and
# slot_active (c,) uint8 (scratch); acc (n, 4) float64 (scratch, all zero
# between calls). Bit-identical to solve_parallel for any thread count.
solve_serial = njit(**_JIT)(_solve_serial_impl)


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


# ---------------------------------------------------------------- patches (once per model)


@njit(cache=True)
def build_patches(triangles, tri_edges, n_edges, n, seed_order, patch_size):
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
        while head < tail and size < patch_size:
            t = queue[head]
            head += 1
            ptris[q] = t
            q += 1
            size += 1
            for k in range(3):
                e = tri_edges[t, k]
                for j in range(deg[e], deg[e + 1]):
                    u = etri[j]
                    if patch_of[u] < 0 and tail - head + size < patch_size:
                        patch_of[u] = np_
                        queue[tail] = u
                        tail += 1
        # Queued but not taken (cannot happen with the bound above, kept safe).
        for j in range(head, tail):
            patch_of[queue[j]] = -1
        np_ += 1
        pstart[np_] = q
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
