"""Model building from polygons: edges, triangulation, bending stencils,
geodesic tethers, greedy colouring, vertex masses. Runs once per cloth."""

import heapq

import numpy as np
from numba import njit

from .jit import PLAIN
from .params import SolverError

GEOM_EPS = 1e-12


def polygon_starts(face_sizes):
    starts = np.zeros(len(face_sizes), dtype=np.int64)
    if len(face_sizes) > 1:
        np.cumsum(face_sizes[:-1], out=starts[1:])
    return starts


def structural_edges(face_indices, face_sizes):
    """Unique polygon edges (i < j), self-edges dropped. (e, 2) int64."""
    if len(face_sizes) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    starts = polygon_starts(face_sizes)
    poly = np.repeat(np.arange(len(face_sizes)), face_sizes)
    corner = np.arange(len(face_indices))
    nxt = corner + 1
    last = nxt == (starts + face_sizes)[poly]
    nxt[last] = starts[poly[last]]
    return unique_pairs(face_indices[corner], face_indices[nxt])


def quad_diagonals(face_indices, face_sizes):
    """Both diagonals of every quad, unique, (d, 2) int64."""
    starts = polygon_starts(face_sizes)[face_sizes == 4]
    a = np.concatenate([face_indices[starts], face_indices[starts + 1]])
    b = np.concatenate([face_indices[starts + 2], face_indices[starts + 3]])
    return unique_pairs(a, b)


def unique_pairs(a, b):
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    lo, hi = lo[keep], hi[keep]
    if len(lo) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    # One int64 key per pair: np.unique on it is far faster than axis=0.
    base = int(hi.max()) + 1
    key = np.unique(lo * base + hi)
    return np.stack([key // base, key % base], axis=1)


def triangulate(face_indices, face_sizes):
    """Fan triangulation (corner 0, j, j+1) of every polygon; triangles with a
    repeated vertex are dropped. Quads split along their 0-2 diagonal."""
    if len(face_sizes) == 0:
        return np.zeros((0, 3), dtype=np.int32)
    starts = polygon_starts(face_sizes)
    ntri = np.maximum(face_sizes - 2, 0)
    poly = np.repeat(np.arange(len(face_sizes)), ntri)
    j = np.arange(ntri.sum()) - np.repeat(np.cumsum(ntri) - ntri, ntri) + 1
    s = starts[poly]
    tris = np.stack([face_indices[s], face_indices[s + j], face_indices[s + j + 1]], axis=1)
    ok = (tris[:, 0] != tris[:, 1]) & (tris[:, 1] != tris[:, 2]) & (tris[:, 0] != tris[:, 2])
    return np.ascontiguousarray(tris[ok], dtype=np.int32)


def bending_elements(rest, triangles):
    """Bergou et al. 2006 isometric bending, one element per interior edge
    (an edge shared by exactly two triangles).

    Returns idx (m, 4) [edge v0, edge v1, apex of tri A, apex of tri B],
    k (m, 4) float64 = cotangent weights * sqrt(3 / (A0 + A1)) so that
    |sum k_i x_i|^2 / 2 is the element's bending energy per unit stiffness,
    and rest_norm (m,) = |sum k_i x_i| at rest (0 for a flat rest pose).
    Elements touching a zero-area triangle are skipped (no curvature there).
    """
    t = np.asarray(triangles, dtype=np.int64)
    if len(t) == 0:
        return np.zeros((0, 4), np.int64), np.zeros((0, 4)), np.zeros(0)
    # Each triangle contributes 3 edges with its opposite vertex.
    ea = np.concatenate([t[:, 0], t[:, 1], t[:, 2]])
    eb = np.concatenate([t[:, 1], t[:, 2], t[:, 0]])
    opp = np.concatenate([t[:, 2], t[:, 0], t[:, 1]])
    lo, hi = np.minimum(ea, eb), np.maximum(ea, eb)
    key = lo * (int(hi.max()) + 1) + hi
    order = np.argsort(key, kind="stable")
    ks = key[order]
    # Group sizes; keep groups of exactly two (manifold interior edges).
    bounds = np.flatnonzero(np.diff(ks)) + 1
    gstart = np.concatenate([[0], bounds])
    gsize = np.diff(np.concatenate([gstart, [len(ks)]]))
    g = gstart[gsize == 2]
    first, second = order[g], order[g + 1]
    idx = np.stack([lo[first], hi[first], opp[first], opp[second]], axis=1)
    idx = idx[idx[:, 2] != idx[:, 3]]

    x0, x1, x2, x3 = (rest[idx[:, c]].astype(np.float64) for c in range(4))

    def cot(u, v):
        cr = np.linalg.norm(np.cross(u, v), axis=1)
        return np.einsum("ij,ij->i", u, v) / np.maximum(cr, GEOM_EPS), cr

    e0, e1, e2, e3, e4 = x1 - x0, x2 - x0, x3 - x0, x2 - x1, x3 - x1
    c01, s0 = cot(e0, e1)
    c02, s1 = cot(e0, e2)
    c03, _ = cot(-e0, e3)
    c04, _ = cot(-e0, e4)
    area = 0.5 * (s0 + s1)
    elen = np.linalg.norm(e0, axis=1)
    ok = (s0 > 1e-8 * np.maximum(elen * elen, GEOM_EPS)) & (s1 > 1e-8 * np.maximum(elen * elen, GEOM_EPS)) & (elen > 0)
    ok &= (np.linalg.norm(e3, axis=1) > 0) & (np.linalg.norm(e4, axis=1) > 0)
    idx, c01, c02, c03, c04, area = idx[ok], c01[ok], c02[ok], c03[ok], c04[ok], area[ok]
    k = np.stack([c03 + c04, c01 + c02, -c01 - c03, -c02 - c04], axis=1)
    k *= np.sqrt(3.0 / area)[:, None]
    xs = np.stack([rest[idx[:, c]].astype(np.float64) for c in range(4)], axis=1)
    lvec = np.einsum("mc,mcd->md", k, xs)
    rest_norm = np.linalg.norm(lvec, axis=1)
    # A flat stencil's L is zero up to round-off; make that exact.
    scale = np.einsum("mc,mcd->m", np.abs(k), np.abs(xs)) + GEOM_EPS
    rest_norm[rest_norm < 1e-6 * scale] = 0.0
    return idx, k, rest_norm


def bending_energy(positions, idx, k, rest_norm, compliance=1.0):
    """Total bending energy sum 0.5 (|sum k_i x_i| - rest)^2 / compliance."""
    x = np.asarray(positions, dtype=np.float64)
    lvec = np.einsum("mc,mcd->md", k, x[idx])
    c = np.linalg.norm(lvec, axis=1) - rest_norm
    return 0.5 * float(np.sum(c * c)) / compliance


@njit(**PLAIN)
def _greedy_colour(idx, n_vertices, words):
    m, arity = idx.shape
    used = np.zeros((n_vertices, words), dtype=np.uint64)
    colour = np.empty(m, dtype=np.int64)
    for c in range(m):
        chosen = -1
        for w in range(words):
            occ = np.uint64(0)
            for j in range(arity):
                occ |= used[idx[c, j], w]
            if occ != np.uint64(0xFFFFFFFFFFFFFFFF):
                bit = 0
                while (occ >> np.uint64(bit)) & np.uint64(1):
                    bit += 1
                chosen = w * 64 + bit
                break
        colour[c] = chosen
        if chosen >= 0:
            w = chosen // 64
            mask = np.uint64(1) << np.uint64(chosen % 64)
            for j in range(arity):
                used[idx[c, j], w] |= mask
    return colour


def greedy_colour(idx, n_vertices):
    """Greedy graph colouring: no two constraints of one colour share a vertex.

    idx: (m, arity) vertex indices. Returns (m,) int64 colours 0..C-1.
    """
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if len(idx) == 0:
        return np.zeros(0, dtype=np.int64)
    incidence = np.bincount(idx.ravel(), minlength=n_vertices).max()
    words = int(incidence * idx.shape[1]) // 64 + 1
    colour = _greedy_colour(idx, n_vertices, words)
    assert colour.min() >= 0
    return colour


def colour_order(idx, n_vertices):
    """Stable sort by colour: (order, batch_offsets) with batch c spanning
    order[offsets[c]:offsets[c+1]]."""
    colour = greedy_colour(idx, n_vertices)
    order = np.argsort(colour, kind="stable")
    counts = np.bincount(colour) if len(colour) else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.uint32)
    np.cumsum(counts, out=offsets[1:])
    return order, offsets


@njit(**PLAIN)
def _nearest_components(indptr, nbr, wgt, sources, labels, n, k, rest, normals, min_cos):
    """Multi-source Dijkstra that settles each vertex once per source label,
    up to k labels: for every vertex the k nearest pinned components (their
    geodesic distance and the pinned vertex reached first). Returns
    (dist (n, k), anchor (n, k), count (n,)).

    With normals (n, 3) (else (0, 3)), paths may cut across faces as in
    Theta* (Nash et al. 2007): a vertex reached from u may take u's own
    predecessor p as its predecessor, at the straight rest distance from p,
    where the surface between them is flat (the rest normals of p and the
    vertex within acos(min_cos)). Along edges alone the distance over a
    flat grid is up to 8 % longer than the straight one, and a vertex
    tethered to two pins with such lengths is held where the lengths put
    it, away from its neighbours; the straight distances agree with the
    rest shape."""
    dist = np.full((n, k), np.inf)
    anchor = np.full((n, k), -1, dtype=np.int64)
    label = np.full((n, k), -1, dtype=np.int64)
    parent = np.full((n, k), -1, dtype=np.int64)
    parent_dist = np.zeros((n, k))
    count = np.zeros(n, dtype=np.int64)
    straight = normals.shape[0] == n
    heap = [(0.0, np.int64(0), np.int64(0), np.int64(0), np.int64(0), 0.0)]
    heap.pop()
    for j in range(sources.shape[0]):
        s = sources[j]
        heap.append((0.0, np.int64(s), np.int64(labels[j]), np.int64(s), np.int64(s), 0.0))
    heapq.heapify(heap)
    while len(heap) > 0:
        d, u, lab, anc, par, dpar = heapq.heappop(heap)
        if count[u] >= k:
            continue
        seen = False
        for q in range(count[u]):
            if label[u, q] == lab:
                seen = True
        if seen:
            continue
        c = count[u]
        dist[u, c] = d
        anchor[u, c] = anc
        label[u, c] = lab
        parent[u, c] = par
        parent_dist[u, c] = dpar
        count[u] = c + 1
        for e in range(indptr[u], indptr[u + 1]):
            v = nbr[e]
            if count[v] >= k:
                continue
            known = False
            for q in range(count[v]):
                if label[v, q] == lab:
                    known = True
            if known:
                continue
            dv, pv, dpv = d + wgt[e], u, d
            if straight and par != u:
                cn = normals[par, 0] * normals[v, 0] + normals[par, 1] * normals[v, 1] + normals[par, 2] * normals[v, 2]
                if cn >= min_cos:
                    dx = rest[v, 0] - rest[par, 0]
                    dy = rest[v, 1] - rest[par, 1]
                    dz = rest[v, 2] - rest[par, 2]
                    ds = dpar + np.sqrt(dx * dx + dy * dy + dz * dz)
                    if ds < dv:
                        dv, pv, dpv = ds, par, dpar
            heapq.heappush(heap, (dv, v, lab, anc, pv, dpv))
    return dist, anchor, count


def vertex_normals(rest, triangles):
    """Unit area-weighted vertex normals of the rest mesh, (n, 3) float64
    (zero for a vertex in no triangle of non-zero area)."""
    r = np.asarray(rest, dtype=np.float64)
    t = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    nrm = np.zeros((len(r), 3))
    if len(t):
        fn = np.cross(r[t[:, 1]] - r[t[:, 0]], r[t[:, 2]] - r[t[:, 0]])
        for c in range(3):
            np.add.at(nrm, t[:, c], fn)
    length = np.linalg.norm(nrm, axis=1)
    nrm[length > 0] /= length[length > 0, None]
    return nrm


# Paths cut straight across the faces where the rest normals at their ends
# are within this angle: a chord over a surface curved by it is at most
# 0.02 % shorter than the path over the surface.
STRAIGHT_TETHER_DEGREES = 4.0


# Each free vertex is tethered to its nearest pinned vertex in each of up to
# this many pinned regions (connected pinned vertices). With the nearest pin
# alone, cloth held in two places split where the nearest pin changes sides:
# each half held by its own tethers, the edges on the seam between them
# carried the pull (`make bench-solver`'s pinned-sheet rows).
TETHER_REGIONS = 2


def pinned_regions(edges, anchors, n):
    """A label per anchor: its connected component among the anchors (along edges)."""
    anchors = np.asarray(anchors, dtype=np.int64)
    parent = np.arange(n)
    pinned = np.zeros(n, dtype=bool)
    pinned[anchors] = True
    both = pinned[edges[:, 0]] & pinned[edges[:, 1]] if len(edges) else np.zeros(0, dtype=bool)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges[both]:
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([find(int(a)) for a in anchors], dtype=np.int64)
    return np.unique(roots, return_inverse=True)[1].astype(np.int64)


def geodesic_tethers(rest, edges, anchors, regions=None, triangles=None):
    """Long-range attachments: each vertex reachable from an anchor gets
    (anchor, geodesic rest distance) via multi-source Dijkstra along the rest
    edges (so a cape's hem is not tethered straight through the body), one
    per pinned region for its `regions` nearest regions (default
    TETHER_REGIONS). With the rest triangles, paths cut straight across
    flat stretches of the surface (_nearest_components), so on a flat sheet
    the lengths are the rest distances. Returns (vertex, anchor, length)
    for non-anchor reachable vertices, sorted by vertex."""
    n = len(rest)
    anchors = np.asarray(anchors, dtype=np.int64)
    if len(anchors) == 0 or len(edges) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, np.zeros(0)
    r = rest.astype(np.float64)
    length = np.linalg.norm(r[edges[:, 0]] - r[edges[:, 1]], axis=1)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    w = np.concatenate([length, length])
    order = np.argsort(src, kind="stable")
    nbr, wgt = dst[order], w[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    labels = pinned_regions(np.asarray(edges, dtype=np.int64), anchors, n)
    k = max(int(TETHER_REGIONS if regions is None else regions), 1)
    normals = np.zeros((0, 3)) if triangles is None else vertex_normals(r, triangles)
    min_cos = float(np.cos(np.radians(STRAIGHT_TETHER_DEGREES)))
    dist, anchor, count = _nearest_components(indptr, nbr, wgt, anchors, labels, n, k, r, normals, min_cos)
    is_anchor = np.zeros(n, dtype=bool)
    is_anchor[anchors] = True
    slot = np.arange(dist.shape[1])[None, :] < count[:, None]
    slot &= ~is_anchor[:, None]
    v = np.nonzero(slot)[0]
    return v, anchor[slot], dist[slot]


# Two levels: more levels (2, 4, 8, 16) cost more than stretch and shear
# together for little less stretch (`make bench-solver`'s pinned-sheet rows);
# spans 4 and 12 keep the blanket of tests/blender's cloth-cloth scene out of
# the hammock, where 3 + 12 and 4 + 16 let it through.
STRETCH_LIMIT_SPANS = (4, 12)


@njit(**PLAIN)
def _straight_walks(rest, indptr, nbr, spans, min_cos):
    """From every vertex along each of its edges, keep going straight: at each
    vertex take the neighbour whose direction is closest to the last step's
    (within acos(min_cos)), summing rest edge lengths. Emits (start, vertex
    reached, path length) after each span in `spans` (ascending) edges."""
    n = rest.shape[0]
    max_span = spans[spans.shape[0] - 1]
    cap = 0
    for v in range(n):
        cap += (indptr[v + 1] - indptr[v]) * spans.shape[0]
    out_a = np.empty(cap, np.int64)
    out_b = np.empty(cap, np.int64)
    out_l = np.empty(cap, np.float64)
    m = 0
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            prev = v
            cur = nbr[e]
            hx = rest[cur, 0] - rest[v, 0]
            hy = rest[cur, 1] - rest[v, 1]
            hz = rest[cur, 2] - rest[v, 2]
            length = np.sqrt(hx * hx + hy * hy + hz * hz)
            if length <= 0.0:
                continue
            hx, hy, hz = hx / length, hy / length, hz / length
            k = 0
            for step in range(1, max_span + 1):
                if step == spans[k]:
                    out_a[m] = v
                    out_b[m] = cur
                    out_l[m] = length
                    m += 1
                    k += 1
                    if k == spans.shape[0]:
                        break
                best = -1
                best_cos = min_cos
                bx = by = bz = 0.0
                bl = 0.0
                for f in range(indptr[cur], indptr[cur + 1]):
                    u = nbr[f]
                    if u == prev or u == v:
                        continue
                    dx = rest[u, 0] - rest[cur, 0]
                    dy = rest[u, 1] - rest[cur, 1]
                    dz = rest[u, 2] - rest[cur, 2]
                    dl = np.sqrt(dx * dx + dy * dy + dz * dz)
                    if dl <= 0.0:
                        continue
                    c = (dx * hx + dy * hy + dz * hz) / dl
                    if c > best_cos:
                        best_cos = c
                        best = u
                        bx, by, bz, bl = dx / dl, dy / dl, dz / dl, dl
                if best < 0:
                    break
                prev = cur
                cur = best
                hx, hy, hz = bx, by, bz
                length += bl
    return out_a[:m], out_b[:m], out_l[:m]


def stretch_limit_pairs(rest, edges, spans=STRETCH_LIMIT_SPANS, min_cos=0.7):
    """Long-range stretch limits: vertex pairs 4 and 12 edges apart along
    the straightest path through the mesh's polygon edges (rows and columns
    of a quad grid), each with its path's rest length, which is never shorter
    than their rest distance. Solved unilaterally (only pulled together when
    farther apart than that), they carry a pull across many edges in one
    iteration where single edges would pass it on one ring per iteration; a
    straight chord over a curved rest surface is shorter than the path, so a
    limit never fights the rest shape or a fold. Returns ((m, 2) int64 pairs
    i < j, (m,) float64 rest path lengths); a pair reached by several walks
    keeps the shortest."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    n = len(rest)
    if len(edges) == 0 or n == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.argsort(src, kind="stable")
    nbr = dst[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    a, b, length = _straight_walks(np.asarray(rest, np.float64), indptr, nbr,
                                   np.asarray(sorted(spans), np.int64), float(min_cos))
    keep = a != b
    return shortest_pairs(a[keep], b[keep], length[keep], n)


def shortest_pairs(a, b, length, n):
    """Unique vertex pairs ((m, 2) int64, i < j) of the pairs (a, b) with
    their lengths, each keeping its shortest length."""
    if len(a) == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo * n + hi
    order = np.lexsort((length, key))
    key, length = key[order], length[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    key, length = key[first], length[first]
    return np.stack([key // n, key % n], axis=1), length


def vertex_masses(rest_positions, face_indices, face_sizes, areal_density, weight=None):
    """Per-vertex mass (kg): each polygon's area (sum of its fan triangles) x
    areal_density (kg/m^2), split equally among its corners; optional (n,)
    weight scales each vertex's mass. Vertices in no polygon (or only in
    zero-area ones) get the mean mass of the others, so they still fall."""
    rest = np.asarray(rest_positions, dtype=np.float64)
    fi = np.asarray(face_indices, dtype=np.int64).ravel()
    fs = np.asarray(face_sizes, dtype=np.int64).ravel()
    n = len(rest)
    if rest.ndim != 2 or rest.shape[1] != 3:
        raise SolverError(f"rest_positions must have shape (n, 3), got {rest.shape}")
    if fs.sum() != len(fi):
        raise SolverError(f"face_sizes sum to {fs.sum()} but face_indices has {len(fi)} entries")
    if not np.isfinite(areal_density) or areal_density <= 0:
        raise SolverError(f"areal_density must be a positive number (kg/m^2), got {areal_density}")
    mass = np.zeros(n)
    if len(fs):
        starts = polygon_starts(fs)
        ntri = np.maximum(fs - 2, 0)
        poly = np.repeat(np.arange(len(fs)), ntri)
        j = np.arange(ntri.sum()) - np.repeat(np.cumsum(ntri) - ntri, ntri) + 1
        s = starts[poly]
        a, b, c = rest[fi[s]], rest[fi[s + j]], rest[fi[s + j + 1]]
        tri_area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
        poly_area = np.bincount(poly, weights=tri_area, minlength=len(fs))
        per_corner = np.repeat(poly_area / np.maximum(fs, 1), fs)
        mass = np.bincount(fi, weights=per_corner, minlength=n) * areal_density
    if weight is not None:
        wv = np.asarray(weight, dtype=np.float64).ravel()
        if wv.shape != (n,) or not np.all(np.isfinite(wv)) or np.any(wv < 0):
            raise SolverError(f"weight must be (n,) finite, >= 0 with n={n}")
        mass = mass * wv
    positive = mass > 0
    fill = mass[positive].mean() if positive.any() else areal_density * 1e-4
    mass[~positive] = fill
    return mass.astype(np.float32)
