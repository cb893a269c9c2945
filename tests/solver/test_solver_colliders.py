"""Capsule and plane colliders checked with exact geometry (tests/oracles.py)."""

import numpy as np
import pytest

import oracles
from drape.solver import Capsules, ClothParams, Planes, StepInputs, build_model, colliders, step
from drape.solver.colliders import capsule


def test_capsule_distance_kernel_matches_exact_oracle():
    rng = np.random.default_rng(0)
    for _ in range(40):
        a, b = rng.normal(size=3), rng.normal(size=3)
        if rng.random() < 0.2:
            b = a.copy()  # sphere
        ra, rb = rng.uniform(0.05, 0.8, size=2)
        for p in rng.normal(scale=1.5, size=(10, 3)):
            d, nx, ny, nz, s = capsule.capsule_distance(*np.float32(p), *np.float32(a), *np.float32(b),
                                                        np.float32(ra), np.float32(rb))
            cap = np.zeros((1, 14), np.float32)
            cap[0, :3], cap[0, 3:6], cap[0, 6], cap[0, 7] = a, b, ra, rb
            pre = capsule.prepare_capsules(cap, np.float32(0.0))
            d2, *_ = capsule.capsule_distance_pre(*np.float32(p), tuple(pre[0]))
            assert d2 == pytest.approx(d, abs=1e-5)
            exact = oracles.point_capsule_distance(p, a, b, ra, rb)
            if exact > 0:
                assert d == pytest.approx(exact, abs=2e-4)
                # Moving along the normal by -d lands on the surface.
                q = p - d * np.array([nx, ny, nz])
                assert abs(oracles.point_capsule_distance(q, a, b, ra, rb)) < 2e-4
            else:
                assert d < 1e-4


def _sheet_with_pins(nx=16, size=1.0):
    rest, fi, fs = oracles.grid_sheet(nx, nx, size)
    pin = np.zeros(len(rest))
    pin[: nx + 1] = 1.0
    return rest, fi, fs, pin


@pytest.mark.parametrize("radius_a, radius_b", [(0.12, 0.12), (0.08, 0.16)])
def test_capsule_moved_one_metre_in_one_step_does_not_tunnel(radius_a, radius_b):
    # A capsule crosses a hanging sheet (y = 0) from y = -0.5 to y = +0.5 in a
    # single step of 2 substeps: each substep moves it further than its own
    # diameter. No vertex may end inside it (exact distance), and the sheet
    # must still be in front of it (the side it started on).
    rest, fi, fs, pin = _sheet_with_pins()
    params = ClothParams(substeps=2)
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), pin, params)
    state = model.new_state()
    a0, b0 = np.array([[0.2, -0.5, 0.5]]), np.array([[0.8, -0.5, 0.5]])
    a1, b1 = a0 + [0, 1.0, 0], b0 + [0, 1.0, 0]
    caps = Capsules(a0, b0, a1, b1, np.array([radius_a]), np.array([radius_b]))
    step(model, state, StepInputs(capsules=caps), 1 / 60, params)
    x = state.positions_aos().astype(np.float64)
    d = oracles.point_capsule_distances(x, a1[0], b1[0], radius_a, radius_b)
    assert d.min() > -1e-4
    # Vertices in the capsule's shadow were carried in front of it.
    shadow = (rest[:, 0] > 0.25) & (rest[:, 0] < 0.75) & (np.abs(rest[:, 2] - 0.5) < 0.05)
    assert shadow.sum() > 5
    assert np.all(x[shadow, 1] > 0.5)


def test_without_swept_contacts_the_same_capsule_would_tunnel():
    # Negative control for the test above: only the live push-out (no swept
    # entry plane) lets the fast capsule pass through the sheet.
    rest, fi, fs, pin = _sheet_with_pins()
    x = rest.T.astype(np.float32).copy()
    cap1 = np.zeros((1, 14), np.float32)
    cap1[0, :6] = [0.2, 0.5, 0.5, 0.8, 0.5, 0.5]
    cap1[0, 6:8] = 0.12
    hit = np.zeros(len(rest), np.int32)
    contact = np.zeros((7, len(rest)), np.float32)
    colliders.project_colliders(x, np.ones(len(rest), np.float32), cap1, np.zeros((0, 9), np.float32),
                              np.float32(0.005), hit, np.zeros((9, len(rest)), np.float32), contact,
                              np.zeros(len(rest), np.float32), np.zeros(0, np.uint32), -1, np.float32(0.0),
                              np.zeros(len(rest), np.uint32), 0)
    shadow = (rest[:, 0] > 0.25) & (rest[:, 0] < 0.75) & (np.abs(rest[:, 2] - 0.5) < 0.05)
    assert np.all(x[1, shadow] < 0.5)


@pytest.mark.parametrize("case", ["static", "moving", "two capsules"])
def test_swept_contacts_find_where_each_path_first_enters_a_capsule(case):
    # Random paths around round cones, static or translating over the
    # substep (then the path runs from the start position carried along,
    # in the capsules' end frame). The exact distance sampled along each
    # path decides: a path that goes clearly inside must be hit at the
    # first sample inside, on the surface of the capsule it enters first,
    # with the surface's velocity; one that stays clearly outside must not
    # be; a start just inside (resting on a capsule that moved into it)
    # enters where it is.
    rng = np.random.default_rng(7)
    cones = [(np.array([0.0, 0.0, 0.0]), np.array([0.6, 0.1, -0.05]), 0.1, 0.16)]
    if case == "two capsules":
        cones.append((np.array([0.1, 0.3, 0.1]), np.array([0.5, 0.25, 0.2]), 0.08, 0.06))
    h = 1.0 / 120.0
    move = np.array([0.05, -0.08, 0.03]) if case == "moving" else np.zeros(3)
    k = len(cones)
    cap0, cap1 = np.zeros((k, 14), np.float32), np.zeros((k, 14), np.float32)
    for j, (a, b, ra, rb) in enumerate(cones):
        for cap, ends in ((cap0, (a - move, b - move)), (cap1, (a, b))):
            cap[j, :3], cap[j, 3:6], cap[j, 6], cap[j, 7] = ends[0], ends[1], ra, rb
            cap[j, 8:11] = cap[j, 11:14] = move / h
    n = 1000
    x0 = rng.uniform([-0.3, -0.35, -0.35], [0.9, 0.45, 0.35], size=(n, 3)) - move
    x1 = x0 + move + rng.normal(scale=0.12, size=(n, 3))
    hit = np.zeros(n, np.uint8)
    entry = np.zeros((9, n), np.float32)
    capsule.swept_contacts(np.arange(n, dtype=np.uint32), n, x1.T.astype(np.float32).copy(),
                           x0.T.astype(np.float32).copy(), cap0, cap1, capsule.capsule_boxes(cap0, cap1, 0.0),
                           np.float32(0.0), hit, entry, np.zeros(n, np.float32))
    samples = np.linspace(0.0, 1.0, 401)
    start = x0 + move
    paths = start[:, None, :] + samples[None, :, None] * (x1 - start)[:, None, :]
    # Distance to the union of the capsules, and which one is nearest.
    each = np.stack([oracles.point_capsule_distances(paths.reshape(-1, 3), *cone).reshape(n, -1) for cone in cones])
    d, nearest = each.min(axis=0), each.argmin(axis=0)
    checked = {"in": 0, "out": 0, "resting": 0}
    for i in range(n):
        if -0.04 < d[i, 0] < -1e-4 and np.sum(each[:, i, 0] < 1e-4) == 1:
            kind = "resting"
        elif d[i, 0] > 1e-4 and d[i].min() < -2e-3:
            kind = "in"
        elif d[i].min() > 1e-4:
            kind = "out"
        else:
            continue  # deep inside at the start, or grazing: either answer is right
        if kind == "out":
            checked[kind] += 1
            assert hit[i] == 0, i
            continue
        first = 0 if kind == "resting" else np.argmax(d[i] <= 0.0)
        if kind == "in" and np.sort(each[:, i, first])[:2].max() < 1e-3 and k > 1:
            continue  # enters both capsules at the same sample: either is right
        checked[kind] += 1
        j = nearest[i, first]
        assert hit[i] == j + 1, i
        a, b, ra, rb = cones[j]
        p = entry[:3, i].astype(np.float64)
        assert abs(oracles.point_capsule_distance(p, a, b, ra, rb)) < 1e-4
        normal = entry[3:6, i].astype(np.float64)
        assert oracles.point_capsule_distance(p + 0.01 * normal, a, b, ra, rb) == pytest.approx(0.01, abs=1e-4)
        np.testing.assert_allclose(entry[6:9, i], move / h, atol=1e-3)
        if kind == "resting":
            continue
        e = x1[i] - start[i]
        u = np.dot(p - start[i], e) / np.dot(e, e)
        assert np.linalg.norm(start[i] + u * e - p) < 1e-4  # on the path
        assert samples[first - 1] - 1e-3 <= u <= samples[first] + 1e-3
    assert min(checked.values()) >= 20, checked


def test_vertex_between_capsule_and_ground_ends_on_the_ground_side():
    # One free vertex under a capsule that is pressed into the ground: the
    # capsule pushes it down, the plane (solved last) wins.
    rest = np.array([[0.0, 0.0, 0.05], [5.0, 5.0, 5.0]])
    params = ClothParams(substeps=2, collision_margin=0.0)
    model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.ones(2), np.array([0.0, 1.0]), params)
    state = model.new_state()
    ground = Planes(point0=np.zeros((1, 3)), normal0=np.array([[0.0, 0.0, 1.0]]))
    for i in range(10):
        z0, z1 = 0.3 - 0.03 * i, 0.3 - 0.03 * (i + 1)
        caps = Capsules(np.array([[-1, 0, z0]]), np.array([[1, 0, z0]]), np.array([[-1, 0, z1]]),
                        np.array([[1, 0, z1]]), np.array([0.2]), np.array([0.2]))
        step(model, state, StepInputs(capsules=caps, planes=ground), 1 / 60, params)
        assert state.positions[2, 0] >= -1e-6
    assert np.all(np.isfinite(state.positions))


def test_cloth_rests_on_ground_plane_and_static_friction_holds_on_a_gentle_slope():
    # A single vertex on a plane tilted by 15 degrees (tan = 0.27) with
    # mu_s = 0.5 stays put; at 40 degrees (tan = 0.84 > mu_k) it slides.
    def slide(angle_deg):
        t = np.radians(angle_deg)
        normal = np.array([[0.0, -np.sin(t), np.cos(t)]])
        rest = np.array([[0.0, 0.0, 0.0]])
        params = ClothParams(substeps=4, collision_margin=0.0, friction_static=0.5, friction_kinetic=0.4)
        model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.ones(1), np.zeros(1), params)
        state = model.new_state()
        plane = Planes(point0=np.zeros((1, 3)), normal0=normal)
        for _ in range(60):
            step(model, state, StepInputs(planes=plane), 1 / 60, params)
        x = state.positions_aos()[0].astype(np.float64)
        assert np.dot(x, normal[0]) > -1e-5
        return np.linalg.norm(x)

    assert slide(15.0) < 1e-3
    moved = slide(40.0)
    # Kinetic friction: a = g (sin - mu_k cos); 1 s gives ~0.5 a.
    t = np.radians(40.0)
    a = 9.81 * (np.sin(t) - 0.4 * np.cos(t))
    assert 0.3 * a < moved < 0.7 * a


def test_moving_plane_lifts_cloth():
    rest, fi, fs = oracles.grid_sheet(6, 6, plane="xy")
    params = ClothParams(substeps=2)
    model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), np.zeros(len(rest)), params)
    state = model.new_state()
    for i in range(30):
        plane = Planes(point0=np.array([[0, 0, 0.01 * i]]), normal0=np.array([[0, 0, 1.0]]),
                       point1=np.array([[0, 0, 0.01 * (i + 1)]]), normal1=np.array([[0, 0, 1.0]]))
        step(model, state, StepInputs(planes=plane), 1 / 60, params)
        assert state.positions[2].min() >= 0.01 * (i + 1) + params.collision_margin - 1e-5


def _two_points(params, z=0.5, ground=False):
    # Two free vertices (no faces), vertex 0 masked off the capsules.
    rest = np.array([[0.0, 0.0, z], [0.3, 0.0, z]])
    model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.full(2, 1e-3), np.zeros(2), params)
    model.set_collider_mask(np.array([False, True]))
    return model, model.new_state()


def _capsule_sweeping_through_y0():
    """A capsule (radius 0.12) at z = 0.5 crossing y = 0 from y = -0.5 to +0.5
    in one step: the Capsules and its end points at step end."""
    a0, b0 = np.array([-1.0, -0.5, 0.5]), np.array([1.0, -0.5, 0.5])
    a1, b1 = a0 + [0, 1.0, 0], b0 + [0, 1.0, 0]
    return Capsules(a0[None], b0[None], a1[None], b1[None], np.array([0.12]), np.array([0.12])), a1, b1


# step_fast (default settings) and step_fused (begin_substep/advance_vertices).
@pytest.mark.parametrize("iterations", [1, 2])
def test_masked_vertex_falls_through_a_capsule_onto_the_ground_unmasked_one_rests_on_it(iterations):
    params = ClothParams(substeps=4, iterations=iterations, collision_margin=0.0)
    model, state = _two_points(params)
    a, b, r = np.array([-1.0, 0.0, 0.2]), np.array([1.0, 0.0, 0.2]), 0.1
    caps = Capsules(a[None], b[None], a[None], b[None], np.array([r]), np.array([r]))
    ground = Planes(point0=np.zeros((1, 3)), normal0=np.array([[0.0, 0.0, 1.0]]))
    inside = 0
    for _ in range(60):
        step(model, state, StepInputs(capsules=caps, planes=ground), 1 / 60, params)
        x = state.positions_aos().astype(np.float64)
        d = oracles.point_capsule_distances(x, a, b, r, r)
        assert d[1] > -1e-4
        inside += d[0] < -1e-3
    assert inside > 0, "the masked vertex never entered the capsule"
    x = state.positions_aos().astype(np.float64)
    # Masked: through the capsule and held by the plane (the ground wins).
    assert -1e-5 <= x[0, 2] < 0.01
    # Unmasked: resting on top of the capsule (exact distance ~0).
    assert x[1, 2] > 0.25
    assert abs(oracles.point_capsule_distance(x[1], a, b, r, r)) < 2e-3


@pytest.mark.parametrize("iterations", [1, 2])
def test_capsule_swept_through_in_one_step_carries_only_the_unmasked_vertex(iterations):
    # The capsule crosses both vertices (y = 0) from y = -0.5 to +0.5 in one
    # step of 2 substeps: the swept contacts carry the unmasked vertex in
    # front of it; the masked one is left behind, untouched.
    params = ClothParams(substeps=2, iterations=iterations, collision_margin=0.0)
    model, state = _two_points(params)
    caps, a1, b1 = _capsule_sweeping_through_y0()
    step(model, state, StepInputs(capsules=caps), 1 / 60, params)
    x = state.positions_aos().astype(np.float64)
    d = oracles.point_capsule_distances(x, a1, b1, 0.12, 0.12)
    assert d[1] > -1e-4 and x[1, 1] > 0.5
    assert x[0, 1] == 0.0 and d[0] > 0.3


def test_bad_collider_mask_raises_and_changes_nothing():
    from drape.solver.params import SolverError
    model, _ = _two_points(ClothParams())
    for bad in (np.ones(3, bool), np.array([0.5, 1.0]), np.array([2, 0]), np.array([np.nan, 1.0])):
        with pytest.raises(SolverError, match="collider mask"):
            model.set_collider_mask(bad)
        assert model.collider_mask.tolist() == [0, 1]


@pytest.mark.parametrize("iterations", [1, 2])
def test_collider_offset_rests_a_vertex_that_much_off_the_capsule(iterations):
    # Vertex 1 grown by 2 cm (an outer layer of clothing), vertex 2 not: both
    # fall onto the same capsule; the exact distance oracle puts them at
    # 0.02 and 0 off its surface. Vertex 0 stays masked off.
    params = ClothParams(substeps=4, iterations=iterations, collision_margin=0.0)
    rest = np.array([[0.0, 0.0, 0.5], [0.3, 0.0, 0.5], [-0.3, 0.0, 0.5]])
    model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.full(3, 1e-3), np.zeros(3), params)
    model.set_collider_mask(np.array([False, True, True]))
    model.set_collider_offset(np.array([0.05, 0.02, 0.0]))
    assert model.collider_mask.tolist() == [0, 1, 1]
    state = model.new_state()
    a, b, r = np.array([-1.0, 0.0, 0.2]), np.array([1.0, 0.0, 0.2]), 0.1
    caps = Capsules(a[None], b[None], a[None], b[None], np.array([r]), np.array([r]))
    for _ in range(60):
        step(model, state, StepInputs(capsules=caps), 1 / 60, params)
        d = oracles.point_capsule_distances(state.positions_aos().astype(np.float64), a, b, r, r)
        assert d[1] > 0.02 - 1e-4 and d[2] > -1e-4
    assert abs(d[1] - 0.02) < 2e-3 and abs(d[2]) < 2e-3
    assert state.positions[2, 0] < 0.0, "the masked vertex must still fall through"


def test_collider_offset_holds_against_a_capsule_swept_through_in_one_step():
    params = ClothParams(substeps=2, collision_margin=0.0)
    rest = np.array([[0.0, 0.0, 0.5], [0.3, 0.0, 0.5]])
    model = build_model(rest, np.zeros(0, int), np.zeros(0, int), np.full(2, 1e-3), np.zeros(2), params)
    model.set_collider_offset(0.03)
    state = model.new_state()
    caps, a1, b1 = _capsule_sweeping_through_y0()
    step(model, state, StepInputs(capsules=caps), 1 / 60, params)
    x = state.positions_aos().astype(np.float64)
    d = oracles.point_capsule_distances(x, a1, b1, 0.12, 0.12)
    assert np.all(d > 0.03 - 1e-4) and np.all(x[:, 1] > 0.5)


def test_bad_collider_offset_raises_and_changes_nothing():
    from drape.solver.params import SolverError
    model, _ = _two_points(ClothParams())
    model.set_collider_offset([0.0, 0.01])
    for bad in (np.ones(3), -0.01, [np.nan, 0.0], [np.inf, 0.0]):
        with pytest.raises(SolverError, match="collider offset"):
            model.set_collider_offset(bad)
        assert model.collider_offset.tolist() == [-1.0, pytest.approx(0.01)]
