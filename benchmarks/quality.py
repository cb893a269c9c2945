"""Quality metrics for a simulated cloth frame, written apart from the solver so
they can judge Drape and Blender's Cloth modifier alike (plain numpy, float64).

- edge strain: |e| / |e_rest| - 1 over the structural edges (polygon sides);
- vertices inside colliders: exact distance to a capsule/sphere, or the face
  planes of a convex collider mesh (what Blender collides with);
- intersecting triangle pairs: an exact segment-triangle crossing test with
  orientation predicates, on every pair of triangles that share no vertex
  (adjacent triangles touch by construction and are never counted).
"""

import numpy as np


# ----------------------------------------------------------------- topology

def polygon_edges(face_indices, face_sizes):
    """Unique undirected structural edges (sides of the polygons), (e, 2) int64."""
    face_indices = np.asarray(face_indices, dtype=np.int64)
    face_sizes = np.asarray(face_sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(face_sizes)[:-1]])
    corner = np.arange(len(face_indices))
    face_of = np.repeat(np.arange(len(face_sizes)), face_sizes)
    local = corner - starts[face_of]
    nxt = starts[face_of] + (local + 1) % face_sizes[face_of]
    a = face_indices
    b = face_indices[nxt]
    e = np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)
    return np.unique(e, axis=0)


def triangulate(face_indices, face_sizes):
    """Fan triangulation of the polygons, (t, 3) int64."""
    face_indices = np.asarray(face_indices, dtype=np.int64)
    face_sizes = np.asarray(face_sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(face_sizes)[:-1]])
    tris = []
    for k in range(1, int(face_sizes.max()) - 1):
        sel = face_sizes > k + 1
        s = starts[sel]
        tris.append(np.stack([face_indices[s], face_indices[s + k], face_indices[s + k + 1]], axis=1))
    return np.concatenate(tris)


# ----------------------------------------------------------------- strain

def edge_strain(positions, edges, rest_length):
    """Per-edge strain |e|/rest - 1 (positive = stretched)."""
    p = np.asarray(positions, dtype=np.float64)
    length = np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)
    return length / rest_length - 1.0


def rest_lengths(rest_positions, edges):
    p = np.asarray(rest_positions, dtype=np.float64)
    return np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1)


# ----------------------------------------------------------------- colliders

def inside_capsule(positions, a, b, radius, tolerance=1e-3, radius_b=None):
    """Count vertices deeper than `tolerance` inside the capsule a-b (a == b: sphere).
    With radius_b (a round cone) the radius is interpolated at the closest point on
    the axis, which is exact for equal radii and slightly generous otherwise."""
    p = np.asarray(positions, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ab = b - a
    denom = float(ab @ ab)
    if denom > 0.0:
        t = np.clip((p - a) @ ab / denom, 0.0, 1.0)
    else:
        t = np.zeros(len(p))
    closest = a + t[:, None] * ab
    d = np.linalg.norm(p - closest, axis=1)
    r = radius if radius_b is None else radius + (radius_b - radius) * t
    return int(np.count_nonzero(d < r - tolerance))


def inside_convex(positions, normals, offsets, tolerance=1e-3):
    """Count vertices deeper than `tolerance` inside a convex polytope given by its
    outward face planes n.x = d (inside: n.x - d < 0 for every face)."""
    p = np.asarray(positions, dtype=np.float64)
    signed = p @ np.asarray(normals, dtype=np.float64).T - np.asarray(offsets, dtype=np.float64)
    return int(np.count_nonzero(signed.max(axis=1) < -tolerance))


# ----------------------------------------------------------------- triangle intersections

def _orient(a, b, c, d):
    """Signed volume det[b-a, c-a, d-a] for stacks of points (k, 3)."""
    u = b - a
    v = c - a
    w = d - a
    return (u[:, 0] * (v[:, 1] * w[:, 2] - v[:, 2] * w[:, 1])
            - u[:, 1] * (v[:, 0] * w[:, 2] - v[:, 2] * w[:, 0])
            + u[:, 2] * (v[:, 0] * w[:, 1] - v[:, 1] * w[:, 0]))


def _segment_crosses_triangle(p, q, a, b, c):
    """Segment pq passes strictly through the interior of triangle abc."""
    dp = _orient(a, b, c, p)
    dq = _orient(a, b, c, q)
    straddles = dp * dq < 0.0
    s1 = _orient(p, q, a, b)
    s2 = _orient(p, q, b, c)
    s3 = _orient(p, q, c, a)
    inside = ((s1 > 0) & (s2 > 0) & (s3 > 0)) | ((s1 < 0) & (s2 < 0) & (s3 < 0))
    return straddles & inside


def triangles_intersect(t1, t2):
    """Exact test for stacks of triangle pairs, each (k, 3, 3) float64: true where
    the two triangles cross (in general position an intersection always has an
    edge of one triangle passing through the other)."""
    hit = np.zeros(len(t1), dtype=bool)
    for (x, y) in ((t1, t2), (t2, t1)):
        a, b, c = y[:, 0], y[:, 1], y[:, 2]
        for i in range(3):
            p = x[:, i]
            q = x[:, (i + 1) % 3]
            hit |= _segment_crosses_triangle(p, q, a, b, c)
    return hit


def candidate_pairs(positions, triangles, cell=None):
    """Pairs (i < j) of triangles whose bounding boxes overlap, from a uniform grid."""
    p = np.asarray(positions, dtype=np.float64)
    tp = p[triangles]
    lo = tp.min(axis=1)
    hi = tp.max(axis=1)
    if cell is None:
        cell = max(float(np.median((hi - lo).max(axis=1))) * 1.5, 1e-6)
    origin = lo.min(axis=0)
    ilo = np.floor((lo - origin) / cell).astype(np.int64)
    ihi = np.floor((hi - origin) / cell).astype(np.int64)
    span = ihi - ilo + 1
    # Huge triangles (span > 4 cells) are rare on cloth; they are tested against everything near them
    # by clamping their cell range, which only adds candidates, never drops one.
    counts = span.prod(axis=1)
    tri_ids = np.repeat(np.arange(len(triangles)), counts)
    offs = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    sx = np.repeat(span[:, 0], counts)
    sy = np.repeat(span[:, 1], counts)
    ox = offs % sx
    oy = (offs // sx) % sy
    oz = offs // (sx * sy)
    cx = np.repeat(ilo[:, 0], counts) + ox
    cy = np.repeat(ilo[:, 1], counts) + oy
    cz = np.repeat(ilo[:, 2], counts) + oz
    dims = ihi.max(axis=0) + 2
    key = (cx * dims[1] + cy) * dims[2] + cz
    order = np.argsort(key, kind="stable")
    key = key[order]
    tri_ids = tri_ids[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], bounds])
    sizes = np.diff(np.concatenate([starts, [len(key)]]))
    pairs = []
    for k in np.unique(sizes):
        if k < 2:
            continue
        groups = starts[sizes == k][:, None] + np.arange(k)[None, :]
        members = tri_ids[groups]
        iu, ju = np.triu_indices(k, 1)
        pairs.append(np.stack([members[:, iu].ravel(), members[:, ju].ravel()], axis=1))
    if not pairs:
        return np.empty((0, 2), dtype=np.int64)
    pr = np.concatenate(pairs)
    pr = np.stack([pr.min(axis=1), pr.max(axis=1)], axis=1)
    pr = np.unique(pr, axis=0)
    overlap = np.all((lo[pr[:, 0]] <= hi[pr[:, 1]]) & (lo[pr[:, 1]] <= hi[pr[:, 0]]), axis=1)
    return pr[overlap]


def intersecting_pairs(positions, triangles, chunk=400_000):
    """Number of pairs of triangles sharing no vertex that intersect, exact test."""
    p = np.asarray(positions, dtype=np.float64)
    triangles = np.asarray(triangles, dtype=np.int64)
    pr = candidate_pairs(p, triangles)
    ta = triangles[pr[:, 0]]
    tb = triangles[pr[:, 1]]
    shares = np.zeros(len(pr), dtype=bool)
    for i in range(3):
        for j in range(3):
            shares |= ta[:, i] == tb[:, j]
    pr = pr[~shares]
    total = 0
    for s in range(0, len(pr), chunk):
        c = pr[s:s + chunk]
        total += int(np.count_nonzero(triangles_intersect(p[triangles[c[:, 0]]], p[triangles[c[:, 1]]])))
    return total


def crossings_between(xa, ta, xb, tb):
    """Intersecting triangle pairs between two meshes (positions, (t, 3)
    triangles) and within each: (between, within a, within b)."""
    within_a = intersecting_pairs(xa, ta)
    within_b = intersecting_pairs(xb, tb)
    both = intersecting_pairs(np.concatenate([xa, xb]), np.concatenate([ta, np.asarray(tb) + len(xa)]))
    return both - within_a - within_b, within_a, within_b


# ----------------------------------------------------------------- one frame, all metrics

class FrameMetrics:
    """Accumulates metrics over the frames of one run."""

    def __init__(self, rest_positions, face_indices, face_sizes):
        self.edges = polygon_edges(face_indices, face_sizes)
        self.rest = rest_lengths(rest_positions, self.edges)
        self.triangles = triangulate(face_indices, face_sizes)
        self.max_strain = 0.0
        self.mean_strain_sum = 0.0
        self.final_mean_strain = 0.0
        self.final_max_strain = 0.0
        self.frames = 0
        self.inside_max = 0
        self.inside_frames = 0
        self.intersect_max = 0
        self.intersect_frames_checked = 0

    def add(self, positions, inside=None, check_intersections=False):
        s = edge_strain(positions, self.edges, self.rest)
        self.final_max_strain = float(s.max())
        self.final_mean_strain = float(s.mean())
        self.max_strain = max(self.max_strain, self.final_max_strain)
        self.mean_strain_sum += self.final_mean_strain
        self.frames += 1
        if inside is not None:
            self.inside_max = max(self.inside_max, inside)
            self.inside_frames += int(inside > 0)
        if check_intersections:
            self.intersect_max = max(self.intersect_max, intersecting_pairs(positions, self.triangles))
            self.intersect_frames_checked += 1

    def as_dict(self):
        return {
            "max_strain": round(self.max_strain, 5),
            "mean_strain": round(self.mean_strain_sum / max(self.frames, 1), 5),
            "final_max_strain": round(self.final_max_strain, 5),
            "final_mean_strain": round(self.final_mean_strain, 5),
            "inside_collider_max": self.inside_max,
            "frames_with_inside": self.inside_frames,
            "intersecting_pairs_max": self.intersect_max,
            "frames_checked_for_intersections": self.intersect_frames_checked,
        }
