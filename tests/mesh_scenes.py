"""Collider meshes and an oracle for the mesh collider tests and benchmark,
written apart from solver/colliders/mesh.py: closed meshes built in numpy,
exact point-triangle distances (tests/oracles.py) and inside-or-outside by
the generalised winding number (float64 solid angles); the hung sheets'
pin layouts and a half cylinder with its exact unrolling for the
convergence tests."""

import numba as nb
import numpy as np

import oracles
from drape.solver import ClothParams, build_model, step, vertex_masses

# The add-on's defaults (properties.py) at 24 frames a second.
ADDON = dict(substeps=4, iterations=1, bend_compliance=1e3, tether_compliance=1e-9, air_drag=0.1,
             settle_damping=10.0, settle_speed=0.1, air_resistance=1.0)


def uv_sphere(radius, centre, rings=16, segments=32):
    """A closed UV sphere, outward normals: (verts (m, 3), tris (t, 3))."""
    c = np.asarray(centre, dtype=np.float64)
    verts = [c + (0, 0, radius)]
    for r in range(1, rings):
        th = np.pi * r / rings
        for s in range(segments):
            ph = 2 * np.pi * s / segments
            verts.append(c + radius * np.array((np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th))))
    verts.append(c - (0, 0, radius))
    tris = []
    for s in range(segments):
        tris.append((0, 1 + s, 1 + (s + 1) % segments))
    for r in range(rings - 2):
        a, b = 1 + r * segments, 1 + (r + 1) * segments
        for s in range(segments):
            s1 = (s + 1) % segments
            tris.append((a + s, b + s, b + s1))
            tris.append((a + s, b + s1, a + s1))
    last = len(verts) - 1
    base = 1 + (rings - 2) * segments
    for s in range(segments):
        tris.append((base + s, last, base + (s + 1) % segments))
    return np.array(verts, np.float32), np.array(tris, np.int32)


def box(lo, hi, n=1):
    """A closed axis-aligned box split into n x n quads per face (two
    triangles each), outward normals."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    verts, tris = [], []
    g = np.linspace(0.0, 1.0, n + 1)
    for axis in range(3):
        for side in (0, 1):
            u, v = [a for a in range(3) if a != axis]
            base = len(verts)
            for i in range(n + 1):
                for j in range(n + 1):
                    p = np.empty(3)
                    p[axis] = hi[axis] if side else lo[axis]
                    p[u] = lo[u] + g[i] * (hi[u] - lo[u])
                    p[v] = lo[v] + g[j] * (hi[v] - lo[v])
                    verts.append(p)
            for i in range(n):
                for j in range(n):
                    a = base + i * (n + 1) + j
                    q = (a, a + n + 1, a + n + 2, a + 1)
                    tris.append((q[0], q[1], q[2]))
                    tris.append((q[0], q[2], q[3]))
    verts = np.array(verts, np.float32)
    tris = np.array(tris, np.int32)
    # Orient outward: the normal points away from the box's centre.
    c = (lo + hi) / 2
    a, b, cc = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    nrm = np.cross(b - a, cc - a)
    flip = np.einsum("ij,ij->i", nrm, (a + b + cc) / 3 - c) < 0
    tris[flip] = tris[flip][:, ::-1]
    return verts, tris


def merge(*meshes):
    """One (verts, tris) of several."""
    vs, ts, base = [], [], 0
    for v, t in meshes:
        vs.append(v)
        ts.append(t + base)
        base += len(v)
    return np.concatenate(vs).astype(np.float32), np.concatenate(ts).astype(np.int32)


def table(top=0.75, size=1.0, slab=0.04, leg=0.05, n=4):
    """A table: a slab on four square legs (five closed boxes), centred on
    the origin."""
    h = size / 2
    parts = [box((-h, -h, top - slab), (h, h, top), n)]
    for sx in (-1, 1):
        for sy in (-1, 1):
            cx, cy = sx * (h - leg), sy * (h - leg)
            parts.append(box((cx - leg / 2, cy - leg / 2, 0.0), (cx + leg / 2, cy + leg / 2, top - slab), 2))
    return merge(*parts)


def cylinder(radius, length, rings=24, segments=24):
    """An open tube along +Z from z = 0 to length, outward normals; vertex
    r * segments + s is ring r, segment s."""
    verts, tris = [], []
    for r in range(rings + 1):
        z = length * r / rings
        for s in range(segments):
            ph = 2 * np.pi * s / segments
            verts.append((radius * np.cos(ph), radius * np.sin(ph), z))
    for r in range(rings):
        for s in range(segments):
            s1 = (s + 1) % segments
            a, b = r * segments + s, r * segments + s1
            c, d = a + segments, b + segments
            tris.append((a, b, d))
            tris.append((a, d, c))
    return np.array(verts, np.float32), np.array(tris, np.int32)


def unsigned_distance(points, verts, tris):
    """Exact distance of every point to the nearest triangle (float64)."""
    p = np.asarray(points, np.float64)
    v = np.asarray(verts, np.float64)
    best = np.full(len(p), np.inf)
    for a, b, c in tris:
        best = np.minimum(best, oracles.point_triangle_distance(p, v[a], v[b], v[c]))
    return best


@nb.njit(cache=True)
def _winding(p, a, b, c):
    """The generalised winding number of every point about the triangles
    (a, b, c): the signed solid angles summed over 4 pi (van Oosterom and
    Strackee). About 1 inside a closed, outward-facing mesh and 0 outside, with
    no special case where a ray would graze an edge or a vertex."""
    out = np.zeros(p.shape[0])
    for i in range(p.shape[0]):
        total = 0.0
        for j in range(a.shape[0]):
            ax, ay, az = a[j, 0] - p[i, 0], a[j, 1] - p[i, 1], a[j, 2] - p[i, 2]
            bx, by, bz = b[j, 0] - p[i, 0], b[j, 1] - p[i, 1], b[j, 2] - p[i, 2]
            cx, cy, cz = c[j, 0] - p[i, 0], c[j, 1] - p[i, 1], c[j, 2] - p[i, 2]
            la = np.sqrt(ax * ax + ay * ay + az * az)
            lb = np.sqrt(bx * bx + by * by + bz * bz)
            lc = np.sqrt(cx * cx + cy * cy + cz * cz)
            det = ax * (by * cz - bz * cy) - ay * (bx * cz - bz * cx) + az * (bx * cy - by * cx)
            den = (la * lb * lc + (ax * bx + ay * by + az * bz) * lc + (bx * cx + by * cy + bz * cz) * la
                   + (cx * ax + cy * ay + cz * az) * lb)
            total += 2.0 * np.arctan2(det, den)
        out[i] = total / (4.0 * np.pi)
    return out


def winding_numbers(points, verts, tris):
    """(n,) winding number of each point about the triangle mesh (float64)."""
    p = np.ascontiguousarray(points, np.float64).reshape(-1, 3)
    v = np.asarray(verts, np.float64)
    t = np.asarray(tris, np.int64).reshape(-1, 3)
    return _winding(p, np.ascontiguousarray(v[t[:, 0]]), np.ascontiguousarray(v[t[:, 1]]),
                    np.ascontiguousarray(v[t[:, 2]]))


def inside(points, verts, tris):
    """True where a point is inside the closed mesh: its winding number is
    above one half in magnitude (either facing). (A ray's crossing parity miscounts where the ray meets a
    shared edge or vertex, which a cloth resting on a faceted sphere finds.)"""
    return np.abs(winding_numbers(points, verts, tris)) > 0.5


def penetration(points, verts, tris):
    """How deep each point is inside the closed mesh (0 outside), m."""
    p = np.asarray(points, np.float64).reshape(-1, 3)
    out = np.zeros(len(p))
    ins = inside(p, verts, tris)
    if ins.any():
        out[ins] = unsigned_distance(p[ins], verts, tris)
    return out


def held_vertices(rest, layout):
    top, left, right = (np.isclose(rest[:, 2], 1.0), np.isclose(rest[:, 0], 0.0), np.isclose(rest[:, 0], 1.0))
    return {"one_corner": top & left, "two_corners": top & (left | right), "one_edge": top,
            "two_edges": left | right}[layout]


def half_cylinder(nu, nz, radius=0.3, height=1.0):
    """A half cylinder (a prism of nu flat facets) around the z axis: rest,
    faces, sizes and each vertex unrolled into the plane (the facets laid
    side by side, so the straight line between two unrolled points is their
    exact geodesic over the facets)."""
    theta = np.linspace(0.0, np.pi, nu + 1)
    zs = np.linspace(height, 0.0, nz + 1)
    t, z = np.meshgrid(theta, zs)
    rest = np.stack([radius * np.cos(t.ravel()), radius * np.sin(t.ravel()), z.ravel()], axis=1)
    idx = np.arange((nu + 1) * (nz + 1)).reshape(nz + 1, nu + 1)
    quads = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], axis=-1)
    facet = 2.0 * radius * np.sin(np.pi / (2 * nu))
    column = np.meshgrid(np.arange(nu + 1), zs)[0]
    unrolled = np.stack([facet * column.ravel(), z.ravel()], axis=1)
    return rest, quads.reshape(-1).astype(np.int64), np.full(nu * nz, 4, dtype=np.int64), unrolled


def settled_strain(nx, layout, frames=96, **settings):
    """Edge strains of a 1 m sheet of nx x nx quads hung in the XZ plane for
    `frames` frames at 24 fps."""
    rest, fi, fs = oracles.grid_sheet(nx, nx)
    params = ClothParams(**{**ADDON, **settings})
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held_vertices(rest, layout).astype(float),
                        params)
    state = model.new_state()
    for _ in range(frames):
        step(model, state, None, 1 / 24, params)
    x = state.positions_aos().astype(np.float64)
    assert np.all(np.isfinite(x))
    return oracles.edge_strain(x, model.stretch.pairs, rest)
