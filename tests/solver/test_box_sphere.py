"""Sphere (a capsule with equal ends) and box colliders against exact
signed distances computed here in numpy (float64, written independently of
the kernels): sheets dropped on them, still, moving at up to 5 m/s and
turning, over several substep counts; each also with the multilevel
stretch on (stretch_hierarchy), whose coarse corrections must leave the
cloth in contact with a collider to the collider."""

import numpy as np
import pytest
from numba import njit

import oracles
from drape.solver import Boxes, Capsules, ClothParams, SolverError, StepInputs, build_model, step
from drape.solver.colliders import box as box_mod


def _quat(axis, angle):
    axis = np.asarray(axis, float)
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def _matrix(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def box_sdf(points, center, q, half, radius=0.0):
    """Exact signed distance to a rounded box (the rounding inside the half
    extents), float64."""
    local = (np.asarray(points, float) - center) @ _matrix(q)
    r = min(radius, min(half))
    e = np.abs(local) - (np.asarray(half, float) - r)
    outside = np.linalg.norm(np.maximum(e, 0.0), axis=1)
    inside = np.minimum(e.max(axis=1), 0.0)
    return outside + inside - r


def sphere_sdf(points, center, radius):
    return np.linalg.norm(np.asarray(points, float) - center, axis=1) - radius


def _sheet(nx=20, size=1.0, z=0.0):
    rest, fi, fs = oracles.grid_sheet(nx, nx, size, plane="xy")
    rest = rest - [size / 2, size / 2, 0.0]
    rest[:, 2] = z
    return rest, fi, fs


# The stretch solves every collider scene here runs with: the defaults,
# and the multilevel stretch on as well.
HIERARCHY = pytest.mark.parametrize("hierarchy", [False, True], ids=["limits", "hierarchy"])


def _drop(rest, fi, fs, inputs_at, frames, substeps, pin=None, hierarchy=False):
    params = ClothParams(substeps=substeps, stretch_hierarchy=hierarchy)
    pin = np.zeros(len(rest)) if pin is None else pin
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), pin, params)
    state = model.new_state()
    worst = np.inf
    for f in range(frames):
        inputs, sdf_end = inputs_at(f)
        step(model, state, inputs, 1 / 30, params)
        x = state.positions_aos().astype(np.float64)
        assert np.all(np.isfinite(x))
        worst = min(worst, sdf_end(x).min())
    return state.positions_aos().astype(np.float64), worst, params.collision_margin


def test_box_distance_kernel_matches_exact_sdf():
    rng = np.random.default_rng(3)
    for _ in range(30):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        half = rng.uniform(0.05, 0.6, size=3)
        radius = rng.uniform(0.0, 0.1) if rng.random() < 0.6 else 0.0
        center = rng.normal(size=3)
        packed = Boxes(center[None], q[None], half[None], radius=np.array([radius])).packed()
        rows = np.zeros((1, box_mod.ROW), np.float32)
        box_mod.interpolate_boxes(packed, np.float32(0), np.float32(1), np.float32(1), rows, rows)
        pts = center + rng.normal(scale=0.7, size=(20, 3))
        exact = box_sdf(pts, center, q, half, radius)
        for p, e in zip(pts, exact):
            d, nx, ny, nz = _distance(p, rows)
            assert d == pytest.approx(e, abs=2e-5)
            if e > 1e-3:
                # One step along -d n lands on the surface.
                s = p - d * np.array([nx, ny, nz])
                assert abs(box_sdf(s[None], center, q, half, radius)[0]) < 1e-4


@njit
def _box_distance0(px, py, pz, b):
    return box_mod.box_distance(px, py, pz, b, 0, np.float32(0.0))


def _distance(p, rows):
    return _box_distance0(np.float32(p[0]), np.float32(p[1]), np.float32(p[2]), rows)


@HIERARCHY
@pytest.mark.parametrize("substeps", [2, 5])
def test_sheet_dropped_on_still_sphere_and_box(substeps, hierarchy):
    # (At one substep of 1/30 s the sheet is soft enough to slide off the
    # sphere; the other tests cover one substep.)
    rest, fi, fs = _sheet(z=0.3)
    c, r = np.array([0.0, 0.0, 0.0]), 0.25
    sphere = Capsules(c[None], c[None], c[None], c[None], np.array([r]), np.array([r]))
    x, worst, margin = _drop(rest, fi, fs, lambda f: (StepInputs(capsules=sphere), lambda x: sphere_sdf(x, c, r)),
                             45, substeps, hierarchy=hierarchy)
    assert worst > -margin
    # It rests on the sphere: the middle lies on its top.
    mid = np.argmin(np.linalg.norm(rest[:, :2], axis=1))
    assert abs(sphere_sdf(x[mid:mid + 1], c, r)[0]) < 3 * margin + 1e-3

    q = _quat([0, 0, 1], 0.4)
    half = np.array([0.25, 0.2, 0.1])
    boxes = Boxes(c[None], q[None], half[None], radius=np.array([0.02]))
    x, worst, margin = _drop(rest, fi, fs,
                             lambda f: (StepInputs(boxes=boxes), lambda x: box_sdf(x, c, q, half, 0.02)),
                             45, substeps, hierarchy=hierarchy)
    assert worst > -margin
    mid = np.argmin(np.linalg.norm(rest[:, :2], axis=1))
    assert abs(box_sdf(x[mid:mid + 1], c, q, half, 0.02)[0]) < 3 * margin + 1e-3
    # The parts past the box's edges hang below its top.
    assert x[:, 2].min() < c[2] + half[2] - 0.1


@HIERARCHY
@pytest.mark.parametrize("kind", ["sphere", "box"])
@pytest.mark.parametrize("speed, substeps", [(1.0, 2), (5.0, 1), (5.0, 4)])
def test_collider_moving_through_hanging_sheet_does_not_tunnel(kind, speed, substeps, hierarchy):
    # A sheet hangs from its top row in the x-z plane (y = 0); the collider
    # crosses it along +y at `speed`: at 5 m/s and one substep it moves
    # further in one substep than its own thickness.
    rest, fi, fs = oracles.grid_sheet(16, 16, 1.0)
    pin = np.zeros(len(rest))
    pin[:17] = 1.0
    dt = 1 / 30
    y0 = -0.3
    center = np.array([0.5, y0, 0.5])
    half = np.array([0.2, 0.05, 0.15])
    q = _quat([1, 1, 0], 0.3)

    def at(f):
        c0 = center + [0, speed * dt * f, 0]
        c1 = c0 + [0, speed * dt, 0]
        if kind == "sphere":
            inputs = StepInputs(capsules=Capsules(c0[None], c0[None], c1[None], c1[None], np.array([0.12]),
                                                  np.array([0.12])))
            return inputs, lambda x: sphere_sdf(x, c1, 0.12)
        inputs = StepInputs(boxes=Boxes(c0[None], q[None], half[None], c1[None], q[None]))
        return inputs, lambda x: box_sdf(x, c1, q, half)

    # Until its centre is 0.2 m past the sheet's plane.
    frames = int(round(0.5 / (speed * dt)))
    x, worst, margin = _drop(rest, fi, fs, at, frames, substeps, pin, hierarchy=hierarchy)
    assert worst > -margin
    # Vertices that started in the collider's shadow were carried in front
    # of it (the side they started on), or slid off round its side: none is
    # behind its centre and still in its shadow, the points a line along
    # its motion through them would meet it (left behind, through it).
    end_y = y0 + speed * dt * frames
    shadow = (np.abs(rest[:, 0] - 0.5) < 0.08) & (np.abs(rest[:, 2] - 0.5) < 0.06)
    assert shadow.sum() >= 2
    sdf_end = at(frames - 1)[1]
    line = np.linspace(end_y - 0.5, end_y + 0.5, 401)
    for p in x[shadow]:
        if p[1] <= end_y:
            along = np.stack([np.full_like(line, p[0]), line, np.full_like(line, p[2])], axis=1)
            assert sdf_end(along).min() > 0.0, p


@pytest.mark.parametrize("substeps", [1, 2, 4])
@HIERARCHY
@pytest.mark.parametrize("omega", [2.5, 3.0, 3.5])
def test_sheet_on_rotating_box(substeps, hierarchy, omega):
    # A flat slab turns about the vertical at 2.5-3.5 rad/s under a sheet
    # that fell on it: its corners sweep at 1.2-1.65 m/s through the
    # hanging parts. No vertex gets in. No point along an edge either at
    # four substeps; at two (the default) a corner sweeping 2-3 cm a
    # substep cuts an edge up to 11 mm in on one frame before the next
    # pushes it out (the edges once stayed 15-26 mm in), and at one, 4-5 cm
    # a substep between two vertices of a hanging column, further.
    rest, fi, fs = _sheet(nx=20, size=1.2, z=0.15)
    c = np.array([0.0, 0.0, 0.0])
    half = np.array([0.4, 0.25, 0.08])
    dt = 1 / 30
    params = ClothParams(substeps=substeps, stretch_hierarchy=hierarchy)
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
    state = model.new_state()
    worst = edge_worst = np.inf
    for f in range(40):
        q0 = _quat([0, 0, 1], omega * dt * f)
        q1 = _quat([0, 0, 1], omega * dt * (f + 1))
        step(model, state, StepInputs(boxes=Boxes(c[None], q0[None], half[None], c[None], q1[None])), dt, params)
        x = state.positions_aos().astype(np.float64)
        assert np.all(np.isfinite(x))
        worst = min(worst, box_sdf(x, c, q1, half).min())
        edge_worst = min(edge_worst, box_sdf(_edge_points(x, model.triangles), c, q1, half).min())
    margin = params.collision_margin
    assert worst > -margin
    if substeps >= 2:
        bound = margin if substeps >= 4 else 3 * margin
        assert edge_worst > -bound, f"an edge point {-edge_worst * 1e3:.1f} mm inside the slab"
    # It still lies on the slab (friction turns it along).
    mid = np.argmin(np.linalg.norm(rest[:, :2], axis=1))
    assert x[mid, 2] > half[2]


def test_bad_boxes_are_refused_and_change_nothing():
    rest, fi, fs = _sheet(nx=4)
    params = ClothParams()
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
    state = model.new_state()
    before = state.positions.copy()
    c, q, half = np.zeros((1, 3)), np.array([[1.0, 0, 0, 0]]), np.full((1, 3), 0.1)
    bad = [
        (Boxes(c, q, half, radius=np.array([-0.1])), "radius"),
        (Boxes(c, q, np.zeros((1, 3))), "half_extents"),
        (Boxes(c, np.zeros((1, 4)), half), "rotation0"),
        (Boxes(np.full((1, 3), np.nan), q, half), "center0"),
        (Boxes(c, q, half, center1=np.zeros((2, 3))), "center1"),
    ]
    for boxes, name in bad:
        with pytest.raises(SolverError, match=name):
            step(model, state, StepInputs(boxes=boxes), 1 / 30, params)
        assert np.array_equal(state.positions, before)


def _edge_points(x, triangles, samples=9):
    """Points along every edge of the solver's triangles, (m, 3)."""
    t3 = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    pairs = np.concatenate([t3[:, [0, 1]], t3[:, [1, 2]], t3[:, [2, 0]]])
    t = np.linspace(0.0, 1.0, samples)[:, None, None]
    return (x[pairs[:, 0]][None] * (1 - t) + x[pairs[:, 1]][None] * t).reshape(-1, 3)


@HIERARCHY
@pytest.mark.parametrize("substeps", [1, 2, 4, 8])
@pytest.mark.parametrize("angle", [0.18, 0.2, 0.215])
def test_coarse_sheet_edges_stay_out_of_a_box_edge(substeps, hierarchy, angle):
    # A coarse sheet (12 cm edges) falls on a 6 cm table top and drapes
    # over its edges and corners: its edges across them would cut in by
    # centimetres with every vertex outside, and an edge from the top to a
    # vertex that swung in under the top runs through it. With edge
    # contacts (the default) no point along an edge is deeper than the
    # margin in any frame from two substeps on; without them they are. At
    # one substep no vertex gets in.
    rest, fi, fs = _sheet(nx=12, size=1.5, z=0.15)
    c, q, half = np.zeros(3), _quat([0, 0, 1], angle), np.array([0.45, 0.35, 0.03])
    boxes = Boxes(c[None], q[None], half[None])
    depth = {}
    for edges in (True, False):
        params = ClothParams(substeps=substeps, edge_contacts=edges, stretch_hierarchy=hierarchy and edges)
        model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
        state = model.new_state()
        depth[edges] = np.inf
        for _ in range(30):
            step(model, state, StepInputs(boxes=boxes), 1 / 30, params)
            x = state.positions_aos().astype(np.float64)
            assert box_sdf(x, c, q, half).min() > -params.collision_margin
            depth[edges] = min(depth[edges], box_sdf(_edge_points(x, model.triangles), c, q, half).min())
        # Still on the table: its middle lies on the top. At one substep
        # the overhang stretches past a metre and can drag the sheet off
        # the turned top around its edge within the 30 frames (no vertex
        # is ever in the box: checked every frame above).
        mid = np.argmin(np.linalg.norm(rest[:, :2], axis=1))
        if substeps >= 2:
            assert x[mid, 2] > half[2]
    margin = ClothParams().collision_margin
    if substeps >= 2:
        assert depth[True] > -margin, f"an edge point {-depth[True] * 1e3:.1f} mm inside the top"
    assert depth[False] < -2 * margin


@HIERARCHY
def test_coarse_sheet_edges_stay_out_of_a_small_sphere(hierarchy):
    # The capsule edge contacts with a == b (a sphere): a coarse sheet
    # (12 cm edges) over a sphere of radius 0.1 keeps its edges out of it.
    rest, fi, fs = _sheet(nx=10, size=1.2, z=0.2)
    c, r = np.array([0.03, -0.02, 0.0]), 0.1
    sphere = Capsules(c[None], c[None], c[None], c[None], np.array([r]), np.array([r]))
    depth, held = {}, {}
    for edges in (True, False):
        params = ClothParams(substeps=4, edge_contacts=edges, stretch_hierarchy=hierarchy and edges)
        model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
        state = model.new_state()
        for _ in range(20):
            step(model, state, StepInputs(capsules=sphere), 1 / 30, params)
        x = state.positions_aos().astype(np.float64)
        assert sphere_sdf(x, c, r).min() > -params.collision_margin
        depth[edges] = sphere_sdf(_edge_points(x, model.triangles), c, r).min()
        held[edges] = x[:, 2].max() > c[2] + r
    margin = ClothParams().collision_margin
    assert held[True] and depth[True] > -margin
    # Without them the sphere cuts between the vertices: through the edges
    # (deeper than the margin), or all the way (the sheet falls past it).
    assert depth[False] < -margin or not held[False]


def _face_points(x, triangles, k=6):
    """Points on every triangle of the cloth: a barycentric grid, k steps a side."""
    t = np.asarray(triangles, np.int64).reshape(-1, 3)
    u, v = np.meshgrid(np.arange(k + 1), np.arange(k + 1))
    keep = u + v <= k
    u, v = u[keep] / k, v[keep] / k
    a, b, c = x[t[:, 0]], x[t[:, 1]], x[t[:, 2]]
    return (a[:, None] + u[None, :, None] * (b - a)[:, None] + v[None, :, None] * (c - a)[:, None]).reshape(-1, 3)


def tablecloth_on_box(nx, substeps, angle, radius=0.0, frames=72):
    """A 1.6 m cloth of nx x nx quads dropped flat, unpinned, on a table top
    (1 x 0.7 x 0.06 m box, turned `angle` about z) at the add-on's
    stiffness and 24 fps. Returns the deepest point of the cloth's faces
    inside the box over every 4th frame and the last (m, exact distance;
    negative: outside) and the margin."""
    rest, fi, fs = _sheet(nx=nx, size=1.6, z=0.1)
    c, q, half = np.zeros(3), _quat([0, 0, 1], angle), np.array([0.5, 0.35, 0.03])
    boxes = Boxes(c[None], q[None], half[None], radius=np.array([radius]))
    params = ClothParams(substeps=substeps, bend_compliance=1e3)
    model = build_model(rest, fi, fs, np.full(len(rest), 0.15 * 1.6 * 1.6 / len(rest)), np.zeros(len(rest)), params)
    state = model.new_state()
    deepest = -np.inf
    for f in range(frames):
        step(model, state, StepInputs(boxes=boxes), 1 / 24, params)
        if f % 4 == 3 or f == frames - 1:
            x = state.positions_aos().astype(np.float64)
            deepest = max(deepest, -box_sdf(_face_points(x, model.triangles), c, q, half, radius).min())
    return deepest, params.collision_margin


# At 2 substeps a vertex of the cloth's skirt swings in under the top
# within one substep and its edge to a vertex on the top runs through the
# box's edge (13 mm deep): the edge pass holds edges that come to a box's
# edge or corner, not one whose end went around it.
_UNDER_THE_TOP = pytest.mark.xfail(strict=True, reason="a skirt vertex swings under the top in one substep")


@pytest.mark.parametrize("nx, substeps, angle", [(30, 4, 0.2), (40, 4, 0.0), (50, 4, 0.0), (50, 8, 0.0), (30, 8, 0.2),
                                                 pytest.param(30, 2, 0.0, marks=_UNDER_THE_TOP),
                                                 pytest.param(50, 2, 0.2, marks=_UNDER_THE_TOP)])
def test_a_box_corner_does_not_poke_through_a_tablecloth(nx, substeps, angle):
    # A cloth draped over a table's corner: with every vertex and edge
    # held outside, the corner itself came through the middle of a face
    # and the cloth hung hooked on it (9-15 mm deep at 30 to 50 quads a
    # side, 4 substeps, the face stretched to three times its size). No
    # point of any face is inside the box.
    deepest, margin = tablecloth_on_box(nx, substeps, angle)
    assert deepest <= 0.0, f"a face point {deepest * 1e3:.1f} mm inside the box"
