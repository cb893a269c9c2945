"""Mesh colliders (solver/colliders/mesh.py).

Every scene is judged apart from the solver (tests/mesh_scenes.py): the
depth of a cloth point inside a closed collider is its exact distance to
the nearest triangle (tests/oracles.py's point-triangle distance) where its
winding number about the mesh is one, else 0. The solver
keeps vertices the collider's thickness plus the cloth's collision margin
outside the surface; a vertex may end at most that distance inside (two overlapping parts of one collider, a table's leg
meeting its top, hold a vertex between their faces) and must not pass
through: sheets dropped on a sphere, a box and a table, a sheet on a
deforming cylinder, colliders driven through a sheet at up to 10 m/s.
"""

import numpy as np
import pytest

import mesh_scenes as ms
import oracles
from drape.solver import ClothParams, MeshCollider, SolverError, StepInputs, build_model, step, vertex_masses
from drape.solver.colliders import mesh as mesh_mod
from drape.solver.colliders.mesh import pack_meshes

DT = 1.0 / 60.0
TH = 0.01
# The distance the solver keeps: the collider's thickness plus the cloth's
# own collision margin, as for capsules and planes.
MARGIN = ClothParams().collision_margin
KEEP = TH + MARGIN


def sheet(nq, size, z, centre=(0.0, 0.0)):
    """A horizontal size x size sheet of nq x nq quads at height z."""
    rest, fi, fs = oracles.grid_sheet(nq, nq, size, plane="xy")
    rest = rest - (size / 2 - centre[0], size / 2 - centre[1], -z)
    return rest, fi, fs


def cloth(rest, fi, fs, params, pin=None):
    """(model, state) of a cloth of density 0.2, free unless pinned."""
    pin = np.zeros(len(rest)) if pin is None else pin
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
    return model, model.new_state()


def simulate(rest, fi, fs, colliders_at, frames, substeps=2, pin=None, params=None, every=None):
    """Step a cloth `frames` times; colliders_at(frame) -> list of
    MeshCollider for that step. Returns the final positions and, with
    every=k, the positions of every k-th frame (simulate.triangles: the
    cloth's triangles)."""
    params = params or ClothParams(substeps=substeps)
    model, state = cloth(rest, fi, fs, params, pin)
    simulate.triangles = model.triangles
    seen = []
    for f in range(frames):
        step(model, state, StepInputs(meshes=colliders_at(f)), DT, params)
        if every and f % every == every - 1:
            seen.append(state.positions_aos().copy())
    return state.positions_aos(), seen


def edge_points(x, triangles, samples=9):
    """Points along every triangle edge of positions x (ends included)."""
    t = np.asarray(triangles)
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    f = np.linspace(0.0, 1.0, samples)[None, :, None]
    return (x[e[:, 0]][:, None] * (1 - f) + x[e[:, 1]][:, None] * f).reshape(-1, 3)


def static(verts, tris, **kw):
    c = MeshCollider(verts0=verts, tris=tris, thickness=kw.pop("thickness", TH), **kw)
    return lambda f: [c]


SCENES = {
    "sphere": (lambda: ms.uv_sphere(0.4, (0.0, 0.0, 0.4)), 1.2),
    "box": (lambda: ms.box((-0.3, -0.3, 0.0), (0.3, 0.3, 0.5), 3), 1.2),
    "table": (lambda: ms.table(), 1.6),
}


def test_the_inside_oracle_against_the_sphere_it_faces():
    # Points on rays through the UV sphere's vertices and edge midpoints
    # (where a crossing-parity test meets shared edges), at radii inside the
    # inscribed faceting and outside the sphere: inside exactly where the
    # analytic sphere says, and the depth close to the analytic one.
    verts, tris = ms.uv_sphere(0.4, (0.0, 0.0, 0.4))
    v = verts.astype(np.float64) - (0.0, 0.0, 0.4)
    mids = (v[tris[:, 0]] + v[tris[:, 1]]) / 2
    dirs = np.concatenate([v, mids])
    dirs /= np.linalg.norm(dirs, axis=1)[:, None]
    radii = np.array([0.05, 0.2, 0.37, 0.41, 0.43, 0.6])
    pts = (dirs[:, None, :] * radii[None, :, None]).reshape(-1, 3) + (0.0, 0.0, 0.4)
    want = np.tile(radii < 0.4, len(dirs))
    np.testing.assert_array_equal(ms.inside(pts, verts, tris), want)
    depth = ms.penetration(pts, verts, tris)
    analytic = np.maximum(0.4 - np.linalg.norm(pts - (0.0, 0.0, 0.4), axis=1), 0.0)
    # The faceting sits at most r (1 - cos(pi / 16)) inside the sphere.
    assert np.abs(depth - analytic).max() <= 0.4 * (1 - np.cos(np.pi / 16)) + 1e-9


@pytest.mark.parametrize("hierarchy", [False, True], ids=["limits", "hierarchy"])
@pytest.mark.parametrize("substeps", [1, 3])
@pytest.mark.parametrize("scene", sorted(SCENES))
def test_dropped_sheet_rests_on_closed_mesh(scene, substeps, hierarchy):
    make, size = SCENES[scene]
    verts, tris = make()
    top = float(verts[:, 2].max())
    rest, fi, fs = sheet(24, size, top + 0.05)
    params = ClothParams(substeps=substeps, stretch_hierarchy=hierarchy)
    x, seen = simulate(rest, fi, fs, static(verts, tris), 75, substeps, params=params, every=15)
    for frame in seen + [x]:
        assert np.isfinite(frame).all()
        assert ms.penetration(frame, verts, tris).max() <= KEEP + 1e-4
    # Nor do the edges between the vertices cut deep into it (the box's and
    # the table's edges; ClothParams.edge_contacts): one pass over the edges
    # per iteration leaves an edge folded over a sharp corner up to one more
    # thickness inside.
    assert ms.penetration(edge_points(x, simulate.triangles), verts, tris).max() <= 2 * KEEP
    # Resting on it, not fallen through nor floating: the vertices over the
    # collider's top sit at the thickness from its surface (a little more
    # where an edge between them is held at it over a facet's edge, or the
    # hanging sides still rock the sheet).
    d = ms.unsigned_distance(x, verts, tris)
    over = (np.abs(rest[:, 0]) < 0.1) & (np.abs(rest[:, 1]) < 0.1)
    assert over.sum() > 4
    assert np.all((d[over] > KEEP - 0.002) & (d[over] < KEEP + 0.01)), d[over]
    assert d.min() >= KEEP * 0.5


def test_without_edge_contacts_edges_cut_the_box_edges():
    # The oracle sees what the edge pass prevents: a sheet draped over a box
    # cuts its edges between the vertices when only vertices collide (no
    # cloth margin: the kept distance is the collider's thickness).
    verts, tris = ms.box((-0.3, -0.3, 0.0), (0.3, 0.3, 0.5), 3)
    rest, fi, fs = sheet(24, 1.2, 0.55)
    params = ClothParams(substeps=1, edge_contacts=False, collision_margin=0.0)
    x, _ = simulate(rest, fi, fs, static(verts, tris), 75, 1, params=params)
    assert ms.penetration(x, verts, tris).max() <= TH + 1e-4
    assert ms.penetration(edge_points(x, simulate.triangles), verts, tris).max() > 2.5 * TH


def test_without_the_collider_the_sheet_falls_through():
    # The oracle sees the failure the collider prevents.
    verts, tris = ms.box((-0.3, -0.3, 0.0), (0.3, 0.3, 0.5), 3)
    rest, fi, fs = sheet(16, 1.2, 0.55)
    x, seen = simulate(rest, fi, fs, lambda f: [], 12, 2, every=1)
    assert max(ms.penetration(s, verts, tris).max() for s in seen) > 0.05


def bent_cylinder(t_bend):
    """A closed horizontal cylinder (radius 0.1, along x, 1.2 m) whose
    middle bends up by 0.15 m * t_bend (a parabola; the caps tilt with it)."""
    tube, tt = ms.cylinder(0.1, 1.2, rings=24, segments=20)
    # Along x, centred on the origin, at height 0.5.
    v = tube[:, [2, 0, 1]].astype(np.float64)
    v[:, 0] -= 0.6
    v[:, 2] += 0.5
    seg = 20
    v = np.concatenate([v, [v[:seg].mean(axis=0), v[24 * seg:].mean(axis=0)]])
    tris = [tuple(t) for t in tt]
    for k, (ring, flip) in enumerate(((0, True), (24, False))):
        c = len(tube) + k
        for s in range(seg):
            a, b = ring * seg + s, ring * seg + (s + 1) % seg
            tris.append((c, b, a) if flip else (c, a, b))
    tris = np.array(tris, np.int32)
    # Outward normals (check by the centroid's offset from the axis).
    cen = v[tris].mean(axis=1)
    nrm = np.cross(v[tris[:, 1]] - v[tris[:, 0]], v[tris[:, 2]] - v[tris[:, 0]])
    out = cen - np.stack([cen[:, 0], np.zeros(len(cen)), np.full(len(cen), 0.5)], axis=1)
    side = np.abs(cen[:, 0]) > 0.599
    out[side] = np.stack([np.sign(cen[side, 0]), np.zeros(side.sum()), np.zeros(side.sum())], axis=1)
    flip = np.einsum("ij,ij->i", nrm, out) < 0
    tris[flip] = tris[flip][:, ::-1]
    lift = 0.15 * t_bend * (1.0 - (v[:, 0] / 0.6) ** 2)
    v[:, 2] += lift
    return v.astype(np.float32), tris


def test_sheet_follows_a_deforming_cylinder():
    # The cylinder bends up under a sheet resting on it: the sheet rises
    # with its middle and never goes inside.
    frames, bend_frames = 90, 40
    rest, fi, fs = sheet(24, 0.8, 0.62)

    def at(f):
        s0 = min(max((f - 30) / bend_frames, 0.0), 1.0)
        s1 = min(max((f + 1 - 30) / bend_frames, 0.0), 1.0)
        v0, tris = bent_cylinder(s0)
        v1, _ = bent_cylinder(s1)
        return [MeshCollider(verts0=v0, verts1=v1, tris=tris, thickness=TH)]

    x, seen = simulate(rest, fi, fs, at, frames, 2, every=10)
    for k, frame in enumerate(seen):
        v, tris = bent_cylinder(min(max((10 * (k + 1) - 30) / bend_frames, 0.0), 1.0))
        assert ms.penetration(frame, v, tris).max() <= KEEP + 1e-4
    # The cylinder's top at the middle rose from 0.6 to 0.75: the sheet's
    # vertices over it rose with it and rest at the thickness.
    v, tris = bent_cylinder(1.0)
    mid = (np.abs(x[:, 0]) < 0.05) & (np.abs(x[:, 1]) < 0.05) & (x[:, 2] > 0.65)
    assert mid.sum() > 0
    assert np.all(x[mid, 2] > 0.73)
    assert np.all(np.abs(ms.unsigned_distance(x[mid], v, tris) - KEEP) < 0.003)


@pytest.mark.parametrize("speed", [1.0, 5.0, 10.0])
@pytest.mark.parametrize("substeps", [1, 2])
def test_fast_collider_does_not_tunnel(speed, substeps):
    # A box driven up through a sheet pinned at its four corners: each step
    # moves it speed / 60 (up to 4 times the thickness... and 17 cm), and no
    # cloth vertex may end up inside it nor below its top once it passed.
    base, tris = ms.box((-0.15, -0.15, 0.0), (0.15, 0.15, 0.2), 2)
    rest, fi, fs = sheet(20, 1.0, 0.5)
    pin = np.zeros(len(rest))
    corners = [0, 20, 21 * 20, 21 * 21 - 1]
    pin[corners] = 1.0
    rise = speed * DT

    def at(f):
        z0, z1 = min(f * rise, 0.6), min((f + 1) * rise, 0.6)
        return [MeshCollider(verts0=base + (0, 0, z0), verts1=base + (0, 0, z1), tris=tris, thickness=TH)]

    frames = int(np.ceil(0.6 / rise)) + 5
    params = ClothParams(substeps=substeps)
    model, state = cloth(rest, fi, fs, params, pin)
    for f in range(frames):
        step(model, state, StepInputs(meshes=at(f)), DT, params)
        x = state.positions_aos()
        z1 = min((f + 1) * rise, 0.6)
        assert ms.penetration(x, base + (0, 0, z1), tris).max() <= KEEP + 1e-4, f
    over = (np.abs(x[:, 0]) < 0.1) & (np.abs(x[:, 1]) < 0.1)
    assert over.sum() > 0
    assert np.all(x[over, 2] >= 0.8 - 1e-3)


@pytest.mark.parametrize("speed", [4.0, 12.0])
@pytest.mark.parametrize("substeps", [1, 2])
def test_a_sheet_thrown_at_a_box_from_afar_does_not_pass_it(speed, substeps):
    # The sheet starts 1.2 m over the box, outside the reach a step's grid
    # keeps (mesh.cull_triangles: the cloth's box and its travel), and is
    # thrown down at it: the box's triangles must be binned by the step in
    # which the sheet arrives.
    verts, tris = ms.box((-0.3, -0.3, 0.0), (0.3, 0.3, 0.4), 3)
    rest, fi, fs = sheet(16, 0.8, 1.6)
    params = ClothParams(substeps=substeps)
    model, state = cloth(rest, fi, fs, params)
    state.velocities[2, :] = -speed
    lowest = []
    for f in range(int(1.6 / speed * 60) + 20):
        step(model, state, StepInputs(meshes=static(verts, tris)(f)), DT, params)
        x = state.positions_aos()
        assert ms.penetration(x, verts, tris).max() <= KEEP + 1e-4, f
        lowest.append(float(x[:, 2].min()))
    over = (np.abs(rest[:, 0]) < 0.2) & (np.abs(rest[:, 1]) < 0.2)
    assert np.all(x[over, 2] > 0.4)        # on the box, not through it
    assert min(lowest) < 0.4               # and the sides did fall past its top


def test_culling_changes_no_push():
    # A small sheet over one end of a long bar of many triangles: the step
    # bins only the triangles near the sheet, and the vertex pass then
    # pushes exactly as with every triangle binned.
    verts, tris = ms.box((-0.1, -0.1, 0.0), (6.0, 0.1, 0.2), 24)
    rest, fi, fs = sheet(10, 0.3, 0.215)
    params = ClothParams(substeps=1)
    model, state = cloth(rest, fi, fs, params)
    # Pushed into the bar's top from over it, and moving, as within a step.
    rng = np.random.default_rng(3)
    model.prev[:] = state.positions
    state.positions[2] -= rng.uniform(0.0, 0.02, model.n).astype(np.float32)
    state.velocities[:] = rng.normal(0.0, 0.5, state.velocities.shape).astype(np.float32)
    collider = [MeshCollider(verts0=verts, tris=tris, thickness=TH)]
    out = []
    for cull in (True, False):
        args = mesh_mod.mesh_step_args(model, collider, DT, 0.0, MARGIN, *(
            (state.positions, state.velocities) if cull else (None, None)))
        if cull:
            assert 0 < args[13].shape[0] < len(tris) // 3
        v0, v1, tr, tp, grid, start, items, tcell, tri1, tbox, inv_dt, near, nbr, sel, once, found, vs = args
        mesh_mod.mesh_substep_rows(v0, v1, tr, tp, np.float32(0.0), np.float32(1.0), inv_dt, np.float32(0.0),
                                   nbr, tri1, tbox, sel, once, vs)
        pos = state.positions.copy()
        contact = np.zeros((7, model.n), np.float32)
        clist = np.zeros(model.n, np.uint32)
        count = mesh_mod.project_meshes(pos, model.prev, model.inv_mass, model.collider_offset, tp, tri1, tbox,
                                        grid, start, items, tcell, near, contact, clist, np.int64(0), found)
        out.append((pos, contact, int(count)))
    assert out[0][2] > 10
    assert out[0][2] == out[1][2]
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_the_grid_reaches_where_the_pins_go():
    # A sheet pinned along one edge, 2 m from a box, its pins animated onto
    # the box's side within the step: the step must bin the box's triangles
    # (the velocities, still zero, do not say the cloth is coming).
    verts, tris = ms.box((1.8, -0.3, 0.0), (2.4, 0.3, 0.6), 2)
    rest, fi, fs = sheet(8, 0.4, 1.0)
    pin = (rest[:, 1] > 0.19).astype(np.float64)
    params = ClothParams(substeps=1)
    model, state = cloth(rest, fi, fs, params, pin)
    ends = (rest + np.float32([1.6, 0.0, -0.5])).T.astype(np.float32).copy()
    collider = [MeshCollider(verts0=verts, verts1=verts + np.float32([0.0, 0.0, 0.001]), tris=tris, thickness=TH)]
    quiet = mesh_mod.mesh_step_args(model, collider, DT, 0.0, MARGIN, state.positions, state.velocities)
    assert quiet[13].shape[0] == 0
    pulled = mesh_mod.mesh_step_args(model, collider, DT, 0.0, MARGIN, state.positions, state.velocities, ends)
    assert pulled[13].shape[0] > 0


def test_a_still_collider_keeps_its_grid_until_it_or_the_cloth_moves():
    # A sheet settles on a still box: the step keeps the box's grid and its
    # triangles' rows (mesh_step_args) instead of making them every step.
    # Then the box rises 5 cm in one step and is still again: the sheet must
    # be pushed up with it and stay on it, not be left inside (the grid of
    # the box where it was must not be kept).
    verts, tris = ms.box((-0.3, -0.3, 0.0), (0.3, 0.3, 0.4), 3)
    rest, fi, fs = sheet(16, 1.0, 0.45)
    params = ClothParams(substeps=2)
    model, state = cloth(rest, fi, fs, params)
    for f in range(60):
        step(model, state, StepInputs(meshes=static(verts, tris)(f)), DT, params)
    builds = mesh_mod._SCRATCH[model].builds
    assert builds < 20
    lifted = verts + np.float32([0.0, 0.0, 0.05])
    rise = [MeshCollider(verts0=verts, verts1=lifted, tris=tris, thickness=TH)]
    for f in range(4):
        step(model, state, StepInputs(meshes=rise if f == 0 else static(lifted, tris)(f)), DT, params)
        x = state.positions_aos()
        assert ms.penetration(x, lifted, tris).max() <= KEEP + 1e-4, f
    assert mesh_mod._SCRATCH[model].builds > builds
    over = (np.abs(rest[:, 0]) < 0.2) & (np.abs(rest[:, 1]) < 0.2)
    assert np.all(x[over, 2] > 0.45)
    # The still box put 3 m away from one step to the next: the sheet falls
    # where it was (a grid or rows kept from the box's old place would hold
    # it up).
    away = lifted + np.float32([3.0, 0.0, 0.0])
    for f in range(40):
        step(model, state, StepInputs(meshes=static(away, tris)(f)), DT, params)
    assert np.all(state.positions_aos()[over, 2] < 0.3)


def plane_mesh(z, size=2.0, n=4, flip=False):
    v, t, _ = oracles.grid_sheet(n, n, size, plane="xy")
    v = v - (size / 2, size / 2, -z)
    t = t.reshape(-1, 4)
    tris = np.concatenate([t[:, [0, 1, 2]], t[:, [0, 2, 3]]]).astype(np.int32)
    a, b, c = v[tris[:, 0]], v[tris[:, 1]], v[tris[:, 2]]
    up = np.cross(b - a, c - a)[:, 2] > 0
    tris[up == flip] = tris[up == flip][:, ::-1]
    return v.astype(np.float32), tris


@pytest.mark.parametrize("substeps", [1, 2])
def test_open_plane_collides_on_its_normal_side(substeps):
    rest, fi, fs = sheet(12, 0.6, 0.6)
    up, tris = plane_mesh(0.5)
    x, _ = simulate(rest, fi, fs, static(up, tris), 60, substeps)
    assert np.allclose(x[:, 2], 0.5 + KEEP, atol=1e-3)
    # Normal facing down: the sheet above is behind it and falls through.
    down, tris_d = plane_mesh(0.5, flip=True)
    x, _ = simulate(rest, fi, fs, static(down, tris_d), 60, substeps)
    assert x[:, 2].max() < 0.3
    # Two-sided: it stops the sheet from either side.
    x, _ = simulate(rest, fi, fs, static(down, tris_d, two_sided=True), 60, substeps)
    assert np.allclose(x[:, 2], 0.5 + KEEP, atol=1e-3)
    below, _, _ = sheet(12, 0.6, 0.3)
    params = ClothParams(substeps=substeps, gravity=(0.0, 0.0, 9.81))
    x, _ = simulate(below, fi, fs, static(up, tris, two_sided=True), 60, substeps, params=params)
    assert np.allclose(x[:, 2], 0.5 - KEEP, atol=1e-3)


@pytest.mark.parametrize("thickness", [0.0, 0.01])
@pytest.mark.parametrize("margin", [0.0, 0.005, 0.02])
def test_kept_distance_is_collider_thickness_plus_cloth_margin(thickness, margin):
    # A sheet resting on a flat mesh floor sits at the collider's outer
    # thickness plus the cloth's collision margin above it, as it sits on a
    # plane collider at the margin.
    rest, fi, fs = sheet(8, 0.5, 0.56)
    up, tris = plane_mesh(0.5)
    params = ClothParams(substeps=2, collision_margin=margin)
    x, _ = simulate(rest, fi, fs, static(up, tris, thickness=thickness), 50, params=params)
    assert np.allclose(x[:, 2], 0.5 + thickness + margin, atol=1e-3), x[:, 2].min()


@pytest.mark.parametrize("friction, slides", [(0.0, True), (1.0, False)])
def test_friction_factor(friction, slides):
    # A sheet on a 15 degree slope (tan 15 = 0.27 < static friction 0.5):
    # it holds with the cloth's friction and slides with none.
    v, tris = plane_mesh(0.0, size=3.0)
    a = np.radians(15.0)
    rot = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    v = (v @ rot.T).astype(np.float32)
    rest, fi, fs = sheet(10, 0.4, 0.0)
    rest = rest @ rot.T + rot[:, 2] * (KEEP + 0.001)
    x, _ = simulate(rest, fi, fs, static(v, tris, friction=friction), 60, 2)
    moved = np.linalg.norm(x - rest, axis=1).mean()
    assert (moved > 0.1) if slides else (moved < 0.01)


def test_bad_input_names_the_collider_and_field():
    v, t = ms.box((0, 0, 0), (1, 1, 1))
    cases = [
        (dict(verts0=np.full((8, 3), np.nan, np.float32), tris=t), "verts0 contains NaN"),
        (dict(verts0=v, verts1=v[:4], tris=t), "verts1 must have the shape"),
        (dict(verts0=v, tris=t + 100), "tris index vertices outside"),
        (dict(verts0=v, tris=t[:, :2]), "tris must be a (t, 3) integer array"),
        (dict(verts0=v, tris=t, thickness=-1.0), "thickness must be finite and >= 0"),
        (dict(verts0=v, tris=t, friction=float("nan")), "friction must be finite"),
    ]
    rest, fi, fs = sheet(4, 0.5, 2.0)
    params = ClothParams()
    model, state = cloth(rest, fi, fs, params)
    before = state.positions.copy()
    for kw, message in cases:
        with pytest.raises(SolverError, match=r"'Chair'.*" + message.replace("(", r"\(").replace(")", r"\)")):
            step(model, state, StepInputs(meshes=[MeshCollider(name="'Chair'", **kw)]), DT, params)
        assert np.array_equal(state.positions, before)


def test_no_faces_and_degenerate_triangles():
    # No triangles: no collider (the sheet falls freely). Degenerate ones
    # (repeated or collinear vertices) are skipped, the rest collide.
    assert pack_meshes([MeshCollider(verts0=np.zeros((0, 3)), tris=np.zeros((0, 3), np.int32))]) is None
    v, t = plane_mesh(0.5)
    extra = np.array([[0.0, 0.0, 0.5], [0.1, 0.0, 0.5], [0.2, 0.0, 0.5]], np.float32)
    v2 = np.concatenate([v, extra])
    n = len(v)
    bad = np.array([[n, n + 1, n + 2], [0, 0, 1], [n, n, n]], np.int32)
    rest, fi, fs = sheet(8, 0.5, 0.6)
    x, _ = simulate(rest, fi, fs, static(v2, np.concatenate([t, bad])), 40, 2)
    assert np.isfinite(x).all()
    assert np.allclose(x[:, 2], 0.5 + KEEP, atol=1e-3)


def test_a_million_triangle_collider_works():
    v, t = plane_mesh(0.5, size=2.0, n=708)
    assert len(t) > 1_000_000
    rest, fi, fs = sheet(8, 0.5, 0.52)
    x, _ = simulate(rest, fi, fs, static(v, t), 6, 2)
    assert np.isfinite(x).all()
    assert x[:, 2].min() >= 0.5 + KEEP - 1e-3


def test_non_manifold_and_self_intersecting_colliders():
    # A floor with a fin standing on its middle edges (three triangles on
    # each) and a second, tilted floor crossing the first along x = 0: no
    # NaN, and the sheet stays above both.
    floor, ft = plane_mesh(0.5, size=2.0, n=2)
    fin = np.array([[-1.0, 0.0, 0.5], [1.0, 0.0, 0.5], [0.0, 0.0, 0.55]], np.float32)
    i = len(floor)
    tilted = floor.copy()
    tilted[:, 2] += 0.05 * tilted[:, 0]
    verts = np.concatenate([floor, fin[2:], tilted])
    # The fin's base is the floor's middle row edge (vertices 3-4-5 of a 3 x 3 grid).
    fin_tris = np.array([[3, 4, i], [4, 5, i]], np.int32)
    second = ft + i + 1
    tris = np.concatenate([ft, fin_tris, second])
    rest, fi, fs = sheet(10, 0.6, 0.7)
    x, _ = simulate(rest, fi, fs, static(verts, tris), 60, 2)
    assert np.isfinite(x).all()
    above = np.maximum(0.5, 0.5 + 0.05 * x[:, 0])
    assert np.all(x[:, 2] >= above + KEEP - 1.5e-3)
