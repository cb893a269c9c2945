"""Intersection recovery: find the cloth's edges that pass through its
triangles and push them back out, each to a consistent side.

Predictive contacts keep a vertex on the side it started a step on; once a
vertex has gone through (a pile crushed faster than the contacts hold it,
a mesh modelled pre-intersected, a collider shoved through the cloth) they
hold it on the wrong side. This pass, after every step, does a simplified
global intersection analysis in the manner of Baraff, Witkin and Kass,
"Untangling Cloth" (SIGGRAPH 2003):

1. every edge that crosses a triangle it shares no corner with is found
   (exact orientation tests, on a hash grid over the triangles' boxes);
2. the crossing edges, and the edges of the triangles they pass through
   (the contour runs across those), cut the mesh: the vertices still joined by uncut
   edges form regions. Where an intersection contour closes on the cloth,
   the region inside it is cut off from the rest of its piece; the smaller
   of the two sides of a crossing edge (less than half its piece) is the
   part that went through;
3. an edge that lay wholly on one side of the triangle's plane when the
   last call ended (x0: the step before) goes back to that side, the end
   that changed sides moving: a crossing the step just made is undone.
   Otherwise the crossing edge's end in a small region is pushed to the
   side of the other end; where both ends are in large regions (a contour
   that runs off the cloth's border, a fold's crossing) the end nearer the
   triangle's plane moves (every other pass the triangle alone moves past
   it instead). The mover goes past the triangle by half a thickness (at
   most one thickness a pass), the triangle's corners the opposite way
   (inverse-mass weighted, one crossing after the other). Between two layered regions the layer order decides a
   shallow crossing first: the outer layer's end goes to the front of an
   inner triangle, the inner layer's behind an outer one.

The passes repeat, finding the crossings again, until none are left or the
pass limit is reached; a region that went through is pushed back one ring
of edges per pass. Velocities are left as they are.

Only triangles with a corner listed in `active` take part (the vertices of
this step's contacts: where the cloth is near itself), unless every vertex
is listed.
"""

import numpy as np
from numba import njit

from .constants import LAYER_DEPTH


@njit(cache=True)
def _orient(ax, ay, az, bx, by, bz, cx, cy, cz, dx, dy, dz):
    adx, ady, adz = ax - dx, ay - dy, az - dz
    bdx, bdy, bdz = bx - dx, by - dy, bz - dz
    cdx, cdy, cdz = cx - dx, cy - dy, cz - dz
    return adx * (bdy * cdz - bdz * cdy) + bdx * (cdy * adz - cdz * ady) + cdx * (ady * bdz - adz * bdy)


@njit(cache=True)
def _crosses(x, p, q, a, b, c):
    """Does segment p-q pass strictly through triangle a, b, c (float64)?"""
    ax, ay, az = np.float64(x[0, a]), np.float64(x[1, a]), np.float64(x[2, a])
    bx, by, bz = np.float64(x[0, b]), np.float64(x[1, b]), np.float64(x[2, b])
    cx, cy, cz = np.float64(x[0, c]), np.float64(x[1, c]), np.float64(x[2, c])
    px, py, pz = np.float64(x[0, p]), np.float64(x[1, p]), np.float64(x[2, p])
    qx, qy, qz = np.float64(x[0, q]), np.float64(x[1, q]), np.float64(x[2, q])
    sp = _orient(ax, ay, az, bx, by, bz, cx, cy, cz, px, py, pz)
    sq = _orient(ax, ay, az, bx, by, bz, cx, cy, cz, qx, qy, qz)
    if not ((sp > 0.0 and sq < 0.0) or (sp < 0.0 and sq > 0.0)):
        return False
    s1 = _orient(px, py, pz, qx, qy, qz, ax, ay, az, bx, by, bz)
    s2 = _orient(px, py, pz, qx, qy, qz, bx, by, bz, cx, cy, cz)
    s3 = _orient(px, py, pz, qx, qy, qz, cx, cy, cz, ax, ay, az)
    return (s1 > 0.0 and s2 > 0.0 and s3 > 0.0) or (s1 < 0.0 and s2 < 0.0 and s3 < 0.0)


_MAX_CELLS = 64

# A push takes its vertex half a thickness past the triangle's plane, by at
# most one thickness a pass: in a pile the layers lie a thickness apart, and
# longer pushes (two thicknesses) drove vertices through the next layer
# (the dropped pile at one iteration, tests/solver/test_selfcollision_scenarios.py,
# went from hundreds of crossing pairs to thousands).
_PAST = np.float32(0.5)
_MOST = np.float32(1.0)


@njit(cache=True)
def _cell_hash(ix, iy, iz, nb):
    h = (ix * np.int64(73856093)) ^ (iy * np.int64(19349663)) ^ (iz * np.int64(83492791))
    h = h % nb
    if h < 0:
        h += nb
    return h


@njit(cache=True)
def find_crossings(x, tri, edges, tri_on, edge_on, cell, out_edge, out_tri):
    """Edges (edge_on) crossing triangles (tri_on) they share no corner
    with; writes up to len(out_edge) pairs, returns how many there are."""
    nt = tri.shape[0]
    inv = np.float32(1.0) / cell
    # Count, then fill, the (cell, triangle) entries of a hash table.
    m = 0
    for t in range(nt):
        if tri_on[t]:
            m += 1
    nb = np.int64(max(64, 2 * m))
    bucket_count = np.zeros(nb + 1, np.int64)
    lo = np.empty((nt, 3), np.int64)
    hi = np.empty((nt, 3), np.int64)
    # Triangles over more than _MAX_CELLS cells (stretched far) stay out of
    # the table and are tested against every edge.
    big = np.empty(nt, np.int32)
    n_big = 0
    blo = np.empty((nt, 3), np.float32)
    bhi = np.empty((nt, 3), np.float32)
    for t in range(nt):
        if not tri_on[t]:
            continue
        for k in range(3):
            v0, v1, v2 = x[k, tri[t, 0]], x[k, tri[t, 1]], x[k, tri[t, 2]]
            blo[t, k] = min(v0, min(v1, v2))
            bhi[t, k] = max(v0, max(v1, v2))
            lo[t, k] = np.int64(np.floor(blo[t, k] * inv))
            hi[t, k] = np.int64(np.floor(bhi[t, k] * inv))
        if _span(lo, hi, t) > _MAX_CELLS:
            big[n_big] = t
            n_big += 1
            continue
        for ix in range(lo[t, 0], hi[t, 0] + 1):
            for iy in range(lo[t, 1], hi[t, 1] + 1):
                for iz in range(lo[t, 2], hi[t, 2] + 1):
                    bucket_count[_cell_hash(ix, iy, iz, nb) + 1] += 1
    for i in range(nb):
        bucket_count[i + 1] += bucket_count[i]
    entries = np.empty(bucket_count[nb], np.int32)
    fill = bucket_count[:nb].copy()
    for t in range(nt):
        if not tri_on[t] or _span(lo, hi, t) > _MAX_CELLS:
            continue
        for ix in range(lo[t, 0], hi[t, 0] + 1):
            for iy in range(lo[t, 1], hi[t, 1] + 1):
                for iz in range(lo[t, 2], hi[t, 2] + 1):
                    h = _cell_hash(ix, iy, iz, nb)
                    entries[fill[h]] = t
                    fill[h] += 1
    stamp = np.full(nt, -1, np.int64)
    count = 0
    for e in range(edges.shape[0]):
        if not edge_on[e]:
            continue
        p, q = edges[e, 0], edges[e, 1]
        flo0, fhi0 = min(x[0, p], x[0, q]), max(x[0, p], x[0, q])
        flo1, fhi1 = min(x[1, p], x[1, q]), max(x[1, p], x[1, q])
        flo2, fhi2 = min(x[2, p], x[2, q]), max(x[2, p], x[2, q])
        elo = (np.int64(np.floor(flo0 * inv)), np.int64(np.floor(flo1 * inv)), np.int64(np.floor(flo2 * inv)))
        ehi = (np.int64(np.floor(fhi0 * inv)), np.int64(np.floor(fhi1 * inv)), np.int64(np.floor(fhi2 * inv)))
        cells = (ehi[0] - elo[0] + 1) * (ehi[1] - elo[1] + 1) * (ehi[2] - elo[2] + 1)
        if cells > _MAX_CELLS:
            # A long edge: every triangle.
            for t in range(nt):
                if tri_on[t]:
                    count = _test(x, tri, e, p, q, t, blo, bhi, flo0, fhi0, flo1, fhi1, flo2, fhi2, stamp, count,
                                  out_edge, out_tri)
            continue
        for j in range(n_big):
            count = _test(x, tri, e, p, q, big[j], blo, bhi, flo0, fhi0, flo1, fhi1, flo2, fhi2, stamp, count,
                          out_edge, out_tri)
        for ix in range(elo[0], ehi[0] + 1):
            for iy in range(elo[1], ehi[1] + 1):
                for iz in range(elo[2], ehi[2] + 1):
                    h = _cell_hash(ix, iy, iz, nb)
                    for s in range(bucket_count[h], bucket_count[h + 1]):
                        # _test, written out: the call in this loop made
                        # the search ten times slower.
                        t = entries[s]
                        if stamp[t] == e:
                            continue
                        stamp[t] = e
                        if (fhi0 < blo[t, 0] or flo0 > bhi[t, 0] or fhi1 < blo[t, 1] or flo1 > bhi[t, 1]
                                or fhi2 < blo[t, 2] or flo2 > bhi[t, 2]):
                            continue
                        a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
                        if p == a or p == b or p == c or q == a or q == b or q == c:
                            continue
                        if _crosses(x, p, q, a, b, c):
                            if count < out_edge.shape[0]:
                                out_edge[count] = e
                                out_tri[count] = t
                            count += 1
    return count


@njit(cache=True)
def _test(x, tri, e, p, q, t, blo, bhi, flo0, fhi0, flo1, fhi1, flo2, fhi2, stamp, count, out_edge, out_tri):
    """Edge e = p-q against triangle t once per edge (stamp); returns the
    crossing count, the pair written while there is room."""
    if stamp[t] == e:
        return count
    stamp[t] = e
    if (fhi0 < blo[t, 0] or flo0 > bhi[t, 0] or fhi1 < blo[t, 1] or flo1 > bhi[t, 1]
            or fhi2 < blo[t, 2] or flo2 > bhi[t, 2]):
        return count
    a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
    if p == a or p == b or p == c or q == a or q == b or q == c:
        return count
    if _crosses(x, p, q, a, b, c):
        if count < out_edge.shape[0]:
            out_edge[count] = e
            out_tri[count] = t
        count += 1
    return count


@njit(cache=True)
def _span(lo, hi, t):
    return (hi[t, 0] - lo[t, 0] + 1) * (hi[t, 1] - lo[t, 1] + 1) * (hi[t, 2] - lo[t, 2] + 1)


@njit(cache=True)
def _find(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True)
def cut_regions(n, edges, cut, piece, piece_size, region_of, small):
    """Regions of the vertices joined by uncut edges; small[v] = 1 where
    v's region holds less than half of v's piece (its connected mesh)."""
    for v in range(n):
        region_of[v] = v
    for e in range(edges.shape[0]):
        if cut[e]:
            continue
        ra, rb = _find(region_of, edges[e, 0]), _find(region_of, edges[e, 1])
        if ra != rb:
            region_of[max(ra, rb)] = min(ra, rb)
    size = np.zeros(n, np.int64)
    for v in range(n):
        region_of[v] = _find(region_of, v)
        size[region_of[v]] += 1
    for v in range(n):
        small[v] = 1 if 2 * size[region_of[v]] < piece_size[piece[v]] else 0


@njit(cache=True)
def _side_before(x0, v, a, b, c):
    """Which side of triangle a, b, c's plane vertex v was on in x0."""
    e1x, e1y, e1z = x0[0, b] - x0[0, a], x0[1, b] - x0[1, a], x0[2, b] - x0[2, a]
    e2x, e2y, e2z = x0[0, c] - x0[0, a], x0[1, c] - x0[1, a], x0[2, c] - x0[2, a]
    nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
    d = (x0[0, v] - x0[0, a]) * nx + (x0[1, v] - x0[1, a]) * ny + (x0[2, v] - x0[2, a]) * nz
    return 1 if d > 0.0 else (-1 if d < 0.0 else 0)


@njit(cache=True)
def push_crossings(x, x0, known, inv_mass, tri, edges, tri_region, vertex_region, layers, thickness, ce, ct, count,
                   small, odd):
    """One pass of pushes over the crossings (see the module doc)."""
    for k in range(count):
        e, t = ce[k], ct[k]
        u, v = edges[e, 0], edges[e, 1]
        a, b, c = tri[t, 0], tri[t, 1], tri[t, 2]
        e1x, e1y, e1z = x[0, b] - x[0, a], x[1, b] - x[1, a], x[2, b] - x[2, a]
        e2x, e2y, e2z = x[0, c] - x[0, a], x[1, c] - x[1, a], x[2, c] - x[2, a]
        nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
        ln = np.sqrt(nx * nx + ny * ny + nz * nz)
        if ln < 1e-20:
            continue
        nx, ny, nz = nx / ln, ny / ln, nz / ln
        du = (x[0, u] - x[0, a]) * nx + (x[1, u] - x[1, a]) * ny + (x[2, u] - x[2, a]) * nz
        dv = (x[0, v] - x[0, a]) * nx + (x[1, v] - x[1, a]) * ny + (x[2, v] - x[2, a]) * nz
        if du * dv >= 0.0:
            continue
        # The mover and the side it goes to.
        mover, side = -1, np.float32(0.0)
        by_region = True
        re, rt = vertex_region[u], tri_region[t]
        le, lt = layers[re], layers[rt]
        h = np.float32(0.5) * max(thickness[re], thickness[rt])
        layered = False
        if le >= 0 and lt >= 0 and le != lt:
            want = np.float32(1.0) if le > lt else np.float32(-1.0)   # outer in front of inner
            wrong = du if du * want < 0.0 else dv
            # Only a shallow one (as the contacts' LAYER_DEPTH): forcing a
            # deep one across the whole layer tears the layers apart.
            if abs(wrong) < LAYER_DEPTH * np.float32(2.0) * h:
                layered = True
                if du * want < 0.0:
                    mover, side = u, want
                else:
                    mover, side = v, want
        # The last step's end (crossing-free where the recovery kept up): an
        # edge wholly on one side of the triangle's plane then, crossing it
        # now, goes back to that side; the end that changed sides moves.
        su0, sv0 = 0, 0
        if known[u] and known[v] and known[a] and known[b] and known[c]:
            su0, sv0 = _side_before(x0, u, a, b, c), _side_before(x0, v, a, b, c)
        if layered:
            pass
        elif su0 != 0 and su0 == sv0:
            side = np.float32(su0)
            mover = u if du * side < 0.0 else v
        elif small[u] and not small[v]:
            mover, side = u, (np.float32(1.0) if dv > 0.0 else np.float32(-1.0))
        elif small[v] and not small[u]:
            mover, side = v, (np.float32(1.0) if du > 0.0 else np.float32(-1.0))
        elif abs(du) <= abs(dv):
            mover, side = u, (np.float32(1.0) if dv > 0.0 else np.float32(-1.0))
            by_region = False
        else:
            mover, side = v, (np.float32(1.0) if du > 0.0 else np.float32(-1.0))
            by_region = False
        dm = du if mover == u else dv
        # h is half the thickness: see _PAST and _MOST.
        delta = side * np.float32(2.0) * _PAST * h - dm
        delta = max(-np.float32(2.0) * _MOST * h, min(np.float32(2.0) * _MOST * h, delta))
        # Where the edge meets the plane: the corners' barycentric weights.
        s = du / (du - dv)
        px = x[0, u] + s * (x[0, v] - x[0, u]) - x[0, a]
        py = x[1, u] + s * (x[1, v] - x[1, u]) - x[1, a]
        pz = x[2, u] + s * (x[2, v] - x[2, u]) - x[2, a]
        d00 = e1x * e1x + e1y * e1y + e1z * e1z
        d01 = e1x * e2x + e1y * e2y + e1z * e2z
        d11 = e2x * e2x + e2y * e2y + e2z * e2z
        d20 = px * e1x + py * e1y + pz * e1z
        d21 = px * e2x + py * e2y + pz * e2z
        den = d00 * d11 - d01 * d01
        if den < 1e-30:
            continue
        wb = (d11 * d20 - d01 * d21) / den
        wc = (d00 * d21 - d01 * d20) / den
        wa = np.float32(1.0) - wb - wc
        wm = inv_mass[mover]
        if odd and not by_region and wa * inv_mass[a] + wb * inv_mass[b] + wc * inv_mass[c] > 0.0:
            # Every other pass the triangle alone moves past the near end:
            # a vertex caught between two layers whose neighbours lie
            # beyond both crosses one layer on either side, so moving it
            # alone only swaps which.
            wm = np.float32(0.0)
        wt = wa * wa * inv_mass[a] + wb * wb * inv_mass[b] + wc * wc * inv_mass[c]
        wsum = wm + wt
        if wsum <= 0.0:
            continue
        lam = delta / wsum
        # In place (Gauss-Seidel): the next crossing sees this push, so the
        # pushes of a vertex caught in a fold add up instead of averaging out.
        x[0, mover] += lam * wm * nx
        x[1, mover] += lam * wm * ny
        x[2, mover] += lam * wm * nz
        for corner, w in ((a, wa), (b, wb), (c, wc)):
            f = -lam * w * inv_mass[corner]
            x[0, corner] += f * nx
            x[1, corner] += f * ny
            x[2, corner] += f * nz


@njit(cache=True)
def untangle(x, x0, known, inv_mass, tri, edges, tri_edges, tri_region, vertex_region, layers, thickness, piece,
             piece_size, active, cell, passes, out_edge, out_tri):
    """Up to `passes` rounds of find, cut, push; returns (crossings found
    in the first round, crossings left after the last push found by a last
    search: -1 when not searched)."""
    n = x.shape[1]
    nt = tri.shape[0]
    ne = edges.shape[0]
    tri_on = np.zeros(nt, np.uint8)
    edge_on = np.zeros(ne, np.uint8)
    any_on = False
    for t in range(nt):
        if active[tri[t, 0]] or active[tri[t, 1]] or active[tri[t, 2]]:
            tri_on[t] = 1
            any_on = True
    if not any_on:
        return 0, 0
    for e in range(ne):
        if active[edges[e, 0]] or active[edges[e, 1]]:
            edge_on[e] = 1
    cut = np.zeros(ne, np.uint8)
    region_of = np.empty(n, np.int64)
    small = np.zeros(n, np.uint8)
    first = -1
    left = 0
    for i in range(passes):
        count = find_crossings(x, tri, edges, tri_on, edge_on, cell, out_edge, out_tri)
        if first < 0:
            first = count
        left = count
        if count == 0:
            return first, 0
        count = min(count, out_edge.shape[0])
        # The cut: the crossing edges, and the edges of the triangles that
        # other edges pass through (the contour runs across those).
        cut[:] = 0
        for k in range(count):
            cut[out_edge[k]] = 1
            t = out_tri[k]
            for j in range(3):
                cut[tri_edges[t, j]] = 1
        cut_regions(n, edges, cut, piece, piece_size, region_of, small)
        push_crossings(x, x0, known, inv_mass, tri, edges, tri_region, vertex_region, layers, thickness, out_edge,
                       out_tri, count, small, (i & 1) == 1)
    return first, -1
