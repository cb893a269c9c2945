"""Hanging sheets at the add-on's default settings, judged by their edge
strain against the rest lengths once settled (the oracle: l / rest - 1 per
structural edge, computed here from the positions), over resolutions, pin
layouts and substeps; the tether lengths the solve relies on, against
exact distances over flat and curved rest surfaces; and the sheet's
mechanical energy after a sphere has passed through it."""

import numpy as np
import pytest

import oracles
from mesh_scenes import ADDON, half_cylinder as _half_cylinder, held_vertices, settled_strain
from drape.solver import Capsules, ClothParams, StepInputs, build_model, step, topology, vertex_masses
from drape.solver import model as model_module

LAYOUTS = ("one_corner", "two_corners", "one_edge", "two_edges")


# One corner: the sheet swings 45 degrees in its own plane and the one
# iteration per substep lets it fold over itself in that plane; two opposite
# edges at 100 x 100: rows 100 edges long between the pins settle just over
# 1 % mean strain.
_UNMET = {("one_corner", 20), ("one_corner", 30), ("one_corner", 50), ("one_corner", 100), ("two_edges", 100)}


def _cases():
    for nx in (20, 30, 50, 100):
        for layout in LAYOUTS:
            for substeps in ((4, 8) if nx <= 30 else (4,)):
                marks = [pytest.mark.slow] if nx >= 100 else []
                if (layout, nx) in _UNMET and substeps == 4:
                    marks.append(pytest.mark.xfail(strict=True, reason="not converged at the default substeps"))
                yield pytest.param(nx, layout, substeps, marks=marks, id=f"{layout}-{nx}x{nx}-{substeps}sub")


@pytest.mark.parametrize("nx,layout,substeps", list(_cases()))
def test_hanging_sheet_settles_converged(nx, layout, substeps):
    """Settled, no edge stretches more than 10 % and the mean |strain| is
    at most 1 %."""
    s = settled_strain(nx, layout, substeps=substeps)
    assert s.max() <= 0.10, f"max stretch {s.max():.3f}"
    assert np.abs(s).mean() <= 0.01, f"mean |strain| {np.abs(s).mean():.4f}"


@pytest.mark.parametrize("nx", [20, 30, pytest.param(50, marks=pytest.mark.slow)])
def test_two_corners_need_tethers_of_straight_length(nx, monkeypatch):
    """Hung from two corners with tethers along the mesh's edges (lengths
    up to 8 % over the straight distance) the sheet is held where those
    lengths put it, torn along its middle: the straight lengths are what
    converges it (the test can fail)."""
    assert settled_strain(nx, "two_corners").max() <= 0.10
    tethers = model_module.Tethers

    def along_edges(*args, triangles=None):
        return tethers(*args)

    monkeypatch.setattr(model_module, "Tethers", along_edges)
    assert settled_strain(nx, "two_corners").max() > 0.10


@pytest.mark.parametrize("layout", ["two_corners", "one_edge"])
def test_without_tethers_the_limits_alone_do_not_hold_a_sheet(layout):
    """Tethers off and the multilevel stretch forced off, one iteration of
    the edges and the stretch limits cannot carry the sheet's weight to
    its pins: the edges at the pins stretch by over a fifth (this is what
    the tethers, or without them the multilevel stretch, are for; if the
    edges alone ever converge, drop both from the defaults). With the
    defaults (the multilevel stretch standing in for the tethers) the same
    sheet's largest stretch is under a quarter and a fifth of that."""
    alone = settled_strain(30, layout, tethers=False, stretch_hierarchy=False).max()
    default = settled_strain(30, layout, tethers=False).max()
    assert alone > 0.2
    assert default < 0.25 and default < alone / 5, (default, alone)


# Without tethers (the multilevel stretch in their place) the bar is met
# by sheets hung from a whole edge, and at 20 x 20 by every layout at 8
# substeps; the rest stretch by 6 to 64 % (most at one corner, where the
# sheet folds in its own plane), from many times over with the stretch
# limits alone.
_UNMET_FREE = {("one_corner", 20), ("one_corner", 30), ("two_corners", 30), ("two_edges", 30), ("one_corner", 50),
               ("two_corners", 50), ("two_edges", 50)}


def _free_cases():
    for nx in (20, 30, 50):
        for layout in LAYOUTS:
            for substeps in ((4, 8) if nx == 20 else (4,)):
                marks = []
                if (layout, nx) in _UNMET_FREE and substeps == 4:
                    marks.append(pytest.mark.xfail(strict=True, reason="not converged without tethers"))
                yield pytest.param(nx, layout, substeps, marks=marks, id=f"{layout}-{nx}x{nx}-{substeps}sub")


@pytest.mark.parametrize("nx,layout,substeps", list(_free_cases()))
def test_hanging_sheet_without_tethers_settles_converged(nx, layout, substeps):
    """Tethers off, the other settings the add-on's: settled, no edge
    stretches more than 10 % and the mean |strain| is at most 1 %."""
    s = settled_strain(nx, layout, substeps=substeps, tethers=False)
    assert s.max() <= 0.10, f"max stretch {s.max():.3f}"
    assert np.abs(s).mean() <= 0.01, f"mean |strain| {np.abs(s).mean():.4f}"


@pytest.mark.parametrize("nu,nz", [(8, 10), (24, 30)])
def test_tethers_are_never_shorter_than_the_surface_path(nu, nz):
    """Over a half cylinder pinned at one corner a tether may cut across
    the faces only where they are flat: no length is shorter than the
    exact geodesic (the unrolled distance), so no tether pulls the cloth
    through what it is draped over; along the cylinder's axis, where it is
    straight, the lengths are exact."""
    rest, fi, fs, unrolled = _half_cylinder(nu, nz)
    pin = np.zeros(len(rest))
    pin[0] = 1.0
    model = build_model(rest, fi, fs, np.ones(len(rest)), pin)
    v, a = model.tethers.vertex.astype(int), model.tethers.anchor.astype(int)
    exact = np.linalg.norm(unrolled[v] - unrolled[a], axis=1)
    length = model.tethers.length.astype(np.float64)
    assert np.all(length >= exact * (1 - 1e-5))
    chord = np.linalg.norm(rest[v] - rest[a], axis=1)
    assert np.any(chord < exact * 0.99)  # the chords through the cylinder are shorter (the test can fail)
    column = np.isclose(rest[v, 0], rest[0, 0]) & np.isclose(rest[v, 1], rest[0, 1])
    assert np.allclose(length[column], exact[column], atol=1e-6)


@pytest.mark.parametrize("nx", [7, 20])
def test_tethers_over_a_flat_sheet_are_straight(nx):
    """On a flat sheet every tether is the straight rest distance to its
    anchor, the nearest pin of its region."""
    rest, fi, fs = oracles.grid_sheet(nx, nx, plane="xy")
    held = np.isclose(rest[:, 1], 1.0) & (np.isclose(rest[:, 0], 0.0) | np.isclose(rest[:, 0], 1.0))
    model = build_model(rest, fi, fs, np.ones(len(rest)), held.astype(float))
    v, a = model.tethers.vertex.astype(int), model.tethers.anchor.astype(int)
    straight = np.linalg.norm(rest[v] - rest[a], axis=1)
    assert np.allclose(model.tethers.length, straight, atol=1e-5)
    assert len(v) == 2 * (len(rest) - 2)
    # Along the edges alone the same tethers are longer off the grid's axes.
    _, _, along = topology.geodesic_tethers(rest, model.graph_edges, np.flatnonzero(held))
    assert len(along) == len(v) and along.sum() > straight.sum() * 1.01


def _sphere_through(model, state, params, speed, mass, after):
    """A 15 cm sphere through the middle of the hanging sheet along y at
    `speed` m/s, then `after` frames without it: the sheet's mechanical
    energy (kinetic + gravitational, J) and its largest vertex movement
    (m) in each of those frames."""
    dt = 1 / 24
    radius = np.array([0.15])
    y = -0.5
    while y < 0.5:
        a0, a1 = np.array([[0.5, y, 0.5]]), np.array([[0.5, y + speed * dt, 0.5]])
        step(model, state, StepInputs(capsules=Capsules(a0=a0, b0=a0, a1=a1, b1=a1, radius_a=radius,
                                                        radius_b=radius)), dt, params)
        y += speed * dt
    energy, moves = [], []
    for _ in range(after):
        before = state.positions.astype(np.float64)
        step(model, state, None, dt, params)
        x, v = state.positions.astype(np.float64), state.velocities.astype(np.float64)
        energy.append(0.5 * float((mass * (v * v).sum(axis=0)).sum()) + 9.81 * float((mass * x[2]).sum()))
        moves.append(float(np.abs(x - before).max()))
    return np.asarray(energy), np.asarray(moves)


@pytest.mark.parametrize("nx", [20, 30])
@pytest.mark.parametrize("layout", ["two_corners", "one_edge"])
@pytest.mark.parametrize("speed", [1.0, 4.0])
def test_energy_leaves_the_sheet_after_a_sphere_passes(nx, layout, speed):
    """After the sphere has gone, nothing pumps energy back in (no jitter
    from the tethers, limits or the contacts just released): the most
    mechanical energy in each second is below the second before's; and
    with a strong air drag the sheet comes to rest (every vertex under
    0.1 mm a frame) instead of settling into a jitter."""
    rest, fi, fs = oracles.grid_sheet(nx, nx)
    held = held_vertices(rest, layout).astype(float)
    mass = vertex_masses(rest, fi, fs, 0.15).astype(np.float64)
    for drag in (ADDON["air_drag"], 3.0):
        params = ClothParams(**{**ADDON, "air_drag": drag})
        model = build_model(rest, fi, fs, mass, held, params)
        state = model.new_state()
        for _ in range(48):
            step(model, state, None, 1 / 24, params)
        energy, moves = _sphere_through(model, state, params, speed, mass, 144)
        peaks = energy.reshape(-1, 24).max(axis=1)
        # Once at rest the energy holds to the float32 positions' round-off
        # (m g of an ulp of z: about 1e-7 J for this sheet): a second may
        # end as high as the one before within that, never higher.
        assert np.all(np.diff(peaks) < 1e-6 * peaks[0]), peaks
        if drag > 1.0:
            assert moves[-24:].max() < 1e-4, moves[-24:].max()


def _variant_sheet(kind, nx):
    """The nx x nx sheet as quads, as triangles, with its inner vertices
    moved at random within a third of an edge, or lying flat (XY) to fall
    from its two corners."""
    rest, fi, fs = oracles.grid_sheet(nx, nx, plane="xy" if kind == "horizontal" else "xz")
    if kind == "triangles":
        q = fi.reshape(-1, 4)
        fi = np.concatenate([q[:, [0, 1, 2]], q[:, [0, 2, 3]]], axis=1).reshape(-1)
        fs = np.full(2 * len(q), 3, dtype=np.int64)
    if kind == "jittered":
        rng = np.random.default_rng(7)
        inner = (rest[:, 0] > 0) & (rest[:, 0] < 1) & (rest[:, 2] > 0) & (rest[:, 2] < 1)
        rest = rest.copy()
        rest[np.ix_(inner, [0, 2])] += rng.uniform(-0.3 / nx, 0.3 / nx, (int(inner.sum()), 2))
    up = 1 if kind == "horizontal" else 2
    held = np.isclose(rest[:, up], 1.0) & (np.isclose(rest[:, 0], 0.0) | np.isclose(rest[:, 0], 1.0))
    return rest, fi, fs, held


@pytest.mark.parametrize("kind", ["triangles", "jittered", "horizontal"])
@pytest.mark.parametrize("nx", [20, 40])
def test_sheets_of_other_meshes_hung_from_two_corners_converge(kind, nx):
    """Triangulated, irregular or released flat: held by two corners, the
    settled sheet's edges stretch at most 10 % and 1 % on average."""
    rest, fi, fs, held = _variant_sheet(kind, nx)
    params = ClothParams(**ADDON)
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(float), params)
    state = model.new_state()
    for _ in range(120):
        step(model, state, None, 1 / 24, params)
    s = oracles.edge_strain(state.positions_aos().astype(np.float64), model.stretch.pairs, rest)
    assert s.max() <= 0.10, f"max stretch {s.max():.3f}"
    assert np.abs(s).mean() <= 0.01, f"mean |strain| {np.abs(s).mean():.4f}"


# ---- settling damping (ClothParams.settle_damping): after a sphere has gone
# through a hanging sheet it comes to rest, at any resolution, hit speed,
# number of substeps and frame rate; it does not slow a falling sheet (the
# oracle: the analytic fall under linear drag) nor a drape over a sphere
# more than a stated fraction, and a sheet hung from moving pins follows
# them (a sheet in uniform motion hangs straight below its pins, at the
# pins' velocity).

STILL = 1e-4  # m a frame at 24 frames a second: "at rest"


def _hit_then_moves(nx, layout, speed, seconds, fps=24, **settings):
    """The sheet hung for 2 s, a 15 cm sphere through its middle along y at
    `speed` m/s, then `seconds` without it: the largest vertex movement in
    each frame, scaled to a 24 fps frame (m)."""
    rest, fi, fs = oracles.grid_sheet(nx, nx)
    params = ClothParams(**{**ADDON, **settings})
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held_vertices(rest, layout).astype(float),
                        params)
    state = model.new_state()
    dt = 1 / fps
    for _ in range(2 * fps):
        step(model, state, None, dt, params)
    radius, y = np.array([0.15]), -0.5
    while y < 0.5:
        a0, a1 = np.array([[0.5, y, 0.5]]), np.array([[0.5, y + speed * dt, 0.5]])
        step(model, state, StepInputs(capsules=Capsules(a0=a0, b0=a0, a1=a1, b1=a1, radius_a=radius,
                                                        radius_b=radius)), dt, params)
        y += speed * dt
    moves = []
    for _ in range(int(seconds * fps)):
        before = state.positions.astype(np.float64)
        step(model, state, None, dt, params)
        moves.append(float(np.abs(state.positions - before).max()) * fps / 24)
    return np.asarray(moves)


def _settle_cases():
    for nx in (20, 30, 50):
        for speed in (1.0, 4.0):
            for substeps, fps in ((4, 24), (2, 24), (2, 60)):
                if nx > 20 and substeps == 2 and fps == 24:
                    continue
                yield pytest.param(nx, speed, substeps, fps, id=f"{nx}x{nx}-{speed}m_s-{substeps}sub-{fps}fps")


@pytest.mark.parametrize("nx,speed,substeps,fps", list(_settle_cases()))
def test_sheet_comes_to_rest_after_a_sphere_passes(nx, speed, substeps, fps):
    """With the default settling and air resistance every vertex moves
    under 0.1 mm a frame within 4.5 s of the sphere leaving, and stays so;
    without the settling (the air drag and air resistance alone) the sheet
    still swings by over 1 mm a frame 7 s after."""
    moves = _hit_then_moves(nx, "two_corners", speed, 8, fps, substeps=substeps)
    at = int(4.5 * fps)
    assert moves[at:].max() < STILL, (np.flatnonzero(moves >= STILL)[-1] + 1) / fps
    free = _hit_then_moves(nx, "two_corners", speed, 7, fps, substeps=substeps, settle_damping=0.0)
    assert free[-fps // 4:].max() > 10 * STILL


@pytest.mark.xfail(strict=True, reason="the swing after the hit takes about 3 s to settle at the default "
                   "settling and air resistance; within 2 s it takes damping that slows a pinned sheet's swing "
                   "even more than air does")
@pytest.mark.parametrize("layout", ["two_corners", "one_edge"])
def test_sheet_comes_to_rest_within_two_seconds(layout):
    moves = _hit_then_moves(20, layout, 1.0, 2)
    assert moves[-1] < STILL, moves[-1]


def _dropped(nx, seconds, sphere, fps=24, **settings):
    """A flat 1 m sheet released 0.5 m above the origin, optionally over a
    30 cm sphere there: its z rows after `seconds`."""
    rest, fi, fs = oracles.grid_sheet(nx, nx, plane="xy")
    rest = rest - np.array([0.5, 0.5, -0.5])
    params = ClothParams(**{**ADDON, **settings})
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), np.zeros(len(rest)), params)
    state = model.new_state()
    c, r = np.zeros((1, 3)), np.array([0.3])
    inputs = StepInputs(capsules=Capsules(a0=c, b0=c, a1=c, b1=c, radius_a=r, radius_b=r)) if sphere else None
    for _ in range(int(round(seconds * fps))):
        step(model, state, inputs, 1 / fps, params)
    return state.positions[2].astype(np.float64)


@pytest.mark.parametrize("nx", [10, 30])
@pytest.mark.parametrize("substeps", [2, 4])
def test_settling_does_not_slow_a_free_fall(nx, substeps):
    """The falling sheet's drop in 1 s is that of the integrator's recurrence
    under the air drag c alone (v += -c h v + g h, then x += h v, each
    substep h), within 0.1 %; it is no less than the analytic fall,
    g/c (t - (1 - exp(-ct))/c), less 0.1 % (semi-implicit Euler falls
    g t h / 2 ahead of it); and settling changes it by under 0.05 %."""
    c, t, g = ADDON["air_drag"], 1.0, 9.81
    h = 1 / 24 / substeps
    v = x = 0.0
    for _ in range(round(t / h)):
        v += -c * h * v + g * h
        x += h * v
    drop = 0.5 - _dropped(nx, t, False, substeps=substeps).mean()
    assert abs(drop / x - 1) < 1e-3, (drop, x)
    assert drop > (1 - 1e-3) * g / c * (t - (1 - np.exp(-c * t)) / c)
    plain = 0.5 - _dropped(nx, t, False, substeps=substeps, settle_damping=0.0, air_resistance=0.0).mean()
    assert abs(drop / plain - 1) < 5e-4, (drop, plain)


@pytest.mark.parametrize("nx", [20, 30])
def test_settling_barely_slows_a_drape_over_a_sphere(nx):
    """Dropped over a sphere, the sheet's corners have fallen at least 97 %
    as far after 0.4 s with the settling alone as undamped, and at least
    85 % as far with the default air resistance too (still air slows the
    corners swinging down around the sphere); the draped sheet ends as low
    (within 1 cm) after 3 s either way."""
    undamped = dict(settle_damping=0.0, air_resistance=0.0)
    plain = 0.5 - _dropped(nx, 0.4, True, **undamped)
    settled = 0.5 - _dropped(nx, 0.4, True, air_resistance=0.0)
    aired = 0.5 - _dropped(nx, 0.4, True)
    corners = [0, nx, nx * (nx + 1), (nx + 1) ** 2 - 1]
    assert np.all(settled[corners] >= 0.97 * plain[corners]), settled[corners] / plain[corners]
    assert np.all(aired[corners] >= 0.85 * plain[corners]), aired[corners] / plain[corners]
    end_plain = _dropped(nx, 3.0, True, **undamped)
    for end in (_dropped(nx, 3.0, True, air_resistance=0.0), _dropped(nx, 3.0, True)):
        assert abs(end.mean() - end_plain.mean()) < 0.01 and abs(end.min() - end_plain.min()) < 0.01


@pytest.mark.parametrize("nx", [10, 20])
@pytest.mark.parametrize("velocity", [(1.0, 0.0, 0.0), (0.0, 2.0, 0.0), (0.5, 0.0, 0.5)])
def test_sheet_follows_translating_pins(nx, velocity):
    """Pinned by its top row to pins that move at a constant velocity u
    from t = 0, with no air drag: the sheet ends moving at u (each free
    vertex within 1 %) and hanging straight below its pins, as in a still
    frame (bottom row within 5 mm of under the pins): settling damps motion
    relative to the pins, not the pins' own motion."""
    rest, fi, fs = oracles.grid_sheet(nx, nx)
    held = held_vertices(rest, "one_edge")
    params = ClothParams(**{**ADDON, "air_drag": 0.0})
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(float), params)
    state = model.new_state()
    u, dt = np.asarray(velocity), 1 / 24
    targets = rest.astype(np.float64).copy()
    for _ in range(6 * 24):
        targets[held] += u * dt
        step(model, state, StepInputs(pin_targets=targets), dt, params)
    x, v = state.positions.T.astype(np.float64), state.velocities.T.astype(np.float64)
    free = ~held
    assert np.abs(v[free] - u).max() < 0.01 * np.linalg.norm(u), np.abs(v[free] - u).max()
    bottom = np.isclose(rest[:, 2], 0.0)
    offset = x[bottom] - targets[np.flatnonzero(held)[0]] - (rest[bottom] - rest[np.flatnonzero(held)[0]])
    assert np.abs(offset[:, :2]).max() < 0.005, offset[:, :2]


@pytest.mark.parametrize("nx", [10, 20])
@pytest.mark.parametrize("omega", [1.0, -2.0])
def test_sheet_follows_turning_pins(nx, omega):
    """Pinned by its top row to pins turning at omega rad/s about the
    vertical axis through the row's middle (a cape on a turning character),
    with no air drag: after 6 s every free vertex turns with them, its
    velocity within 2 % of omega x r (r from the axis) plus the sheet's
    outward flare at that speed, measured by the angular velocity about
    the axis: settling damps motion relative to the pins' rigid motion."""
    rest, fi, fs = oracles.grid_sheet(nx, nx)
    held = held_vertices(rest, "one_edge")
    params = ClothParams(**{**ADDON, "air_drag": 0.0})
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(float), params)
    state = model.new_state()
    dt, axis = 1 / 24, np.array([0.5, 0.0])
    arm = rest[held][:, :2] - axis
    for f in range(1, 6 * 24 + 1):
        a = omega * f * dt
        c, s = np.cos(a), np.sin(a)
        targets = rest.astype(np.float64).copy()
        targets[held, 0] = axis[0] + c * arm[:, 0] - s * arm[:, 1]
        targets[held, 1] = axis[1] + s * arm[:, 0] + c * arm[:, 1]
        step(model, state, StepInputs(pin_targets=targets), dt, params)
    x, v = state.positions.T.astype(np.float64), state.velocities.T.astype(np.float64)
    free = ~held
    r = x[free, :2] - axis
    r2 = (r * r).sum(axis=1)
    far = r2 > 0.1 ** 2
    turn = (r[:, 0] * v[free, 1] - r[:, 1] * v[free, 0])[far] / r2[far]
    assert np.abs(turn / omega - 1).max() < 0.02, turn / omega


@pytest.mark.parametrize("layout", ["scattered", "row", "one"])
def test_pins_rigid_motion_recovers_a_rigid_motion(layout):
    """Pins moved by a known rigid motion over a step (velocity b, angular
    velocity w about their centre): the fit returns b, and w where the pins
    can see it (all of it for pins off one line; for a row, w without its
    part along the row; none for one pin), to 1e-3 of the motion."""
    from drape.solver.integrate import _pins_rigid_motion
    rng = np.random.default_rng(3)
    pts = {"scattered": rng.uniform(-0.5, 0.5, (12, 3)),
           "row": np.stack([np.linspace(-0.5, 0.5, 9), np.zeros(9), np.zeros(9)], axis=1),
           "one": np.zeros((1, 3))}[layout] + np.array([1.0, 2.0, 3.0])
    b, w, dt = np.array([0.3, -1.2, 0.5]), np.array([0.7, -0.4, 1.1]), 1 / 24
    c = pts.mean(axis=0)
    angle = np.linalg.norm(w) * dt
    axis = w / np.linalg.norm(w)
    r = pts - c
    # Rodrigues: the pins turned by w dt about their centre, then moved b dt
    # (the fit sees the turn's chord: w to within |w| dt / 2).
    turned = (r * np.cos(angle) + np.cross(axis, r) * np.sin(angle)
              + np.outer(r @ axis, axis) * (1 - np.cos(angle)))
    end = c + b * dt + turned
    n = len(pts)
    pin_start = np.ascontiguousarray(pts.T, dtype=np.float32)
    pin_end = np.ascontiguousarray(end.T, dtype=np.float32)
    got = np.array(_pins_rigid_motion(np.arange(n, dtype=np.uint32), pin_start, pin_end, dt), dtype=np.float64)
    gb, gw, gc = got[:3], got[3:6], got[6:]
    assert np.allclose(gc, c + b * dt, atol=1e-5)
    assert np.allclose(gb, b, atol=1e-3 * np.linalg.norm(b)), gb
    seen = {"scattered": w, "row": w - w[0] * np.array([1.0, 0, 0]), "one": np.zeros(3)}[layout]
    assert np.allclose(gw, seen, atol=np.linalg.norm(w) ** 2 * dt), (gw, seen)


@pytest.mark.parametrize("dt", [1 / 60, 1 / 24, 1 / 4])
def test_settling_decays_as_its_rate_says(dt):
    """One call on velocities of every size about held pins (no motion):
    each relative velocity keeps its direction and is scaled by
    exp(-k vs / (vs + |v|) dt) (to 1e-3 where k dt <= 1/2), never grows, and
    shrinks more for a larger k, up to any k."""
    from drape.solver.integrate import settle_velocities
    rng = np.random.default_rng(5)
    n = 400
    v0 = (rng.normal(size=(3, n)) * np.logspace(-4, 1, n)).astype(np.float32)
    pos = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    inv_mass = np.ones(n, np.float32)
    inv_mass[:3] = 0
    kin = np.arange(3, dtype=np.uint32)
    vs, last = 0.1, np.linalg.norm(v0, axis=0)
    for k in (1.0, 10.0, 12.0, 100.0, 1e4, 1e8):
        v = v0.copy()
        settle_velocities(pos, v, inv_mass, kin, pos, pos, np.float32(dt), np.float32(k), np.float32(vs),
                          np.zeros((3, 0), np.uint32), np.float32(0.0))
        speed, speed0 = np.linalg.norm(v, axis=0), np.linalg.norm(v0, axis=0)
        assert np.all(np.isfinite(v)) and np.array_equal(v[:, :3], v0[:, :3])
        ratio = speed[3:] / speed0[3:]
        assert np.allclose(v[:, 3:] / speed[3:], v0[:, 3:] / speed0[3:], atol=1e-4)
        assert np.all(ratio <= 1) and np.all(speed[3:] <= last[3:] * (1 + 1e-6))
        if k * dt <= 0.5:
            exact = np.exp(-k * vs / (vs + speed0[3:]) * dt)
            assert np.allclose(ratio, exact, rtol=1e-3), np.abs(ratio / exact - 1).max()
        last = speed


def _air_sheet(nx, rng):
    """A flat, irregular triangle sheet in the xy plane (inner vertices moved
    within a third of an edge), random masses, and three extra vertices in
    no triangle: (pos (3, n), inv_mass, tris (3, t) uint32, the extras)."""
    rest, fi, _ = oracles.grid_sheet(nx, nx, plane="xy")
    inner = (rest[:, 0] > 0) & (rest[:, 0] < 1) & (rest[:, 1] > 0) & (rest[:, 1] < 1)
    rest = rest.copy()
    rest[np.ix_(inner, [0, 1])] += rng.uniform(-0.3 / nx, 0.3 / nx, (int(inner.sum()), 2))
    q = fi.reshape(-1, 4)
    tris = np.concatenate([q[:, [0, 1, 2]], q[:, [0, 2, 3]]])
    extra = np.array([[2.0, 0.0, 0.0], [2.0, 1.0, 0.0], [3.0, 0.0, 0.5]])
    pos = np.ascontiguousarray(np.concatenate([rest, extra]).T, dtype=np.float32)
    n = pos.shape[1]
    inv_mass = (1.0 / rng.uniform(1e-4, 4e-4, n)).astype(np.float32)
    return pos, inv_mass, np.ascontiguousarray(tris.T, dtype=np.uint32), np.arange(n - 3, n, dtype=np.uint32)


def test_air_resistance_is_quadratic_drag_across_the_cloth():
    """One call of the step-end damping with only air resistance (c = 0.5
    rho C_d), a flat irregular sheet of random masses moving as one at u,
    held still by pins apart from it: each vertex's velocity across the
    sheet drops by c A_i / m_i u_n^2 dt to first order (A_i a third of its
    triangles' areas, computed here in float64), its velocity along the
    sheet is untouched; at any dt the velocity across shrinks and never
    reverses; and with no pins a sheet moving as one (its centre of mass's
    motion) is not slowed at all."""
    from drape.solver.integrate import settle_velocities
    rng = np.random.default_rng(3)
    pos, inv_mass, tris, extra = _air_sheet(12, rng)
    n = pos.shape[1]
    u = np.array([0.3, -0.2, 2.0])
    p64 = pos.T.astype(np.float64)
    t = tris.T.astype(np.int64)
    area = 0.5 * np.linalg.norm(np.cross(p64[t[:, 1]] - p64[t[:, 0]], p64[t[:, 2]] - p64[t[:, 0]]), axis=1)
    a_i = np.bincount(t.ravel(), weights=np.repeat(area / 3, 3), minlength=n)
    held = inv_mass.copy()
    held[extra] = 0.0
    c = 0.5 * 1.2 * 1.0
    sheet = np.ones(n, bool)
    sheet[extra] = False
    for dt in (1e-5, 4e-5):
        v = np.repeat(u[:, None], n, axis=1).astype(np.float32)
        v[:, extra] = 0.0
        settle_velocities(pos, v, held, extra, pos, pos, np.float32(dt), np.float32(0.0), np.float32(0.1), tris,
                          np.float32(c))
        drop = u[2] - v[2, sheet].astype(np.float64)
        expect = c * a_i[sheet] * held[sheet] * u[2] ** 2 * dt
        assert np.allclose(drop, expect, rtol=5e-3), np.abs(drop / expect - 1).max()
        assert np.array_equal(v[:2, sheet], np.repeat(u[:2, None], sheet.sum(), axis=1).astype(np.float32))
    for dt in (0.1, 10.0, 1e4):
        v = np.repeat(u[:, None], n, axis=1).astype(np.float32)
        settle_velocities(pos, v, held, extra, pos, pos, np.float32(dt), np.float32(0.0), np.float32(0.1), tris,
                          np.float32(c))
        assert np.all(v[2, sheet] >= -1e-6 * u[2]) and np.all(v[2, sheet] < u[2]), v[2, sheet].min()
    v = np.repeat(u[:, None], n, axis=1).astype(np.float32)
    settle_velocities(pos, v, inv_mass, np.zeros(0, np.uint32), pos, pos, np.float32(1 / 24), np.float32(0.0),
                      np.float32(0.1), tris, np.float32(c))
    assert np.allclose(v, u[:, None], rtol=1e-5, atol=0), np.abs(v - u[:, None]).max()
    # One triangle of equal masses held by a pin apart: its corners' speed
    # across it goes to u_n / (1 + x), x = k u_n dt with k = c A sum(w) / 9
    # (the implicit step), here chosen as x = 1.
    one = np.ascontiguousarray(np.array([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0], [0.0, 0.2, 0.0], [5.0, 5.0, 0.0]]).T,
                               dtype=np.float32)
    w1 = np.array([2e3, 2e3, 2e3, 0.0], np.float32)
    tri1 = np.array([[0], [1], [2]], np.uint32)
    dt1 = 9.0 / (c * 0.03 * 6e3 * u[2])
    v = np.repeat(u[:, None], 4, axis=1).astype(np.float32)
    v[:, 3] = 0.0
    settle_velocities(one, v, w1, np.array([3], np.uint32), one, one, np.float32(dt1), np.float32(0.0),
                      np.float32(0.1), tri1, np.float32(c))
    assert np.allclose(v[2, :3], u[2] / 2, rtol=1e-5), v[2, :3]


@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("tethers", [True, False])
@pytest.mark.parametrize("limits", [True, False])
@pytest.mark.parametrize("hierarchy", [None, True, False])
def test_which_long_range_stretch_solves_run(pinned, tethers, limits, hierarchy):
    """The step's config runs the multilevel stretch and the stretch limits
    as ClothParams asks: forced on or off by stretch_hierarchy, and when it
    is None (the default), in place of the limits exactly on pinned cloth
    with the tethers off and the limits on."""
    import importlib
    step_module = importlib.import_module("drape.solver.step")
    rest, fi, fs = oracles.grid_sheet(16, 16)   # large enough for coarse levels
    held = held_vertices(rest, "one_edge") if pinned else np.zeros(len(rest), bool)
    params = ClothParams(substeps=1, tethers=tethers, stretch_limits=limits, stretch_hierarchy=hierarchy)
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(float), params)
    step(model, model.new_state(), None, 1 / 24, params)
    c = step_module._CACHES[model].config[0]
    if hierarchy is not None:
        want = (hierarchy, limits)
    elif pinned and limits and not tethers:
        want = (True, False)
    else:
        want = (False, limits)
    assert (bool(c["use_hierarchy"]), bool(c["use_limits"])) == want
