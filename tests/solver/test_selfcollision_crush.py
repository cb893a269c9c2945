"""Intersection recovery (selfcollision.untangle) and crushed, tangled
cloth, judged every frame by the exact triangle-triangle oracle
(tests/oracles.py, written apart from the solver): two triangles that share
no vertex must not intersect.
"""

import numpy as np
import pytest

from oracles import intersecting_triangle_pairs, point_triangle_distance

from drape.solver import ClothParams, Planes, StepInputs, build_model, step, vertex_masses
from drape.solver.selfcollision import SelfCollision, merge_meshes

DT = 1.0 / 60.0


def sheet(n, size, z, x0=None, y0=None):
    """n x n quads in a horizontal plane centred on the z axis, faces +z."""
    x0 = -size / 2 if x0 is None else x0
    y0 = -size / 2 if y0 is None else y0
    xs = np.linspace(x0, x0 + size, n + 1)
    ys = np.linspace(y0, y0 + size, n + 1)
    x, y = np.meshgrid(xs, ys)
    rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
    return rest, quads.ravel(), np.full(n * n, 4)


def build(rest, fi, fs, params, region=None):
    pin = np.zeros(len(rest), np.float32)
    return build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params, region=region)


def crossings(model, state):
    return len(intersecting_triangle_pairs(state.positions_aos(), model.triangles))


def poked_through(n, radius, depth, gap=0.02):
    """Two 0.6 m sheets `gap` apart, the upper one with a round bump (radius
    in metres) pushed `depth` below the lower one: the upper sheet passes
    through the lower along a closed contour. Returns (merged, positions,
    bump vertex mask)."""
    lower = sheet(n, 0.6, 0.0)
    # Offset by a third of a cell so no edge meets the other sheet's
    # vertices or edges exactly.
    upper = sheet(n, 0.6, gap, -0.3 + 0.2 / n, -0.3 + 0.13 / n)
    m = merge_meshes([lower, upper])
    x = m.positions.copy()
    nu = len(lower[0])
    r = np.linalg.norm(x[nu:, :2], axis=1)
    bump = r < radius
    # A smooth dome: flat at the bottom, reaching the sheet at 1.5 radius.
    w = np.clip((1.5 * radius - r) / (0.5 * radius), 0.0, 1.0)
    x[nu:, 2] -= (gap + depth) * w
    mask = np.zeros(len(x), bool)
    mask[nu:] = bump
    return m, x, mask


@pytest.mark.parametrize("n,radius", [(16, 0.1), (24, 0.12), (32, 0.08)])
def test_untangle_pushes_a_poked_through_region_back_to_its_side(n, radius):
    m, x, bump = poked_through(n, radius, depth=0.02)
    assert bump.sum() > 5
    params = ClothParams(substeps=8, iterations=2)
    model = build(m.positions, m.face_indices, m.face_sizes, params, region=m.region)
    sc = SelfCollision.from_model(model, thickness=0.006)
    state = model.new_state(x)
    before = crossings(model, state)
    assert before > 20, "the bump does not pass through the lower sheet"
    for _ in range(40):
        sc.untangle(state.positions, everywhere=True, passes=4)
    assert crossings(model, state) == 0
    assert_upper_above_lower(state.positions_aos(), int(m.vertex_offset[1]))


def assert_upper_above_lower(p, nu):
    """The sheets came apart the consistent way: every vertex of the upper
    sheet over the lower one is above the lower sheet's nearest vertex
    (in x and y), the bump included, whichever of the two sheets moved; to
    within half a thickness, for the slope of a dent between the vertices
    (the bump starts 1.5-3.5 cm on the wrong side)."""
    lower, upper = p[:nu], p[nu:]
    d = np.linalg.norm(upper[:, None, :2] - lower[None, :, :2], axis=2)
    below = lower[np.argmin(d, axis=1), 2]
    assert np.all(upper[:, 2] > below - 0.003), (upper[:, 2] - below).min()


@pytest.mark.parametrize("substeps,iterations", [(8, 2), (4, 1)])
def test_a_cloth_that_starts_tangled_untangles_within_a_second(substeps, iterations):
    # The poked-through pair of sheets, the lower one lying on the ground,
    # simulated: within 60 steps (one second) the crossings are gone and
    # stay gone.
    m, x, bump = poked_through(20, 0.1, depth=0.015, gap=0.03)
    x[:, 2] += 0.04
    params = ClothParams(substeps=substeps, iterations=iterations)
    model = build(m.positions, m.face_indices, m.face_sizes, params, region=m.region)
    model.self_collision = SelfCollision.from_model(model, thickness=0.006)
    state = model.new_state(x)
    assert crossings_at_start(model, x) > 20
    planes = Planes(point0=[[0, 0, 0]], normal0=[[0, 0, 1]])
    counts = []
    for f in range(60):
        step(model, state, StepInputs(planes=planes), DT, params)
        counts.append(crossings(model, state))
    first_clean = next(i for i, c in enumerate(counts + [0]) if c == 0)
    assert first_clean < 60 and max(counts[first_clean:]) == 0, counts
    assert_upper_above_lower(state.positions_aos(), int(m.vertex_offset[1]))


def crossings_at_start(model, x):
    return len(intersecting_triangle_pairs(x, model.triangles))


def crushed_pile(n, substeps, iterations, recover=True, frames=150, squeeze_frames=120):
    """An n x n 1 m sheet lying on the ground, crushed sideways between two
    wall planes to a third of its width over squeeze_frames: the crossing
    pairs of every frame and the highest point at the end."""
    rest, fi, fs = sheet(n, 1.0, 0.01)
    params = ClothParams(substeps=substeps, iterations=iterations)
    model = build(rest, fi, fs, params)
    model.self_collision = SelfCollision.from_model(model, thickness=0.006)
    model.self_collision.recover = recover
    state = model.new_state(rest + np.random.default_rng(1).normal(0.0, 0.001, rest.shape) * [0, 0, 1])

    def wall(f):
        return 0.52 - min(f / squeeze_frames, 1.0) * (0.52 - 0.17)

    normals = [[0, 0, 1], [1, 0, 0], [-1, 0, 0]]
    counts = []
    for f in range(frames):
        a, b = wall(f), wall(f + 1)
        planes = Planes(point0=[[0, 0, 0], [-a, 0, 0], [a, 0, 0]], normal0=normals,
                        point1=[[0, 0, 0], [-b, 0, 0], [b, 0, 0]], normal1=normals)
        step(model, state, StepInputs(planes=planes), DT, params)
        counts.append(crossings(model, state))
    p = state.positions_aos()
    assert np.abs(p[:, 0]).max() < 0.17 + 0.01, "the walls did not crush it"
    return counts, float(p[:, 2].max())


def assert_recovers(counts, still_from):
    """No crossings from frame still_from on (the walls stopped a quarter
    of a second before): what the crushing made is undone."""
    assert max(counts[still_from:]) == 0, counts


@pytest.mark.slow
def test_crushed_32_sheet_ends_without_intersections():
    counts, top = crushed_pile(32, 8, 2)
    assert top > 0.05, "it did not pile up"
    assert_recovers(counts, 135)


@pytest.mark.slow
def test_crushed_32_sheet_tangles_without_recovery():
    # The scene the test above passes does tangle with recovery off.
    counts, _ = crushed_pile(32, 8, 2, recover=False)
    assert counts[-1] > 10


@pytest.mark.slow
@pytest.mark.parametrize("n,substeps,iterations", [
    (48, 8, 2), (64, 8, 2), (64, 4, 2),
    # Undamped at one iteration a substep the coarse pile keeps moving 5-20
    # mm a frame after the walls stop, and crossings come and go: by initial
    # noise (seeds 1-3) the last 30 frames hold up to 24, 60 and 75 pairs
    # (up to 0, 95 and 133 while the next row of triangles got no contacts,
    # SelfCollision's NEAR_ALTITUDES). At 8 substeps and 2 iterations, the
    # README's setting for crushed cloth, the test above ends clean.
    pytest.param(32, 4, 1, marks=pytest.mark.xfail(
        strict=False, reason="an undamped coarse pile at 4 substeps and 1 iteration keeps moving and crossing "
        "after the walls stop, by the initial noise")),
    pytest.param(32, 16, 2, marks=pytest.mark.xfail(
        strict=False, reason="the outcome of this pile depends on the last bits of the floating point: on some CPUs "
        "and on the portable build 59-142 crossing pairs stay at rest (0 on others)")),
])
def test_crushed_sheets_end_without_intersections(n, substeps, iterations):
    counts, top = crushed_pile(n, substeps, iterations)
    assert top > 0.05, "it did not pile up"
    assert_recovers(counts, 135)


@pytest.mark.slow
def test_crushed_faster_ends_without_intersections():
    # The same squeeze in a quarter of the time (0.7 m/s walls).
    counts, top = crushed_pile(48, 8, 2, frames=90, squeeze_frames=30)
    assert_recovers(counts, 75)


def hairpin(edge, thickness, rows=6, cols=4, gap=0.012):
    """A strip of 2 rows x cols quads (edge m), flat at rest, folded flat
    about vertex row `rows`: rows 0..rows lie on the ground, the rest come
    back over them `gap` higher. Returns (model, positions (n, 3), the row
    grid of vertex indices)."""
    nr = 2 * rows + 1
    idx = np.arange(nr * (cols + 1)).reshape(nr, cols + 1)
    ys = np.arange(cols + 1) * edge
    rest = np.array([[i * edge, y, 0.0] for i in range(nr) for y in ys])
    x = np.array([[min(i, 2 * rows - i) * edge, y, 0.006 + (gap if i > rows else 0.0)]
                  for i in range(nr) for y in ys])
    fi = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1).ravel()
    fs = np.full((nr - 1) * cols, 4)
    params = ClothParams()
    model = build(rest, fi, fs, params)
    model.self_collision = SelfCollision.from_model(model, thickness=thickness)
    return model, x, idx


@pytest.mark.parametrize("substeps", [4, 8])
@pytest.mark.parametrize("speed", [1.0, 2.0, 4.0])
def test_coarse_fold_keeps_its_layers_a_thickness_apart_beside_the_fold(substeps, speed):
    # A coarse strip (4 cm edges, 1 cm thick: triangles 28 mm wide, over two
    # contact distances) folded flat, its upper layer thrown down onto the
    # lower one. The upper layer's first row past the fold lies over the
    # lower layer's triangles beside the fold vertex: near it only by one
    # long edge, so they get contacts and the layers stay a thickness apart
    # there, by the exact point-triangle distance (with two rings skipped
    # they settled 0.3-1 mm inside it, at 9.1-9.7 mm).
    thickness = 0.01
    model, x, idx = hairpin(0.04, thickness)
    rows = (idx.shape[0] - 1) // 2
    params = ClothParams(substeps=substeps)
    state = model.new_state(x)
    state.velocities[2, idx[rows + 1:].ravel()] = -speed
    ground = Planes(point0=[[0, 0, 0]], normal0=[[0, 0, 1]])
    worst = 0
    for _ in range(30):
        step(model, state, StepInputs(planes=ground), DT, params)
        worst = max(worst, crossings(model, state))
    assert worst == 0
    p = state.positions_aos().astype(np.float64)
    lower = set(idx[:rows + 1].ravel())
    beside = [t for t in model.triangles if set(t) <= lower and set(t) & set(idx[rows - 1])]
    first = idx[rows + 1, 1:-1]   # the upper row past the fold, less its two ends
    gap = min(float(point_triangle_distance(p[[v]], p[t[0]], p[t[1]], p[t[2]])[0]) for v in first for t in beside)
    assert gap > 0.98 * thickness, gap

