"""Automatic simulation mesh: simplify the render mesh to a vertex budget.

The simplifier is Blender's own Decimate modifier (collapse mode), run on a
temporary mesh in a temporary scene:

- it ships with Blender: nothing to bundle, build or keep up to date for
  every platform, and it is the tool artists already know;
- it is a quadric-error edge collapse (Garland-Heckbert), the same family as
  meshoptimizer's simplifier, so the coarse mesh follows the surface's shape;
- it interpolates every vertex attribute as it collapses, so pin and mass
  weights (stored as float attributes) arrive on the coarse mesh;
- it never collapses a boundary edge, so a hem stays a hem.

Because it never collapses a boundary edge, it would also keep every hem
vertex and spend the whole budget inside, leaving a fringe of slivers along
each hem. ``solver.simplify.thin_boundary`` first thins each boundary loop to
the spacing the budget allows by welding hem vertices into kept hem
neighbours (kept vertices are original ones, corners are kept), then
Decimate reduces the interior. The modifier's ratio is a triangle count;
Euler's formula (the hem and the Euler characteristic survive) turns the
vertex budget into that ratio, usually exact at the first evaluation, and
secant steps follow until the vertex count is within 5 % of the budget. Vertices on the
border of a weight's support (where a pin group starts) are protected through
the modifier's vertex group, so a pinned collar keeps its edge.

Nothing is left behind: the temporary mesh, object and scene are removed in
a ``finally``; the user's objects and meshes are never touched (the inputs
are plain arrays).
"""

import bpy
import numpy as np

from ..solver import simplify as mesh_ops

__all__ = ["simplify", "BUDGET_TOLERANCE"]

BUDGET_TOLERANCE = 0.05
_MAX_TRIES = 12
_PROTECT_GROUP = "drape_protect"
_WEIGHT_PREFIX = "drape_weight_"


def _check(positions, face_indices, face_sizes, weights, target_vertices, name):
    pos = np.asarray(positions, np.float32)
    if pos.ndim != 2 or pos.shape[1] != 3 or pos.shape[0] == 0:
        raise ValueError(f"'{name}': positions must be a non-empty (n, 3) array, got {pos.shape}")
    if not np.all(np.isfinite(pos)):
        raise ValueError(f"'{name}': positions contain NaN or infinite coordinates")
    corners = np.asarray(face_indices, np.int64).ravel()
    sizes = np.asarray(face_sizes, np.int64).ravel()
    if sizes.size == 0:
        raise ValueError(f"'{name}' has no faces to simplify")
    if np.any(sizes < 3) or sizes.sum() != corners.size:
        raise ValueError(f"'{name}': face_sizes must be >= 3 and sum to len(face_indices)")
    if corners.min() < 0 or corners.max() >= pos.shape[0]:
        raise ValueError(f"'{name}': face_indices refer to vertices that do not exist")
    clean = {}
    for key, value in (weights or {}).items():
        w = np.asarray(value, np.float32).ravel()
        if w.shape != (pos.shape[0],):
            raise ValueError(
                f"'{name}': weight '{key}' has {w.shape[0]} values for {pos.shape[0]} vertices")
        clean[key] = w
    if int(target_vertices) < 4:
        raise ValueError(f"'{name}': a vertex budget of {target_vertices} is too small (at least 4)")
    return pos, corners, sizes, clean, int(target_vertices)


def _support_borders(corners, sizes, weights, n):
    """Vertices with weight > 0 that share an edge with a weight-0 vertex."""
    border = np.zeros(n, bool)
    if not weights:
        return border
    edges = mesh_ops._face_edges(corners, sizes)
    for w in weights.values():
        on = w > 1e-6
        cut = on[edges[:, 0]] != on[edges[:, 1]]
        ends = edges[cut].ravel()
        border[ends[on[ends]]] = True
    return border


def _new_mesh(pos, corners, sizes, weights):
    mesh = bpy.data.meshes.new("drape_simplify_tmp")
    try:
        mesh.vertices.add(pos.shape[0])
        mesh.vertices.foreach_set("co", pos.ravel())
        mesh.loops.add(corners.shape[0])
        mesh.loops.foreach_set("vertex_index", corners.astype(np.int32))
        mesh.polygons.add(sizes.shape[0])
        mesh.polygons.foreach_set("loop_start", (np.cumsum(sizes) - sizes).astype(np.int32))
        mesh.update()
        names = {}
        for i, (key, w) in enumerate(weights.items()):
            attr_name = f"{_WEIGHT_PREFIX}{i}"
            attr = mesh.attributes.new(attr_name, 'FLOAT', 'POINT')
            attr.data.foreach_set("value", w)
            names[key] = attr_name
    except Exception:
        bpy.data.meshes.remove(mesh)
        raise
    return mesh, names


def _read(mesh, names):
    n = len(mesh.vertices)
    pos = np.empty(n * 3, np.float32)
    mesh.vertices.foreach_get("co", pos)
    sizes = np.empty(len(mesh.polygons), np.int32)
    mesh.polygons.foreach_get("loop_total", sizes)
    corners = np.empty(len(mesh.loops), np.int32)
    mesh.loops.foreach_get("vertex_index", corners)
    weights = {}
    for key, attr_name in names.items():
        w = np.empty(n, np.float32)
        mesh.attributes[attr_name].data.foreach_get("value", w)
        weights[key] = w
    return pos.reshape(n, 3), corners, sizes, weights


def simplify(positions, face_indices, face_sizes, weights, target_vertices, *, name="mesh"):
    """Simplify a mesh to about ``target_vertices`` vertices (within 5 %).

    positions (n, 3); face_indices, face_sizes as Blender's polygons (flat
    corner list + corners per polygon); weights: name -> (n,) per-vertex
    values (pin, mass, ...), carried over by interpolation and clipped to
    their input range. Returns (coarse_positions (c, 3) float32,
    coarse_face_indices int32, coarse_face_sizes int32 (all triangles),
    coarse_weights dict). A budget at or above n returns the mesh unchanged.
    ``name`` only labels error messages. Raises ValueError when the input is
    unusable or the budget cannot be met (the message says why).
    """
    pos, corners, sizes, weights, target = _check(
        positions, face_indices, face_sizes, weights, target_vertices, name)
    n = pos.shape[0]
    if target >= n:
        return (pos.copy(), corners.astype(np.int32), sizes.astype(np.int32),
                {k: w.copy() for k, w in weights.items()})

    # 1. Thin the hems (pure numpy; Decimate itself never collapses them).
    protect = _support_borders(corners, sizes, weights, n)
    labels = np.zeros(n, np.int64)
    for bit, w in enumerate(weights.values()):
        labels |= (w > 1e-6).astype(np.int64) << bit
    keep_fraction = min(1.0, 1.15 * np.sqrt(target / n))
    remap = mesh_ops.thin_boundary(pos, corners, sizes, keep_fraction, labels=labels)
    corners, sizes = mesh_ops.apply_weld(corners, sizes, remap)
    kept, corners = mesh_ops.compact(n, corners)
    pos = pos[kept]
    protect = protect[kept]
    weights = {k: w[kept] for k, w in weights.items()}
    boundary = np.zeros(pos.shape[0], bool)
    boundary[mesh_ops.boundary_edges(corners, sizes).ravel()] = True
    if target < boundary.sum() + 1:
        raise ValueError(
            f"'{name}': a budget of {target} vertices cannot keep its {int(boundary.sum())} "
            f"hem vertices; raise the vertex budget")
    if pos.shape[0] <= target * (1 + BUDGET_TOLERANCE):
        return pos, corners, sizes, weights

    # 2. Decimate the interior with Blender's modifier on throw-away data.
    mesh = obj = scene = None
    try:
        mesh, names = _new_mesh(pos, corners, sizes, weights)
        obj = bpy.data.objects.new("drape_simplify_tmp", mesh)
        group = obj.vertex_groups.new(name=_PROTECT_GROUP)
        # Hem vertices left after thinning are final (Decimate keeps them
        # anyway); pin borders inside are made expensive to collapse.
        protected = np.flatnonzero(protect | boundary)
        if protected.size:
            group.add(protected.tolist(), 1.0, 'REPLACE')
        scene = bpy.data.scenes.new("drape_simplify_tmp")
        scene.collection.objects.link(obj)
        mod = obj.modifiers.new("drape_decimate", 'DECIMATE')
        mod.decimate_type = 'COLLAPSE'
        mod.use_collapse_triangulate = True
        mod.vertex_group = _PROTECT_GROUP
        mod.invert_vertex_group = True  # weight 0 = expensive to collapse
        mod.vertex_group_factor = 100.0
        with bpy.context.temp_override(scene=scene, view_layer=scene.view_layers[0]):
            depsgraph = bpy.context.evaluated_depsgraph_get()

        n_tris = int((sizes - 2).sum())
        best = None
        # First guess from Euler's formula: Decimate keeps the hem (B edges)
        # and the Euler characteristic, so a triangulated surface with V
        # vertices has T = 2 (V - chi) - B triangles. Then secant steps,
        # bracketed, on the (nearly linear) count-vs-ratio curve.
        n_boundary = int(boundary.sum())
        chi = pos.shape[0] - (n_tris + n_boundary) / 2.0
        lo, hi = (0.0, 0), (1.0, pos.shape[0])
        ratio = (2.0 * (target - chi) - n_boundary) / max(n_tris, 1)
        for _ in range(_MAX_TRIES):
            mod.ratio = float(np.clip(ratio, 1.0 / max(n_tris, 1), 1.0))
            depsgraph.update()
            count = len(obj.evaluated_get(depsgraph).data.vertices)
            error = count / target - 1.0
            if best is None or abs(error) < abs(best[1]):
                best = (mod.ratio, error)
            if abs(error) <= BUDGET_TOLERANCE * 0.6:
                break
            if count > target:
                hi = (mod.ratio, count)
            else:
                lo = (mod.ratio, count)
            if hi[1] != lo[1]:
                ratio = lo[0] + (target - lo[1]) * (hi[0] - lo[0]) / (hi[1] - lo[1])
            else:
                ratio = 0.5 * (lo[0] + hi[0])
            ratio = float(np.clip(ratio, lo[0] + 1e-6, hi[0] - 1e-6))
        if mod.ratio != best[0]:  # setting it again would decimate again
            mod.ratio = best[0]
            depsgraph.update()
        evaluated = obj.evaluated_get(depsgraph)
        c_pos, c_corners, c_sizes, c_weights = _read(evaluated.data, names)
    finally:
        if obj is not None:
            bpy.data.objects.remove(obj)
        if mesh is not None:
            bpy.data.meshes.remove(mesh)
        if scene is not None:
            bpy.data.scenes.remove(scene)

    if abs(c_pos.shape[0] / target - 1.0) > BUDGET_TOLERANCE:
        raise ValueError(
            f"'{name}': could not simplify to {target} vertices (closest: {c_pos.shape[0]}); "
            "try another vertex budget")
    kept, c_corners = mesh_ops.compact(c_pos.shape[0], c_corners)
    c_pos = c_pos[kept]
    for key, w in c_weights.items():
        lo_w, hi_w = float(weights[key].min()), float(weights[key].max())
        c_weights[key] = np.clip(w[kept], lo_w, hi_w)
    return c_pos, c_corners, c_sizes, c_weights
