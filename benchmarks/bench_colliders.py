"""Mesh collider benchmark (`make bench-colliders`): one JSON line per case.

The scene: a 100 x 100 vertex sheet (10k vertices, 1.6 m) dropped on a
deforming body mesh (an ellipsoid torso of 19,998 triangles that bends
sideways and breathes, vertices moving every frame), 60 Hz steps, 2
substeps, 1 numba thread.

Cases:
- mesh_collider_body_20k: ms per step of the sheet with the mesh collider
  against the same sheet without it (falling freely), stepped in lockstep
  (step i of each, then step i + 1) so both see the same moments of a shared
  machine; target ratio <= 2. Also the mesh collider's own parts: the grid
  build per step (build_grid) and the projection per call. Quality: the
  deepest cloth vertex inside the body at the end of every measured frame
  (exact point-triangle distance, inside by ray parity; tests/mesh_scenes.py)
  against the thickness.
- blender_cloth_body_20k (with --blender): the same scene in Blender's Cloth
  (Collision modifier on the body, quality 5), seconds per frame and the
  same penetration oracle, and Drape's speed ratio over it.

    .venv/bin/python benchmarks/bench_colliders.py            # Drape rows
    .venv/bin/python benchmarks/bench_colliders.py --blender  # and Blender's Cloth
    .venv/bin/python benchmarks/bench_colliders.py --quick    # smoke run

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
    """The body's vertices at a time: bent sideways (x shifts with the
    square of the height) and breathing (x, y scale), both periodic."""
    z = rest[:, 2] / AXES[2]
    bend = 0.08 * np.sin(2 * np.pi * time_s / 1.5)
    breathe = 1.0 + 0.04 * np.sin(2 * np.pi * time_s / 0.8)
    v = rest.copy()
    v[:, 0] = v[:, 0] * breathe + bend * (z + 1.0) ** 2
    v[:, 1] *= breathe
    return (v + CENTRE).astype(np.float32)


def sheet(nv=100, size=1.6):
    rest, fi, fs = oracles.grid_sheet(nv - 1, nv - 1, size, plane="xy")
    rest = rest - (size / 2, size / 2, 0.0) + (0.0, 0.0, CENTRE[2] + AXES[2] + 0.03)
    return rest, fi, fs


def spread(values):
    a = np.asarray(values, float)
    return {"median": float(np.median(a)), "p25": float(np.percentile(a, 25)), "p75": float(np.percentile(a, 75))}


def drape_case(warm, steps, quality_every):
    rest, fi, fs = sheet()
    params = ClothParams(substeps=2)
    body, tris = body_rest()
    runs = []
    for with_mesh in (True, False):
        model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), np.zeros(len(rest)), params)
        runs.append((with_mesh, model, model.new_state()))
    times = {True: [], False: []}
    worst = 0.0
    grid_ms = []
    for i in range(warm + steps):
        v0, v1 = body_at(body, i * DT), body_at(body, (i + 1) * DT)
        collider = MeshCollider(verts0=v0, verts1=v1, tris=tris, thickness=THICKNESS)
        for with_mesh, model, state in runs:
            inputs = StepInputs(meshes=[collider]) if with_mesh else None
            t = time.thread_time()
            step(model, state, inputs, DT, params)
            if i >= warm:
                times[with_mesh].append((time.thread_time() - t) * 1e3)
        if i >= warm:
            packed = mesh_mod.pack_meshes([collider])
            t = time.thread_time()
            mesh_mod.build_grid(*packed, np.float32(0.0))
            grid_ms.append((time.thread_time() - t) * 1e3)
            if (i - warm) % quality_every == quality_every - 1 or i == warm + steps - 1:
                x = runs[0][2].positions_aos()
                worst = max(worst, float(mesh_scenes.penetration(x, v1, tris).max()))
    # The projection alone, on the final state (one call, the grid of the last step).
    model, state = runs[0][1], runs[0][2]
    args = mesh_mod.mesh_step_args(model, [collider], DT, 0.0)
    v0, v1, tr, tp, grid, start, items, tcell, tri1, tbox, inv_dt = args
    mesh_mod.mesh_substep_rows(v0, v1, tr, tp, np.float32(0.5), np.float32(1.0), inv_dt, np.float32(0.0),
                               tri1, tbox)
    pos = state.positions.copy()
    contact = np.zeros((7, model.n), np.float32)
    clist = np.zeros(model.n, np.uint32)
    proj = []
    for _ in range(20):
        contact[:] = 0
        t = time.thread_time()
        mesh_mod.project_meshes(pos, model.prev, model.inv_mass, model.collider_offset, tp, tri1, tbox,
                                grid, start, items, tcell, contact, clist, np.int64(0))
        proj.append((time.thread_time() - t) * 1e3)
    on, off = spread(times[True]), spread(times[False])
    emit(bench="colliders", case="mesh_collider_body_20k", vertices=int(model.n), triangles=int(tris.shape[0]),
         substeps=2, steps=steps, broad_phase="grid",
         ms_per_step_mesh=on, ms_per_step_no_mesh=off, ratio=on["median"] / off["median"], target_ratio=2.0,
         grid_build_ms=spread(grid_ms), projection_ms=spread(proj),
         max_penetration_m=worst, thickness_m=THICKNESS, threads=numba.get_num_threads())
    return on["median"], worst


def blender_case(frames, drape_ms, drape_pen):
    """Blender's Cloth on the same scene (bpy), quality 5, a Collision
    modifier on the body (outer thickness = Drape's thickness)."""
    import bpy

    rest, fi, fs = sheet()
    body, tris = body_rest()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps = 60
    scene.frame_start, scene.frame_end = 1, frames + 1
    me = bpy.data.meshes.new("sheet")
    me.from_pydata(rest.tolist(), [], fi.reshape(-1, 4).tolist())
    cloth = bpy.data.objects.new("sheet", me)
    scene.collection.objects.link(cloth)
    mod = cloth.modifiers.new("Cloth", "CLOTH")
    mod.settings.quality = 5
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
    ap.add_argument("--blender", action="store_true", help="also run Blender's Cloth on the scene")
    ap.add_argument("--blender-frames", type=int, default=30)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    warm, steps = (10, 10) if args.quick else (60, 120)
    log(f"mesh collider: {warm} warm-up and {steps} measured steps")
    drape_ms, drape_pen = drape_case(warm, steps, quality_every=20)
    if args.blender:
        blender_case(5 if args.quick else args.blender_frames, drape_ms, drape_pen)


if __name__ == "__main__":
    main()
