"""Skinning a dense mesh onto a coarse one, checked against analytic surfaces
and exact geometry computed apart from the solver (here and in tests/oracles.py)."""

import numba
import numpy as np
import pytest

from drape.solver import skinning
from oracles import point_triangle_distance


def sheet(nx, ny, width=1.0, height=1.0, z=0.0):
    """A regular grid on [0, width] x [0, height] at height z, split into triangles."""
    u = np.linspace(0.0, width, nx + 1)
    v = np.linspace(0.0, height, ny + 1)
    X, Y = np.meshgrid(u, v, indexing="ij")
    positions = np.stack([X.ravel(), Y.ravel(), np.full(X.size, z)], axis=1)
    index = np.arange((nx + 1) * (ny + 1)).reshape(nx + 1, ny + 1)
    a, b = index[:-1, :-1].ravel(), index[1:, :-1].ravel()
    c, d = index[1:, 1:].ravel(), index[:-1, 1:].ravel()
    triangles = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return positions, triangles


def roll(points, radius):
    """Isometric roll of the plane z=0 around the axis y at height `radius`:
    the mid-surface becomes a cylinder, a point at height z above the sheet
    ends up at distance radius - z from the axis (thickness kept)."""
    theta = points[:, 0] / radius
    r = radius - points[:, 2]
    return np.stack([r * np.sin(theta), points[:, 1], radius - r * np.cos(theta)], axis=1)


def rigid(points, angle=0.7, axis=(1.0, 2.0, 0.5), shift=(0.3, -1.2, 2.0)):
    axis = np.asarray(axis) / np.linalg.norm(axis)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K
    return points @ R.T + np.asarray(shift)


# --- tests ------------------------------------------------------------------


def test_rest_pose_reproduced_on_a_curved_coarse_mesh_with_thickness():
    """Coarse and dense both already curved (a cylinder), dense offset by a
    random thickness: skinning the rest pose gives the dense mesh back."""
    rng = np.random.default_rng(1)
    coarse_flat, tris = sheet(12, 8, 2.0, 1.0)
    dense_flat, _ = sheet(61, 37, 2.0, 1.0)
    dense_flat[:, 2] = rng.uniform(-0.01, 0.02, len(dense_flat))
    coarse = roll(coarse_flat, 0.6)
    dense = roll(dense_flat, 0.6)
    binding = skinning.bind(coarse, tris, dense)
    out = skinning.skin(binding, coarse.astype(np.float32))
    size = np.ptp(dense, axis=0).max()
    assert out.dtype == np.float32 and out.shape == dense.shape
    assert np.abs(out - dense).max() < 1e-4 * size


def test_offsets_along_the_normal_carry_thickness():
    """A dense sheet hovering 1 cm over a flat coarse one: the offset along
    the normal is exactly that height and the barycentrics its position."""
    coarse, tris = sheet(4, 4)
    dense, _ = sheet(9, 9, z=0.01)
    binding = skinning.bind(coarse, tris, dense)
    np.testing.assert_allclose(binding.offset[0], 0.01, atol=1e-6)
    np.testing.assert_allclose(binding.offset[1:], 0.0, atol=1e-6)
    np.testing.assert_allclose(binding.bary.sum(axis=0), 1.0, atol=1e-6)


@pytest.mark.parametrize("thickness", [0.0, 0.01])
def test_phong_beats_flat_on_a_rolled_cylinder(thickness):
    """Roll a flat sheet into a cylinder (analytic): the dense surface rebuilt
    from the coarse one with Phong tessellation is much closer to the exact
    cylinder than flat barycentric interpolation is."""
    coarse_flat, tris = sheet(10, 4, 2.0, 1.0)
    dense_flat, _ = sheet(80, 20, 2.0, 1.0, z=thickness)
    radius = 0.5
    coarse = roll(coarse_flat, radius).astype(np.float32)
    exact = roll(dense_flat, radius)
    # A boundary vertex's normal only sees one side of the curve; away from
    # the two rolled edges the vertex normals are exact.
    interior = (dense_flat[:, 0] > 0.2) & (dense_flat[:, 0] < 1.8)

    errors, interior_errors = {}, {}
    for alpha in (0.0, 0.5, 0.75, 1.0):
        binding = skinning.bind(coarse_flat, tris, dense_flat, shape_factor=alpha)
        error = np.linalg.norm(skinning.skin(binding, coarse) - exact, axis=1)
        errors[alpha] = error.max()
        interior_errors[alpha] = error[interior].max()
    flat = errors[0.0]
    alpha = skinning.DEFAULT_SHAPE_FACTOR
    # One coarse edge spans 0.4 rad: the flat chord sags by R (1 - cos 0.2).
    np.testing.assert_allclose(flat, radius * (1 - np.cos(0.2)), rtol=0.02)
    assert errors[alpha] < 0.6 * flat, errors
    assert interior_errors[alpha] < 0.1 * interior_errors[0.0], interior_errors
    # Plain Phong (alpha = 1) overshoots about as much as flat undershoots;
    # the default is the better reconstruction.
    assert interior_errors[alpha] < 0.2 * interior_errors[1.0], interior_errors
    assert interior_errors[alpha] < interior_errors[0.75], interior_errors


def test_binding_stable_under_vertex_and_triangle_shuffles():
    rng = np.random.default_rng(7)
    coarse_flat, tris = sheet(9, 7, 1.5, 1.0)
    dense_flat, _ = sheet(40, 31, 1.5, 1.0, z=0.004)
    dense_flat[:, :2] += rng.normal(0, 0.003, (len(dense_flat), 2))
    deformed = roll(coarse_flat, 0.4).astype(np.float32)

    reference = skinning.skin(skinning.bind(coarse_flat, tris, dense_flat), deformed)

    coarse_perm = rng.permutation(len(coarse_flat))  # new index -> old index
    old_to_new = np.argsort(coarse_perm)
    tris_shuffled = old_to_new[tris][rng.permutation(len(tris))]
    tris_shuffled = np.roll(tris_shuffled, 1, axis=1)  # same winding, other first corner
    dense_perm = rng.permutation(len(dense_flat))
    binding = skinning.bind(coarse_flat[coarse_perm], tris_shuffled, dense_flat[dense_perm])
    out = skinning.skin(binding, deformed[coarse_perm])
    # Vertices over a shared edge may bind to either neighbour; both agree
    # to rounding and the small tangential offsets.
    size = np.ptp(dense_flat, axis=0).max()
    np.testing.assert_allclose(out, reference[dense_perm], atol=1e-4 * size)


def test_frill_outside_the_coarse_mesh_binds_and_moves_rigidly():
    """A frill sticking out past the coarse sheet's edge (and a few points far
    away) binds without NaN, reproduces the rest pose and follows a rigid
    motion of the coarse mesh exactly like a rigid body would."""
    coarse, tris = sheet(6, 6)
    dense, _ = sheet(30, 30)
    u = np.linspace(0, 1, 25)
    w = np.linspace(0.02, 0.3, 8)
    U, W = np.meshgrid(u, w, indexing="ij")
    frill = np.stack([1.0 + W.ravel() * 0.7, U.ravel(), W.ravel() * 0.7], axis=1)
    far = np.array([[5.0, 5.0, 5.0], [-3.0, 0.5, -2.0], [0.5, 0.5, 40.0]])
    dense = np.concatenate([dense, frill, far])
    binding = skinning.bind(coarse, tris, dense)
    assert np.all(np.isfinite(binding.bary)) and np.all(np.isfinite(binding.offset))
    assert np.all(binding.bary >= -1e-6)

    size = np.ptp(dense, axis=0).max()
    rest = skinning.skin(binding, coarse)
    assert np.abs(rest - dense).max() < 1e-4 * size

    moved = skinning.skin(binding, rigid(coarse).astype(np.float32))
    assert np.abs(moved - rigid(dense)).max() < 1e-4 * size

    rolled = skinning.skin(binding, roll(coarse, 0.3).astype(np.float32))
    assert np.all(np.isfinite(rolled))


def test_each_dense_vertex_binds_to_its_closest_triangle():
    """Grid search against brute force over every triangle (independent
    point-triangle distance), on a bumpy coarse mesh with points all around."""
    rng = np.random.default_rng(3)
    coarse, tris = sheet(12, 12)
    coarse[:, 2] = 0.15 * np.sin(4 * coarse[:, 0]) * np.cos(3 * coarse[:, 1])
    points = rng.uniform([-0.3, -0.3, -0.4], [1.3, 1.3, 0.4], (400, 3))
    binding = skinning.bind(coarse, tris, points, shape_factor=0.0)
    all_d = np.stack([point_triangle_distance(points, *coarse[t]) for t in tris], axis=1)
    chosen = all_d[np.arange(len(points)), binding.triangle]
    np.testing.assert_allclose(chosen, all_d.min(axis=1), atol=1e-9)


def assert_float32_close(a, b, ulps=8):
    """Two code paths of one float32 formula: equal to a few float32 roundings
    of the largest coordinate (which SIMD path runs, and so how a sum rounds,
    depends on the CPU numba compiles for)."""
    scale = max(1.0, float(np.abs(a).max(initial=0.0)), float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=0, atol=ulps * float(np.finfo(np.float32).eps) * scale)


def test_pinned_dense_vertices_take_their_targets_exactly():
    coarse, tris = sheet(5, 5)
    dense, _ = sheet(20, 20)
    pinned = dense[:, 1] > 0.95  # the collar row
    binding = skinning.bind(coarse, tris, dense, dense_pinned=pinned)
    free_binding = skinning.bind(coarse, tris, dense)

    deformed = roll(coarse, 0.5).astype(np.float32)
    targets = rigid(dense).astype(np.float32)  # somewhere else entirely
    out = skinning.skin(binding, deformed, pin_targets=targets)
    assert np.array_equal(out[pinned], targets[pinned])
    assert_float32_close(out[~pinned], skinning.skin(free_binding, deformed)[~pinned])

    with pytest.raises(ValueError, match="pin_targets"):
        skinning.skin(binding, deformed)


def test_soft_pin_weights_blend_between_skin_and_target():
    coarse, tris = sheet(3, 3)
    dense, _ = sheet(6, 6)
    weight = np.zeros(len(dense), np.float32)
    weight[:5] = 0.25
    binding = skinning.bind(coarse, tris, dense, dense_pinned=weight)
    targets = dense.astype(np.float32) + np.float32(1.0)
    out = skinning.skin(binding, coarse, pin_targets=targets)
    np.testing.assert_allclose(out[:5], dense[:5] + 0.25, atol=1e-6)
    np.testing.assert_allclose(out[5:], dense[5:], atol=1e-6)


def test_soa_and_aos_inputs_and_out_buffer_agree():
    coarse, tris = sheet(7, 5)
    dense, _ = sheet(21, 15, z=0.002)
    binding = skinning.bind(coarse, tris, dense)
    deformed = roll(coarse, 0.7).astype(np.float32)
    aos = skinning.skin(binding, deformed)
    out = np.zeros_like(aos)
    soa = skinning.skin(binding, np.ascontiguousarray(deformed.T), out=out)
    assert soa is out
    assert_float32_close(aos, soa)
    with pytest.raises(ValueError, match="coarse_positions"):
        skinning.skin(binding, deformed[:-1])


def test_bad_inputs_get_clear_errors():
    coarse, tris = sheet(2, 2)
    with pytest.raises(ValueError, match="triangulate"):
        skinning.bind(coarse, np.zeros((2, 4), int), coarse)
    with pytest.raises(ValueError, match="outside"):
        skinning.bind(coarse, tris + 100, coarse)
    with pytest.raises(ValueError, match="NaN"):
        skinning.bind(coarse, tris, np.full((3, 3), np.nan))
    empty = skinning.bind(coarse, tris, np.zeros((0, 3)))
    assert skinning.skin(empty, coarse).shape == (0, 3)


def test_vertex_normals_of_a_cylinder_point_away_from_the_axis():
    coarse_flat, tris = sheet(16, 3, 2.0, 1.0)
    radius = 0.5
    cyl = roll(coarse_flat, radius)
    normals = skinning.vertex_normals(cyl, tris)
    # Interior columns: the exact normal points from the point to the axis.
    interior = (coarse_flat[:, 0] > 0.01) & (coarse_flat[:, 0] < 1.99)
    axis_point = np.stack([np.zeros(len(cyl)), cyl[:, 1], np.full(len(cyl), radius)], 1)
    exact = axis_point - cyl
    exact /= np.linalg.norm(exact, axis=1, keepdims=True)
    np.testing.assert_allclose(normals[interior], exact[interior], atol=2e-3)


def test_triangulate_fans_quads_and_ngons():
    tris = skinning.triangulate([0, 1, 2, 3, 4, 5, 6, 7, 8], [4, 5])
    np.testing.assert_array_equal(
        tris, [[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7], [4, 7, 8]])
    with pytest.raises(ValueError):
        skinning.triangulate([0, 1, 2], [4])


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
@pytest.mark.parametrize("kind", [0, 1, 2])
def test_parallel_and_serial_skinning_agree(monkeypatch, kind):
    """Large dense meshes skin in parallel; the result must not change, with
    each of skin's three formulas (no offsets, along the normal, any). The
    dense meshes span two or three of the parallel pass's chunks, the last
    one short."""
    coarse, tris = sheet(10, 10)
    on_surface = sheet(70, 70)[0]
    above, _ = sheet(70, 70, z=0.003)
    frill = above[:50] + np.array([-0.2, 0.0, 0.1])
    dense = [on_surface, np.concatenate([on_surface, above]),
             np.concatenate([on_surface, above, frill])][kind]
    binding = skinning.bind(coarse, tris, dense)
    assert binding._scratch.kind == kind
    deformed = roll(coarse, 0.4).astype(np.float32)
    monkeypatch.setattr(skinning, "_PARALLEL_MIN_VERTICES", 10**9)
    serial = skinning.skin(binding, deformed)
    monkeypatch.setattr(skinning, "_PARALLEL_MIN_VERTICES", 1)
    old = numba.get_num_threads()
    numba.set_num_threads(2)  # skin() takes the parallel pass with 2 threads or more
    try:
        parallel = skinning.skin(binding, deformed)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_allclose(serial, parallel, atol=1e-6)
