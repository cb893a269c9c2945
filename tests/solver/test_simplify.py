"""Boundary thinning helpers of the automatic simulation mesh (no Blender)."""

import numpy as np

from drape.solver import simplify


def quad_grid(nx, ny, hole=None):
    """Quads on a unit-spaced grid; `hole` = (i0, i1, j0, j1) cells left out."""
    idx = np.arange((nx + 1) * (ny + 1)).reshape(nx + 1, ny + 1)
    quads = []
    for i in range(nx):
        for j in range(ny):
            if hole and hole[0] <= i < hole[1] and hole[2] <= j < hole[3]:
                continue
            quads.append([idx[i, j], idx[i + 1, j], idx[i + 1, j + 1], idx[i, j + 1]])
    X, Y = np.meshgrid(np.arange(nx + 1.0), np.arange(ny + 1.0), indexing="ij")
    pos = np.stack([X.ravel(), Y.ravel(), np.zeros(X.size)], axis=1)
    quads = np.array(quads)
    return pos, quads.ravel(), np.full(len(quads), 4)


def test_boundary_loops_of_a_sheet_with_a_hole():
    pos, faces, sizes = quad_grid(10, 8, hole=(3, 6, 3, 5))
    loops = simplify.boundary_loops(faces, sizes, len(pos))
    assert sorted(len(loop) for loop in loops) == [10, 36]  # 2*(3+2) and 2*(10+8)
    outer = max(loops, key=len)
    steps = np.linalg.norm(pos[outer] - pos[np.roll(outer, -1)], axis=1)
    np.testing.assert_allclose(steps, 1.0)  # consecutive: a real walk


def test_thin_boundary_keeps_corners_and_welds_along_the_hem_only():
    pos, faces, sizes = quad_grid(20, 20)
    remap = simplify.thin_boundary(pos, faces, sizes, 0.3)
    moved = np.flatnonzero(remap != np.arange(len(pos)))
    on_edge = lambda p: (p[:, 0] == 0) | (p[:, 0] == 20) | (p[:, 1] == 0) | (p[:, 1] == 20)
    assert moved.size > 0 and np.all(on_edge(pos[moved]))
    assert np.all(on_edge(pos[remap[moved]]))
    assert np.all(remap[remap] == remap)  # targets are kept vertices
    # welds stay on the same side of the square and close by
    assert np.all(np.linalg.norm(pos[moved] - pos[remap[moved]], axis=1) <= 3.0)
    for corner in ((0, 0), (20, 0), (0, 20), (20, 20)):
        v = np.flatnonzero((pos[:, 0] == corner[0]) & (pos[:, 1] == corner[1]))[0]
        assert remap[v] == v
    kept_on_hem = np.sum(on_edge(pos) & (remap == np.arange(len(pos))))
    assert abs(kept_on_hem - 0.3 * 80) <= 6


def test_thin_boundary_keeps_label_changes():
    pos, faces, sizes = quad_grid(20, 4)
    labels = ((pos[:, 1] == 4) & (pos[:, 0] >= 7) & (pos[:, 0] <= 12)).astype(int)
    remap = simplify.thin_boundary(pos, faces, sizes, 0.2, labels=labels)
    for x in (6, 7, 12, 13):
        v = np.flatnonzero((pos[:, 0] == x) & (pos[:, 1] == 4))[0]
        assert remap[v] == v


def test_weld_then_compact_gives_a_valid_mesh_with_the_same_loops():
    pos, faces, sizes = quad_grid(12, 12, hole=(4, 8, 4, 8))
    remap = simplify.thin_boundary(pos, faces, sizes, 0.4)
    new_faces, new_sizes = simplify.apply_weld(faces, sizes, remap)
    assert new_sizes.min() >= 3 and new_sizes.sum() == len(new_faces)
    # no polygon repeats a vertex
    starts = np.cumsum(new_sizes) - new_sizes
    for s, k in zip(starts, new_sizes):
        assert len(set(new_faces[s:s + k])) == k
    kept, compact_faces = simplify.compact(len(pos), new_faces)
    assert compact_faces.max() == len(kept) - 1
    np.testing.assert_array_equal(kept[compact_faces], new_faces)
    loops = simplify.boundary_loops(compact_faces, new_sizes, len(kept))
    assert len(loops) == 2
    # total area unchanged for a flat square with straight hems
    p = pos[kept]
    area = 0.0
    for s, k in zip(starts, new_sizes):
        poly = p[compact_faces[s:s + k]]
        area += 0.5 * np.cross(poly - poly[0], np.roll(poly, -1, axis=0) - poly[0])[:, 2].sum()
    assert np.isclose(area, 144 - 16)


def test_apply_weld_drops_collapsed_polygons():
    faces = np.array([0, 1, 2, 3, 1, 4, 2])
    sizes = np.array([4, 3])
    remap = np.array([0, 1, 1, 3, 4])  # 2 -> 1: quad -> triangle, triangle vanishes
    new_faces, new_sizes = simplify.apply_weld(faces, sizes, remap)
    np.testing.assert_array_equal(new_faces, [0, 1, 3])
    np.testing.assert_array_equal(new_sizes, [3])
