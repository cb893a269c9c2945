"""Blender-side overhead per frame of the live preview, beyond the solver step.

For a 10k-vertex cloth (100x100 quads, top row pinned, one capsule collider,
optionally a Wind field) played through ``scene.frame_set`` in the bpy module:

- read_ms: evaluated pin targets / weights (foreach_get of the Drape
  modifier's stored attributes), world transform, colliders, wind, params;
- write_ms: to object space + foreach_set of the result attribute + tags;
- overhead_ms = read_ms + write_ms (the target is <= 1 ms);
- step_ms: the solver step alone (the same figure the solver bench measures);
- reeval_ms: Blender re-evaluating the object's stack after a result write
  (the Geometry Nodes write-back: three stored attributes and Set Position);
- frame_set_ms: the whole frame_set (Blender's depsgraph evaluation of the
  stack including the Geometry Nodes write-back, plus the handler), and
  frame_set_no_drape_ms: the same scene with the cloth disabled.

Prints one JSON line per case. Timings are medians over the played frames.
"""

import json
import math
import sys
import time

import bpy
import numpy as np

import drape


def build(n=100, wind=False, proxy=0):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 400
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0, location=(0, 0, 1.5),
                                    rotation=(math.pi / 2, 0, 0))
    cloth = bpy.context.active_object
    co = np.empty(len(cloth.data.vertices) * 3, np.float32)
    cloth.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    top = np.where(co[:, 1] > co[:, 1].max() - 1e-6)[0]
    cloth.vertex_groups.new(name="pin").add([int(i) for i in top], 1.0, 'REPLACE')
    bpy.ops.drape.cloth_add(pin_group="pin")
    cloth.drape.substeps = 2
    if proxy:
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=proxy, y_subdivisions=proxy, size=1.0,
                                        location=(0, 0, 1.5), rotation=(math.pi / 2, 0, 0))
        coarse = bpy.context.active_object
        c = np.empty(len(coarse.data.vertices) * 3, np.float32)
        coarse.data.vertices.foreach_get("co", c)
        c = c.reshape(-1, 3)
        ctop = np.where(c[:, 1] > c[:, 1].max() - 1e-6)[0]
        coarse.vertex_groups.new(name="pin").add([int(i) for i in ctop], 1.0, 'REPLACE')
        cloth.drape.sim_source = 'PROXY'
        cloth.drape.proxy = coarse
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.1)
    capsule = bpy.context.active_object
    capsule.location = (-0.6, 0.15, 1.2)
    capsule.rotation_euler = (0, 0, -math.pi / 2)
    capsule.keyframe_insert("location", frame=1)
    capsule.location = (0.6, 0.15, 1.2)
    capsule.keyframe_insert("location", frame=60)
    if wind:
        bpy.ops.object.effector_add(type='WIND', location=(0, -1, 1), rotation=(-math.pi / 2, 0, 0))
        bpy.context.active_object.field.strength = 3.0
        bpy.context.active_object.field.noise = 0.5
    return scene, cloth


def run(name, frames=120, warm=10, **kw):
    from drape.scene import runtime

    scene, cloth = build(**kw)
    for f in range(1, warm + 1):
        scene.frame_set(f)
    read, write, step, skin, total = [], [], [], [], []
    for f in range(warm + 1, warm + 1 + frames):
        t = time.perf_counter()
        scene.frame_set(f)
        total.append((time.perf_counter() - t) * 1e3)
        e = runtime.get(cloth)
        if e.error:
            raise SystemExit(e.error)
        read.append(e.last_read_ms)
        write.append(e.last_write_ms)
        step.append(e.last_step_ms)
        skin.append(e.last_skin_ms)
    # Blender's own cost of showing a result: write it, let the depsgraph
    # re-evaluate the stack with the Drape Geometry Nodes modifier.
    from drape.scene import writeback

    depsgraph = bpy.context.evaluated_depsgraph_get()
    result = runtime.get(cloth).frames[warm + frames]
    reeval = []
    for _ in range(30):
        writeback.write_result(cloth, result)
        t = time.perf_counter()
        depsgraph.update()
        reeval.append((time.perf_counter() - t) * 1e3)
    cloth.drape.enabled = False
    base = []
    for f in range(1, 41):
        t = time.perf_counter()
        scene.frame_set(f)
        base.append((time.perf_counter() - t) * 1e3)
    import numba

    e = runtime.get(cloth) or e
    med = lambda a: round(float(np.median(a)), 4)  # noqa: E731
    print(json.dumps(dict(
        scene=name, vertices=len(cloth.data.vertices), simulated_vertices=int(e.model.n),
        substeps=cloth.drape.substeps, threads=1, numba_threads=numba.get_num_threads(),
        ms_per_step_median=med(step), read_ms_median=med(read), write_ms_median=med(write),
        overhead_ms_median=med(np.add(read, write)), skin_ms_median=med(skin),
        reeval_ms_median=med(reeval), frame_set_ms_median=med(total), frame_set_no_drape_ms_median=med(base), frames=frames,
    )), flush=True)


def main():
    drape.register()
    run("sheet_100x100_capsule")
    run("sheet_100x100_capsule_wind", wind=True)
    run("sheet_100x100_proxy_45x45_capsule", proxy=45)
    drape.unregister()


if __name__ == "__main__":
    sys.exit(main())
