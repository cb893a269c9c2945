"""Baking overhead per frame beyond the solver, per target, for a ~10k-vertex
dense mesh; file sizes per 100 frames. One JSON line per target.

The frame source is a table of precomputed positions (a lookup, no solver),
so what is measured is the bake's own cost: for each repetition, the time of
a full bake (begin, every frame, finish and swap) minus the time of the same
frame_set + read loop without baking, divided by the frame count. Medians of
REPEATS repetitions. Then the same with the real simulation (scene.runtime on
a dense grid simulated through an automatic coarse mesh): bake time minus
plain playback time per frame. The machine is shared: read the numbers as noisy.

    .venv/bin/python benchmarks/bench_bake.py [--frames 100] [--repeats 3]
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import bpy
import numpy as np


def _setup(grid):
    import drape

    if not hasattr(bpy.types.Object, "drape_bake"):
        drape.register()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=grid, y_subdivisions=grid, size=2.0)
    obj = bpy.context.active_object
    obj.name = "Dense"
    return obj


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--grid", type=int, default=100, help="grid subdivisions (100 -> 10 201 vertices)")
    ap.add_argument("--solver-frames", type=int, default=48,
                    help="frames of the with-solver cases (0 skips them)")
    args = ap.parse_args()

    from drape.bake import install, job as bake_job

    obj = _setup(args.grid)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, args.frames
    n = len(obj.data.vertices)
    rest = np.empty(n * 3, np.float32)
    obj.data.vertices.foreach_get("co", rest)
    rest = rest.reshape(-1, 3)
    table = {f: rest * (1.0 + 0.001 * f) for f in range(1, args.frames + 1)}
    bake_job.set_frame_source(lambda o: table[scene.frame_current])

    tmp = tempfile.mkdtemp(prefix="drape_bench_bake_")
    blend = os.path.join(tmp, "bench.blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend, compress=False)
    plain_size = os.path.getsize(blend)
    source = bake_job.frame_source()

    def baseline():
        t = time.perf_counter()
        for f in range(1, args.frames + 1):
            scene.frame_set(f)
            source(obj)
        scene.frame_set(1)
        return time.perf_counter() - t

    try:
        import numba

        threads = numba.get_num_threads()
    except ImportError:
        threads = 1

    for target in ('PC2', 'SHAPE_KEYS', 'ALEMBIC'):
        overheads, finishes = [], []
        size = 0
        for rep in range(args.repeats):
            base = baseline()
            job = bake_job.BakeJob(scene, [obj], 1, args.frames, target=target, folder=tmp + "/cache")
            t = time.perf_counter()
            job.validate().begin()
            while not job.step():
                pass
            t_finish = time.perf_counter()
            job.finish()
            t_end = time.perf_counter()
            overheads.append(((t_end - t) - base) / args.frames * 1e3)
            finishes.append((t_end - t_finish) * 1e3)
            if rep == args.repeats - 1:
                if target == 'SHAPE_KEYS':
                    bpy.ops.wm.save_as_mainfile(filepath=blend, compress=False)
                    size = os.path.getsize(blend) - plain_size
                else:
                    size = os.path.getsize(job.items[0].abs_path)
            install.free(obj, delete_files=True)
            scene.frame_set(1)
        print(json.dumps({
            "scene": f"bake_{target.lower()}_grid{args.grid}",
            "target": target,
            "vertices": n,
            "frames": args.frames,
            "substeps": 0,
            "threads": threads,
            "ms_per_step_median": round(statistics.median(overheads), 3),
            "overhead_ms_per_frame_median": round(statistics.median(overheads), 3),
            "overhead_ms_per_frame_all": [round(x, 3) for x in overheads],
            "finish_ms_median": round(statistics.median(finishes), 1),
            "bytes_per_100_frames": int(size * 100 / args.frames),
            "mb_per_100_frames": round(size * 100 / args.frames / 2**20, 2),
            "target_ms_per_frame": 2.0 if target != 'ALEMBIC' else None,
        }), flush=True)
    bake_job.set_frame_source(None)
    if args.solver_frames:
        _with_solver(args, threads)


def _with_solver(args, threads):
    """The same overhead with the real simulation: a dense grid simulated
    through an automatic coarse mesh and skinned (scene.runtime), baked
    vs. simply played (frame_set) over the same frames."""
    from drape.bake import install, job as bake_job

    obj = _setup(args.grid)
    scene = bpy.context.scene
    frames = args.solver_frames
    scene.frame_start, scene.frame_end = 1, frames
    co = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(co[:, 1] > co[:, 1].max() - 1e-6)], 1.0, 'REPLACE')
    obj.select_set(True)
    bpy.ops.drape.cloth_add(pin_group="pin")
    obj.drape.sim_source = 'AUTO'
    obj.drape.vertex_budget = 1000
    tmp = tempfile.mkdtemp(prefix="drape_bench_bake_solver_")
    bpy.ops.wm.save_as_mainfile(filepath=os.path.join(tmp, "solver.blend"))

    def play():
        scene.frame_set(1)
        t = time.perf_counter()
        for f in range(2, frames + 1):
            scene.frame_set(f)
        return (time.perf_counter() - t) / (frames - 1) * 1e3

    play()  # compile and build once
    for target in ('PC2', 'SHAPE_KEYS'):
        played, baked = [], []
        for _ in range(args.repeats):
            played.append(play())
            scene.frame_set(1)
            job = bake_job.BakeJob(scene, [obj], 2, frames, target=target, folder=tmp + "/cache")
            job.validate().begin()
            t = time.perf_counter()
            while not job.step():
                pass
            job.finish()
            baked.append((time.perf_counter() - t) / (frames - 1) * 1e3)
            install.free(obj, delete_files=True)
        over = [b - p for b, p in zip(baked, played)]
        print(json.dumps({
            "scene": f"bake_{target.lower()}_with_solver_grid{args.grid}",
            "target": target,
            "vertices": len(obj.data.vertices),
            "sim_vertex_budget": obj.drape.vertex_budget,
            "frames": frames - 1,
            "substeps": obj.drape.substeps if hasattr(obj.drape, "substeps") else None,
            "threads": threads,
            "ms_per_step_median": round(statistics.median(played), 3),
            "bake_ms_per_frame_median": round(statistics.median(baked), 3),
            "overhead_ms_per_frame_median": round(statistics.median(over), 3),
            "overhead_ms_per_frame_all": [round(x, 3) for x in over],
        }), flush=True)


if __name__ == "__main__":
    main()
