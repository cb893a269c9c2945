"""Mesh collider benchmark (`make bench-colliders`): one JSON line per case.

The scene: a 100 x 100 vertex sheet (10k vertices, 1.6 m) dropped on a
deforming body mesh (an ellipsoid torso of 19,998 triangles whose lower
part sways sideways and which breathes, vertices moving every frame), held
by its centre 3 cm over the body's top, 60 Hz steps, 2 substeps, 1 numba
thread.

Cases:
- mesh_collider_body_20k: ms per step of the sheet with the mesh collider
  against the same sheet without it (falling freely), stepped in lockstep
  (step i of each, then step i + 1) so both see the same moments of a shared
  machine; target ratio <= 2. Also the mesh collider's own parts: its set-up
  per step (mesh_step_args: packing, culling the triangles to the cloth's
  reach, the grid; triangles_binned: how many stay) and the vertex and edge
  passes per call.
- mesh_collider_panel_on_body_20k: a 40 x 40 panel (0.5 m) hung beside the
  body's lower part, as a skirt's panel: the triangles the step keeps
  (triangles_binned, of 19,998: those within the cloth's reach) and ms per
  step with and without the mesh collider.
- mesh_collider_still_body_20k: the draped sheet on the body held still
  (verts1 None: the step keeps the grid and the triangles' rows while it
  stays so), ms per step with and without the mesh collider.
- mesh_broad_phase_body_20k: the broad phase the solver keeps (a uniform
  grid rebuilt per step) against a BVH built once and refitted per step:
  build or refit, and listing every vertex's candidate triangles. Quality: the
  deepest cloth vertex inside the body at the end of every measured frame
  (exact point-triangle distance, inside by winding number; tests/mesh_scenes.py)
  against the thickness.
- box_table_sheet_10k: a 100 x 100 sheet (1.5 m) dropped on a table top
  box (0.9 x 0.7 x 0.06 m, turned 0.2 rad) and draped over its edges and
  corners, stepped in lockstep with the edge contacts on and off (the
  vertices collide in both): ms per step of each, and the deepest point
  along any edge inside the box (exact box distance of 9 points per edge)
  over the measured frames, against the thickness (collision margin).
- capsule_spinning_arm_sheet_41 (4 and 2 substeps), capsule_post_4m_s_sheet_21,
  capsule_thin_tip_4m_s_sheet_21: a hanging sheet cut by a fast capsule
  (tests/capsule_scenes.py: an arm spinning at 3.8 m/s at its ends, a 5 cm
  post and a 2 cm tip at 4 m/s), with the edge and face contacts on and
  off: ms per step of each, the frames where a point of the cloth's surface
  is deeper in the capsule than the thickness, and the deepest.
- blender_cloth_body_20k (when bpy imports; --no-blender skips it): the same scene in Blender's Cloth
  (Collision modifier on the body, quality 5), seconds per frame and the
  same penetration oracle, and Drape's speed ratio over it.

    make bench-colliders                                          # every row, into results.jsonl
    .venv/bin/python benchmarks/bench_colliders.py --no-blender   # Drape rows only
    .venv/bin/python benchmarks/bench_colliders.py --quick        # smoke run

Step figures are thread CPU time, medians over the measured steps, with the
spread (25th-75th percentile).
"""

import argparse
import os
import sys
import time

import numba
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import capsule_scenes  # noqa: E402
import mesh_scenes  # noqa: E402
import oracles  # noqa: E402
from common import emit, log  # noqa: E402

from drape.solver import ClothParams, MeshCollider, StepInputs, build_model, step, vertex_masses  # noqa: E402
from drape.solver.colliders import mesh as mesh_mod  # noqa: E402

DT = 1.0 / 60.0
THICKNESS = 0.01
CENTRE = np.array((0.0, 0.0, 0.7))
AXES = np.array((0.32, 0.22, 0.55))


def body_rest(rings=100, segments=101):
    """The torso at rest: a UV sphere scaled to an ellipsoid (19,998
    triangles at the default resolution)."""
    v, t = mesh_scenes.uv_sphere(1.0, (0.0, 0.0, 0.0), rings, segments)
    return v.astype(np.float64) * AXES, t


def body_at(rest, time_s):
    """The body's vertices at a time: its lower part swaying sideways (x
    shifts with the square of the depth below the top, 8 cm at the bottom)
    and breathing (x, y scale by 4 %), both periodic; the top stays."""
    z = rest[:, 2] / AXES[2]
    bend = 0.08 * np.sin(2 * np.pi * time_s / 1.5)
    breathe = 1.0 + 0.04 * np.sin(2 * np.pi * time_s / 0.8)
    v = rest.copy()
    v[:, 0] = v[:, 0] * breathe + bend * ((1.0 - z) / 2.0) ** 2
    v[:, 1] *= breathe
    return (v + CENTRE).astype(np.float32)


def sheet(nv=100, size=1.6):
    """The sheet 3 cm over the body's top, and its pins: the vertices within
    5 cm of its centre (held there, so it stays draped over the body)."""
    rest, fi, fs = oracles.grid_sheet(nv - 1, nv - 1, size, plane="xy")
    rest = rest - (size / 2, size / 2, 0.0) + (0.0, 0.0, CENTRE[2] + AXES[2] + 0.03)
    pin = (np.hypot(rest[:, 0], rest[:, 1]) < 0.05).astype(np.float64)
    return rest, fi, fs, pin


def spread(values):
    a = np.asarray(values, float)
    return {"median": float(np.median(a)), "p25": float(np.percentile(a, 25)), "p75": float(np.percentile(a, 75))}


# ---------------------------------------------------------------- the broad phase that lost
#
# A bounding volume hierarchy over the triangles, built once (median
# splits of the rest centroids) and refitted every step to the step-swept
# triangle boxes: measured here against mesh.build_grid, the uniform grid
# the solver keeps, on the same boxes and the same queries (every cloth
# vertex's path box, listing the triangles whose box it meets).

LEAF = 4


@numba.njit(cache=True)
def bvh_build(v, tris):
    """Nodes (2t, 3) int32: first child (or -1 - first item of a leaf),
    item count, spare; order (t,) triangle ids by leaf."""
    t = tris.shape[0]
    cen = np.empty((t, 3), np.float32)
    for j in range(t):
        for c in range(3):
            cen[j, c] = (v[tris[j, 0], c] + v[tris[j, 1], c] + v[tris[j, 2], c]) / 3
    order = np.arange(t).astype(np.int32)
    nodes = np.zeros((2 * t + 1, 3), np.int32)
    span = np.zeros((2 * t + 1, 2), np.int32)
    span[0, 0], span[0, 1] = 0, t
    count = 1
    stack = np.empty(128, np.int32)
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        k = stack[top]
        lo, hi = span[k, 0], span[k, 1]
        if hi - lo <= LEAF:
            nodes[k, 0] = -1 - lo
            nodes[k, 1] = hi - lo
            continue
        ext = np.zeros(3, np.float32)
        for c in range(3):
            a, b = np.float32(3e38), np.float32(-3e38)
            for q in range(lo, hi):
                a = min(a, cen[order[q], c])
                b = max(b, cen[order[q], c])
            ext[c] = b - a
        axis = np.argmax(ext)
        keys = np.empty(hi - lo, np.float32)
        for q in range(lo, hi):
            keys[q - lo] = cen[order[q], axis]
        sub = order[lo:hi][np.argsort(keys)]
        order[lo:hi] = sub
        mid = (lo + hi) // 2
        nodes[k, 0] = count
        span[count, 0], span[count, 1] = lo, mid
        span[count + 1, 0], span[count + 1, 1] = mid, hi
        stack[top] = count
        stack[top + 1] = count + 1
        top += 2
        count += 2
    return nodes[:count], order


@numba.njit(cache=True)
def bvh_refit(nodes, order, v0, v1, tris, grow, box):
    """Every node's box over the step (children are numbered after their
    parent: one backward pass)."""
    for k in range(nodes.shape[0] - 1, -1, -1):
        for c in range(3):
            box[k, c] = np.float32(3e38)
            box[k, 3 + c] = np.float32(-3e38)
        if nodes[k, 0] < 0:
            first = -1 - nodes[k, 0]
            for q in range(first, first + nodes[k, 1]):
                j = order[q]
                for c in range(3):
                    for m in range(3):
                        x0, x1 = v0[tris[j, m], c], v1[tris[j, m], c]
                        box[k, c] = min(box[k, c], min(x0, x1) - grow)
                        box[k, 3 + c] = max(box[k, 3 + c], max(x0, x1) + grow)
        else:
            a = nodes[k, 0]
            for c in range(3):
                box[k, c] = min(box[a, c], box[a + 1, c])
                box[k, 3 + c] = max(box[a, 3 + c], box[a + 1, 3 + c])


@numba.njit(cache=True)
def bvh_query_all(pos, prev, nodes, order, box):
    """Triangles listed for every vertex's path box (their total)."""
    total = 0
    stack = np.empty(128, np.int32)
    for i in range(pos.shape[1]):
        lx, ux = min(pos[0, i], prev[0, i]), max(pos[0, i], prev[0, i])
        ly, uy = min(pos[1, i], prev[1, i]), max(pos[1, i], prev[1, i])
        lz, uz = min(pos[2, i], prev[2, i]), max(pos[2, i], prev[2, i])
        stack[0] = 0
        top = 1
        while top > 0:
            top -= 1
            k = stack[top]
            if ux < box[k, 0] or uy < box[k, 1] or uz < box[k, 2] or lx > box[k, 3] or ly > box[k, 4] or lz > box[k, 5]:
                continue
            if nodes[k, 0] < 0:
                total += nodes[k, 1]
            else:
                stack[top] = nodes[k, 0]
                stack[top + 1] = nodes[k, 0] + 1
                top += 2
    return total


@numba.njit(cache=True)
def grid_query_all(pos, prev, grid, start, items, tcell):
    """The same listing through mesh.build_grid's grid (each triangle once)."""
    total = 0
    ox, oy, oz, inv = grid[0], grid[1], grid[2], grid[3]
    nx, ny, nz = int(grid[4]), int(grid[5]), int(grid[6])
    for i in range(pos.shape[1]):
        lo = (min(pos[0, i], prev[0, i]), min(pos[1, i], prev[1, i]), min(pos[2, i], prev[2, i]))
        hi = (max(pos[0, i], prev[0, i]), max(pos[1, i], prev[1, i]), max(pos[2, i], prev[2, i]))
        c0x = min(max(int((lo[0] - ox) * inv), 0), nx - 1)
        c0y = min(max(int((lo[1] - oy) * inv), 0), ny - 1)
        c0z = min(max(int((lo[2] - oz) * inv), 0), nz - 1)
        c1x = min(max(int((hi[0] - ox) * inv), 0), nx - 1)
        c1y = min(max(int((hi[1] - oy) * inv), 0), ny - 1)
        c1z = min(max(int((hi[2] - oz) * inv), 0), nz - 1)
        if hi[0] < ox or hi[1] < oy or hi[2] < oz or lo[0] > ox + nx / inv or lo[1] > oy + ny / inv or lo[2] > oz + nz / inv:
            continue
        for cz in range(c0z, c1z + 1):
            for cy in range(c0y, c1y + 1):
                for cx in range(c0x, c1x + 1):
                    cell = (cz * ny + cy) * nx + cx
                    for q in range(start[cell], start[cell + 1]):
                        j = items[q]
                        if cx == max(c0x, tcell[j, 0]) and cy == max(c0y, tcell[j, 1]) and cz == max(c0z, tcell[j, 2]):
                            total += 1
    return total


def broad_phase_case(state, model, collider, repeats=30):
    """Per step: grid build vs BVH refit; per substep: listing every
    vertex's candidates through each."""
    v0, v1, tris, tparam = mesh_mod.pack_meshes([collider])
    # Every triangle binned (no cloth box to cull to).
    cull = (mesh_mod.triangle_neighbours(tris), np.full(3, -3e38, np.float32), np.full(3, 3e38, np.float32))
    grow = np.float32(max(float(tparam[0, 0]), float(tparam[0, 3])))
    nodes, order = bvh_build(v0, tris)
    box = np.empty((nodes.shape[0], 6), np.float32)
    built = mesh_mod.build_grid(v0, v1, tris, tparam, np.float32(0.0), *cull)[:4]
    bvh_refit(nodes, order, v0, v1, tris, grow, box)
    pos, prev = state.positions, model.prev
    found = (grid_query_all(pos, prev, *built), bvh_query_all(pos, prev, nodes, order, box))
    t_grid, t_refit, q_grid, q_bvh = [], [], [], []
    for _ in range(repeats):
        t = time.thread_time()
        built = mesh_mod.build_grid(v0, v1, tris, tparam, np.float32(0.0), *cull)[:4]
        t_grid.append(time.thread_time() - t)
        t = time.thread_time()
        bvh_refit(nodes, order, v0, v1, tris, grow, box)
        t_refit.append(time.thread_time() - t)
        t = time.thread_time()
        grid_query_all(pos, prev, *built)
        q_grid.append(time.thread_time() - t)
        t = time.thread_time()
        bvh_query_all(pos, prev, nodes, order, box)
        q_bvh.append(time.thread_time() - t)
    ms = lambda a: spread(np.asarray(a) * 1e3)  # noqa: E731
    per_step = lambda build, query: float(np.median(build) + 2 * np.median(query)) * 1e3  # noqa: E731
    emit(bench="colliders", case="mesh_broad_phase_body_20k", triangles=int(tris.shape[0]), vertices=int(model.n),
         grid_build_ms=ms(t_grid), bvh_refit_ms=ms(t_refit), grid_query_ms=ms(q_grid), bvh_query_ms=ms(q_bvh),
         grid_candidates=int(found[0]), bvh_candidates=int(found[1]),
         grid_ms_per_step=per_step(t_grid, q_grid), bvh_ms_per_step=per_step(t_refit, q_bvh),
         note="per step: one build or refit, two substeps of queries; the solver keeps the grid")


def lockstep(rest, fi, fs, pin, params, collider_at, warm, steps, after=None):
    """The cloth stepped with the mesh collider collider_at(i) at step i and
    without it, in lockstep (step i of each, then step i + 1) so both see
    the same moments of a shared machine; after(i, model, state, collider)
    runs after each step of the one with it. Returns that one's model and
    state, and the spreads of ms per measured step with and without the
    collider."""
    runs = []
    for with_mesh in (True, False):
        model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
        runs.append((with_mesh, model, model.new_state()))
    times = {True: [], False: []}
    for i in range(warm + steps):
        collider = collider_at(i)
        for with_mesh, model, state in runs:
            t = time.thread_time()
            step(model, state, StepInputs(meshes=[collider]) if with_mesh else None, DT, params)
            if i >= warm:
                times[with_mesh].append((time.thread_time() - t) * 1e3)
        if after is not None:
            after(i, runs[0][1], runs[0][2], collider)
    return runs[0][1], runs[0][2], spread(times[True]), spread(times[False])


def deforming(body, tris):
    """collider_at for lockstep: the body moving over step i."""
    return lambda i: MeshCollider(verts0=body_at(body, i * DT), verts1=body_at(body, (i + 1) * DT), tris=tris,
                                  thickness=THICKNESS)


def drape_case(warm, steps, quality_every):
    rest, fi, fs, pin = sheet()
    params = ClothParams(substeps=2)
    body, tris = body_rest()
    worst = [0.0]
    grid_ms = []
    binned = []

    def after(i, model, state, collider):
        if i < warm:
            return
        # The mesh collider's set-up of a step as the solver does it:
        # pack, cull to the cloth's reach, bin.
        t = time.thread_time()
        args = mesh_mod.mesh_step_args(model, [collider], DT, 0.0, params.collision_margin, state.positions,
                                       state.velocities)
        grid_ms.append((time.thread_time() - t) * 1e3)
        binned.append(int(args[13].shape[0]))
        if (i - warm) % quality_every == quality_every - 1 or i == warm + steps - 1:
            x = state.positions_aos()
            worst[0] = max(worst[0], float(mesh_scenes.penetration(x, collider.verts1, tris).max()))

    collider_at = deforming(body, tris)
    model, state, on, off = lockstep(rest, fi, fs, pin, params, collider_at, warm, steps, after)
    collider = collider_at(warm + steps - 1)
    worst = worst[0]
    # The projection alone, on the final state (one call, the grid of the last step).
    args = mesh_mod.mesh_step_args(model, [collider], DT, 0.0, params.collision_margin, state.positions,
                                   state.velocities)
    v0, v1, tr, tp, grid, start, items, tcell, tri1, tbox, inv_dt, near, nbr, sel, once, found, vs = args
    mesh_mod.mesh_substep_rows(v0, v1, tr, tp, np.float32(0.5), np.float32(1.0), inv_dt, np.float32(0.0),
                               nbr, tri1, tbox, sel, once, vs)
    pos = state.positions.copy()
    contact = np.zeros((7, model.n), np.float32)
    clist = np.zeros(model.n, np.uint32)
    proj, edge_proj = [], []
    for _ in range(20):
        contact[:] = 0
        t = time.thread_time()
        mesh_mod.project_meshes(pos, model.prev, model.inv_mass, model.collider_offset, tp, tri1, tbox,
                                grid, start, items, tcell, near, contact, clist, np.int64(0), found)
        proj.append((time.thread_time() - t) * 1e3)
        es, eo = model.surface.arrays()[:2]
        t = time.thread_time()
        mesh_mod.project_mesh_edges(pos, model.prev, model.inv_mass, model.collider_offset, es, eo, tp, tri1, tbox,
                                    grid, start, items, tcell, near, contact, clist, np.int64(0))
        edge_proj.append((time.thread_time() - t) * 1e3)
    broad_phase_case(state, model, collider)
    emit(bench="colliders", case="mesh_collider_body_20k", vertices=int(model.n), triangles=int(tris.shape[0]),
         substeps=2, steps=steps, broad_phase="grid",
         ms_per_step_mesh=on, ms_per_step_no_mesh=off, ratio=on["median"] / off["median"], target_ratio=2.0,
         grid_build_ms=spread(grid_ms), triangles_binned=int(np.median(binned)), projection_ms=spread(proj),
         edge_projection_ms=spread(edge_proj),
         max_penetration_m=worst, thickness_m=THICKNESS, threads=numba.get_num_threads())
    return on["median"], worst


def still_case(warm, steps):
    """The draped sheet on the still body (see the module doc)."""
    rest, fi, fs, pin = sheet()
    body, tris = body_rest()
    collider = MeshCollider(verts0=body_at(body, 0.0), tris=tris, thickness=THICKNESS)
    model, state, on, off = lockstep(rest, fi, fs, pin, ClothParams(substeps=2), lambda i: collider, warm, steps)
    worst = float(mesh_scenes.penetration(state.positions_aos(), collider.verts0, tris).max())
    emit(bench="colliders", case="mesh_collider_still_body_20k", vertices=int(model.n),
         triangles=int(tris.shape[0]), substeps=2, steps=steps, grid_builds=int(mesh_mod._SCRATCH[model].builds),
         ms_per_step_mesh=on, ms_per_step_no_mesh=off, ratio=on["median"] / off["median"],
         max_penetration_m=worst, thickness_m=THICKNESS, threads=numba.get_num_threads())


def panel_case(warm, steps):
    """The skirt-panel scene (see the module doc)."""
    nv = 40
    rest, fi, fs = oracles.grid_sheet(nv - 1, nv - 1, 0.5, plane="xz")
    rest = rest + (-0.25, -0.25, 0.1)
    pin = (rest[:, 2] > rest[:, 2].max() - 1e-6).astype(np.float64)
    body, tris = body_rest()
    binned = []

    def after(i, model, state, collider):
        if i >= warm:
            binned.append(tris.shape[0] - mesh_mod._SCRATCH[model].culled)

    collider_at = deforming(body, tris)
    model, state, on, off = lockstep(rest, fi, fs, pin, ClothParams(substeps=2), collider_at, warm, steps, after)
    worst = float(mesh_scenes.penetration(state.positions_aos(), collider_at(warm + steps - 1).verts1, tris).max())
    emit(bench="colliders", case="mesh_collider_panel_on_body_20k", vertices=int(model.n),
         triangles=int(tris.shape[0]), substeps=2, steps=steps, triangles_binned=int(np.median(binned)),
         ms_per_step_mesh=on, ms_per_step_no_mesh=off, ratio=on["median"] / off["median"],
         max_penetration_m=worst, thickness_m=THICKNESS, threads=numba.get_num_threads())


def _box_sdf(points, centre, rot, half):
    """Exact signed distance to the box (float64, apart from the kernels)."""
    e = np.abs((points - centre) @ rot) - half
    return np.linalg.norm(np.maximum(e, 0.0), axis=1) + np.minimum(e.max(axis=1), 0.0)


def box_case(warm, steps):
    """The sheet on the table top box (see the module doc)."""
    from drape.solver import Boxes
    rest, fi, fs = oracles.grid_sheet(99, 99, 1.5, plane="xy")
    rest = rest + (-0.75, -0.75, 0.15)
    angle = 0.2
    quat = np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])
    c, s = np.cos(angle), np.sin(angle)
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    half = np.array([0.45, 0.35, 0.03])
    inputs = StepInputs(boxes=Boxes(np.zeros((1, 3)), quat[None], half[None]))
    runs = []
    for edges in (True, False):
        params = ClothParams(substeps=2, edge_contacts=edges)
        model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), np.zeros(len(rest)), params)
        runs.append((edges, params, model, model.new_state()))
    t3 = np.asarray(runs[0][2].triangles, dtype=np.int64).reshape(-1, 3)
    pairs = np.unique(np.sort(np.concatenate([t3[:, [0, 1]], t3[:, [1, 2]], t3[:, [2, 0]]]), axis=1), axis=0)
    f = np.linspace(0.0, 1.0, 9)[None, :, None]
    times = {True: [], False: []}
    deepest = {True: 0.0, False: 0.0}
    for i in range(warm + steps):
        for edges, params, model, state in runs:
            t = time.thread_time()
            step(model, state, inputs, DT, params)
            if i < warm:
                continue
            times[edges].append((time.thread_time() - t) * 1e3)
            x = state.positions_aos().astype(np.float64)
            pts = (x[pairs[:, 0]][:, None] * (1.0 - f) + x[pairs[:, 1]][:, None] * f).reshape(-1, 3)
            deepest[edges] = max(deepest[edges], float(-_box_sdf(pts, 0.0, rot, half).min()))
    on, off = spread(times[True]), spread(times[False])
    emit(bench="colliders", case="box_table_sheet_10k", vertices=int(runs[0][2].n), substeps=2, steps=steps,
         ms_per_step_edges=on, ms_per_step_vertices_only=off, ratio=on["median"] / off["median"],
         max_edge_depth_m=deepest[True], max_edge_depth_vertices_only_m=deepest[False],
         thickness_m=ClothParams().collision_margin, threads=numba.get_num_threads())


def capsule_case(scene, vertices, substeps, at, seconds, repeats):
    """A hanging sheet cut by a fast capsule (tests/capsule_scenes.py), with
    the edge and face contacts on and off (the vertices collide in both):
    ms per step of each (`repeats` runs of the scene), and per frame the
    deepest point of the cloth's surface inside the capsule (exact round
    cone distance of 16 points per edge and every centroid)."""
    from drape.solver import Capsules

    rest, fi, fs, pin = capsule_scenes.hanging_sheet(vertices)
    times = {True: [], False: []}
    deepest = {True: 0.0, False: 0.0}
    bad = {True: 0, False: 0}
    frames = int(round(seconds / DT))
    margin = ClothParams().collision_margin
    for _ in range(repeats):
        for edges in (True, False):
            params = ClothParams(substeps=substeps, edge_contacts=edges)
            model = build_model(rest, fi, fs, np.full(len(rest), 1e-3), pin, params)
            state = model.new_state()
            for k in range(frames):
                a0, b0, r = at(k * DT)
                a1, b1, _ = at((k + 1) * DT)
                inputs = StepInputs(capsules=Capsules(a0[None], b0[None], a1[None], b1[None], np.array([r]),
                                                      np.array([r])))
                t = time.thread_time()
                step(model, state, inputs, DT, params)
                times[edges].append((time.thread_time() - t) * 1e3)
                d = capsule_scenes.max_depth(state.positions_aos(), model.triangles, a1, b1, r, r)
                deepest[edges] = max(deepest[edges], d)
                bad[edges] += d > margin
    on, off = spread(times[True]), spread(times[False])
    emit(bench="colliders", case=scene, vertices=len(rest), substeps=substeps, frames=frames * repeats,
         ms_per_step_edges=on, ms_per_step_vertices_only=off, ratio=on["median"] / off["median"],
         max_depth_m=deepest[True], max_depth_vertices_only_m=deepest[False], frames_deeper_than_margin=bad[True],
         frames_deeper_than_margin_vertices_only=bad[False], thickness_m=margin, threads=numba.get_num_threads())


def capsule_cases(repeats):
    """The fast-capsule scenes (see the module doc)."""
    capsule_case("capsule_spinning_arm_sheet_41", 41, 4, *capsule_scenes.spinning_arm(), repeats)
    capsule_case("capsule_spinning_arm_sheet_41_2_substeps", 41, 2, *capsule_scenes.spinning_arm(), repeats)
    capsule_case("capsule_post_4m_s_sheet_21", 21, 2, *capsule_scenes.post(4.0), repeats)
    capsule_case("capsule_thin_tip_4m_s_sheet_21", 21, 2, *capsule_scenes.thin_poke(4.0, 0.02), repeats)


def blender_case(frames, drape_ms, drape_pen):
    """Blender's Cloth on the same scene (bpy), quality 5, a Collision
    modifier on the body (outer thickness = Drape's thickness)."""
    import bpy

    rest, fi, fs, pin = sheet()
    body, tris = body_rest()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps = 60
    scene.frame_start, scene.frame_end = 1, frames + 1
    me = bpy.data.meshes.new("sheet")
    me.from_pydata(rest.tolist(), [], fi.reshape(-1, 4).tolist())
    cloth = bpy.data.objects.new("sheet", me)
    scene.collection.objects.link(cloth)
    cloth.vertex_groups.new(name="pin").add([int(i) for i in np.nonzero(pin)[0]], 1.0, 'REPLACE')
    mod = cloth.modifiers.new("Cloth", "CLOTH")
    mod.settings.quality = 5
    mod.settings.vertex_group_mass = "pin"
    mod.collision_settings.use_self_collision = False
    mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames + 1
    bm = bpy.data.meshes.new("body")
    bm.from_pydata(body_at(body, 0.0).tolist(), [], tris.tolist())
    bobj = bpy.data.objects.new("body", bm)
    scene.collection.objects.link(bobj)
    bobj.modifiers.new("Collision", "COLLISION")
    bobj.collision.thickness_outer = THICKNESS
    # The deformation as shape keys keyed per frame would be heavy; a
    # per-frame handler writes the vertices (Blender's Collision modifier
    # reads the evaluated mesh each frame either way).
    flat = np.empty(len(body) * 3, np.float32)

    def move(sc, *_):
        flat[:] = body_at(body, (sc.frame_current - 1) * DT).ravel()
        bm.vertices.foreach_set("co", flat)
        bm.update()

    bpy.app.handlers.frame_change_pre.append(move)
    per_frame = []
    worst = 0.0
    co = np.empty(len(rest) * 3, np.float32)
    try:
        for f in range(1, frames + 2):
            t = time.perf_counter()
            scene.frame_set(f)
            dg = bpy.context.evaluated_depsgraph_get()
            ev = cloth.evaluated_get(dg)
            ev.data.vertices.foreach_get("co", co)
            if f > 1:
                per_frame.append(time.perf_counter() - t)
                x = co.reshape(-1, 3)
                if f % 10 == 0 or f == frames + 1:
                    worst = max(worst, float(mesh_scenes.penetration(x, body_at(body, (f - 1) * DT), tris).max()))
    finally:
        bpy.app.handlers.frame_change_pre.remove(move)
    s = spread(np.asarray(per_frame) * 1e3)
    emit(bench="colliders", case="blender_cloth_body_20k", frames=frames, quality=5, ms_per_frame=s,
         max_penetration_m=worst, drape_ms_per_step=drape_ms, drape_max_penetration_m=drape_pen,
         speedup=s["median"] / drape_ms, target_speedup=50.0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few steps (smoke run)")
    ap.add_argument("--no-blender", action="store_true", help="skip Blender's Cloth on the scene")
    ap.add_argument("--blender-frames", type=int, default=30)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    warm, steps = (10, 10) if args.quick else (60, 120)
    log(f"mesh collider: {warm} warm-up and {steps} measured steps")
    drape_ms, drape_pen = drape_case(warm, steps, quality_every=20)
    still_case(warm, steps)
    panel_case(warm, steps)
    box_case(warm, steps)
    capsule_cases(1 if args.quick else 3)
    if not args.no_blender:
        try:
            import bpy  # noqa: F401
        except ImportError:
            log("bpy does not import: no Blender Cloth row")
            return
        blender_case(5 if args.quick else args.blender_frames, drape_ms, drape_pen)


if __name__ == "__main__":
    main()
