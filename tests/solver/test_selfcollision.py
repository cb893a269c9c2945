"""Self and cloth-cloth collision: contact generation and the Jacobi solve.

Fast tests on synthetic positions; the scenario tests with the exact
triangle-triangle oracle are in test_selfcollision_scenarios.py.
"""

import numba
import numpy as np
import pytest

from oracles import point_triangle_distance, segment_segment_distance

from drape.solver import SolverError
from drape.solver.selfcollision import broad, cache, constants, solve, topology
from drape.solver.selfcollision import (KIND_EDGE_EDGE, KIND_POINT_POINT, KIND_VERTEX_TRIANGLE, MODE_FULL,
                                        MODE_OFF, MODE_POINT_POINT, SelfCollision, merge_meshes, triangulate)

G = (0.0, 0.0, -9.81)


def sheet(nx, ny, size=1.0, z=0.0):
    """nx x ny quads in the XY plane at height z, faces pointing +z."""
    xs = np.linspace(0.0, size, nx + 1)
    ys = np.linspace(0.0, size, ny + 1)
    x, y = np.meshgrid(xs, ys)
    rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1)
    idx = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
    return rest, quads.ravel(), np.full(nx * ny, 4)


def fan_disc(spokes=24, rings=2, radius=0.5):
    """A disc: a centre vertex of valence `spokes`, then rings of quads."""
    pts = [[0.0, 0.0, 0.0]]
    for r in range(1, rings + 1):
        for k in range(spokes):
            a = 2 * np.pi * k / spokes
            pts.append([radius * r / rings * np.cos(a), radius * r / rings * np.sin(a), 0.0])
    tris = [[0, 1 + k, 1 + (k + 1) % spokes] for k in range(spokes)]
    for r in range(1, rings):
        o0 = 1 + (r - 1) * spokes
        o1 = 1 + r * spokes
        for k in range(spokes):
            k1 = (k + 1) % spokes
            tris.append([o0 + k, o1 + k, o1 + k1])
            tris.append([o0 + k, o1 + k1, o0 + k1])
    return np.asarray(pts), np.asarray(tris)


def soa(p):
    return np.ascontiguousarray(np.asarray(p, dtype=np.float32).T)


def normals_z(rest, tris):
    t = np.asarray(tris)
    return np.cross(rest[t[:, 1]] - rest[t[:, 0]], rest[t[:, 2]] - rest[t[:, 0]])[:, 2]


F32_EPS = float(np.finfo(np.float32).eps)


def f32_rounding(x, ulps=8):
    """A few float32 units in the last place of the largest coordinate of x
    [m]: how far two compilations of the same float32 arithmetic (or the
    same sums in another order) may round apart."""
    return ulps * F32_EPS * float(np.abs(x).max())


def _closest_params(p0, p1, q0, q1):
    """Closest points p0 + s (p1 - p0), q0 + t (q1 - q0) of segment pairs
    (each (n, 3), float64), clamped, and whether the segments are so near
    parallel that the closest points are ill-conditioned."""
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a, e = np.einsum("ij,ij->i", d1, d1), np.einsum("ij,ij->i", d2, d2)
    b, c, f = np.einsum("ij,ij->i", d1, d2), np.einsum("ij,ij->i", d1, r), np.einsum("ij,ij->i", d2, r)
    den = a * e - b * b
    parallel = den <= 1e-4 * a * e
    s = np.where(parallel, 0.0, np.clip((b * f - c * e) / np.where(parallel, 1.0, den), 0.0, 1.0))
    t = (b * s + f) / e
    s = np.where(t < 0, np.clip(-c / a, 0, 1), np.where(t > 1, np.clip((b - c) / a, 0, 1), s))
    return s, np.clip(t, 0.0, 1.0), parallel


def near_a_threshold(x, sc, k, tol):
    """For contacts k of sc at positions x (3, n): whether one of the solve's
    decisions (pass 1's and the filter's: violated, clear of the plane,
    deep behind it, beside the triangle or the other edge) lies within tol
    [m] of its threshold, in float64. Two compilations may decide those
    either way."""
    p = x.T.astype(np.float64)
    cv, kind, nrm, tg = sc.contact_vertex[k], sc.contact_kind[k], sc.contact_normal[k].astype(np.float64), \
        sc.contact_target[k].astype(np.float64)
    x0, x1, x2, x3 = (p[cv[:, i]] for i in range(4))
    room = np.sqrt(float(solve._FILTER_ROOM))
    depth, vt_reach, ee_reach = constants.CONTACT_DEPTH, constants.VT_REACH, constants.EE_REACH
    margins = []
    # Vertex-triangle: the signed height over the plane, and how far beside
    # the triangle (from its closest point, and beyond each edge's line).
    m = np.cross(x2 - x1, x3 - x1)
    n = m / np.linalg.norm(m, axis=1)[:, None]
    side = np.where(nrm[:, 0] > 0, 1.0, -1.0)
    h = side * np.einsum("ij,ij->i", x0 - x1, n)
    dist = point_triangle_distances(x0, x1, x2, x3)
    beside = np.sqrt(np.maximum(dist * dist - h * h, 0.0))
    vt = [h - tg, h - room * tg, h + depth * tg, h + depth * tg * room, h + depth * tg / room,
          beside - vt_reach * tg]
    q = x0 - np.einsum("ij,ij->i", x0 - x1, n)[:, None] * n
    for a, b in ((x1, x2), (x2, x3), (x3, x1)):
        out = np.cross(b - a, n)
        out /= np.linalg.norm(out, axis=1)[:, None]
        w = np.einsum("ij,ij->i", q - a, out)
        vt += [w - vt_reach * tg * room]
    # Edge-edge: the closest points' offset along the normal turned with its
    # frame triangle, and across it.
    tri = sc.triangles[np.maximum(sc.contact_frame[k], 0)]
    fa, fb, fc = p[tri[:, 0]], p[tri[:, 1]], p[tri[:, 2]]
    u = (fb - fa) / np.linalg.norm(fb - fa, axis=1)[:, None]
    fn = np.cross(fb - fa, fc - fa)
    fn /= np.linalg.norm(fn, axis=1)[:, None]
    fv = np.cross(fn, u)
    en = nrm[:, 0:1] * u + nrm[:, 1:2] * fv + nrm[:, 2:3] * fn
    s_, t_, parallel = _closest_params(x0, x1, x2, x3)
    e = (x0 + s_[:, None] * (x1 - x0)) - (x2 + t_[:, None] * (x3 - x2))
    eh = np.einsum("ij,ij->i", e, en)
    across = np.sqrt(np.maximum(np.einsum("ij,ij->i", e, e) - eh * eh, 0.0))
    ee = [eh - tg, eh + depth * tg, across - ee_reach * tg]
    # Point-point: the gap along the stored normal.
    pp = [np.einsum("ij,ij->i", x0 - x1, nrm) - tg]
    near = np.zeros(len(k), bool)
    for kind_, ms in ((KIND_VERTEX_TRIANGLE, vt), (KIND_EDGE_EDGE, ee), (KIND_POINT_POINT, pp)):
        sel = kind == kind_
        close = np.any(np.abs(np.stack(ms)) <= tol, axis=0)
        if kind_ == KIND_EDGE_EDGE:
            close |= parallel
        near[sel] = close[sel]
    return near


def point_triangle_distances(p, a, b, c):
    """point_triangle_distance (tests/oracles.py) for one point per triangle."""
    return np.array([point_triangle_distance(p[i:i + 1], a[i], b[i], c[i])[0] for i in range(len(p))])


def test_every_contact_emitted_once_on_high_valence_fan():
    # Two copies of a fan whose centre has valence 24, 6 mm apart: every
    # vertex touches each triangle around its twin, every edge each edge
    # sharing an end with its twin. Count what the solver emits against that.
    p, t = fan_disc(spokes=24, rings=3)
    dz = 0.006
    top = p + [0.0, 0.0, dz]
    m = merge_meshes([(p, t), (top, t)])
    tri = triangulate(m.face_indices, m.face_sizes)
    sc = SelfCollision(m.positions, tri, m.region, thickness=0.01, margin=0.25)
    x = soa(m.positions)
    sc.detect(x, np.zeros_like(x), 1 / 60, (0.0, 0.0, 0.0))
    keys = sc.contact_keys()
    assert len(keys) == len(set(keys)), "a contact was emitted twice"

    nA = len(p)
    expected = set()
    for side, other in ((0, nA), (nA, 0)):
        for v in range(nA):
            for tt in t:
                if v in tt:
                    expected.add((KIND_VERTEX_TRIANGLE, v + side) + tuple(sorted(tt + other)))
    edges = {tuple(sorted(e)) for tt in t for e in ((tt[0], tt[1]), (tt[1], tt[2]), (tt[2], tt[0]))}
    for e in edges:
        for f in edges:
            if set(e) & set(f):
                e1 = (e[0], e[1])
                e2 = (f[0] + nA, f[1] + nA)
                expected.add((KIND_EDGE_EDGE,) + min(e1, e2) + max(e1, e2))
    assert set(keys) == expected
    # The centre vertex (valence 24) appears in exactly 24 vertex-triangle
    # contacts as the vertex (once per triangle around its twin).
    assert sum(1 for k in keys if k[0] == KIND_VERTEX_TRIANGLE and k[1] == 0) == 24


def two_sheets(gap, n=6, rest_gap=None, noise=0.0, seed=0):
    r, fi, fs = sheet(n, n, 0.3)
    top = r + [0.0, 0.0, gap]
    m = merge_meshes([(r, fi, fs), (top, fi, fs)])
    rest = m.positions.copy()
    if rest_gap is not None:
        rest[len(r):, 2] = rest_gap
    x = m.positions.copy()
    if noise:
        x += np.random.default_rng(seed).normal(0.0, noise, x.shape).astype(np.float32)
    return m, rest, soa(x), len(r)


def test_solve_reaches_thickness_between_sheets():
    m, rest, x, na = two_sheets(0.004, rest_gap=0.05)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01, friction=0.0)
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    assert sc.count > 0
    for _ in range(40):
        sc.solve(x, x.copy())
    gap = x[2, na:] - x[2, :na]
    assert gap.min() > 0.0099 and gap.max() < 0.0101


def test_rest_neighbours_closer_than_thickness_are_held_at_rest_distance():
    # Modelled 3 mm apart with a 10 mm thickness: not pushed to 10 mm, but
    # not let through either.
    m, rest, x, na = two_sheets(0.001, rest_gap=0.003)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01, friction=0.0)
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    for _ in range(40):
        sc.solve(x, x.copy())
    gap = x[2, na:] - x[2, :na]
    assert np.allclose(gap, 0.003, atol=5e-5)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_jacobi_solve_identical_for_1_and_2_threads():
    m, rest, x, na = two_sheets(0.003, n=16, noise=0.002, rest_gap=0.05)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01,
                                 friction=0.3, parallel=True)
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    assert sc.count > 500
    prev = x - np.float32(0.001)
    out = []
    old = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            # Each run from a fresh detection: the contacts' state (SLOT_STALE)
            # carries from solve to solve, as from substep to substep.
            sc.detect(x, np.zeros_like(x), 1 / 60, G)
            y = x.copy()
            for _ in range(5):
                sc.solve(y, prev)
            out.append(y)
    finally:
        numba.set_num_threads(old)
    assert not np.array_equal(out[0], x), "the solve did nothing"
    assert np.array_equal(out[0], out[1])
    # The serial solve (scatter in contact order) sums the same way. It is
    # another compilation of the same arithmetic (a serial loop, not the
    # parallel loop's outlined body), which LLVM may contract differently:
    # with numba's cache holding a copy compiled by another process (a
    # step's), pass 1 differed by 9e-10 m and the solve by as little. Equal
    # to rounding, then; the thread counts above are the same code, bit for bit.
    sc.parallel = False
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    y = x.copy()
    for _ in range(5):
        sc.solve(y, prev)
    assert not np.array_equal(y, x), "the serial solve did nothing"
    np.testing.assert_allclose(y, out[0], rtol=0, atol=f32_rounding(x))


def test_layer_order_puts_outer_layer_outside():
    # The outer sheet starts 3 mm *below* the inner one (tangled). With a layer
    # order it ends above by the thickness; without, it is held below.
    r, fi, fs = sheet(6, 6, 0.3)
    assert np.all(normals_z(r, triangulate(fi, fs)) > 0)
    below = r + [0.0, 0.0, -0.003]
    m = merge_meshes([(r, fi, fs), (below, fi, fs)])
    na = len(r)
    rest = m.positions.copy()
    rest[na:, 2] = 0.05   # modelled outside
    for layers, outer_above in (([0, 1], True), (None, False)):
        x = soa(m.positions)
        sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region,
                                     thickness=0.01, friction=0.0, layers=layers)
        sc.detect(x, np.zeros_like(x), 1 / 60, G)
        for _ in range(60):
            sc.solve(x, x.copy())
        gap = x[2, na:] - x[2, :na]
        if outer_above:
            assert gap.min() > 0.0099
        else:
            assert gap.max() < -0.0099


def test_layer_order_does_not_force_a_deep_tangle_through():
    # The same sheets with the outer one 11 mm (1.1 thicknesses) below the
    # inner: within contact reach, but deeper than LAYER_DEPTH thicknesses.
    # Forcing such a vertex or edge across the whole layer in one solve tore
    # the demo's skirts apart (edge strain 4.9); the side at step start
    # holds instead, as without a layer order, and nothing moves far.
    r, fi, fs = sheet(6, 6, 0.3)
    below = r + [0.0, 0.0, -0.011]
    m = merge_meshes([(r, fi, fs), (below, fi, fs)])
    na = len(r)
    rest = m.positions.copy()
    rest[na:, 2] = 0.05
    x = soa(m.positions)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region,
                                 thickness=0.01, friction=0.0, layers=[0, 1])
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    assert sc.count > 0, "the sheets are within reach: contacts must be made"
    x0 = x.copy()
    for _ in range(60):
        sc.solve(x, x.copy())
    gap = x[2, na:] - x[2, :na]
    assert gap.max() < -0.0099
    assert np.abs(x - x0).max() < 0.002


def test_region_modes_off_and_point_point():
    m, rest, x, na = two_sheets(0.004)
    off = np.array([[MODE_FULL, 0], [MODE_OFF, MODE_FULL]])
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01, modes=off)
    assert sc.detect(x, np.zeros_like(x), 1 / 60, G) == 0
    pp = np.array([[MODE_FULL, 0], [MODE_POINT_POINT, MODE_FULL]])
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01, modes=pp)
    sc.detect(x, np.zeros_like(x), 1 / 60, G)
    assert sc.count == na  # each vertex against its twin, once
    assert np.all(sc.contact_kind == KIND_POINT_POINT)


def test_predictive_contacts_from_closing_speed_not_common_motion():
    m, rest, x, na = two_sheets(0.05)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01)
    v = np.zeros_like(x)
    assert sc.detect(x, v, 1 / 60, G) == 0
    still = sc.candidates
    v[2, na:] = -4.0   # top sheet closes 67 mm in the step: contacts predicted
    assert sc.detect(x, v, 1 / 60, G) > 0
    v[2, :] = -4.0     # both fall together: nothing to predict, no extra candidates
    assert sc.detect(x, v, 1 / 60, G) == 0
    assert sc.candidates == still


def test_cached_contacts_are_reused_without_detection():
    m, rest, x, na = two_sheets(0.004)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01)
    n_cached = sc.cache_contacts(x)
    keys = sc.contact_keys()
    far = x.copy()
    far[2, na:] += 1.0
    assert sc.detect(far, np.zeros_like(x), 1 / 60, G) == n_cached
    assert sc.contact_keys() == keys and sc.detect_ms == 0.0
    sc.clear_cache()
    assert sc.detect(far, np.zeros_like(x), 1 / 60, G) == 0


def test_flat_sheet_has_no_self_contacts_and_bad_input_is_named():
    r, fi, fs = sheet(20, 20, 1.0)
    sc = SelfCollision.from_mesh(r, fi, fs, thickness=0.01)
    x = soa(r)
    assert sc.detect(x, np.zeros_like(x), 1 / 60, G) == 0
    with pytest.raises(SolverError, match="pos must be float32"):
        sc.detect(x[:, :-1], np.zeros_like(x), 1 / 60, G)
    with pytest.raises(SolverError, match="thickness"):
        SelfCollision.from_mesh(r, fi, fs, thickness=[0.01, 0.02])
    with pytest.raises(SolverError, match="triangle index out of range"):
        SelfCollision(r, [[0, 1, 10 ** 6]])
    bad = x.copy()
    bad[0, 3] = np.nan
    with pytest.raises(SolverError, match="NaN"):
        sc.detect(bad, np.zeros_like(x), 1 / 60, G)


def test_merge_meshes_offsets_and_regions():
    a, fa, sa = sheet(2, 2)
    b, tb = fan_disc(spokes=5, rings=1)
    m = merge_meshes([(a, fa, sa), (b, tb)])
    assert list(m.vertex_offset) == [0, 9, 15]
    assert list(np.bincount(m.region)) == [9, 6]
    assert m.face_indices[len(fa):].min() == 9
    assert m.face_sizes.sum() == len(m.face_indices)
    with pytest.raises(SolverError, match="mesh 1"):
        merge_meshes([(a, fa, sa), (b, tb + 100)])


def test_cached_layer_contacts_keep_each_vertexs_nearest_triangles_and_hold_the_order():
    # Two layered sheets, the outer 4 mm above the inner: the cache keeps
    # only vertex-triangle contacts across the layers, at most three per
    # vertex, always including a triangle right under/over it (its xy
    # footprint covers the vertex), and the solve still holds
    # the outer layer a thickness above the inner one.
    m, rest, x, na = two_sheets(0.004, rest_gap=0.05)
    x[0, na:] += 0.012   # shifted by part of a cell (50 mm), so each vertex
    x[1, na:] += 0.004   # lies over the inside of one triangle of the other
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.01,
                                 friction=0.0, layers=[0, 1])
    sc.cache_contacts(x, radius=0.02, between_regions=True)
    v = sc.contact_vertex
    assert sc.count > 0 and np.all(sc.contact_kind == KIND_VERTEX_TRIANGLE)
    assert np.all(m.region[v[:, 0]] != m.region[v[:, 1]])
    per_vertex = np.bincount(v[:, 0], minlength=len(m.region))
    assert per_vertex.max() <= 3 and np.all(per_vertex >= 1)
    p = x.T.astype(np.float64)

    def covers(t, q):
        # the triangle's xy footprint contains q's xy (2D barycentrics, small tolerance)
        a, b, c = p[t[0], :2], p[t[1], :2], p[t[2], :2]
        m2 = np.array([b - a, c - a]).T
        u, w = np.linalg.solve(m2, q[:2] - a)
        return u >= -1e-6 and w >= -1e-6 and u + w <= 1 + 1e-6

    tri = triangulate(m.face_indices, m.face_sizes)
    checked = 0
    for vert in range(len(m.region)):
        other = tri[m.region[tri[:, 0]] != m.region[vert]]
        if any(covers(t, p[vert]) for t in other):   # not beyond the other sheet's border
            checked += 1
            assert any(covers(t, p[vert]) for t in v[v[:, 0] == vert, 1:]), f"vertex {vert} lost its triangle"
    assert checked > 50
    for _ in range(40):
        sc.solve(x, x.copy())
    gap = x[2, na:] - x[2, :na]
    assert gap.min() > 0.0099 and gap.max() < 0.0101


def cached_layers(dx, dy, between_regions):
    """Two 12x12 layered sheets 4 mm apart, the outer shifted by (dx, dy),
    with contacts cached between them: (merged mesh, positions, first outer
    vertex, SelfCollision)."""
    m, rest, x, na = two_sheets(0.004, n=12, rest_gap=0.05)
    x[0, na:] += np.float32(dx)
    x[1, na:] += np.float32(dy)
    sc = SelfCollision.from_mesh(rest, m.face_indices, m.face_sizes, m.region, thickness=0.008,
                                 friction=0.2, layers=[0, 1])
    sc.cache_contacts(x, radius=0.02, between_regions=between_regions)
    return m, x, na, sc


def test_filter_decides_only_what_pass_one_would():
    # The filter leaves a contact (sel 0) when its vertex is clear of the
    # triangle's plane, stale and deep behind it, or beside the triangle by
    # more than the reach (five dot products, not pass 1's closest point).
    # Whatever it leaves must get the slot state pass 1 would give it:
    # checked against _vt_rows run on every contact, on cached layer
    # contacts (strip fans and single contacts) with the layers shifted,
    # shaken and partly pushed through, from random slot states.
    m, x, na, sc = cached_layers(0.009, 0.004, True)
    nc, fans, rows = sc.count, sc._fans, sc._filter_rows
    nf = fans.shape[1]
    assert nf > 0 and np.all(sc.contact_kind == KIND_VERTEX_TRIANGLE)
    cv = sc.contact_vertex
    every = np.arange(nc, dtype=np.uint32)
    rng = np.random.default_rng(11)
    by_beside = 0
    for trial in range(8):
        y = x + rng.normal(0.0, 0.005, x.shape).astype(np.float32)
        y[2, na:] -= np.float32(0.012) * (rng.random(len(m.region) - na) < 0.2)   # some pushed through
        prev = x.copy()
        state = rng.choice(np.array([constants.SLOT_OFF, constants.SLOT_ON, constants.SLOT_STALE], np.uint8), nc)
        active = state.copy()
        sel = np.zeros(solve.solve_work(nc)[0].shape[0], np.uint8)
        solve._strip_flags(y[0], y[1], y[2], fans[0], fans[1], fans[2], fans[3], fans[4], fans[5], rows[4],
                         sc.contact_target, active, sel)
        solve._plane_flags(y[0], y[1], y[2], rows[0], rows[1], rows[2], rows[3], rows[4], sc.contact_target,
                         active, sel, 3 * nf)
        st = np.empty(nc, np.uint8)
        dl = np.empty((12, nc), np.float32)
        solve._vt_rows(every, 0, nc, y[0], y[1], y[2], prev[0], prev[1], prev[2], cv.reshape(-1),
                     sc.contact_normal.reshape(-1), sc.contact_target, sc.contact_friction, sc.inv_mass,
                     state, st, dl)
        expected = np.where(st == 3, state, st)   # 3: a stale contact left as it was
        left = sel[:nc] == 0
        assert np.array_equal(active[left], expected[left])
        # Those the plane tests alone would have listed: the vertex well
        # inside the thickness over the plane (float64 here), not stale.
        p = y.T.astype(np.float64)
        normal = np.cross(p[cv[:, 2]] - p[cv[:, 1]], p[cv[:, 3]] - p[cv[:, 1]])
        normal /= np.linalg.norm(normal, axis=1)[:, None]
        h = np.einsum("ij,ij->i", p[cv[:, 0]] - p[cv[:, 1]], normal) * np.sign(sc.contact_normal[:, 0])
        by_beside += np.count_nonzero(left & (np.abs(h) < 0.9 * sc.contact_target) & (state != constants.SLOT_STALE))
        assert 0 < np.count_nonzero(~left) < nc
    assert by_beside > 100


@pytest.mark.parametrize("between_regions", [True, False])
def test_cached_strip_fans_filter_as_each_contact_alone(between_regions):
    # Cached layer contacts are grouped per vertex into strip fans (three
    # triangles joined edge to edge, five corners) and filtered a fan at a
    # time. Checked against the contacts themselves: each fan contact's
    # vertex and triangle, the side folded for the strip's corner order;
    # and against the per-contact filter, which must list the same
    # contacts and leave the same slot states and corrections on states
    # where some contacts are clear, some violated and some stale. Without
    # between_regions the cache also holds edge-edge contacts and vertices
    # with more than three: fewer fans, the rest filtered one by one.
    m, x, na, sc = cached_layers(0.007, 0.003, between_regions)
    fans, nc = sc._fans, sc.count
    nf = fans.shape[1]
    assert nf > (0.8 * len(m.region) if between_regions else 10)
    assert between_regions or np.any(sc.contact_kind == KIND_EDGE_EDGE)
    cv = sc.contact_vertex
    p = x.T.astype(np.float64)
    for s in range(3):
        k = s * nf + np.arange(nf)
        assert np.array_equal(cv[k, 0], fans[0])
        corners = fans[1 + s:4 + s]
        assert np.array_equal(np.sort(cv[k, 1:], axis=1), np.sort(corners.T, axis=1))
        # The folded side times the strip-order normal is the contact's
        # side times its own triangle's normal.
        n_own = np.cross(p[cv[k, 2]] - p[cv[k, 1]], p[cv[k, 3]] - p[cv[k, 1]])
        n_strip = np.cross(p[corners[1]] - p[corners[0]], p[corners[2]] - p[corners[0]])
        side = np.where(sc.contact_normal[k, 0] > 0, 1.0, -1.0)
        dots = np.einsum("ij,ij->i", n_own * side[:, None], n_strip * sc._filter_rows[4, k][:, None])
        assert np.all(dots > 0)
    plain_rows = solve.filter_rows(cv, sc.contact_kind, sc.contact_normal)
    rng = np.random.default_rng(5)
    listed = 0
    for trial in range(6):
        y = x + rng.normal(0.0, 0.004, x.shape).astype(np.float32)
        prev = x.copy()
        state = rng.choice(np.array([constants.SLOT_OFF, constants.SLOT_ON, constants.SLOT_STALE], np.uint8), nc)
        out = []
        for rows, fan_rows in ((sc._filter_rows, fans), (plain_rows, cache.NO_FANS)):
            active = state.copy()
            delta = np.zeros((nc, 4, 3), np.float32)
            todo, nt, _ = solve._pass1_serial(y, prev, sc.inv_mass, cv, sc.contact_kind, sc.contact_normal,
                                            sc.contact_frame, sc.triangles, sc.contact_target, sc.contact_friction,
                                            delta, active, rows, fan_rows, solve.solve_work(nc), True)
            out.append((todo[:nt].copy(), active, delta))
        (todo_f, act_f, d_f), (todo_p, act_p, d_p) = out
        # The two filters see each triangle's corners in another order (the
        # fan's strip order, the triangle's own), so their float32 tests
        # round apart: they may list different contacts, and the contacts
        # may end in different slot states, only where a decision lies
        # within float32 rounding of its threshold. Contacts both list get
        # the same corrections, to rounding.
        tol = f32_rounding(y)
        # (Few contacts are that close to a threshold: the check below can fail.)
        assert np.mean(near_a_threshold(y, sc, np.arange(nc), tol)) < 0.01
        listed_once = np.setxor1d(todo_f, todo_p)
        differ = np.union1d(listed_once, np.flatnonzero(act_f != act_p)).astype(np.int64)
        assert np.all(near_a_threshold(y, sc, differ, tol)), differ
        both = np.intersect1d(todo_f, todo_p)
        np.testing.assert_allclose(d_f[both], d_p[both], rtol=0, atol=tol)
        listed += len(todo_p)
        assert 0 < len(todo_p) < nc
    assert listed > 0
    # The serial solve (its scatter reads the row passes' output) and the
    # parallel one (its gather reads slot_delta) agree on the fans too, to
    # rounding: they are separate compilations of the row passes, and one
    # compiled in this process can round differently from one loaded from
    # numba's cache (7e-9 m seen; 1 and 2 threads of the parallel one are
    # compared exactly in test_jacobi_solve_identical_for_1_and_2_threads).
    # Both also leave the same slot states, which carry from solve to solve
    # (the serial scatter writes the listed contacts' states, pass 1 does
    # for the parallel gather): from the same mix of states, three solves.
    y = x + rng.normal(0.0, 0.004, x.shape).astype(np.float32)
    start = rng.choice(np.array([constants.SLOT_OFF, constants.SLOT_ON, constants.SLOT_STALE], np.uint8), nc)
    moved = []
    for parallel in (False, True):
        sc.parallel = parallel
        sc._slot_active[:] = start
        z = y.copy()
        inputs = []
        for _ in range(3):
            inputs.append(z.copy())
            sc.solve(z, y)
        moved.append((z, sc._slot_active.copy(), inputs))
    (z0, s0, in0), (z1, s1, in1) = moved
    tol = f32_rounding(y)
    assert np.abs(z0 - z1).max() <= tol and np.abs(z0 - y).max() > 1e-4
    # A state may differ only where one of the solves' decisions, at the
    # positions some solve started from, was within rounding of its
    # threshold (the positions themselves differ by up to tol).
    differ = np.flatnonzero(s0 != s1)
    if differ.size:
        near = np.zeros(differ.size, bool)
        for a, b in zip(in0, in1):
            near |= near_a_threshold(a, sc, differ, 2 * tol + np.abs(a - b).max())
        assert np.all(near), differ
    assert np.count_nonzero(s0 == constants.SLOT_ON) > 0 and np.count_nonzero(s0 != start) > 0.1 * nc
    # Live detection after the cache: no fans left over.
    sc.clear_cache()
    sc.detect(y, np.zeros_like(y), 1 / 60, G)
    assert sc._fans.shape[1] == 0 and sc._solve_work[0].shape[0] >= sc.count


def test_compiled_step_solves_the_self_contacts_it_found():
    """The step solves a SelfCollision's frozen contacts inside the compiled
    loop (solve_args + selfcollision.solve_serial): a sheet falling onto a
    held sheet 6 mm below stops above it; without self collision it falls
    through (the test can fail)."""
    from drape.solver import ClothParams, StepInputs, build_model, step
    n = 8
    xs = np.linspace(0.0, 0.4, n + 1)
    x, y = np.meshgrid(xs, xs)
    grid = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1).ravel()
    m = merge_meshes([(grid, quads, np.full(n * n, 4)), (grid + [0.0, 0.0, 0.006], quads, np.full(n * n, 4))])
    below = len(grid)
    pin = np.zeros(len(m.positions))
    pin[:below] = 1.0                                  # the lower sheet is held still
    params = ClothParams(substeps=4)
    gaps = []
    for self_collision in (True, False):
        model = build_model(m.positions, m.face_indices, m.face_sizes, np.full(len(m.positions), 0.002), pin,
                            params, region=m.region)
        sc = SelfCollision.from_model(model, thickness=0.004) if self_collision else None
        model.self_collision = sc
        state = model.new_state()
        counts = []
        for _ in range(12):
            step(model, state, StepInputs(), 1 / 60, params)
            counts.append(sc.count if sc else 0)
        z = state.positions[2]
        gaps.append(float((z[below:] - z[:below]).min()))
        if sc:
            assert max(counts) > 50, counts
    with_contacts, without = gaps
    assert with_contacts > 0.002, with_contacts          # above, about a thickness apart
    assert without < 0.0, without                        # fell through


@pytest.mark.parametrize("thickness,graded", [(0.003, False), (0.008, True), (0.02, False)])
def test_broad_phases_find_the_same_contacts_on_a_crumpled_moving_sheet(thickness, graded):
    # The patch broad phase (default) skips flat patch pairs and visits the
    # rest in its own order; the uniform grid tests every box pair. On a
    # sheet folded into an S (three layers 4 mm apart) with noise and a
    # shearing motion, both must emit the same contacts, each once. The
    # 25 mm cells' triangles (18 mm altitudes) are wide for 3 mm (the next
    # triangles get contacts, one altitude in the flat test) and narrow for
    # 20 mm (two rings, two altitudes); graded cells, 4-40 mm along x, are
    # both for 8 mm.
    n = 24
    r, fi, fs = sheet(n, n, 0.6)
    if graded:
        r[:, 0] = 0.6 * (r[:, 0] / 0.6) ** 1.6
    tri = triangulate(fi, fs)
    u = r[:, 0] / 0.6 * 3.0                     # 0..3 along x: three panels
    panel = np.minimum(u.astype(int), 2)
    local = u - panel
    x = np.where(panel % 2 == 0, local, 1.0 - local) * 0.2
    z = panel * 0.004 + 0.002 * np.sin(7.0 * r[:, 1])
    pos = np.stack([x, r[:, 1], z], axis=1)
    rng = np.random.default_rng(3)
    pos += rng.normal(0.0, 0.0005, pos.shape)
    vel = np.stack([np.zeros(len(r)), 0.3 * (z - z.mean()) / 0.004, -0.2 * np.cos(5.0 * r[:, 1])], axis=1)
    keys = {}
    for bp in ("patch", "grid"):
        sc = SelfCollision(r, tri, thickness=thickness, broad_phase=bp)
        sc.detect(soa(pos), soa(vel), 1 / 60, G)
        k = sc.contact_keys()
        assert len(k) == len(set(k)), f"{bp}: a contact was emitted twice"
        keys[bp] = set(k)
    assert len(keys["grid"]) > 1000
    assert keys["patch"] == keys["grid"]


def test_a_thickness_change_finds_what_a_fresh_build_finds():
    # Which triangles are near follows the thickness (NEAR_ALTITUDES contact
    # distances): set_params rebuilds it, and a cloth whose thickness changed
    # between steps must find the contacts a cloth built with the new one
    # finds, both ways, on the crumpled S of the test above.
    n = 24
    r, fi, fs = sheet(n, n, 0.6)
    tri = triangulate(fi, fs)
    u = r[:, 0] / 0.6 * 3.0
    panel = np.minimum(u.astype(int), 2)
    local = u - panel
    x = np.where(panel % 2 == 0, local, 1.0 - local) * 0.2
    pos = np.stack([x, r[:, 1], panel * 0.004 + 0.002 * np.sin(7.0 * r[:, 1])], axis=1)
    pos += np.random.default_rng(4).normal(0.0, 0.0005, pos.shape)
    vel = np.zeros_like(pos)
    for before, after in ((0.003, 0.02), (0.02, 0.003)):
        changed = SelfCollision(r, tri, thickness=before)
        changed.detect(soa(pos), soa(vel), 1 / 60, G)
        rings = len(changed.ring)
        changed.set_params(thickness=after)
        assert (len(changed.ring) > rings) == (after > before)
        changed.detect(soa(pos), soa(vel), 1 / 60, G)
        fresh = SelfCollision(r, tri, thickness=after)
        fresh.detect(soa(pos), soa(vel), 1 / 60, G)
        assert fresh.count > 100
        assert sorted(changed.contact_keys()) == sorted(fresh.contact_keys())


def _edge_pair_pass(shift_x):
    """One edge-edge contact (frozen normal +z: edge 0-1 belongs 4 mm above
    edge 2-3): edge 0-1 along y at x = shift_x, z = 0; edge 2-3 along x from
    -1 to 0, 1 mm higher. Returns (active, correction of vertex 0)."""
    pos = np.array([[shift_x, -1.0, 0.0], [shift_x, 1.0, 0.0], [-1.0, 0.0, 0.001], [0.0, 0.0, 0.001],
                    [0.0, 0.0, -1.0], [1.0, 0.0, -1.0], [0.0, 1.0, -1.0]], np.float32).T.copy()
    args = (np.ones(7, np.float32), np.array([[0, 1, 2, 3]], np.int32), np.array([KIND_EDGE_EDGE], np.int8),
            np.array([[0.0, 0.0, 1.0]], np.float32), np.array([0], np.int32), np.array([[4, 5, 6]], np.int32),
            np.array([0.004], np.float32), np.zeros(1, np.float32))
    delta = np.zeros((1, 4, 3), np.float32)
    active = np.zeros(1, np.uint8)
    solve._pass1_serial(pos, pos.copy(), *args, delta, active, solve.filter_rows(*args[1:4]), cache.NO_FANS, solve.solve_work(1), True)
    return int(active[0]), delta[0, 0]


def test_edge_contact_whose_edges_slid_apart_sideways_is_stale():
    # Edge 0-1 is 1 mm on the wrong side of edge 2-3 along the frozen
    # normal both times. Crossing (closest points 1 mm apart): the contact
    # pushes edge 0-1 up, to its side. Slid apart across the normal by more
    # than EE_REACH thicknesses (4 x 4 mm): the frozen normal no longer
    # separates anything and the contact must not act.
    active, move = _edge_pair_pass(-0.5)
    assert active == 1 and move[2] > 0
    reach = constants.EE_REACH * 0.004
    active, move = _edge_pair_pass(1.1 * reach)   # past edge 2-3's end, 10 % beyond the reach in x
    assert active == 0 and not np.any(move)
    active, move = _edge_pair_pass(0.9 * reach)   # within it: still acts
    assert active == 1 and move[2] > 0


def test_contact_near_a_pinned_end_moves_no_vertex_farther_than_its_gap():
    # Edge 0-1 hangs from vertex 0, pinned (inverse mass 0); edge 2-3 (fixed)
    # crosses it 2 % of the way down, 3 mm on the wrong side of its frozen
    # normal. The free end 1 alone can move; without a cap the contact moves
    # it |C| / 0.02 = 0.35 m (the demo skirt's waist edges threw a hem vertex
    # 0.12 m in one substep). With the cap it moves at most the gap, 7 mm.
    pos = np.array([[0.0, 0.0, 0.0], [0.0, -1.0, 0.0], [-1.0, -0.02, 0.003], [1.0, -0.02, 0.003]],
                   np.float32).T.copy()
    args = (np.array([0.0, 1.0, 0.0, 0.0], np.float32), np.array([[0, 1, 2, 3]], np.int32),
            np.array([KIND_EDGE_EDGE], np.int8), np.array([[0.0, 0.0, 1.0]], np.float32),
            np.array([0], np.int32), np.array([[4, 5, 6]], np.int32), np.array([0.004], np.float32),
            np.zeros(1, np.float32))
    pos = np.concatenate([pos, np.array([[0.0, 0.0, -1.0], [1.0, 0.0, -1.0], [0.0, 1.0, -1.0]], np.float32).T], axis=1)
    delta = np.zeros((1, 4, 3), np.float32)
    active = np.zeros(1, np.uint8)
    solve._pass1_serial(pos, pos.copy(), *args, delta, active, solve.filter_rows(*args[1:4]), cache.NO_FANS, solve.solve_work(1), True)
    assert active[0] == constants.SLOT_ON
    gap = 0.003 + 0.004
    assert not np.any(delta[0, 0])                      # the pinned end stays
    assert 0.5 * gap < delta[0, 1, 2] <= gap * 1.0001   # the free end: up, at most the gap


def _vt_pass(vertex, state):
    """One pass of one vertex-triangle contact (vertex 0 belongs on the +z
    side of the fixed triangle (0,0,0), (1,0,0), (0,1,0), 4 mm off it),
    vertex 0 at `vertex`. state: the (1,) uint8 slot state, carried from pass
    to pass as the substeps carry it. Returns (state, correction of vertex 0)."""
    pos = np.array([vertex, [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32).T.copy()
    args = (np.array([1.0, 0.0, 0.0, 0.0], np.float32), np.array([[0, 1, 2, 3]], np.int32),
            np.array([KIND_VERTEX_TRIANGLE], np.int8), np.array([[1.0, 0.0, 0.0]], np.float32),
            np.array([0], np.int32), np.array([[1, 2, 3]], np.int32), np.array([0.004], np.float32),
            np.zeros(1, np.float32))
    delta = np.zeros((1, 4, 3), np.float32)
    solve._pass1_serial(pos, pos.copy(), *args, delta, state, solve.filter_rows(*args[1:4]), cache.NO_FANS, solve.solve_work(1), True)
    return int(state[0]), delta[0, 0] if state[0] == constants.SLOT_ON else np.zeros(3, np.float32)


def test_vertex_that_went_around_a_triangle_is_not_pulled_through_it():
    # Went around: 5 cm behind the plane but beside the triangle (the
    # contact is off), then slid under it. Pulling it back through from
    # there threw the demo's hem 10 cm in one substep; the contact stays off
    # until the vertex is back within CONTACT_DEPTH thicknesses.
    state = np.zeros(1, np.uint8)
    assert _vt_pass([-0.2, 0.3, -0.05], state)[0] == constants.SLOT_STALE
    s, move = _vt_pass([0.2, 0.3, -0.05], state)
    assert s == constants.SLOT_STALE and not np.any(move)
    assert _vt_pass([0.2, 0.3, 0.01], state)[0] == constants.SLOT_OFF   # back in front: the contact is live again
    # The same position under the triangle without that history (it came
    # straight through in this substep): pushed back up, 5.4 cm.
    s, move = _vt_pass([0.2, 0.3, -0.05], np.zeros(1, np.uint8))
    assert s == constants.SLOT_ON and abs(move[2] - 0.054) < 1e-5 and abs(move[0]) < 1e-6
    # Shallow beside the triangle is not stale: it may slide under and be pushed.
    assert _vt_pass([-0.2, 0.3, -0.006], np.zeros(1, np.uint8))[0] == constants.SLOT_OFF


def test_layered_edge_contact_predicted_from_beside_pulls_only_across_the_layer():
    # Two layered quads side by side (the outer one, layer 1, 3 cm beyond the
    # inner one's edge and 1 mm below its plane), the outer one sliding
    # towards the inner one at 2 m/s: edge-edge contacts between the facing
    # edges are predicted. The layer order puts the outer edge on the inner
    # layer's normal side, a millimetre away: the contact's normal must be
    # the inner layer's normal (a pull of a few mm across the layers, none
    # while the edges are 3 cm apart along them), not the closest points'
    # direction reversed (a pull of 3 cm along the layers, 9 cm in the
    # demo's skirts).
    inner, fi, fs = sheet(1, 1, 0.1)
    outer = inner + [0.13, 0.0, -0.001]
    m = merge_meshes([(inner, fi, fs), (outer, fi, fs)])
    sc = SelfCollision.from_mesh(m.positions, m.face_indices, m.face_sizes, m.region, thickness=0.005,
                                 layers=[0, 1])
    x = soa(m.positions)
    v = np.zeros_like(x)
    v[0, 4:] = -2.0
    assert sc.detect(x, v, 1 / 60, G) > 0
    assert np.any(sc.contact_kind == KIND_EDGE_EDGE)
    y = x.copy()
    sc.solve(y, x.copy())
    assert np.abs(y - x).max() < 1e-3


@numba.njit
def _closest_rows_loop(p, a, b, c, out):
    for k in range(p.shape[0]):
        out[k, 0], out[k, 1], out[k, 2] = solve._closest_rows(
            p[k, 0], p[k, 1], p[k, 2], a[k, 0], a[k, 1], a[k, 2], b[k, 0], b[k, 1], b[k, 2], c[k, 0], c[k, 1], c[k, 2])


def test_branch_free_closest_point_on_a_triangle_matches_an_independent_distance():
    # The solve's vectorised pass picks the closest point's region by
    # selects, not branches: its point must be the closest one, for points
    # in every Voronoi region (corners, edges, face) of random and of thin
    # triangles, by an algorithm written apart (plane projection + edges).
    rng = np.random.default_rng(7)
    n_tri, per = 60, 200
    tris = rng.normal(size=(n_tri, 3, 3)).astype(np.float32)
    tris[:10, 2] = tris[:10, 0] + np.float32(1e-3) * (tris[:10, 1] - tris[:10, 0])  # slivers
    tris[10:15, 2] = 0.5 * (tris[10:15, 0] + tris[10:15, 1]) + np.float32(0.01) * rng.normal(size=(5, 3))
    for t in tris:
        p = (t.mean(axis=0) + 1.5 * rng.normal(size=(per, 3))).astype(np.float32)
        a, b, c = (np.repeat(t[i][None], per, axis=0) for i in range(3))
        uvw = np.empty((per, 3), np.float32)
        _closest_rows_loop(p, a, b, c, uvw)
        assert np.all(uvw >= -1e-6) and np.allclose(uvw.sum(axis=1), 1.0, atol=1e-5)
        q = uvw[:, :1] * a + uvw[:, 1:2] * b + uvw[:, 2:] * c
        got = np.linalg.norm(p.astype(np.float64) - q, axis=1)
        want = point_triangle_distance(p.astype(np.float64), *t.astype(np.float64))
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


@numba.njit
def _closest_segments_rows_loop(p0, p1, q0, q1, out):
    for k in range(p0.shape[0]):
        out[k, 0], out[k, 1] = solve._closest_segments_rows(
            p0[k, 0], p0[k, 1], p0[k, 2], p1[k, 0], p1[k, 1], p1[k, 2],
            q0[k, 0], q0[k, 1], q0[k, 2], q1[k, 0], q1[k, 1], q1[k, 2])


def test_branch_free_closest_points_of_two_segments_match_an_independent_distance():
    # The solve's vectorised edge-edge pass: its closest points must be the
    # closest ones for skew, crossing, parallel and point-like segments, by
    # an algorithm written apart (critical point + end point distances).
    rng = np.random.default_rng(11)
    n = 4000
    p0, p1, q0, q1 = (rng.normal(size=(n, 3)).astype(np.float32) for _ in range(4))
    q1[:500] = q0[:500] + np.float32(2.0) * (p1[:500] - p0[:500])      # parallel
    p1[500:600] = p0[500:600]                                           # a point
    q1[600:700] = q0[600:700]                                           # a point
    p1[700:750] = p0[700:750]
    q1[700:750] = q0[700:750]                                           # two points
    st = np.empty((n, 2), np.float32)
    _closest_segments_rows_loop(p0, p1, q0, q1, st)
    assert np.all((st >= 0) & (st <= 1))
    s, t = st[:, :1].astype(np.float64), st[:, 1:].astype(np.float64)
    a, b, c, d = (v.astype(np.float64) for v in (p0, p1, q0, q1))
    got = np.linalg.norm((a + s * (b - a)) - (c + t * (d - c)), axis=1)
    want = segment_segment_distance(a, b, c, d)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


def test_patch_motion_bound_is_the_displacement_gradients_frobenius_norm():
    # The flat-patch cull bounds how fast the step's displacement changes
    # across the cloth by each triangle's squared Lipschitz bound. It must
    # hold: at least the squared largest singular value of the
    # displacement's gradient over the triangle (an SVD, written apart); and
    # be tight: at most its squared Frobenius norm (plus 2% for rounding
    # where the terms cancel), or the cull fails on moving cloth it could
    # skip.
    rng = np.random.default_rng(5)
    nt = 400
    corners = rng.normal(size=(nt, 3, 3)).astype(np.float32)
    corners[:40, 2] = corners[:40, 0] + np.float32(0.05) * (corners[:40, 1] - corners[:40, 0]) \
        + np.float32(0.02) * rng.normal(size=(40, 3))                                      # thin
    move = rng.normal(size=(nt, 3, 3)).astype(np.float32)
    move[100:200] = np.einsum("tij,tkj->tki", rng.normal(size=(100, 3, 3)), corners[100:200])  # linear
    pos = np.ascontiguousarray(corners.reshape(-1, 3).T)
    rel = np.ascontiguousarray(move.reshape(-1, 3).T)
    tri = np.arange(3 * nt, dtype=np.int32)
    rows = np.zeros((7, nt), np.float32)
    broad._patch_triangles(np.uint64(0), np.uint64(nt), np.arange(nt, dtype=np.int32), tri, pos[0], pos[1], pos[2],
                         rel[0], rel[1], rel[2], np.zeros(nt, np.int32), np.ones(1, np.float32),
                         np.ones(1, np.float32), *rows)
    lip = rows[4].astype(np.float64)
    c = corners.astype(np.float64)
    m = move.astype(np.float64)
    E = np.stack([c[:, 1] - c[:, 0], c[:, 2] - c[:, 0]], axis=2)       # (nt, 3, 2) edges
    D = np.stack([m[:, 1] - m[:, 0], m[:, 2] - m[:, 0]], axis=2)       # their displacement change
    J = D @ np.linalg.pinv(E)                                          # the gradient on the plane
    sv = np.linalg.svd(J, compute_uv=False)
    assert np.all(lip >= sv[:, 0] ** 2 * (1 - 1e-4))
    assert np.all(lip <= (sv ** 2).sum(axis=1) * 1.02 + 1e-6)
    # Points of the triangle: their displacements differ by at most the bound.
    w = rng.dirichlet(np.ones(3), size=(nt, 2))
    dx = np.einsum("tk,tkj->tj", w[:, 0] - w[:, 1], c)
    dr = np.einsum("tk,tkj->tj", w[:, 0] - w[:, 1], m)
    assert np.all((dr ** 2).sum(axis=1) <= lip * (dx ** 2).sum(axis=1) * (1 + 1e-4) + 1e-9)


def test_triangle_components_label_each_connected_piece():
    # Two sheets side by side (merged, never joined) and a strip joined to
    # the second through one shared vertex: two components, each labelled
    # once, whatever the triangle order.
    r, fi, fs = sheet(3, 2, 0.3)
    m = merge_meshes([(r, fi, fs), (r + [1.0, 0.0, 0.0], fi, fs)])
    tri = triangulate(m.face_indices, m.face_sizes)
    n = len(m.positions)
    corner = len(r) + 3                                    # a corner of the second sheet
    tri = np.concatenate([tri, [[corner, n, n + 1], [n, n + 2, n + 1]]]).astype(np.int32)
    perm = np.random.default_rng(2).permutation(len(tri))
    comp = topology.triangle_components(tri[perm], n + 3)
    first = np.isin(tri[perm], np.arange(len(r))).all(axis=1)
    assert len(set(comp[first])) == 1 and len(set(comp[~first])) == 1
    assert comp[first][0] != comp[~first][0]
