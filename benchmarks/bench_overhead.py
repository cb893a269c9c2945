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

And eight cloths of one scene played with every cloth's Threads at 1 and
at 2 (eight_cloths_frame_set; --eight runs only that case).

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


# Eight cloths of one scene (28,440 vertices), self collision on two, one
# capsule swinging through all of them: a frame's independent simulations
# step side by side (scene.runtime.update_scene, solver.threads).
EIGHT_CLOTHS = (84, 72, 60, 56, 52, 48, 44, 40)
EIGHT_SELF = (52, 48)


def build_eight():
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 2000
    cloths = []
    for i, n in enumerate(EIGHT_CLOTHS):
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0,
                                        location=(1.2 * (i - 3.5), 0, 1.5), rotation=(math.pi / 2, 0, 0))
        cloth = bpy.context.active_object
        cloth.name = f"Cloth{i}"
        co = np.empty(len(cloth.data.vertices) * 3, np.float32)
        cloth.data.vertices.foreach_get("co", co)
        co = co.reshape(-1, 3)
        top = np.where(co[:, 1] > co[:, 1].max() - 1e-6)[0]
        cloth.vertex_groups.new(name="pin").add([int(k) for k in top], 1.0, 'REPLACE')
        bpy.ops.drape.cloth_add(pin_group="pin")
        cloth.drape.self_collision = n in EIGHT_SELF
        cloths.append(cloth)
    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.1)
    capsule = bpy.context.active_object
    capsule.scale = (1.0, 10.0, 1.0)
    capsule.rotation_euler = (0, 0, -math.pi / 2)
    for frame, y in ((1, -0.4), (30, 0.4), (60, -0.4)):
        capsule.location = (-5.0, y, 1.2)
        capsule.keyframe_insert("location", frame=frame)
    return scene, cloths


def run_eight(blocks=10, per_block=6, warm=12):
    """frame_set of the eight cloths with every cloth's Threads at 1 and at
    2, in alternating blocks of frames (wall time: medians and spread)."""
    import numba

    from drape.scene import runtime

    scene, cloths = build_eight()
    for f in range(1, warm + 1):
        scene.frame_set(f)
    frame = warm
    times = {1: [], 2: []}
    steps = {1: [], 2: []}
    phases = {1: [], 2: []}
    cpu = {1: [0.0, 0.0], 2: [0.0, 0.0]}  # the cores the process had: CPU over wall time
    for b in range(blocks):
        for count in ((1, 2) if b % 2 == 0 else (2, 1)):
            for c in cloths:
                c.drape.threads = count
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(per_block):
                frame += 1
                t = time.perf_counter()
                scene.frame_set(frame)
                times[count].append((time.perf_counter() - t) * 1e3)
                steps[count].append(runtime.last_frame_ms["steps"])
                phases[count].append((runtime.last_frame_ms["read"], runtime.last_frame_ms["show"]))
            cpu[count][0] += time.process_time() - c0
            cpu[count][1] += time.perf_counter() - w0
    errors = [runtime.get(c).error for c in cloths if runtime.get(c).error]
    if errors:
        raise SystemExit(errors[0])
    med = lambda a: round(float(np.median(a)), 4)  # noqa: E731
    for count in (1, 2):
        print(json.dumps(dict(
            scene="eight_cloths_frame_set", vertices=sum(len(c.data.vertices) for c in cloths), cloths=len(cloths),
            self_collision_cloths=len(EIGHT_SELF), substeps=cloths[0].drape.substeps, threads=count,
            numba_threads=numba.get_num_threads(), frame_set_ms_median=med(times[count]),
            frame_set_ms_p10=round(float(np.percentile(times[count], 10)), 4),
            frame_set_ms_p90=round(float(np.percentile(times[count], 90)), 4),
            speedup_vs_1_thread=round(float(np.median(times[1]) / np.median(times[count])), 3),
            steps_ms_median=med(steps[count]), steps_speedup_vs_1_thread=round(
                float(np.median(steps[1]) / np.median(steps[count])), 3),
            steps_ms_p10=round(float(np.percentile(steps[count], 10)), 4),
            steps_ms_p90=round(float(np.percentile(steps[count], 90)), 4),
            read_ms_median=med([p[0] for p in phases[count]]), show_ms_median=med([p[1] for p in phases[count]]),
            frames=len(times[count]), cores_used=round(cpu[count][0] / cpu[count][1], 3),
        )), flush=True)


def main():
    drape.register()
    if "--eight" in sys.argv:  # only the eight-cloth frame at 1 and 2 threads
        run_eight()
        drape.unregister()
        return
    run("sheet_100x100_capsule")
    run("sheet_100x100_capsule_wind", wind=True)
    run("sheet_100x100_proxy_45x45_capsule", proxy=45)
    run_eight()
    drape.unregister()


if __name__ == "__main__":
    sys.exit(main())
