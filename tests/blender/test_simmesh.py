"""Automatic simulation mesh: Blender's Decimate to a vertex budget, hems and
weights kept. Boundaries are checked with Blender's own bmesh, geometry
against the analytic outline of the input."""

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
bmesh = pytest.importorskip("bmesh")

from drape.scene import simmesh  # noqa: E402


def quad_sheet(n, wave=0.0):
    u = np.linspace(0.0, 1.0, n + 1)
    X, Y = np.meshgrid(u, u, indexing="ij")
    pos = np.stack([X.ravel(), Y.ravel(), wave * np.sin(6 * X.ravel()) * Y.ravel()], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    quads = np.stack([idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(),
                      idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()], axis=1)
    return pos, quads.ravel(), np.full(len(quads), 4)


def skirt(rings, segments, r0=0.3, r1=1.0):
    """An annulus draped into a wavy skirt: two round hems (waist and hem)."""
    r = np.linspace(r0, r1, rings + 1)
    a = np.linspace(0.0, 2 * np.pi, segments, endpoint=False)
    R, A = np.meshgrid(r, a, indexing="ij")
    R, A = R.ravel(), A.ravel()
    pos = np.stack([R * np.cos(A), R * np.sin(A), -R + 0.1 * np.sin(8 * A) * (R - r0)], axis=1)
    idx = np.arange((rings + 1) * segments).reshape(rings + 1, segments)
    nxt = np.roll(idx, -1, axis=1)
    quads = np.stack([idx[:-1].ravel(), idx[1:].ravel(), nxt[1:].ravel(), nxt[:-1].ravel()], 1)
    return pos, quads.ravel(), np.full(len(quads), 4)


def blender_boundary(positions, face_indices, face_sizes):
    """Boundary vertices and loop count from Blender's own bmesh."""
    mesh = bpy.data.meshes.new("test_boundary")
    try:
        mesh.vertices.add(len(positions))
        mesh.vertices.foreach_set("co", np.asarray(positions, np.float32).ravel())
        mesh.loops.add(len(face_indices))
        mesh.loops.foreach_set("vertex_index", np.asarray(face_indices, np.int32))
        mesh.polygons.add(len(face_sizes))
        sizes = np.asarray(face_sizes, np.int64)
        mesh.polygons.foreach_set("loop_start", (np.cumsum(sizes) - sizes).astype(np.int32))
        mesh.update()
        bm = bmesh.new()
        bm.from_mesh(mesh)
        edges = np.array([[e.verts[0].index, e.verts[1].index] for e in bm.edges if e.is_boundary])
        bm.free()
    finally:
        bpy.data.meshes.remove(mesh)
    # Loops = connected components of the boundary edges (union-find).
    parent = {}

    def find(v):
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in edges:
        parent[find(a)] = find(b)
    vertices = np.unique(edges)
    return vertices, len({find(v) for v in vertices}), edges


def distance_to_polylines(points, positions, edges):
    a, b = positions[edges[:, 0]], positions[edges[:, 1]]
    ab = b - a
    t = np.clip(np.einsum("pij,ij->pi", points[:, None] - a[None], ab) / np.einsum("ij,ij->i", ab, ab), 0, 1)
    closest = a[None] + t[..., None] * ab[None]
    return np.linalg.norm(points[:, None] - closest, axis=2).min(axis=1)


def datablock_counts():
    return {k: len(getattr(bpy.data, k)) for k in ("meshes", "objects", "scenes", "collections")}


@pytest.mark.parametrize("shape,target", [("sheet", 1200), ("sheet", 300), ("skirt", 900)])
def test_budget_hems_and_weights(empty_scene, shape, target):
    pos, faces, sizes = quad_sheet(60, wave=0.05) if shape == "sheet" else skirt(24, 160)
    n = len(pos)
    # pin: a hem stretch (sheet: top edge; skirt: waist); mass: a linear ramp.
    if shape == "sheet":
        pin = (pos[:, 1] > 0.999).astype(np.float32)
    else:
        pin = (np.hypot(pos[:, 0], pos[:, 1]) < 0.3 + 1e-6).astype(np.float32)
    mass = (1.0 + pos[:, 0]).astype(np.float32)

    # A user object in the scene must come out untouched.
    user_mesh = bpy.data.meshes.new("user")
    user_mesh.from_pydata([(0, 0, 0), (1, 0, 0), (0, 1, 0)], [], [(0, 1, 2)])
    user = bpy.data.objects.new("user", user_mesh)
    empty_scene.collection.objects.link(user)
    before = datablock_counts()

    c_pos, c_faces, c_sizes, c_weights = simmesh.simplify(
        pos, faces, sizes, {"pin": pin, "mass": mass}, target, name="Skirt")

    assert datablock_counts() == before
    assert len(user_mesh.vertices) == 3 and user.data is user_mesh
    assert bpy.context.scene == empty_scene

    assert c_pos.dtype == np.float32 and c_pos.shape[1] == 3
    assert abs(len(c_pos) / target - 1.0) <= 0.05, len(c_pos)
    assert np.all(c_sizes == 3) and c_sizes.sum() == len(c_faces)
    assert np.all(np.isfinite(c_pos))
    assert set(np.unique(c_faces)) == set(range(len(c_pos))), "loose coarse vertices"

    dense_boundary, dense_loops, dense_edges = blender_boundary(pos, faces, sizes)
    coarse_boundary, coarse_loops, _ = blender_boundary(c_pos, c_faces, c_sizes)
    assert coarse_loops == dense_loops
    size = np.ptp(pos, axis=0).max()
    gap = distance_to_polylines(c_pos[coarse_boundary].astype(np.float64), pos, dense_edges)
    assert gap.max() < 1e-5 * size, gap.max()
    # Not a hem of slivers: the hem was thinned like the interior (linear
    # density ~ sqrt of the vertex ratio), not kept whole.
    assert len(coarse_boundary) <= 1.3 * np.sqrt(target / n) * len(dense_boundary)
    # Corners of the sheet survive.
    if shape == "sheet":
        for corner in ((0, 0), (1, 0), (0, 1), (1, 1)):
            assert np.min(np.linalg.norm(c_pos[:, :2] - corner, axis=1)) < 1e-6

    # Weights: the pinned hem stays pinned, far away stays free, the mass
    # ramp (a linear function of x) survives interpolation.
    c_pin, c_mass = c_weights["pin"], c_weights["mass"]
    assert c_pin.shape == (len(c_pos),) and c_mass.shape == (len(c_pos),)
    if shape == "sheet":
        on_hem = c_pos[:, 1] > 0.999
        far = c_pos[:, 1] < 0.8
    else:
        radius = np.hypot(c_pos[:, 0], c_pos[:, 1])
        on_hem = radius < 0.3 + 1e-5
        far = radius > 0.5
    assert on_hem.sum() >= 4
    assert np.all(c_pin[on_hem] > 0.99)
    assert np.all(c_pin[far] == 0.0)
    np.testing.assert_allclose(c_mass, 1.0 + c_pos[:, 0], atol=0.05)
    assert c_mass.min() >= mass.min() and c_mass.max() <= mass.max()


def test_budget_above_vertex_count_returns_the_mesh(empty_scene):
    pos, faces, sizes = quad_sheet(4)
    c_pos, c_faces, c_sizes, c_weights = simmesh.simplify(pos, faces, sizes, {}, 1000)
    np.testing.assert_array_equal(c_pos, pos.astype(np.float32))
    np.testing.assert_array_equal(c_faces, faces)
    np.testing.assert_array_equal(c_sizes, sizes)
    assert c_weights == {}


def test_bad_input_names_the_mesh_and_leaves_nothing(empty_scene):
    pos, faces, sizes = quad_sheet(20)
    before = datablock_counts()
    with pytest.raises(ValueError, match="'Cape'.*weight 'pin'"):
        simmesh.simplify(pos, faces, sizes, {"pin": np.zeros(5)}, 100, name="Cape")
    with pytest.raises(ValueError, match="'Cape'.*hem"):
        simmesh.simplify(pos, faces, sizes, {}, 10, name="Cape")
    with pytest.raises(ValueError, match="'Cape'.*too small"):
        simmesh.simplify(pos, faces, sizes, {}, 2, name="Cape")
    assert datablock_counts() == before


def test_a_failure_midway_leaves_nothing_behind(empty_scene, monkeypatch):
    pos, faces, sizes = quad_sheet(30)
    before = datablock_counts()

    def broken(*args):
        raise RuntimeError("reading the decimated mesh failed")

    monkeypatch.setattr(simmesh, "_read", broken)
    with pytest.raises(RuntimeError, match="decimated"):
        simmesh.simplify(pos, faces, sizes, {"pin": np.ones(len(pos))}, 300)
    assert datablock_counts() == before
    assert bpy.context.scene == empty_scene
