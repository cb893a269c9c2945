"""Garment authoring against geometric and analytic oracles: sewing, shrink,
warp and weft, painted stiffness, pressure, max distance and backstop."""

import numpy as np
import pytest

import oracles
from drape.solver import Capsules, ClothParams, SolverError, StepInputs, build_model, step, vertex_masses


def _sheet(nx, ny, size=1.0, offset=(0.0, 0.0, 0.0), plane="xy"):
    rest, fi, fs = oracles.grid_sheet(nx, ny, size, plane)
    return rest + np.asarray(offset), fi, fs


def _model(rest, fi, fs, params, pin=None, density=0.2):
    pin = np.zeros(len(rest)) if pin is None else pin
    return build_model(rest, fi, fs, vertex_masses(rest, fi, fs, density), pin, params)


def _lengths(x, pairs):
    x = np.asarray(x, dtype=np.float64)
    return np.linalg.norm(x[pairs[:, 0]] - x[pairs[:, 1]], axis=1)


def _corner_uv(rest, fi, axes=(0, 1)):
    return np.asarray(rest, dtype=np.float64)[fi][:, list(axes)]


# ---------------------------------------------------------------- sewing

def _two_panels(nx=12, nz=4, width=0.5, height=0.2, gap=0.3):
    """Front and back panels, flat, facing each other across y = 0; their
    left and right columns are stitched (the loose edges of a tube)."""
    front, fi, fs = _sheet(nx, nz, 1.0, plane="xz")
    front = front * [width, 1.0, height] + [-width / 2, gap / 2, -height / 2]
    back = front * [1.0, -1.0, 1.0]
    n1 = len(front)
    rest = np.concatenate([front, back])
    faces = np.concatenate([fi, fi + n1])
    sizes = np.concatenate([fs, fs])
    idx = np.arange(n1).reshape(nz + 1, nx + 1)
    left, right = idx[:, 0], idx[:, -1]
    stitches = np.concatenate([np.stack([left, left + n1], 1), np.stack([right, right + n1], 1)])
    return rest, faces, sizes, stitches


@pytest.mark.parametrize("substeps,iterations", [(2, 1), (5, 1), (2, 3)])
def test_two_flat_panels_sew_shut_around_a_cylinder(substeps, iterations):
    rest, fi, fs, stitches = _two_panels()
    radius = 0.1
    a, b = np.array([[0.0, 0.0, -0.4]]), np.array([[0.0, 0.0, 0.4]])
    caps = Capsules(a, b, a, b, np.array([radius]), np.array([radius]))
    params = ClothParams(substeps=substeps, iterations=iterations, gravity=(0, 0, 0), sewing_max_force=0.2,
                         air_drag=2.0, collision_margin=0.003)
    model = _model(rest, fi, fs, params)
    model.set_sewing(stitches)
    state = model.new_state()
    gap0 = _lengths(state.positions_aos(), stitches).max()
    for _ in range(150):
        step(model, state, StepInputs(capsules=caps), 1 / 60, params)
    x = state.positions_aos().astype(np.float64)
    assert np.all(np.isfinite(x))
    assert gap0 > 0.29
    assert _lengths(x, stitches).max() <= 1e-3
    # Nothing inside the cylinder: the tube closed around it.
    d = oracles.point_capsule_distances(x, a[0], b[0], radius, radius)
    assert d.min() > -1e-3
    # No crossings in the sewn tube (the stitched vertices welded into one).
    weld = np.arange(len(x))
    weld[stitches[:, 1]] = stitches[:, 0]
    assert len(oracles.intersecting_triangle_pairs(x, weld[model.triangles])) == 0
    # And it closed around, not beside it: the seams lie on either side.
    seam_x = x[stitches[:, 0], 0]
    assert seam_x[: len(seam_x) // 2].max() < -radius and seam_x[len(seam_x) // 2:].min() > radius


@pytest.mark.parametrize("force", [0.01, 0.05])
def test_a_stitch_pulls_with_at_most_the_max_sewing_force(force):
    # One substep, two vertices of different panels and nothing else moving
    # them at first: the gap shrinks by (w_a + w_b) F h^2 when F limits it.
    rest, fi, fs, stitches = _two_panels()
    params = ClothParams(substeps=1, gravity=(0, 0, 0), sewing_max_force=force, tethers=False,
                         stretch_limits=False)
    model = _model(rest, fi, fs, params)
    model.set_sewing(stitches)
    state = model.new_state()
    dt = 1 / 240
    gap0 = _lengths(state.positions_aos(), stitches)
    step(model, state, None, dt, params)
    gap1 = _lengths(state.positions_aos(), stitches)
    w = model.inv_mass[stitches].sum(axis=1)
    closed = gap0 - gap1
    assert np.all(closed <= w * force * dt * dt * (1 + 1e-4) + 1e-7)
    assert np.all(closed > 0.3 * w * force * dt * dt)   # it pulls (stretch holds the stitch vertices back)


def test_a_stitch_inside_one_panel_is_refused_and_changes_nothing():
    rest, fi, fs, stitches = _two_panels()
    model = _model(rest, fi, fs, ClothParams())
    model.set_sewing(stitches)
    with pytest.raises(SolverError, match="join a panel to itself"):
        model.set_sewing([[0, 5]])
    assert len(model.sewing) == len(stitches)
    loose = np.concatenate([rest, [[5.0, 5.0, 5.0]]])
    lonely = _model(loose, fi, fs, ClothParams())
    with pytest.raises(SolverError, match="in no polygon"):
        lonely.set_sewing([[0, len(loose) - 1]])


def _polyline_distance(p, chain, closed=False):
    """Exact distance from point p to the polyline through chain's points."""
    a = chain if not closed else np.concatenate([chain, chain[:1]])
    u, v = a[:-1], a[1:]
    d = v - u
    t = np.clip(np.einsum("ij,ij->i", p - u, d) / np.maximum(np.einsum("ij,ij->i", d, d), 1e-30), 0.0, 1.0)
    return float(np.linalg.norm(u + t[:, None] * d - p, axis=1).min())


def _strip_pair(na, nb, length=0.6, gap=0.25, rows=3):
    """Two flat panels side by side in the XY plane, their facing borders
    (along x, the same length) of na and nb vertices, zipped by pair_loops
    as drape.sew_edge_loops does: (rest, faces, sizes, stitches, border a,
    border b)."""
    from drape.solver.constraints.sewing import pair_loops

    def panel(nx, y0, y1):
        xs = np.linspace(0.0, length, nx)
        ys = np.linspace(y0, y1, rows + 1)
        pts = np.array([(x, y, 0.0) for y in ys for x in xs])
        quads = [(j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i)
                 for j in range(rows) for i in range(nx - 1)]
        return pts, np.array(quads)

    pa, qa = panel(na, -0.2, 0.0)            # its top row (y = 0) is its seam
    pb, qb = panel(nb, gap, gap + 0.2)       # its bottom row (y = gap)
    rest = np.concatenate([pa, pb])
    quads = np.concatenate([qa, qb + len(pa)])
    border_a = np.arange(rows * na, (rows + 1) * na)
    border_b = len(pa) + np.arange(nb)
    pairs = pair_loops(rest[border_a], rest[border_b])
    stitches = np.stack([border_a[pairs[:, 0]], border_b[pairs[:, 1]]], axis=1)
    return rest, quads.reshape(-1), np.full(len(quads), 4), stitches, border_a, border_b


@pytest.mark.parametrize("na,nb", [(10, 7), (7, 10), (13, 5), (9, 9)])
@pytest.mark.parametrize("substeps", [2, 6])
def test_borders_of_different_vertex_counts_sew_into_one_seam_line(na, nb, substeps):
    """Loose edges between borders of different counts (fans) close the
    seam: every border vertex ends on the other border's polyline (the
    oracle: exact point-polyline distance) within 1.5 mm (zero-length
    stitches along every loose edge left them 5-15 mm apart), and the
    border edges keep their lengths (no edge squeezed shut between two
    stitches of one fan, as they were to a fifth)."""
    rest, fi, fs, stitches, ba, bb = _strip_pair(na, nb)
    params = ClothParams(substeps=substeps, gravity=(0, 0, 0), sewing_max_force=0.5, air_drag=2.0)
    model = _model(rest, fi, fs, params)
    model.set_sewing(stitches)
    state = model.new_state()
    for _ in range(120):
        step(model, state, None, 1 / 24, params)
    x = state.positions_aos().astype(np.float64)
    assert np.all(np.isfinite(x))
    far = max(max(_polyline_distance(x[i], x[bb]) for i in ba), max(_polyline_distance(x[i], x[ba]) for i in bb))
    assert far <= 1.5e-3, f"{far * 1e3:.2f} mm from the other border"
    for border in (ba, bb):
        ratio = _lengths(x, np.stack([border[:-1], border[1:]], 1)) / _lengths(rest, np.stack([border[:-1],
                                                                                                  border[1:]], 1))
        assert ratio.min() > 0.97, ratio.min()
    assert np.abs(model.sewing.gaps(x)).max() <= 1.5e-3


@pytest.mark.parametrize("substeps", [2, 4, 8])
def test_a_closed_seam_holds_a_load_above_the_max_sewing_force(substeps):
    """A hem: the bottom panel hangs from the top one by its stitches only.
    With gravity off the seam closes at a tenth of the weight per stitch;
    then gravity comes on, three times the max force per stitch, and the
    closed seam holds (every stitch under 1 mm in every frame) instead of
    opening under the load."""
    nx, width, height, gap = 6, 0.3, 0.12, 0.2
    verts, quads = [], []
    for base in (0.0, -gap - height):
        b = len(verts)
        verts += [(width * i / nx, 0.0, base + height * j / 3) for j in range(4) for i in range(nx + 1)]
        quads += [(b + j * (nx + 1) + i, b + j * (nx + 1) + i + 1, b + (j + 1) * (nx + 1) + i + 1,
                   b + (j + 1) * (nx + 1) + i) for j in range(3) for i in range(nx)]
    rest = np.array(verts)
    top = 4 * (nx + 1)
    stitches = np.array([(i, top + 3 * (nx + 1) + i) for i in range(nx + 1)])
    fi, fs = np.array(quads).reshape(-1), np.full(len(quads), 4)
    pin = ((np.arange(len(rest)) < top) & np.isclose(rest[:, 2], height)).astype(float)
    density = 0.3
    per_stitch = density * width * height * 9.81 / len(stitches)
    off, on = (ClothParams(substeps=substeps, sewing_max_force=per_stitch / 3, gravity=g)
               for g in ((0, 0, 0), (0, 0, -9.81)))
    model = _model(rest, fi, fs, off, pin=pin, density=density)
    model.set_sewing(stitches)
    state = model.new_state()
    inputs = StepInputs(pin_targets=rest)
    for _ in range(90):
        step(model, state, inputs, 1 / 24, off)
    assert _lengths(state.positions_aos(), stitches).max() <= 1e-3
    worst = 0.0
    for _ in range(72):
        step(model, state, inputs, 1 / 24, on)
        worst = max(worst, _lengths(state.positions_aos(), stitches).max())
    assert worst <= 1e-3, f"{worst * 1e3:.1f} mm"
    # A new state starts with its seams open again (the cap applies).
    fresh = model.new_state()
    step(model, fresh, inputs, 1 / 24, on)
    assert fresh.seams is not None and not fresh.seams.any()


def test_the_default_loop_stays_without_garment_settings():
    import sys

    step_mod = sys.modules["drape.solver.step"]

    rest, fi, fs = _sheet(4, 4)
    params = ClothParams()
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    step(model, state, None, 1 / 60, params)
    assert step_mod._CACHES[model].default
    step(model, state, None, 1 / 60, ClothParams(max_distance=0.1))
    assert not step_mod._CACHES[model].default


# ---------------------------------------------------------------- shrink

@pytest.mark.parametrize("hierarchy", [False, True])
@pytest.mark.parametrize("substeps", [1, 4])
@pytest.mark.parametrize("shrink", [0.2, -0.1])
def test_shrink_settles_every_edge_at_its_scaled_rest_length(substeps, shrink, hierarchy):
    # (The multilevel stretch's coarse lengths grow with the cloth.)
    rest, fi, fs = _sheet(8, 8)
    params = ClothParams(substeps=substeps, gravity=(0, 0, 0), shrink=shrink, stretch_hierarchy=hierarchy)
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    for _ in range(240):
        step(model, state, None, 1 / 60, params)
    pairs = model.stretch.pairs
    ratio = _lengths(state.positions_aos(), pairs) / _lengths(rest, pairs)
    assert np.allclose(ratio, 1.0 - shrink, rtol=0.01)


@pytest.mark.parametrize("shrink", [-0.1, -0.2])
@pytest.mark.parametrize("substeps", [4, 10])
def test_a_pinned_hanging_sheet_grows_to_its_scaled_length(shrink, substeps):
    """Hung from its top row, with the default tethers and stretch limits, a
    sheet with a negative shrink s (it grows) hangs at (1 - s) of its
    modelled length: its
    vertical edges' mean length ratio is 1 - s within 1 % (the tethers kept
    a growing sheet at its modelled length, and it buckled)."""
    rest, fi, fs = _sheet(10, 12, 0.48, offset=(0.0, 0.0, -0.48), plane="xz")
    pin = np.isclose(rest[:, 2], rest[:, 2].max()).astype(float)
    params = ClothParams(substeps=substeps, shrink=shrink, air_drag=1.0, settle_damping=10.0)
    model = _model(rest, fi, fs, params, pin=pin, density=0.15)
    state = model.new_state()
    for _ in range(300):
        step(model, state, StepInputs(pin_targets=rest), 1 / 60, params)
    x = state.positions_aos().astype(np.float64)
    pairs = model.stretch.pairs
    vertical = np.isclose(rest[pairs[:, 0], 0], rest[pairs[:, 1], 0])
    ratio = _lengths(x, pairs[vertical]) / _lengths(rest, pairs[vertical])
    assert ratio.mean() == pytest.approx(1.0 - shrink, rel=0.01)


def test_a_shrink_group_shrinks_only_where_it_is_painted():
    # Two panels of one mesh, one painted: each settles to its own scale.
    one, fi, fs = _sheet(6, 6)
    rest = np.concatenate([one, one + [2.0, 0.0, 0.0]])
    fi, fs = np.concatenate([fi, fi + len(one)]), np.concatenate([fs, fs])
    weight = (rest[:, 0] < 1.5).astype(float)
    params = ClothParams(gravity=(0, 0, 0), shrink=0.0, shrink_max=0.2)
    model = _model(rest, fi, fs, params)
    model.set_garment_weights(shrink=weight)
    state = model.new_state()
    for _ in range(240):
        step(model, state, None, 1 / 60, params)
    pairs = model.stretch.pairs
    ratio = _lengths(state.positions_aos(), pairs) / _lengths(rest, pairs)
    both = weight[pairs].sum(axis=1)
    assert np.allclose(ratio[both == 2], 0.8, rtol=0.01)
    assert np.allclose(ratio[both == 0], 1.0, rtol=0.01)


def test_warp_and_weft_shrink_follow_the_uv_axes():
    rest, fi, fs = _sheet(8, 8)
    params = ClothParams(gravity=(0, 0, 0), shrink_warp=0.2, shrink_weft=-0.1)
    model = _model(rest, fi, fs, params)
    # U runs along y here, V along x: the UVs, not the world, decide.
    model.set_uv(_corner_uv(rest, fi, (1, 0)))
    state = model.new_state()
    for _ in range(240):
        step(model, state, None, 1 / 60, params)
    pairs = model.stretch.pairs
    d0 = rest[pairs[:, 1]] - rest[pairs[:, 0]]
    ratio = _lengths(state.positions_aos(), pairs) / np.linalg.norm(d0, axis=1)
    along_y = np.abs(d0[:, 1]) > 1e-9
    assert np.allclose(ratio[along_y], 0.8, rtol=0.01)
    assert np.allclose(ratio[~along_y], 1.1, rtol=0.01)


def test_warp_and_weft_without_a_uv_map_are_refused():
    rest, fi, fs = _sheet(4, 4)
    params = ClothParams(shrink_warp=0.1)
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    before = state.positions.copy()
    with pytest.raises(SolverError, match="UV map"):
        step(model, state, None, 1 / 60, params)
    assert np.array_equal(state.positions, before)


# ---------------------------------------------------------------- stiffness

def _strip(rows=6, width=0.1, edge=0.1):
    rest, fi, fs = _sheet(1, rows, 1.0, plane="xz")
    rest = rest * [width, 1.0, edge * rows]
    pin = (rest[:, 2] > edge * rows - 1e-9).astype(float)
    return rest, fi, fs, pin


def _hang(rest, fi, fs, pin, params, setup=None, frames=600):
    model = build_model(rest, fi, fs, np.full(len(rest), 0.01), pin, params)
    if setup:
        setup(model)
    state = model.new_state()
    for _ in range(frames):
        step(model, state, None, 1 / 60, params)
    return model, state.positions_aos()


def test_painted_stretch_stiffness_changes_stretch_only_where_painted():
    rest, fi, fs, pin = _strip()
    alpha, h = 0.04, 1 / (60 * 16)
    base = dict(substeps=16, shear_compliance=1e3, bend_compliance=1e6, tethers=False, stretch_limits=False,
                air_drag=3.0)
    lower = (rest[:, 2] < 0.3 + 1e-9).astype(float)
    plain_model, plain = _hang(rest, fi, fs, pin, ClothParams(**base, stretch_compliance=alpha))
    _, uniform = _hang(rest, fi, fs, pin, ClothParams(**base, stretch_compliance=alpha / 4))
    stiff = ClothParams(**base, stretch_compliance=alpha, stretch_weight_max=4.0)
    model, painted = _hang(rest, fi, fs, pin, stiff, lambda m: m.set_garment_weights(stretch=lower))
    pairs = model.stretch.pairs
    vertical = np.abs(rest[pairs[:, 0], 2] - rest[pairs[:, 1], 2]) > 1e-9
    inside = (lower[pairs].sum(axis=1) == 2) & vertical
    outside = (lower[pairs].sum(axis=1) == 0) & vertical
    s_plain = _lengths(plain, pairs) - _lengths(rest, pairs)
    s_paint = _lengths(painted, pairs) - _lengths(rest, pairs)
    s_uniform = _lengths(uniform, pairs) - _lengths(rest, pairs)
    assert np.allclose(s_paint[outside], s_plain[outside], rtol=0.02)
    # The chain's tension does not depend on its stiffness: where painted
    # it stretches as the whole strip does at a quarter of the compliance,
    # and a quarter as much as unpainted (one XPBD iteration per substep
    # settles at compliance + (w_a + w_b) h^2 per edge).
    assert np.allclose(s_paint[inside], s_uniform[inside], rtol=0.02)
    bias = 2 * 100.0 * h * h
    assert np.allclose(s_paint[inside], s_plain[inside] * (alpha / 4 + bias) / (alpha + bias), rtol=0.03)


def test_warp_and_weft_compliance_show_as_the_ratio_of_stretch_under_equal_load():
    rest, fi, fs, pin = _strip()
    base = dict(substeps=16, stretch_compliance=0.04, shear_compliance=1e3, bend_compliance=1e6, tethers=False,
                stretch_limits=False, air_drag=3.0, warp_compliance_scale=1.0, weft_compliance_scale=3.0)
    stretch = []
    for axes in ((0, 2), (2, 0)):   # the strip hangs along V, then along U
        model, x = _hang(rest, fi, fs, pin, ClothParams(**base),
                         lambda m, a=axes: m.set_uv(_corner_uv(rest, fi, a)))
        pairs = model.stretch.pairs
        vertical = np.abs(rest[pairs[:, 0], 2] - rest[pairs[:, 1], 2]) > 1e-9
        stretch.append((_lengths(x, pairs) - _lengths(rest, pairs))[vertical].sum())
    assert stretch[0] / stretch[1] == pytest.approx(3.0, rel=0.05)


def test_painted_stiffness_with_damping_is_refused():
    rest, fi, fs, pin = _strip()
    params = ClothParams(stretch_weight_max=3.0, stretch_damping=0.1)
    model = build_model(rest, fi, fs, np.full(len(rest), 0.01), pin, params)
    model.set_garment_weights(stretch=np.ones(len(rest)))
    with pytest.raises(SolverError, match="iterations = 1"):
        step(model, model.new_state(), None, 1 / 60, params)


# ---------------------------------------------------------------- pressure

def _cube(k=6, size=1.0):
    """A closed quad cube of k x k quads per side, outward-wound."""
    points, faces = {}, []

    def vid(p):
        key = tuple(np.round(p, 9))
        if key not in points:
            points[key] = len(points)
        return points[key]

    g = np.linspace(-0.5, 0.5, k + 1) * size
    for axis in range(3):
        for sign in (-1.0, 1.0):
            u_ax, v_ax = (axis + 1) % 3, (axis + 2) % 3
            for i in range(k):
                for j in range(k):
                    quad = []
                    for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1)):
                        p = np.zeros(3)
                        p[axis] = sign * size / 2
                        p[u_ax], p[v_ax] = g[i + du], g[j + dv]
                        quad.append(vid(p))
                    faces.append(quad if sign > 0 else quad[::-1])
    rest = np.array(sorted(points, key=points.get))
    return rest, np.array(faces).reshape(-1), np.full(len(faces), 4)


def _volume(x, fi, fs):
    """Signed volume of the polygons (fanned), in float64."""
    x = np.asarray(x, dtype=np.float64)
    vol, at = 0.0, 0
    for size in fs:
        f = fi[at:at + size]
        for j in range(1, size - 1):
            vol += np.dot(x[f[0]], np.cross(x[f[j]], x[f[j + 1]])) / 6.0
        at += size
    return vol


# Pressure acts once a step, on the last substep: the volume must not depend
# on how many substeps come before it.
@pytest.mark.parametrize("target,iterations,substeps", [(0.85, 1, 4), (1.15, 1, 4), (1.15, 3, 4), (1.15, 1, 1),
                                                        (0.85, 1, 8), (1.15, 2, 16)])
def test_an_inflated_closed_box_reaches_its_target_volume(target, iterations, substeps):
    rest, fi, fs = _cube()
    assert _volume(rest, fi, fs) == pytest.approx(1.0)
    params = ClothParams(substeps=substeps, iterations=iterations, gravity=(0, 0, -9.81), pressure=True,
                         pressure_volume=target, stretch_compliance=1e-4, air_drag=1.0)
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    for _ in range(90):
        step(model, state, None, 1 / 60, params)
    x = state.positions_aos()
    assert np.all(np.isfinite(x))
    assert _volume(x, fi, fs) == pytest.approx(target, rel=0.02)


@pytest.mark.parametrize("substeps", [2, 8])
def test_an_inflated_box_struck_by_a_capsule_keeps_its_volume_and_calms(substeps):
    """A 6 cm capsule sweeps through the side of an inflated cube at 3 m/s
    and leaves: no vertex ever moves much faster than it (an update of the
    volume that throws vertices is unstable), and once it is gone the volume
    is back at the target."""
    rest, fi, fs = _cube(k=8)
    params = ClothParams(substeps=substeps, gravity=(0, 0, 0), pressure=True, pressure_volume=1.1, air_drag=1.0)
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    r = np.array([0.03])
    fastest = 0.0
    for f in range(150):
        x0, x1 = -1.0 + 3.0 * f / 60, -1.0 + 3.0 * (f + 1) / 60   # x from -1 m to 6.5 m
        a0, b0 = np.array([[x0, 0.45, -0.8]]), np.array([[x0, 0.45, 0.8]])
        a1, b1 = np.array([[x1, 0.45, -0.8]]), np.array([[x1, 0.45, 0.8]])
        step(model, state, StepInputs(capsules=Capsules(a0, b0, a1, b1, r, r)), 1 / 60, params)
        v = state.velocities
        assert np.all(np.isfinite(v)), f
        fastest = max(fastest, float(np.sqrt((v.astype(np.float64) ** 2).sum(axis=0)).max()))
    assert fastest < 9.0   # three times the capsule's speed
    assert _volume(state.positions_aos(), fi, fs) == pytest.approx(1.1, rel=0.02)


def _uv_sphere(radius=0.25, segments=20, rings=10):
    """A closed UV sphere of quads (triangles at the poles), outward."""
    v = [(0.0, 0.0, radius)]
    for k in range(1, rings):
        th = np.pi * k / rings
        v += [(radius * np.sin(th) * np.cos(2 * np.pi * s / segments),
               radius * np.sin(th) * np.sin(2 * np.pi * s / segments), radius * np.cos(th)) for s in range(segments)]
    v.append((0.0, 0.0, -radius))
    faces = [(0, 1 + s, 1 + (s + 1) % segments) for s in range(segments)]
    for k in range(rings - 2):
        b = 1 + k * segments
        faces += [(b + s, b + segments + s, b + segments + (s + 1) % segments, b + (s + 1) % segments)
                  for s in range(segments)]
    last, b = len(v) - 1, 1 + (rings - 2) * segments
    faces += [(b + s, last, b + (s + 1) % segments) for s in range(segments)]
    return np.array(v), np.array([i for f in faces for i in f]), np.array([len(f) for f in faces])


@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize("substeps,stretch", [(2, 1e-3), (6, 1e-3), (6, 0.0)])
def test_a_free_balloon_neither_drifts_nor_spins(group, substeps, stretch):
    """A free balloon (no pins, no gravity) inflated to 1.2 of its volume,
    with a pressure group on its lower half or without one: its centre of
    mass stays within 1 mm of where it started and its angular momentum
    about it stays near zero over 3 s (a group's weighted push carried the
    balloon off at tens of metres a second, and pressure fighting stretch
    spun it), and it still reaches the target within 2 %."""
    rest, fi, fs = _uv_sphere()
    params = ClothParams(substeps=substeps, pressure=True, pressure_volume=1.2, stretch_compliance=stretch,
                         gravity=(0, 0, 0), air_drag=1.0)
    model = _model(rest, fi, fs, params)
    if group:
        model.set_garment_weights(pressure=(rest[:, 2] < 0).astype(np.float32))
    mass = model.mass.astype(np.float64)
    centre0 = (mass[:, None] * rest).sum(axis=0) / mass.sum()
    v0 = _volume(rest, fi, fs)
    state = model.new_state()
    spin = 0.0
    for _ in range(180):
        step(model, state, None, 1 / 60, params)
        x, v = state.positions_aos().astype(np.float64), state.velocities_aos().astype(np.float64)
        c = (mass[:, None] * x).sum(axis=0) / mass.sum()
        assert np.linalg.norm(c - centre0) < 1e-3
        spin = max(spin, float(np.linalg.norm((mass[:, None] * np.cross(x - c, v)).sum(axis=0))))
    # Angular momentum of the whole balloon turning at 0.05 rad/s (it spun
    # at 1-9 rad/s).
    inertia = float((mass * ((x - c) ** 2).sum(axis=1)).sum())
    assert spin < 0.05 * inertia, spin / inertia
    vol = _volume(x, fi, fs) / v0
    assert vol == pytest.approx(1.2, rel=0.02)


def test_pressure_on_an_open_mesh_is_refused_and_changes_nothing():
    rest, fi, fs = _sheet(4, 4)
    params = ClothParams(pressure=True)
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    before = state.positions.copy()
    with pytest.raises(SolverError, match="closed mesh"):
        step(model, state, None, 1 / 60, params)
    assert np.array_equal(state.positions, before)


# ---------------------------------------------------------------- skinned

def _animated(rest, t):
    """A fast, swinging animation of the whole sheet (m)."""
    return rest + np.array([3.0 * t, 0.4 * np.sin(9.0 * t), 0.2 * np.cos(13.0 * t)])


@pytest.mark.parametrize("substeps,frames_per_step,iterations", [(1, 1, 1), (1, 4, 1), (3, 1, 1), (1, 1, 3)])
def test_max_distance_is_never_exceeded(substeps, frames_per_step, iterations):
    # substeps = 1 checks every substep; (3, 1) the end of each step.
    rest, fi, fs = _sheet(8, 8)
    rng = np.random.default_rng(3)
    weight = np.where(rest[:, 0] < 0.5, rng.uniform(0.1, 1.0, len(rest)), 0.0)
    r = 0.05
    params = ClothParams(substeps=substeps, iterations=iterations, max_distance=r)
    model = _model(rest, fi, fs, params)
    model.set_garment_weights(max_distance=weight)
    state = model.new_state()
    dt = 1 / (60 * frames_per_step)
    limited = weight > 0
    worst_free = 0.0
    for k in range(1, 120 * frames_per_step):
        target = _animated(rest, k * dt)
        step(model, state, StepInputs(pin_targets=target), dt, params)
        d = np.linalg.norm(state.positions_aos().astype(np.float64) - target, axis=1)
        assert np.all(d[limited] <= r * weight[limited] + 1e-6)
        worst_free = max(worst_free, d[~limited].max())
    assert worst_free > 2 * r   # the free half lags far behind: the limit is what holds the other


def test_the_backstop_keeps_cloth_out_of_its_sphere_behind_the_animation():
    rest, fi, fs = _sheet(8, 8)
    R, depth = 0.5, 0.02
    params = ClothParams(substeps=2, backstop_radius=R, backstop_distance=depth, gravity=(0, 0, -9.81))
    model = _model(rest, fi, fs, params)
    state = model.new_state()
    # The sheet's normal (its winding): the backstop lies on that side's back.
    a, b, c = rest[fi[0]], rest[fi[1]], rest[fi[2]]
    normal = np.cross(b - a, c - a)
    normal /= np.linalg.norm(normal)
    g = np.array(params.gravity) * (1 if normal[2] > 0 else -1)
    params.gravity = tuple(g)   # falls towards the back
    lowest = 0.0
    for _ in range(120):
        step(model, state, StepInputs(pin_targets=rest), 1 / 60, params)
        x = state.positions_aos().astype(np.float64)
        centre = rest - (depth + R) * normal
        assert np.all(np.linalg.norm(x - centre, axis=1) >= R * (1 - 1e-5))
        lowest = min(lowest, float(((x - rest) @ normal).min()))
    assert lowest < -0.5 * depth   # it did fall onto the backstop


def test_negative_radii_are_refused():
    for bad in (dict(max_distance=-0.1), dict(backstop_radius=-1.0), dict(backstop_distance=float("nan"))):
        with pytest.raises(SolverError, match=next(iter(bad))):
            ClothParams(**bad).validate()


# ---------------------------------------------------------------- pairing loops

def test_pair_loops_matches_equal_chains_even_when_one_runs_backwards():
    from drape.solver.constraints.sewing import pair_loops

    a = np.stack([np.linspace(0, 1, 6), np.zeros(6), np.zeros(6)], 1)
    b = a[::-1] + [0.0, 0.3, 0.0]
    pairs = pair_loops(a, b)
    assert len(pairs) == 6
    np.testing.assert_allclose(a[pairs[:, 0], 0], b[pairs[:, 1], 0])


@pytest.mark.parametrize("k,l", [(5, 9), (9, 5), (4, 13)])
def test_pair_loops_of_different_counts_stitch_every_vertex_to_the_nearest_fraction(k, l):
    from drape.solver.constraints.sewing import pair_loops

    a = np.stack([np.linspace(0, 1, k), np.zeros(k), np.zeros(k)], 1)
    b = np.stack([np.linspace(0, 1, l), np.full(l, 0.2), np.zeros(l)], 1)
    pairs = pair_loops(a, b)
    assert set(pairs[:, 0]) == set(range(k)) and set(pairs[:, 1]) == set(range(l))
    # Along the seam no stitch runs farther than half the coarser spacing.
    assert np.abs(a[pairs[:, 0], 0] - b[pairs[:, 1], 0]).max() <= 0.5 / (min(k, l) - 1) + 1e-9


def test_pair_loops_turns_and_rotates_a_closed_loop_onto_the_other():
    from drape.solver.constraints.sewing import pair_loops

    t = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    a = np.stack([np.cos(t), np.sin(t), np.zeros(12)], 1)
    b = np.roll(a[::-1], 5, axis=0) + [0.0, 0.0, 0.5]
    pairs = pair_loops(a, b, closed=True)
    assert len(pairs) == 12
    np.testing.assert_allclose(a[pairs[:, 0], :2], b[pairs[:, 1], :2], atol=1e-12)


@pytest.mark.parametrize("target", [0.97, 1.03])
def test_one_pressure_update_moves_only_weighted_vertices_and_reaches_the_target(target):
    from drape.solver.constraints.pressure import solve_pressure

    rest, fi, fs = _cube(8)
    model = _model(rest, fi, fs, ClothParams())
    weight = (rest[:, 2] > 0).astype(np.float32)   # the top half only
    model.set_garment_weights(pressure=weight)
    p = model.pressure
    coef = np.array([target * p.rest_volume, 0.0, 0.0], np.float32)   # not recentred
    pos = np.ascontiguousarray(rest.T, np.float32)
    solve_pressure(pos, p.tris, p.w_active, p.grad, coef)
    x = pos.T.astype(np.float64)
    assert np.array_equal(x[weight == 0], rest[weight == 0].astype(np.float32))
    assert np.all(np.linalg.norm(x[weight > 0] - rest[weight > 0], axis=1) > 0)
    # A linearised update: the volume error left is second order in the step.
    assert abs(_volume(x, fi, fs) - target) < 0.1 * abs(target - 1.0)


def test_painted_shear_and_bend_scale_only_the_painted_elements():
    rest, fi, fs = _sheet(6, 6)
    weight = (rest[:, 0] < 0.4).astype(float)
    params = ClothParams(shear_weight_max=5.0, bend_weight_max=3.0)
    model = _model(rest, fi, fs, params)
    model.set_garment_weights(shear=weight, bend=weight)
    step(model, model.new_state(), None, 1 / 60, params)
    shear = model.shear.alpha_scale
    inside = weight[model.shear.pairs].min(axis=1) == 1
    outside = weight[model.shear.pairs].max(axis=1) == 0
    np.testing.assert_allclose(shear[inside], 1 / 5.0)
    np.testing.assert_allclose(shear[outside], 1.0)
    quads = weight[model.bend.idx_aos]
    np.testing.assert_allclose(model.bend.alpha_scale[quads.min(axis=1) == 1], 1 / 3.0)
    np.testing.assert_allclose(model.bend.alpha_scale[quads.max(axis=1) == 0], 1.0)
    # Stretch is left alone, and the coefficients follow the scales.
    assert model.stretch.alpha_scale is None
    alpha = params.shear_compliance * (60 * params.substeps) ** 2
    wa, wb = model.shear.wa.astype(np.float64), model.shear.wb.astype(np.float64)
    np.testing.assert_allclose(model.shear.ca, wa / (wa + wb + alpha * shear), rtol=1e-4)
