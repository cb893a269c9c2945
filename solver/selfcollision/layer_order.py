"""Layer-order recovery: after each step, every vertex of a layered region
that ended more than a little on the wrong side of another layer goes back
to the right side, one thickness clear.

The step's contacts keep the layer order only where they were predicted
(from the velocities at step start) and only while a vertex is less than
LAYER_DEPTH thicknesses on the wrong side; a body that reverses (a leg
swung forward and back) drives the inner layer through the outer one with
no predicted contact, and from then on the contacts hold the wrong side.
This pass knows which side is right, as the layer order says (faces point
outwards: the outer layer lies on the front of the inner one, Chaos
Cloth's self-collision layers state the same rule):

1. a hash grid over the layered regions' triangles (cell: the mean rest
   edge);
2. for each vertex of a layered region, and each other layered region that
   collides with its own (modes), the nearest triangle within its reach: a
   few thicknesses plus the vertex's motion over the step relative to the
   cloth's mean motion (capped);
3. the vertex's side of the nearest feature (face, edge or corner of that
   triangle) by the feature's pseudo-normal (the face normal, the sum of an
   edge's two face normals, a corner's angle-weighted normal: Baerentzen and
   Aanaes, 2005), so a vertex over a convex crease is judged by the crease,
   not by whichever face happened to come first;
4. it is skipped where the side cannot be trusted: the nearest feature on
   the other layer's border (the vertex is beside it, not over it), the
   vertex's own layer facing the other way there (a fold of either layer:
   the outer layer wraps the inner one's fold from the other side), or
   the nearest triangle folded against its corners' normals;
5. otherwise, where the vertex lies on the wrong side (an outer vertex
   behind an inner triangle, an inner vertex in front of an outer one), it
   and the triangle are pushed apart along the pseudo-normal until the
   vertex is one thickness on the right side, weighted by inverse mass
   with the inner layer LAYER_SHOCK times heavier (Houdini Vellum's layer
   shock: a lower layer is 4x heavier by default), so the inner layer,
   pressed on the body, gives less and the outer one yields; pinned
   vertices do not move.

Pushes are made in place (Gauss-Seidel) vertex after vertex; the pass
repeats up to `passes` times while it moved anything. Velocities are left
as they are (as the intersection recovery leaves them).
"""

import numpy as np
from numba import njit

from .geometry import closest_on_triangle

# The inner layer's inverse mass is divided by this in the pushes.
LAYER_SHOCK = np.float32(4.0)

# A vertex's reach, in thicknesses: this many plus its motion over the step
# relative to the cloth's mean motion, at most REACH_MAX thicknesses.
REACH_BASE = np.float32(3.0)
REACH_GRID = np.float32(8.0)
# From a vertex's tracked triangle (the nearest at the last call) the walk
# over the other layer finds its nearest triangle however far the layers
# moved against each other; it is trusted up to this many thicknesses.
REACH_MAX = np.float32(16.0)

# Pushed to this many thicknesses on the right side.
CLEAR = np.float32(1.0)

_MAX_AXIS_CELLS = 12


@njit(cache=True)
def _cell_hash(ix, iy, iz, nb):
    h = (ix * np.int64(73856093)) ^ (iy * np.int64(19349663)) ^ (iz * np.int64(83492791))
    h = h % nb
    if h < 0:
        h += nb
    return h


@njit(cache=True)
def _normals(x, tri, tri_on, n, face_n, vert_n):
    """Unit face normals of the triangles in tri_on, and angle-weighted
    vertex normals (unnormalised sums) of their corners."""
    for i in range(n):
        vert_n[0, i] = 0.0
        vert_n[1, i] = 0.0
        vert_n[2, i] = 0.0
    for t in range(tri.shape[0]):
        if not tri_on[t]:
            continue
        a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
        e1x, e1y, e1z = x[0, b] - x[0, a], x[1, b] - x[1, a], x[2, b] - x[2, a]
        e2x, e2y, e2z = x[0, c] - x[0, a], x[1, c] - x[1, a], x[2, c] - x[2, a]
        nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
        ln = np.sqrt(nx * nx + ny * ny + nz * nz)
        if ln < 1e-20:
            face_n[t, 0] = 0.0
            face_n[t, 1] = 0.0
            face_n[t, 2] = 0.0
            continue
        nx, ny, nz = nx / ln, ny / ln, nz / ln
        face_n[t, 0] = nx
        face_n[t, 1] = ny
        face_n[t, 2] = nz
        for k in range(3):
            p = tri[t, k]
            q = tri[t, (k + 1) % 3]
            r = tri[t, (k + 2) % 3]
            ux, uy, uz = x[0, q] - x[0, p], x[1, q] - x[1, p], x[2, q] - x[2, p]
            wx, wy, wz = x[0, r] - x[0, p], x[1, r] - x[1, p], x[2, r] - x[2, p]
            lu = np.sqrt(ux * ux + uy * uy + uz * uz)
            lw = np.sqrt(wx * wx + wy * wy + wz * wz)
            if lu < 1e-20 or lw < 1e-20:
                continue
            cs = (ux * wx + uy * wy + uz * wz) / (lu * lw)
            ang = np.arccos(min(1.0, max(-1.0, cs)))
            vert_n[0, p] += ang * nx
            vert_n[1, p] += ang * ny
            vert_n[2, p] += ang * nz


@njit(cache=True)
def order_layers(x, x0, known, inv_mass, tri, tri_edges, edge_tris, tri_region, vertex_region, layers, modes,
                 thickness, border, border_vertex, vtri_start, vtri, track, cell, passes, moved, skips):
    """Push the vertices on the wrong side of another layer back (see the
    module doc). x (3, n) float32 in place; x0: the positions at step start
    (where known[v]); border, border_vertex: the edges with one
    triangle and their ends; moved[v] is set to 1 for every vertex this moved
    (a pushed vertex and its triangle's corners). Returns (vertices found
    on the wrong side in the first pass, pushes made in all passes)."""
    n = x.shape[1]
    nt = tri.shape[0]
    tri_on = np.zeros(nt, np.uint8)
    any_tri = False
    for t in range(nt):
        if layers[tri_region[t]] >= 0:
            tri_on[t] = 1
            any_tri = True
    if not any_tri:
        return 0, 0
    n_regions = layers.shape[0]
    # Each vertex's reach: its motion over the step relative to the mean.
    mx = 0.0
    my = 0.0
    mz = 0.0
    nk = 0
    for v in range(n):
        if known[v]:
            mx += x[0, v] - x0[0, v]
            my += x[1, v] - x0[1, v]
            mz += x[2, v] - x0[2, v]
            nk += 1
    if nk > 0:
        mx /= nk
        my /= nk
        mz /= nk
    reach = np.zeros(n, np.float32)
    for v in range(n):
        r = vertex_region[v]
        if layers[r] < 0:
            continue
        th = thickness[r]
        m = 0.0
        if known[v]:
            dx = x[0, v] - x0[0, v] - mx
            dy = x[1, v] - x0[1, v] - my
            dz = x[2, v] - x0[2, v] - mz
            m = np.sqrt(dx * dx + dy * dy + dz * dz)
        reach[v] = min(REACH_BASE * th + m, REACH_GRID * th)
    face_n = np.empty((nt, 3), np.float32)
    vert_n = np.empty((3, n), np.float32)
    inv = np.float32(1.0) / cell
    lo = np.empty((nt, 3), np.int64)
    hi = np.empty((nt, 3), np.int64)
    best_t = np.empty(n_regions, np.int64)
    best_d = np.empty(n_regions, np.float64)
    first = -1
    pushes = 0
    for it in range(passes):
        _normals(x, tri, tri_on, n, face_n, vert_n)
        # The hash grid over the triangles' boxes (grown by the largest
        # push a pass can make to another triangle: the table is kept
        # through the pass while vertices move).
        m = 0
        for t in range(nt):
            if tri_on[t]:
                m += 1
        nb = np.int64(max(64, 2 * m))
        bucket = np.zeros(nb + 1, np.int64)
        for t in range(nt):
            if not tri_on[t]:
                continue
            pad = REACH_BASE * thickness[tri_region[t]]
            for k in range(3):
                v0, v1, v2 = x[k, tri[t, 0]], x[k, tri[t, 1]], x[k, tri[t, 2]]
                lo[t, k] = np.int64(np.floor((min(v0, min(v1, v2)) - pad) * inv))
                hi[t, k] = np.int64(np.floor((max(v0, max(v1, v2)) + pad) * inv))
            span = (hi[t, 0] - lo[t, 0] + 1) * (hi[t, 1] - lo[t, 1] + 1) * (hi[t, 2] - lo[t, 2] + 1)
            if span > 512:
                # Stretched far: no side to trust; left out.
                lo[t, 0] = 1
                hi[t, 0] = 0
                continue
            for ix in range(lo[t, 0], hi[t, 0] + 1):
                for iy in range(lo[t, 1], hi[t, 1] + 1):
                    for iz in range(lo[t, 2], hi[t, 2] + 1):
                        bucket[_cell_hash(ix, iy, iz, nb) + 1] += 1
        for i in range(nb):
            bucket[i + 1] += bucket[i]
        entries = np.empty(bucket[nb], np.int32)
        fill = bucket[:nb].copy()
        for t in range(nt):
            if not tri_on[t]:
                continue
            for ix in range(lo[t, 0], hi[t, 0] + 1):
                for iy in range(lo[t, 1], hi[t, 1] + 1):
                    for iz in range(lo[t, 2], hi[t, 2] + 1):
                        h = _cell_hash(ix, iy, iz, nb)
                        entries[fill[h]] = t
                        fill[h] += 1
        stamp = np.full(nt, -1, np.int64)
        found = 0
        made = 0
        for v in range(n):
            rv = vertex_region[v]
            lv = layers[rv]
            if lv < 0:
                continue
            for r in range(n_regions):
                best_t[r] = -1
                best_d[r] = np.inf
            px, py, pz = x[0, v], x[1, v], x[2, v]
            # The vertex's reach, in whole cells (the triangles' boxes carry
            # REACH_BASE thicknesses already).
            rr = max(np.float32(0.0), reach[v] - REACH_BASE * thickness[rv])
            cx0 = np.int64(np.floor((px - rr) * inv))
            cx1 = np.int64(np.floor((px + rr) * inv))
            cy0 = np.int64(np.floor((py - rr) * inv))
            cy1 = np.int64(np.floor((py + rr) * inv))
            cz0 = np.int64(np.floor((pz - rr) * inv))
            cz1 = np.int64(np.floor((pz + rr) * inv))
            if not (cx1 - cx0 >= _MAX_AXIS_CELLS or cy1 - cy0 >= _MAX_AXIS_CELLS
                    or cz1 - cz0 >= _MAX_AXIS_CELLS):
                for ix in range(cx0, cx1 + 1):
                    for iy in range(cy0, cy1 + 1):
                        for iz in range(cz0, cz1 + 1):
                            h = _cell_hash(ix, iy, iz, nb)
                            for s in range(bucket[h], bucket[h + 1]):
                                t = entries[s]
                                if stamp[t] == v:
                                    continue
                                stamp[t] = v
                                rt = tri_region[t]
                                lt = layers[rt]
                                if lt < 0 or lt == lv:
                                    continue
                                if modes[max(rv, rt), min(rv, rt)] == 0:
                                    continue
                                a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
                                if v == a or v == b or v == c:
                                    continue
                                u, w1, w2 = closest_on_triangle(px, py, pz, x[0, a], x[1, a], x[2, a],
                                                                x[0, b], x[1, b], x[2, b], x[0, c], x[1, c], x[2, c])
                                qx = u * x[0, a] + w1 * x[0, b] + w2 * x[0, c]
                                qy = u * x[1, a] + w1 * x[1, b] + w2 * x[1, c]
                                qz = u * x[2, a] + w1 * x[2, b] + w2 * x[2, c]
                                d = (px - qx) ** 2 + (py - qy) ** 2 + (pz - qz) ** 2
                                if d < best_d[rt]:
                                    best_d[rt] = d
                                    best_t[rt] = t
            # From the triangle this vertex was nearest last call, walk
            # over the other layer to its nearest triangle now: the layers
            # may have moved further against each other than the reach.
            walked = -1
            tt = track[v]
            if tt >= 0 and layers[tri_region[tt]] >= 0 and layers[tri_region[tt]] != lv:
                tw, dw = _walk(x, tri, tri_region, vtri_start, vtri, v, tt)
                rt = tri_region[tt]
                if tw >= 0 and dw < best_d[rt]:
                    best_d[rt] = dw
                    best_t[rt] = tw
                walked = rt
            nearest = -1
            nearest_d = np.inf
            for rt in range(n_regions):
                if best_t[rt] >= 0 and best_d[rt] < nearest_d:
                    nearest_d = best_d[rt]
                    nearest = best_t[rt]
            if nearest >= 0:
                track[v] = nearest
            for rt in range(n_regions):
                t = best_t[rt]
                if t < 0:
                    continue
                far = REACH_MAX * thickness[rv] if rt == walked else reach[v]
                if np.sqrt(best_d[rt]) > far:
                    if it == 0:
                        skips[0] += 1
                    continue
                lt = layers[rt]
                want = np.float32(1.0) if lv > lt else np.float32(-1.0)
                a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
                px, py, pz = x[0, v], x[1, v], x[2, v]
                u, w1, w2 = closest_on_triangle(px, py, pz, x[0, a], x[1, a], x[2, a],
                                                x[0, b], x[1, b], x[2, b], x[0, c], x[1, c], x[2, c])
                fx, fy, fz = face_n[t, 0], face_n[t, 1], face_n[t, 2]
                if fx == 0.0 and fy == 0.0 and fz == 0.0:
                    continue
                # The nearest triangle folded against its corners: no side.
                folded = False
                for k in range(3):
                    cc = tri[t, k]
                    if fx * vert_n[0, cc] + fy * vert_n[1, cc] + fz * vert_n[2, cc] <= 0.0:
                        folded = True
                if folded:
                    if it == 0:
                        skips[1] += 1
                    continue
                # The nearest feature and its pseudo-normal.
                zu, zv, zw = u == 0.0, w1 == 0.0, w2 == 0.0
                nzero = int(zu) + int(zv) + int(zw)
                if nzero == 0:
                    nx, ny, nz = fx, fy, fz
                elif nzero == 1:
                    # Edge: ab (w2 = 0) is tri_edges[t, 0], bc (u = 0) [t, 1], ca (w1 = 0) [t, 2].
                    e = tri_edges[t, 0] if zw else (tri_edges[t, 1] if zu else tri_edges[t, 2])
                    t2 = edge_tris[e, 1] if edge_tris[e, 0] == t else edge_tris[e, 0]
                    if t2 < 0 or border[e]:
                        if it == 0:
                            skips[2] += 1
                        continue
                    nx, ny, nz = fx + face_n[t2, 0], fy + face_n[t2, 1], fz + face_n[t2, 2]
                else:
                    cc = a if not zu else (b if not zv else c)
                    if border_vertex[cc]:
                        if it == 0:
                            skips[2] += 1
                        continue
                    nx, ny, nz = vert_n[0, cc], vert_n[1, cc], vert_n[2, cc]
                ln = np.sqrt(nx * nx + ny * ny + nz * nz)
                if ln < 1e-20:
                    continue
                nx, ny, nz = nx / ln, ny / ln, nz / ln
                # The vertex's own layer must face the same way there.
                if vert_n[0, v] * nx + vert_n[1, v] * ny + vert_n[2, v] * nz <= 0.0:
                    if it == 0:
                        skips[3] += 1
                    continue
                qx = u * x[0, a] + w1 * x[0, b] + w2 * x[0, c]
                qy = u * x[1, a] + w1 * x[1, b] + w2 * x[1, c]
                qz = u * x[2, a] + w1 * x[2, b] + w2 * x[2, c]
                hgt = (px - qx) * nx + (py - qy) * ny + (pz - qz) * nz
                th = np.float32(0.5) * (thickness[rv] + thickness[rt])
                if want * hgt >= 0.0:
                    if it == 0:
                        skips[4] += 1
                    continue
                found += 1
                # C = want * hgt - CLEAR * th >= 0, moving v along want * n
                # and the corners the other way.
                shock_v = np.float32(1.0) if want > 0 else np.float32(1.0) / LAYER_SHOCK
                shock_t = np.float32(1.0) / LAYER_SHOCK if want > 0 else np.float32(1.0)
                wv = inv_mass[v] * shock_v
                wa, wb, wc = inv_mass[a] * shock_t, inv_mass[b] * shock_t, inv_mass[c] * shock_t
                wsum = wv + u * u * wa + w1 * w1 * wb + w2 * w2 * wc
                if wsum <= 0.0:
                    if it == 0:
                        skips[5] += 1
                    continue
                lam = (CLEAR * th - want * hgt) / wsum
                sx, sy, sz = want * nx * lam, want * ny * lam, want * nz * lam
                x[0, v] += wv * sx
                x[1, v] += wv * sy
                x[2, v] += wv * sz
                moved[v] = 1
                for cc, bw, wm in ((a, u, wa), (b, w1, wb), (c, w2, wc)):
                    f = -bw * wm
                    if f != 0.0:
                        x[0, cc] += f * sx
                        x[1, cc] += f * sy
                        x[2, cc] += f * sz
                        moved[cc] = 1
                made += 1
                px, py, pz = x[0, v], x[1, v], x[2, v]
        if first < 0:
            first = found
        pushes += made
        if made == 0:
            break
    return max(first, 0), pushes


@njit(cache=True)
def _walk(x, tri, tri_region, vtri_start, vtri, v, t):
    """From triangle t, step to the triangle around its corners (same
    region) nearest to vertex v while that gets nearer; returns (that
    triangle, its squared distance)."""
    px, py, pz = x[0, v], x[1, v], x[2, v]
    r = tri_region[t]
    best = t
    bd = _dist2(x, tri, px, py, pz, t)
    for _ in range(64):
        cur = best
        for k in range(3):
            c = tri[cur, k]
            for s in range(vtri_start[c], vtri_start[c + 1]):
                t2 = vtri[s]
                if t2 == cur or tri_region[t2] != r:
                    continue
                a, b, cc = tri[t2, 0], tri[t2, 1], tri[t2, 2]
                if v == a or v == b or v == cc:
                    continue
                d = _dist2(x, tri, px, py, pz, t2)
                if d < bd:
                    bd = d
                    best = t2
        if best == cur:
            break
    return best, bd


@njit(cache=True)
def _dist2(x, tri, px, py, pz, t):
    a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
    u, w1, w2 = closest_on_triangle(px, py, pz, x[0, a], x[1, a], x[2, a],
                                    x[0, b], x[1, b], x[2, b], x[0, c], x[1, c], x[2, c])
    qx = u * x[0, a] + w1 * x[0, b] + w2 * x[0, c]
    qy = u * x[1, a] + w1 * x[1, b] + w2 * x[1, c]
    qz = u * x[2, a] + w1 * x[2, b] + w2 * x[2, c]
    return (px - qx) ** 2 + (py - qy) ** 2 + (pz - qz) ** 2
