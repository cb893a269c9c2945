"""Layers never pass: two tubes (layer 0 inside, layer 1 outside) pinned
around the top of a capsule leg that swings 90 degrees in 4 frames and back.

Judged apart from the solver: every frame each outer-tube vertex's signed
distance to the inner tube (numpy, below: over the inner triangles its
projection falls on, the nearest, positive on the tube's outer side) must
not go below minus one thickness, and at rest (the leg still) the exact
triangle-triangle oracle (tests/oracles.py) finds no crossing between the
tubes.
"""

import numpy as np
import pytest

from oracles import grid_sheet, intersecting_triangle_pairs

from drape.solver import Capsules, ClothParams, StepInputs, build_model, step, vertex_masses
from drape.solver.selfcollision import SelfCollision, merge_meshes

DT = 1.0 / 60.0
THICK = 0.006
HIP = np.array([0.0, 0.0, 0.6])
LEG = 0.5          # capsule length below the hip
LEG_RADIUS = 0.06
# Loose trouser legs: the tubes' gaps to the leg's surface at rest.
INNER_GAP = 0.025
OUTER_GAP = 0.04


def tube(around, along, radius, z0, z1):
    """An open cylinder about the z axis, quads wound so the faces point out."""
    a = np.linspace(0.0, 2 * np.pi, around, endpoint=False)
    z = np.linspace(z1, z0, along + 1)          # row 0 at the top
    rest = np.stack([np.tile(radius * np.cos(a), along + 1), np.tile(radius * np.sin(a), along + 1),
                     np.repeat(z, around)], axis=1)
    idx = np.arange((along + 1) * around).reshape(along + 1, around)
    nxt = np.roll(idx, -1, axis=1)
    # (top j, bottom j, bottom j+1, top j+1): counter-clockwise seen from outside.
    quads = np.stack([idx[:-1], idx[1:], nxt[1:], nxt[:-1]], axis=-1).reshape(-1, 4)
    return rest, quads.ravel(), np.full(len(quads), 4)


def rotation_x(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def leg_angle(f, swings):
    """0 -> 90 degrees in 4 frames, back in 4, `swings` times; then still."""
    if f >= 8 * swings:
        return 0.0
    k = f % 8
    return np.pi / 2 * (k / 4.0 if k <= 4 else (8 - k) / 4.0)


def pseudo_normals(x, tris, outward):
    """Per triangle its unit face normal (winding times `outward`), per
    triangle side (a-b, b-c, c-a) the sum of the face normals of the
    triangles on it, per vertex the angle-weighted sum of its triangles'
    normals (Baerentzen and Aanaes 2005: the side of the nearest feature by
    these is the side of the surface, creased or not)."""
    a, b, c = x[tris[:, 0]], x[tris[:, 1]], x[tris[:, 2]]
    n = np.cross(b - a, c - a)
    n = n / np.linalg.norm(n, axis=1)[:, None] * outward[:, None]
    side_n = np.repeat(n[:, None, :], 3, axis=1)
    sides = {}
    for t, tr in enumerate(tris):
        for j in range(3):
            sides.setdefault(tuple(sorted((tr[j], tr[(j + 1) % 3]))), []).append((t, j))
    for owners in sides.values():
        total = sum(n[t] for t, _ in owners)
        for t, j in owners:
            side_n[t, j] = total
    vert_n = np.zeros_like(x)
    for j in range(3):
        p, q, r = x[tris[:, j]], x[tris[:, (j + 1) % 3]], x[tris[:, (j + 2) % 3]]
        u, w = q - p, r - p
        ang = np.arccos(np.clip(np.einsum("tk,tk->t", u, w) / (np.linalg.norm(u, axis=1) * np.linalg.norm(w, axis=1)),
                                -1.0, 1.0))
        np.add.at(vert_n, tris[:, j], ang[:, None] * n)
    return n, side_n, vert_n


def signed_depths(points, x, tris, outward):
    """Per point, its signed distance to the nearest triangle of `tris`
    (rows of x): the distance to its closest point on them (the face, or one
    of its sides or corners), signed by that feature's pseudo-normal
    (pseudo_normals): positive on the outer side."""
    n, side_n, vert_n = pseudo_normals(x, tris, outward)
    a, b, c = x[tris[:, 0]], x[tris[:, 1]], x[tris[:, 2]]
    area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    p = points[:, None, :]
    h = np.einsum("ptk,tk->pt", p - a[None], n)
    q = p - h[..., None] * n[None]                                # on the plane
    s = outward / area2
    u = np.einsum("ptk,tk->pt", np.cross(c - b, q - b[None]), n) * s
    v = np.einsum("ptk,tk->pt", np.cross(a - c, q - c[None]), n) * s
    on = (u >= 0) & (v >= 0) & (1.0 - u - v >= 0)
    best = np.where(on, np.abs(h), np.inf)
    near = q
    sign_n = np.broadcast_to(n[None], q.shape).copy()
    for j, (e0, e1) in enumerate(((a, b), (b, c), (c, a))):
        d = e1 - e0
        t = np.clip(np.einsum("ptk,tk->pt", p - e0[None], d) / np.einsum("tk,tk->t", d, d), 0.0, 1.0)
        qe = e0[None] + t[..., None] * d[None]
        de = np.linalg.norm(p - qe, axis=2)
        closer = de < best
        best = np.where(closer, de, best)
        near = np.where(closer[..., None], qe, near)
        feat = np.where((t <= 0.0)[..., None], vert_n[tris[:, j]][None],
                        np.where((t >= 1.0)[..., None], vert_n[tris[:, (j + 1) % 3]][None], side_n[None, :, j]))
        sign_n = np.where(closer[..., None], feat, sign_n)
    k = np.argmin(best, axis=1)
    rows = np.arange(len(points))
    off = points - near[rows, k]
    return best[rows, k] * np.sign(np.einsum("pk,pk->p", off, sign_n[rows, k]))


def run_tubes(around, along, substeps, swings=3, rest_frames=40, layers=(0, 1), collide=True, count_every=0):
    inner = tube(around, along, LEG_RADIUS + INNER_GAP, HIP[2] - 0.4, HIP[2] - 0.02)
    # The outer one ends above the inner one's hem: every outer vertex lies over the inner tube.
    outer = tube(around, along, LEG_RADIUS + OUTER_GAP, HIP[2] - 0.37, HIP[2] - 0.02)
    m = merge_meshes([inner, outer])
    nin = int(m.vertex_offset[1])
    x0 = m.positions.astype(np.float64)
    pin = np.zeros(len(x0), np.float32)
    top = np.isclose(x0[:, 2], x0[:, 2].max())
    pin[top] = 1.0
    params = ClothParams(substeps=substeps, iterations=2)
    model = build_model(m.positions, m.face_indices, m.face_sizes, vertex_masses(m.positions, m.face_indices,
                        m.face_sizes, 0.2), pin, params, region=m.region)
    sc = SelfCollision.from_model(model, thickness=THICK, layers=list(layers))
    sc.recover = True
    model.self_collision = sc if collide else None
    model.set_collider_offset(np.where(np.arange(len(x0)) >= nin, THICK, 0.0))
    tri = model.triangles
    inner_tris = tri[np.all(tri < nin, axis=1)]
    # The winding's outward sign per inner triangle, from the rest shape.
    a, b, c = x0[inner_tris[:, 0]], x0[inner_tris[:, 1]], x0[inner_tris[:, 2]]
    radial = (a + b + c) / 3.0
    radial[:, 2] = 0.0
    outward = np.sign(np.einsum("tk,tk->t", np.cross(b - a, c - a), radial))
    assert np.all(outward > 0), "the tube's faces do not point out"

    def pose(f):
        r = rotation_x(leg_angle(f, swings))
        foot = HIP + r @ np.array([0.0, 0.0, -LEG])
        return r, foot

    def inputs_at(f):
        r0, foot0 = pose(f)
        r1, foot1 = pose(f + 1)
        caps = Capsules(a0=[HIP], b0=[foot0], a1=[HIP], b1=[foot1], radius_a=[LEG_RADIUS], radius_b=[LEG_RADIUS])
        targets = (x0 - HIP) @ r1.T + HIP
        return StepInputs(pin_targets=targets.astype(np.float32), capsules=caps)

    state = model.new_state()
    worst_depth = np.inf
    deep_frames = 0
    crossing_max = 0
    for f in range(8 * swings + rest_frames):
        step(model, state, inputs_at(f), DT, params)
        x = state.positions_aos().astype(np.float64)
        assert np.all(np.isfinite(x))
        depth = signed_depths(x[nin:], x, inner_tris, outward)
        low = depth.min()
        worst_depth = min(worst_depth, low)
        deep_frames += int(low < -THICK)
        if count_every and f % count_every == 0:
            crossing_max = max(crossing_max, between_tubes(x, tri, nin))
    between = between_tubes(state.positions_aos(), tri, nin)
    return worst_depth, deep_frames, between, crossing_max


def between_tubes(x, tri, nin):
    """Crossing triangle pairs with one triangle in each tube (exact oracle)."""
    pairs = intersecting_triangle_pairs(x, tri)
    inner = np.all(tri < nin, axis=1)
    return sum(1 for i, j in pairs if inner[i] != inner[j])


def test_signed_depths_oracle_on_known_points():
    inner = tube(16, 4, 0.1, 0.0, 0.4)
    x = inner[0].astype(np.float64)
    idx = np.asarray(inner[1]).reshape(-1, 4)
    tris = np.concatenate([idx[:, [0, 1, 2]], idx[:, [0, 2, 3]]])
    out = np.ones(len(tris))
    # Out from a corner (vertex at angle 0) 1 cm: the corner is nearest.
    # In from the middle of a face 2 cm: the face, at its normal's height.
    half = np.pi / 16
    mid = 0.1 * np.cos(half) * np.array([np.cos(half), np.sin(half)])
    inward = -np.array([np.cos(half), np.sin(half)])
    p = np.array([[0.11, 0.0, 0.2], [*(mid + 0.02 * inward), 0.2], [0.0, 0.0, 0.2]])
    d = signed_depths(p, x, tris, out)
    assert d[0] == pytest.approx(0.01, abs=1e-9)   # the distance to the corner, outside
    assert d[1] == pytest.approx(-0.02, abs=1e-9)
    # On the axis: every wall 0.1 cos(pi / 16) in.
    assert d[2] == pytest.approx(-0.1 * np.cos(half), abs=1e-9)
    # Flipping the normals flips the signs.
    assert np.allclose(signed_depths(p, x, tris, -out), -d)


def test_signed_depths_oracle_outside_a_sharp_crease():
    # A sharp ridge along x: two faces falling 20 degrees off the vertical
    # on either side (normals 140 degrees apart, both outward and up). A
    # point out beyond the ridge, in the wedge between the normals, is
    # nearest to the ridge and below the plane of one face: the sum of the
    # two face normals says outside, either face's alone may not.
    s, c = np.sin(np.radians(20.0)), np.cos(np.radians(20.0))
    x = np.array([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, -s, -c], [0.0, s, -c]])
    tris = np.array([[0, 2, 1], [0, 1, 3]])
    n = np.cross(x[tris[:, 1]] - x[tris[:, 0]], x[tris[:, 2]] - x[tris[:, 0]])
    out = np.where(n[:, 2] > 0, 1.0, -1.0)
    n1, n2 = np.array([0.0, c, s]), np.array([0.0, -c, s])
    p = np.array([0.01 * n1 + 0.05 * n2, [0.0, 0.0, -0.05]])
    assert np.dot(p[0], n1) < 0          # below one face's plane
    d = signed_depths(p, x, tris, out)
    assert d[0] == pytest.approx(np.linalg.norm(p[0]), abs=1e-9)
    assert d[1] < 0                       # under the ridge, inside



# Not yet held: where the leg reverses, it drives the inner tube through the
# outer one faster than the step's contacts (predicted from the velocities
# at step start) hold it (24x12 at 8 substeps: the outer tube up to ~36 mm
# inside on ~7 frames, ~71 crossing pairs between the tubes in the worst
# frame). The layer-order pass (SelfCollision.order_layers, layer_order.py)
# brings the depth to ~23 mm but not the frames, and doubles the worst
# frame's crossings, so it is off by default. At rest the tubes end apart.
@pytest.mark.xfail(reason="layers still pass where the swung leg reverses", strict=False)
@pytest.mark.parametrize("around,along,substeps", [(24, 12, 8), pytest.param(32, 16, 12, marks=pytest.mark.slow)])
def test_outer_tube_stays_outside_the_inner_over_a_swung_leg(around, along, substeps):
    worst_depth, deep_frames, between, _ = run_tubes(around, along, substeps)
    assert deep_frames == 0, f"outer tube {-worst_depth * 1e3:.1f} mm inside the inner one"
    assert between == 0


def two_layers(outer_z):
    """A 0.6 m inner sheet (layer 0) at z = 0 facing +z and a 0.4 m outer
    sheet (layer 1) at outer_z over its middle, as a SelfCollision with
    the layer pass on."""
    inner = grid_sheet(12, 12, 0.6, plane="xy")
    outer = grid_sheet(8, 8, 0.4, plane="xy")
    inner[0][:] -= [0.3, 0.3, 0.0]
    # Offset so no outer vertex sits exactly over an inner edge.
    outer[0][:] -= [0.2 - 0.011, 0.2 - 0.007, -outer_z]
    m = merge_meshes([inner, outer])
    params = ClothParams(substeps=8, iterations=2)
    model = build_model(m.positions, m.face_indices, m.face_sizes, vertex_masses(m.positions, m.face_indices,
                        m.face_sizes, 0.2), np.zeros(len(m.positions), np.float32), params, region=m.region)
    sc = SelfCollision.from_model(model, thickness=THICK, layers=[0, 1])
    sc.order_layers = True
    return sc, model, int(m.vertex_offset[1])


@pytest.mark.parametrize("behind", [0.5, 1.5, 2.5])
def test_layer_pass_brings_an_outer_layer_back_in_front(behind):
    # The outer sheet lies wholly behind the inner one (no triangle pair
    # crosses, so the intersection recovery has nothing to do): the layer
    # pass puts every outer vertex back in front of the inner sheet, and
    # moves the inner one (4x heavier) less.
    sc, model, nin = two_layers(-behind * THICK)
    x = model.new_state().positions.copy()
    before = x.copy()
    tri = model.triangles
    inner_tris = tri[np.all(tri < nin, axis=1)]
    up = np.ones(len(inner_tris))
    start = signed_depths(before.T[nin:].astype(np.float64), before.T.astype(np.float64), inner_tris, up)
    assert start.max() < 0, "the outer sheet does not start behind the inner one"
    pushes = sc.restore_layers(x, x0=before.copy(), known=np.ones(sc.n, np.uint8))
    assert pushes > 0
    assert np.all(np.isfinite(x))
    # Every outer vertex on the front of the inner sheet as it now lies.
    depth = signed_depths(x.T[nin:].astype(np.float64), x.T.astype(np.float64), inner_tris, up)
    assert depth.min() > 0, depth.min()
    moved_inner = np.abs(x[:, :nin] - before[:, :nin]).max()
    moved_outer = np.abs(x[:, nin:] - before[:, nin:]).max()
    assert moved_inner < moved_outer


def test_layer_pass_leaves_layers_in_order_alone():
    sc, model, nin = two_layers(1.5 * THICK)
    x = model.new_state().positions.copy()
    before = x.copy()
    assert sc.restore_layers(x, x0=before.copy(), known=np.ones(sc.n, np.uint8)) == 0
    assert np.array_equal(x, before)
