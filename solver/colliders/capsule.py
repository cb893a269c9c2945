"""Capsule colliders (round cones: two end points, a radius at each end; a
sphere when the ends meet), moving linearly over the step.

Capsules is the record the caller fills; pack_capsules checks and packs it
for the kernels ((k, 14): a0, b0, a1, b1, radius_a, radius_b). Per substep:
prepare_capsules (axis, length, radii grown by the margin), the swept
contacts of the vertices whose path meets a capsule's box (entry plane and
collider velocity, swept_contacts_into), and the distance functions the
projection (colliders.project_colliders_into) uses.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import EPS, F0, F1, FHALF, TRACE_EPS
from ..hardware import compact_flags
from ..params import _F32, _F64, SolverError
from ..jit import FLAT, KERNEL as JIT, NoAliasCompiler


@njit(inline="always", **JIT)
def _sphere_push(vx, vy, vz, r, s, ax, ay, az):
    """The capsule distances' result for a point at offset v from its closest
    sphere (radius r, axis fraction s): (distance, unit normal, s). On the
    axis (v = 0) any direction perpendicular to the axis (ax, ay, az) will do."""
    d2 = vx * vx + vy * vy + vz * vz
    if d2 > EPS * EPS:
        dc = np.sqrt(d2)
        inv = F1 / dc
        return dc - r, vx * inv, vy * inv, vz * inv, s
    if abs(ax) < abs(ay):
        nx, ny, nz = F0, -az, ay
    else:
        nx, ny, nz = az, F0, -ax
    nl = np.sqrt(nx * nx + ny * ny + nz * nz)
    if nl < EPS:
        return -r, F0, F0, F1, s
    return -r, nx / nl, ny / nl, nz / nl, s


@njit(inline="always", **JIT)
def capsule_distance(px, py, pz, ax, ay, az, bx, by, bz, ra, rb):
    """Signed distance to a round cone (a capsule with one radius per end):
    min over s of |p - c(s)| - r(s), the union of spheres along the axis.
    Returns (distance, unit normal, axis fraction of the closest sphere)."""
    dx, dy, dz = bx - ax, by - ay, bz - az
    l2 = dx * dx + dy * dy + dz * dz
    qx, qy, qz = px - ax, py - ay, pz - az
    if l2 < EPS * EPS:
        s = F0
        r = ra if ra > rb else rb
        cx, cy, cz = ax, ay, az
    else:
        ln = np.sqrt(l2)
        inv = F1 / ln
        ux, uy, uz = dx * inv, dy * inv, dz * inv
        x = qx * ux + qy * uy + qz * uz
        ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
        y = np.sqrt(ex * ex + ey * ey + ez * ez)
        kk = (ra - rb) * inv
        if kk * kk < np.float32(0.999999):
            sd = x - kk * y / np.sqrt(F1 - kk * kk)
        elif ra > rb:
            sd = F0
        else:
            sd = ln
        if sd < F0:
            sd = F0
        if sd > ln:
            sd = ln
        s = sd * inv
        r = ra + (rb - ra) * s
        cx, cy, cz = ax + sd * ux, ay + sd * uy, az + sd * uz
    return _sphere_push(px - cx, py - cy, pz - cz, r, s, dx, dy, dz)


@njit(**JIT)
def prepare_capsules(cap, margin):
    """Per-capsule constants for capsule_distance_pre (k, 12): a(3), unit
    axis(3), length, 1/length, ra, rb (margin added), slope of the tangent
    condition, mode (0 round cone, 1 sphere at a, 2 sphere at b)."""
    pre = np.empty((cap.shape[0], 12), dtype=np.float32)
    prepare_capsules_into(cap, margin, pre)
    return pre


@njit(**FLAT)
def prepare_capsules_into(cap, margin, pre):
    """prepare_capsules into pre (k, 12), allocating nothing: the step's
    per-substep passes compile without reference counting (FLAT)."""
    k = cap.shape[0]
    for j in range(k):
        for c in range(12):
            pre[j, c] = F0
        ax, ay, az = cap[j, 0], cap[j, 1], cap[j, 2]
        dx, dy, dz = cap[j, 3] - ax, cap[j, 4] - ay, cap[j, 5] - az
        ra = cap[j, 6] + margin
        rb = cap[j, 7] + margin
        ln = np.sqrt(dx * dx + dy * dy + dz * dz)
        pre[j, 0], pre[j, 1], pre[j, 2] = ax, ay, az
        pre[j, 8], pre[j, 9] = ra, rb
        if ln < EPS:
            pre[j, 5] = F1
            pre[j, 11] = np.float32(1.0)
            if rb > ra:
                pre[j, 8] = rb
            continue
        inv = F1 / ln
        pre[j, 3], pre[j, 4], pre[j, 5] = dx * inv, dy * inv, dz * inv
        pre[j, 6], pre[j, 7] = ln, inv
        kk = (ra - rb) * inv
        if kk * kk < np.float32(0.999999):
            pre[j, 10] = kk / np.sqrt(F1 - kk * kk)
        else:
            pre[j, 11] = np.float32(1.0) if ra > rb else np.float32(2.0)


@njit(inline="always", **JIT)
def capsule_row_off(pre, j, off):
    """Row j of prepare_capsules as a tuple of scalars, both radii grown by
    off (a vertex's collider offset: an outer layer of clothing keeps clear
    of the body by the inner layers' thickness; the same difference of radii
    keeps the slope and mode). Per-element helpers take scalars and tuples,
    never arrays: an array argument makes numba refcount it on every call
    (atomic NRT_incref/decref that LLVM cannot prune past a branch), which
    made per-vertex loops 100x slower. This accessor has no branch, so its
    own refcounts are pruned."""
    return (pre[j, 0], pre[j, 1], pre[j, 2], pre[j, 3], pre[j, 4], pre[j, 5],
            pre[j, 6], pre[j, 7], pre[j, 8] + off, pre[j, 9] + off, pre[j, 10], pre[j, 11])


@njit(inline="always", **JIT)
def box_row(box, j):
    """Row j of a (k, 6) min/max box array as a tuple (see capsule_row_off)."""
    return (box[j, 0], box[j, 1], box[j, 2], box[j, 3], box[j, 4], box[j, 5])


@njit(inline="always", **JIT)
def capsule_distance_pre(px, py, pz, c):
    """capsule_distance with the per-capsule constants c = capsule_row_off(pre, j, off)
    of prepare_capsules: one sqrt and one division for equal radii."""
    qx, qy, qz = px - c[0], py - c[1], pz - c[2]
    ux, uy, uz = c[3], c[4], c[5]
    ln = c[6]
    x = qx * ux + qy * uy + qz * uz
    mode = c[11]
    slope = c[10]
    if mode == F0:
        sd = x
        if slope != F0:
            ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
            sd = x - slope * np.sqrt(ex * ex + ey * ey + ez * ez)
        if sd < F0:
            sd = F0
        if sd > ln:
            sd = ln
    elif mode == F1:
        sd = F0
    else:
        sd = ln
    s = sd * c[7]
    r = c[8] + (c[9] - c[8]) * s
    return _sphere_push(qx - sd * ux, qy - sd * uy, qz - sd * uz, r, s, ux, uy, uz)


@njit(inline="always", **JIT)
def outside_capsule(px, py, pz, ax, ay, az, ux, uy, uz, ln, rmax):
    """True if the point is farther than rmax from the axis segment (a, a +
    ln u): then it is outside the round cone (every sphere along the axis
    has a radius of at most rmax). Squared, no square root or division: most
    of the vertices the projection visits are near a capsule, not in it, and
    the full distance (capsule_distance_pre) cost them a square root, a
    division and the sphere push's branches."""
    qx, qy, qz = px - ax, py - ay, pz - az
    x = qx * ux + qy * uy + qz * uz
    x = min(max(x, F0), ln)
    ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
    return ex * ex + ey * ey + ez * ez > rmax * rmax


@njit(**JIT)
def capsule_boxes(cap0, cap1, margin):
    """Axis-aligned boxes around each capsule's sweep over the substep
    (cap0 -> cap1), grown by the larger radius and the margin; (k, 6) min, max."""
    box = np.empty((cap1.shape[0], 6), dtype=np.float32)
    capsule_boxes_into(cap0, cap1, margin, box)
    return box


@njit(**FLAT)
def capsule_boxes_into(cap0, cap1, margin, box):
    """capsule_boxes into box (k, 6), allocating nothing."""
    k = cap1.shape[0]
    for j in range(k):
        r = max(cap1[j, 6], cap1[j, 7]) + margin
        for c in range(3):
            lo = min(min(cap0[j, c], cap0[j, 3 + c]), min(cap1[j, c], cap1[j, 3 + c]))
            hi = max(max(cap0[j, c], cap0[j, 3 + c]), max(cap1[j, c], cap1[j, 3 + c]))
            box[j, c] = lo - r
            box[j, 3 + c] = hi + r


@njit(**FLAT)
def swept_box_union(box):
    """Box around every capsule's swept box as a tuple (min xyz, max xyz):
    one cheap test per vertex before the per-capsule work."""
    lx = ly = lz = np.float32(3e38)
    hx = hy = hz = np.float32(-3e38)
    for j in range(box.shape[0]):
        lx = min(lx, box[j, 0])
        ly = min(ly, box[j, 1])
        lz = min(lz, box[j, 2])
        hx = max(hx, box[j, 3])
        hy = max(hy, box[j, 4])
        hz = max(hz, box[j, 5])
    return (lx, ly, lz, hx, hy, hz)


@njit(inline="always", **JIT)
def path_misses(x0, y0, z0, x1, y1, z1, u):
    """True if the path box misses box u (a tuple, see box_row). One `|` of
    six comparisons, no short-circuit branches: it also serves the
    vectorised row pass (_advance_rows)."""
    return ((max(x0, x1) < u[0]) | (min(x0, x1) > u[3]) | (max(y0, y1) < u[1])
            | (min(y0, y1) > u[4]) | (max(z0, z1) < u[2]) | (min(z0, z1) > u[5]))


@njit(**JIT)
def generate_contacts(pos, prev, inv_mass, cap0, cap1, margin, hit, entry, cmask, pad):
    """Swept capsule contacts for this substep: the segment from the vertex's
    substep-start position (carried along with the capsule, so a capsule that
    sweeps past a still vertex is seen) to its predicted position, against the
    capsule at substep end, by Newton steps on the (convex) distance along it.
    hit[i] = 1 + index of the capsule entered first (0 = none) and
    entry[:, i] = entry point, entry normal, surface velocity. cmask[i]: the
    vertex's collider offset (capsule radii grow by it), negative = it
    ignores the capsules (an outer layer that collides with cloth only);
    pad: the largest offset."""
    n = np.uint64(pos.shape[1])
    k = cap1.shape[0]
    box = capsule_boxes(cap0, cap1, margin + pad)
    ubox = swept_box_union(box)
    cand = np.empty(n, dtype=np.uint32)
    count = 0
    for i in range(n):
        hit[i] = 0
        if inv_mass[i] == F0 or k == 0 or cmask[i] < F0:
            continue
        if path_misses(prev[0, i], prev[1, i], prev[2, i], pos[0, i], pos[1, i], pos[2, i], ubox):
            continue
        cand[count] = i
        count += 1
    swept_contacts(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask)


@njit(inline="always", **JIT)
def _capsule_distance_rows(px, py, pz, c, perp):
    """capsule_distance_pre without branches, for the vectorised swept pass:
    the mode and slope (per capsule, the same for every lane) select instead
    of branching, and perp is the capsule's fallback normal for a point on
    its axis (a tuple, see _axis_perpendicular). Same results up to
    rounding."""
    qx, qy, qz = px - c[0], py - c[1], pz - c[2]
    ux, uy, uz = c[3], c[4], c[5]
    ln = c[6]
    x = qx * ux + qy * uy + qz * uz
    ex, ey, ez = qx - x * ux, qy - x * uy, qz - x * uz
    sd = x - c[10] * np.sqrt(ex * ex + ey * ey + ez * ez)
    sd = min(max(sd, F0), ln)
    sd = F0 if c[11] == F1 else sd
    sd = ln if c[11] == np.float32(2.0) else sd
    s = sd * c[7]
    r = c[8] + (c[9] - c[8]) * s
    vx, vy, vz = qx - sd * ux, qy - sd * uy, qz - sd * uz
    d2 = vx * vx + vy * vy + vz * vz
    off_axis = d2 > EPS * EPS
    dc = np.sqrt(max(d2, EPS * EPS))
    inv = F1 / dc
    d = dc - r if off_axis else -r
    nx = vx * inv if off_axis else perp[0]
    ny = vy * inv if off_axis else perp[1]
    nz = vz * inv if off_axis else perp[2]
    return d, nx, ny, nz, s


@njit(inline="always", **JIT)
def _axis_perpendicular(ux, uy, uz):
    """The unit normal _sphere_push gives a point on the axis (ux, uy, uz)."""
    _, nx, ny, nz, _ = _sphere_push(F0, F0, F0, F0, F0, ux, uy, uz)
    return nx, ny, nz


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _path_rows(cand, count, x0r, y0r, z0r, x1r, y1r, z1r, cmask, path):
    """The candidates' paths as rows (7, count): start x, y, z, predicted x,
    y, z, collider offset; read once, then every capsule's passes load them
    contiguously."""
    for q in range(np.uint64(count)):
        i = cand[q]
        path[0, q] = x0r[i]
        path[1, q] = y0r[i]
        path[2, q] = z0r[i]
        path[3, q] = x1r[i]
        path[4, q] = y1r[i]
        path[5, q] = z1r[i]
        path[6, q] = cmask[i]


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _path_box_flags(count, x0r, y0r, z0r, x1r, y1r, z1r, bx, sel):
    """sel[q] = 1 where path q's box meets box bx (a tuple), else 0."""
    for q in range(np.uint64(count)):
        sel[q] = 0 if path_misses(x0r[q], y0r[q], z0r[q], x1r[q], y1r[q], z1r[q], bx) else 1


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def _swept_rows(sub, count, x0r, y0r, z0r, x1r, y1r, z1r, offr, c, perp, e0, e1, inv_l2, move,
                sxr, syr, szr, dr, nxr, nyr, nzr, sr, at_start, newton):
    """The branch-free part of the swept contacts against one capsule (see
    swept_contacts), one lane per path t of sub[:count] (indices into the
    path rows of _path_rows, whose boxes meet the capsule's): the start
    position carried into the frame of the capsule at substep end (sxr,
    syr, szr[t]) and its distance, normal and axis fraction (dr, nxr, nyr,
    nzr, sr[t]). at_start[t] = 1: the path enters at its start (u = 0);
    newton[t] = 1: it may enter later, and only the Newton steps can tell.
    c = capsule_row_off(pre, j, 0) (each lane adds its vertex's collider
    offset); perp: the capsule's normal for a point on its axis; e0, e1:
    the end points at substep start and end; inv_l2 = 1 / |b0 - a0|^2 (0
    for a sphere); move: how far the capsule's axis moves over the substep."""
    ax0, ay0, az0 = e0[0], e0[1], e0[2]
    dx0, dy0, dz0 = e0[3] - ax0, e0[4] - ay0, e0[5] - az0
    tax, tay, taz = e1[0] - ax0, e1[1] - ay0, e1[2] - az0
    tbx, tby, tbz = e1[3] - e0[3], e1[4] - e0[4], e1[5] - e0[5]
    for t in range(np.uint64(count)):
        q = sub[t]
        x0, y0, z0 = x0r[q], y0r[q], z0r[q]
        x1, y1, z1 = x1r[q], y1r[q], z1r[q]
        off = offr[q]
        cc = (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8] + off, c[9] + off, c[10], c[11])
        path = np.sqrt((x1 - x0) * (x1 - x0) + (y1 - y0) * (y1 - y0) + (z1 - z0) * (z1 - z0))
        de, _, _, _, _ = _capsule_distance_rows(x1, y1, z1, cc, perp)
        f = ((x0 - ax0) * dx0 + (y0 - ay0) * dy0 + (z0 - az0) * dz0) * inv_l2
        f = min(max(f, F0), F1)
        g = F1 - f
        sx = x0 + g * tax + f * tbx
        sy = y0 + g * tay + f * tby
        sz = z0 + g * taz + f * tbz
        ex, ey, ez = x1 - sx, y1 - sy, z1 - sz
        seg = np.sqrt(ex * ex + ey * ey + ez * ez)
        d, nx, ny, nz, s = _capsule_distance_rows(sx, sy, sz, cc, perp)
        # Culls: the end point is farther than the path and the capsule's
        # motion can bring it (the distance is 1-Lipschitz); the start is
        # farther than the path in the capsule's frame is long, or both ends are.
        cull = (de > path + move) | (d > seg) | ((d > TRACE_EPS) & (d + de > seg))
        r = cc[8] + (cc[9] - cc[8]) * s
        # Started inside: a vertex resting on the surface that the capsule
        # moved into counts as entering where it touched; one deep inside
        # is left to the live push-out. Started on the surface (within
        # TRACE_EPS): enters at once.
        inside = d < F0
        first = (inside & (d > -FHALF * r)) | ((d >= F0) & (d < TRACE_EPS) & (seg > EPS))
        # Newton's first step: f'(0) = n . e >= 0, the path's closest
        # approach is behind it, no hit.
        later = (d >= TRACE_EPS) & (seg > EPS) & (nx * ex + ny * ey + nz * ez < F0)
        at_start[t] = 0 if cull else (1 if first else 0)
        newton[t] = 0 if cull else (1 if later else 0)
        sxr[t], syr[t], szr[t] = sx, sy, sz
        dr[t], nxr[t], nyr[t], nzr[t], sr[t] = d, nx, ny, nz, s


@njit(**JIT)
def _newton_entry(sx, sy, sz, ex, ey, ez, d, nx, ny, nz, s, c):
    """Where the path s + u e (u in [0, 1], in the frame of the capsule at
    substep end) first reaches the capsule c = capsule_row_off(pre, j, off),
    from u = 0 at distance d > 0 with normal n moving towards it (n . e < 0).
    A round cone is convex, so the distance along the path, f(u), is
    convex: Newton from u = 0 (slope f'(u) = n . e) stays left of the
    first root and converges to it in a few steps, where sphere tracing
    (slope 1) crawled along a surface the vertex slides on for up to 32
    steps. f' >= 0 before reaching the surface: the path's closest approach
    is behind, no hit. Returns (found, u, entry point, normal, axis fraction)."""
    u = F0
    hx, hy, hz = sx, sy, sz
    found = False
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
        d, nx, ny, nz, s = capsule_distance_pre(hx, hy, hz, c)
    return found, u, hx, hy, hz, nx, ny, nz, s


@njit(inline="always", **JIT)
def _write_entry(i, j, hx, hy, hz, nx, ny, nz, s, cap1, hit, entry):
    """hit[i] = j + 1 and the entry (point, normal, surface velocity at axis fraction s)."""
    hit[i] = j + 1
    entry[0, i], entry[1, i], entry[2, i] = hx, hy, hz
    entry[3, i], entry[4, i], entry[5, i] = nx, ny, nz
    g = F1 - s
    entry[6, i] = g * cap1[j, 8] + s * cap1[j, 11]
    entry[7, i] = g * cap1[j, 9] + s * cap1[j, 12]
    entry[8, i] = g * cap1[j, 10] + s * cap1[j, 13]


@njit(**JIT)
def swept_contacts(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask):
    """swept_contacts_into with its scratch allocated here (the general
    path and tests; the step's fast path passes scratch it holds)."""
    scratch = sweep_scratch(count, cap1.shape[0])
    prepare_capsules_into(cap1, margin, scratch[0])
    swept_contacts_into(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask, scratch)


@njit(**JIT)
def sweep_scratch(n, k):
    """Scratch of swept_contacts_into for n paths and k capsules: the
    capsules' prepared rows (prepare_capsules_into fills them) and the flat
    row blocks of the paths (it zeroes what it uses)."""
    room = (n + 7) // 8 * 8
    return (np.empty((k, 12), dtype=np.float32), np.empty(16 * room, dtype=np.float32),
            np.empty(3 * room, dtype=np.uint8), np.empty(2 * room, dtype=np.uint32))


@njit(pipeline_class=NoAliasCompiler, **FLAT)
def swept_contacts_into(cand, count, pos, prev, cap0, cap1, box, margin, hit, entry, cmask, scratch):
    """Swept contacts of the candidate vertices cand[:count] (their paths
    meet the capsules' union box; hit[i] = 0 on entry) against every capsule,
    grown by each vertex's collider offset cmask[i] (box: grown by the
    largest): the path from the vertex's substep-start position, carried
    along with the capsule (so a capsule that sweeps past a still vertex is
    seen), to its predicted position, against the capsule at substep end.
    The first capsule entered along the path wins.
    Vectorised passes: the paths are read into rows once (_path_rows); per
    capsule, a box test lists the paths that meet its swept box, and
    _swept_rows culls those that cannot reach it and finds those that enter
    at their start (a vertex resting on the capsule). Only the rest take
    Newton steps (_newton_entry), one at a time: on the 100x100 sheet with
    the swinging capsule ~340 of ~1,600 candidates a substep. The scalar code
    had cost ~50 ns a candidate; with many capsules (a character's bones)
    the box test per capsule keeps each one's work to the paths near it."""
    k = cap1.shape[0]
    if count == 0 or k == 0:
        return
    # scratch (sweep_scratch): pre = prepare_capsules(cap1, margin), rows
    # for at least count paths. Nothing is allocated here: a FLAT kernel
    # (no reference counts; at 20 substeps of a 32x32 sheet the
    # allocations and counts of each call showed).
    # The blocks are flat and reshaped to the rows needed: C-contiguous
    # rows for the vectorised passes (a column slice of a 2-D block is not).
    pre, block_all, flags_all, lists_all = scratch
    room = (count + 7) // 8 * 8
    block = block_all[:16 * room].reshape(16, room)
    path, rows, best = block[:7], block[7:15], block[15]
    best[:] = np.float32(2.0)
    flags = flags_all[:3 * room].reshape(3, room)
    flags[:] = 0
    lists = lists_all[:2 * room].reshape(2, room)
    sub, todo = lists[0], lists[1]
    _path_rows(cand, count, prev[0], prev[1], prev[2], pos[0], pos[1], pos[2], cmask, path)
    for j in range(k):
        _path_box_flags(count, path[0], path[1], path[2], path[3], path[4], path[5], box_row(box, j), flags[2])
        ns = compact_flags(flags[2], sub)
        if ns == 0:
            continue
        # How far any point of the capsule's axis moves over the substep (at
        # most as far as its farther end).
        da = ((cap1[j, 0] - cap0[j, 0]) ** 2 + (cap1[j, 1] - cap0[j, 1]) ** 2
              + (cap1[j, 2] - cap0[j, 2]) ** 2)
        db = ((cap1[j, 3] - cap0[j, 3]) ** 2 + (cap1[j, 4] - cap0[j, 4]) ** 2
              + (cap1[j, 5] - cap0[j, 5]) ** 2)
        move = np.sqrt(max(da, db))
        e0 = (cap0[j, 0], cap0[j, 1], cap0[j, 2], cap0[j, 3], cap0[j, 4], cap0[j, 5])
        e1 = (cap1[j, 0], cap1[j, 1], cap1[j, 2], cap1[j, 3], cap1[j, 4], cap1[j, 5])
        l2 = (e0[3] - e0[0]) ** 2 + (e0[4] - e0[1]) ** 2 + (e0[5] - e0[2]) ** 2
        inv_l2 = F1 / l2 if l2 > EPS * EPS else F0
        c = capsule_row_off(pre, j, F0)
        perp = _axis_perpendicular(c[3], c[4], c[5])
        _swept_rows(sub, ns, path[0], path[1], path[2], path[3], path[4], path[5], path[6], c, perp, e0, e1,
                    inv_l2, move, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7],
                    flags[0], flags[1])
        rs = (ns + 7) // 8 * 8
        flags[:2, ns:rs] = 0
        m = compact_flags(flags[0, :rs], todo)
        for u in range(m):
            t = todo[u]
            q = sub[t]
            if best[q] > F0:
                best[q] = F0
                d = min(rows[3, t], F0)
                nx, ny, nz = rows[4, t], rows[5, t], rows[6, t]
                _write_entry(cand[q], j, rows[0, t] - d * nx, rows[1, t] - d * ny, rows[2, t] - d * nz,
                             nx, ny, nz, rows[7, t], cap1, hit, entry)
        m = compact_flags(flags[1, :rs], todo)
        for u in range(m):
            t = todo[u]
            q = sub[t]
            sx, sy, sz = rows[0, t], rows[1, t], rows[2, t]
            found, uu, hx, hy, hz, nx, ny, nz, s = _newton_entry(
                sx, sy, sz, path[3, q] - sx, path[4, q] - sy, path[5, q] - sz, rows[3, t], rows[4, t],
                rows[5, t], rows[6, t], rows[7, t], capsule_row_off(pre, j, path[6, q]))
            if found and uu < best[q]:
                best[q] = uu
                _write_entry(cand[q], j, hx, hy, hz, nx, ny, nz, s, cap1, hit, entry)


@njit(cache=True)
def pack_capsules(a0, b0, a1, b1, ra, rb, out):
    """out (k, 14) float32 = a0, b0, a1, b1 (k, 3), radius_a, radius_b (k,),
    as Capsules.packed. Returns 0, or 1 if a value is NaN or Inf (or does
    not fit in float32), 2 if a radius is negative (1 | 2 for both)."""
    bad = 0
    for j in range(out.shape[0]):
        for c in range(3):
            out[j, c] = a0[j, c]
            out[j, 3 + c] = b0[j, c]
            out[j, 6 + c] = a1[j, c]
            out[j, 9 + c] = b1[j, c]
        out[j, 12] = ra[j]
        out[j, 13] = rb[j]
        for c in range(14):
            if not np.isfinite(out[j, c]):
                bad |= 1
        if out[j, 12] < F0 or out[j, 13] < F0:
            bad |= 2
    return bad


@dataclass
class Capsules:
    """k capsules (round cones), end points at step start (a0, b0) and end (a1, b1).

    a0, b0, a1, b1: (k, 3) world space. radius_a, radius_b: (k,) radius at the
    a and b ends (metres). Transforms are interpolated linearly across
    substeps. A capsule with a == b is a sphere.
    """

    a0: np.ndarray
    b0: np.ndarray
    a1: np.ndarray
    b1: np.ndarray
    radius_a: np.ndarray
    radius_b: np.ndarray

    def packed(self):
        """(k, 14) float32: a0, b0, a1, b1, radius_a, radius_b."""
        # Called every step. Float arrays of the right shapes, one dtype:
        # one compiled pass (kernels.pack_capsules); anything else goes the
        # general way below.
        a0, b0, a1, b1, ra, rb = self.a0, self.b0, self.a1, self.b1, self.radius_a, self.radius_b
        if (type(a0) is np.ndarray and type(b0) is np.ndarray and type(a1) is np.ndarray
                and type(b1) is np.ndarray and type(ra) is np.ndarray and type(rb) is np.ndarray):
            dt = a0.dtype
            k = a0.shape[0] if a0.ndim == 2 else -1
            if ((dt == _F64 or dt == _F32) and b0.dtype == dt and a1.dtype == dt and b1.dtype == dt
                    and ra.dtype == dt and rb.dtype == dt and a0.shape == b0.shape == a1.shape == b1.shape
                    == (k, 3) and ra.shape == rb.shape == (k,)):
                out = np.empty((k, 14), dtype=np.float32)
                bad = pack_capsules(a0, b0, a1, b1, ra, rb, out)
                if bad & 1:
                    raise SolverError("Capsules contain NaN or Inf")
                if bad & 2:
                    raise SolverError("Capsules radius_a/radius_b must be >= 0")
                return out
        # The general way: few numpy calls (the values are converted by the
        # assignments, checked by one float64 sum: NaN/Inf propagate, and
        # float32 values cannot overflow it).
        try:
            shape = np.shape(self.a0)
            k = shape[0] if len(shape) == 2 else -1
            out = np.empty((max(k, 0), 14), dtype=np.float32)
            for col, name in ((0, "a0"), (3, "b0"), (6, "a1"), (9, "b1")):
                v = getattr(self, name)
                if np.shape(v) != (k, 3):
                    raise SolverError(f"Capsules.{name} must have shape (k, 3) like a0 {shape}, got {np.shape(v)}")
                out[:, col:col + 3] = v
            out[:, 12] = self.radius_a
            out[:, 13] = self.radius_b
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SolverError):
                raise
            raise SolverError(f"Capsules: arrays must be (k, 3) end points and (k,) radii ({exc})") from None
        if not np.isfinite(out.sum(dtype=np.float64)):
            raise SolverError("Capsules contain NaN or Inf")
        if k > 0 and out[:, 12:14].min() < 0:
            raise SolverError("Capsules radius_a/radius_b must be >= 0")
        return out
