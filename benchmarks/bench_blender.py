"""Drape against Blender's own Cloth modifier, measured in one run on one machine.

The scene (benchmarks/blender_scenes.py): a square sheet hanging from its
pinned top row, a sphere collider sweeping through it, 24 fps. Blender bakes it
through ``scene.frame_set`` (bpy module, Cloth modifier with a pin group and a
Collision modifier on a UV sphere keyed on every frame); Drape runs the same
arrays through its solver API, one frame = 1/24 s split into solver steps.

Every case prints one JSON line: scene, simulator, vertices, substeps, threads,
frames, runs, ms_per_frame_median (median over runs of each run's mean ms per
simulated frame), ms_per_step_median for Drape, speedup_vs_blender (Blender's ms
per frame over Drape's, for the Blender case named in ``vs``), and the quality
of the result from benchmarks/quality.py: max and mean edge strain, vertices
inside the collider, intersecting triangle pairs (exact test, triangles that
share no vertex). Timings exclude reading positions and computing the metrics.

    make bench-blender                  # the default run (~10 min on the shared 2 cores at load 4-5)
    .venv/bin/python benchmarks/bench_blender.py --quick      # smoke run (~1 min)
    .venv/bin/python benchmarks/bench_blender.py --no-blender # Drape only

The slow Blender cases (self collision, 40k vertices) run fewer frames; each
line says how many. The machine is shared: figures are medians and noisy.
"""

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blender_scenes as bs  # noqa: E402
import quality as Q  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "out")
RESULTS = []


def emit(record):
    RESULTS.append(record)
    print(json.dumps(record), flush=True)


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- Drape side

def drape_api():
    from drape import solver
    return solver


# Object.drape property -> ClothParams field, as scene/params.py maps them for the add-on.
_ADDON_FIELDS = {
    "substeps": "substeps", "iterations": "iterations",
    "stretch_compliance": "stretch_compliance", "shear_compliance": "shear_compliance",
    "bend_compliance": "bend_compliance", "tether_compliance": "tether_compliance",
    "stretch_damping": "stretch_damping", "shear_damping": "shear_damping", "bend_damping": "bend_damping",
    "tethers": "tethers", "tether_scale": "tether_scale", "pin_compliance": "pin_compliance",
    "stretch_limits": "stretch_limits",
    "air_drag": "air_drag", "wind_drag": "drag_coefficient", "wind_lift": "lift_coefficient",
    "thickness": "collision_margin", "friction": "friction_kinetic",
}


def addon_defaults():
    """The defaults an artist gets from Object.drape (properties.py), read from the
    property definitions so the benchmark follows the add-on; {} without bpy."""
    try:
        from drape import properties
    except Exception:
        return {}
    out = {}
    for name, prop in properties.DrapeClothSettings.__annotations__.items():
        kw = getattr(prop, "keywords", None)
        if kw is not None and "default" in kw and "get" not in kw:
            out[name] = kw["default"]
    return out


def drape_params(solver, substeps=None):
    """ClothParams with the add-on's defaults (what Object.drape starts with)."""
    d = addon_defaults()
    names = {f.name for f in dataclasses.fields(solver.ClothParams)}
    values = {field: d[prop] for prop, field in _ADDON_FIELDS.items() if prop in d and field in names}
    if "static_friction" in d and "friction" in d and "friction_static" in names:
        values["friction_static"] = max(d["static_friction"], d["friction"])
    params = solver.ClothParams(**values)
    if substeps is not None:
        params.substeps = substeps
    return params


def self_collision_settings():
    d = addon_defaults()
    return {"thickness": d.get("self_thickness", 0.004), "friction": d.get("self_friction", 0.2),
            "conservativeness": d.get("self_conservativeness", 1.0)}


def drape_threads(params):
    return int(getattr(params, "threads", 1))


def sphere_capsules(solver, c0, c1):
    """The sphere as a zero-length capsule moving from c0 (step start) to c1 (step end)."""
    r = np.array([bs.SPHERE_RADIUS])
    return solver.Capsules(a0=c0[None], b0=c0[None], a1=c1[None], b1=c1[None],
                           radius_a=r, radius_b=r)


def run_drape(sheet, frames, params, steps_per_frame, metric_every=1, intersect_frames=(),
              self_collision=False):
    """One run: build, warm nothing (the caller warms numba), step `frames-1` frames.
    Returns (ms per frame list, ms per step list, FrameMetrics)."""
    solver = drape_api()
    # The same mass per vertex as Blender's Cloth default (0.3 kg), so both carry the same load.
    mass = np.full(sheet.n, bs.BLENDER_VERTEX_MASS)
    model = solver.build_model(sheet.rest, sheet.face_indices, sheet.face_sizes, mass,
                               sheet.pin_weight, params)
    if self_collision:
        from drape.solver.selfcollision import SelfCollision
        model.self_collision = SelfCollision.from_model(model, **self_collision_settings())
    state = model.new_state()
    dt = 1.0 / bs.FPS / steps_per_frame
    pins = sheet.rest.astype(np.float32)
    metrics = Q.FrameMetrics(sheet.rest, sheet.face_indices, sheet.face_sizes)
    frame_ms = []
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        for s in range(steps_per_frame):
            fa = f - 1 + s / steps_per_frame
            fb = f - 1 + (s + 1) / steps_per_frame
            inputs = solver.StepInputs(pin_targets=pins,
                                       capsules=sphere_capsules(solver, bs.sphere_center(fa),
                                                                bs.sphere_center(fb)))
            solver.step(model, state, inputs, dt, params)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        if (f - 2) % metric_every == 0 or f == frames or f in intersect_frames:
            x = state.positions_aos()
            c = bs.sphere_center(f)
            inside = Q.inside_capsule(x, c, c, bs.SPHERE_RADIUS)
            metrics.add(x, inside, check_intersections=f in intersect_frames)
    return frame_ms, [m / steps_per_frame for m in frame_ms], metrics


# --------------------------------------------------------------------------- Blender side

def run_blender(sheet, frames, quality, self_collision, metric_every=1, intersect_frames=(),
                with_metrics=True):
    """One bake through scene.frame_set; returns (ms per frame list, FrameMetrics or None)."""
    import bpy
    obj, sphere = bs.build_blender_scene(sheet, frames, quality=quality, self_collision=self_collision)
    scene = bpy.context.scene
    metrics = Q.FrameMetrics(sheet.rest, sheet.face_indices, sheet.face_sizes) if with_metrics else None
    frame_ms = []
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        scene.frame_set(f)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        if with_metrics and ((f - 2) % metric_every == 0 or f == frames or f in intersect_frames):
            x = bs.evaluated_positions(obj)
            normals, offsets = bs.sphere_planes(sphere)
            inside = Q.inside_convex(x, normals, offsets)
            metrics.add(x, inside, check_intersections=f in intersect_frames)
    return frame_ms, metrics


def blender_threads():
    try:
        import bpy
        return int(bpy.context.scene.render.threads)
    except Exception:
        return os.cpu_count()


def _median_of_means(per_run):
    return statistics.median(statistics.fmean(r) for r in per_run)


class BlenderRuns:
    """Runs of one Blender Cloth case; metrics come from the first run."""

    def __init__(self, scene_name, sheet, frames, quality, self_collision, intersect_frames=(), note=None):
        self.scene_name, self.sheet, self.frames = scene_name, sheet, frames
        self.quality, self.self_collision = quality, self_collision
        self.intersect_frames, self.note = intersect_frames, note
        self.per_run, self.metrics = [], None

    def run(self):
        first = not self.per_run
        ms, m = run_blender(self.sheet, self.frames, self.quality, self.self_collision,
                            intersect_frames=self.intersect_frames, with_metrics=first)
        self.per_run.append(ms)
        if first:
            self.metrics = m

    def record(self):
        rec = {
            "scene": self.scene_name, "simulator": "blender_cloth", "vertices": self.sheet.n,
            "quality": self.quality, "substeps": self.quality, "self_collision": self.self_collision,
            "threads": blender_threads(), "frames": self.frames - 1, "runs": len(self.per_run), "fps": bs.FPS,
            "ms_per_frame_median": round(_median_of_means(self.per_run), 3),
            "ms_per_frame_runs": [round(statistics.fmean(r), 3) for r in self.per_run],
        }
        rec.update(self.metrics.as_dict())
        if self.note:
            rec["note"] = self.note
        emit(rec)
        return rec


class DrapeRuns:
    """Runs of one Drape (solver API) case; metrics come from the first run."""

    def __init__(self, scene_name, sheet, frames, substeps, steps_per_frame, intersect_frames=(),
                 self_collision=False, note=None):
        self.scene_name, self.sheet, self.frames = scene_name, sheet, frames
        self.params = drape_params(drape_api(), substeps)
        self.steps_per_frame, self.self_collision = steps_per_frame, self_collision
        self.intersect_frames, self.note = intersect_frames, note
        self.per_run, self.metrics = [], None

    def run(self):
        first = not self.per_run
        ms, _, m = run_drape(self.sheet, self.frames, self.params, self.steps_per_frame,
                             intersect_frames=self.intersect_frames if first else (),
                             self_collision=self.self_collision)
        self.per_run.append(ms)
        if first:
            self.metrics = m

    def record(self, vs=None):
        p = self.params
        ms_frame = _median_of_means(self.per_run)
        rec = {
            "scene": self.scene_name, "simulator": "drape", "vertices": self.sheet.n,
            "substeps": p.substeps, "iterations": p.iterations,
            "steps_per_frame": self.steps_per_frame, "self_collision": self.self_collision,
            "tethers": bool(p.tethers), "threads": drape_threads(p),
            "frames": self.frames - 1, "runs": len(self.per_run), "fps": bs.FPS,
            "ms_per_frame_median": round(ms_frame, 4),
            "ms_per_step_median": round(ms_frame / self.steps_per_frame, 4),
            "ms_per_frame_runs": [round(statistics.fmean(r), 4) for r in self.per_run],
        }
        if vs is not None:
            rec["vs"] = f"blender_cloth quality {vs['quality']}" + (" self collision" if vs["self_collision"] else "")
            rec["blender_ms_per_frame"] = vs["ms_per_frame_median"]
            rec["speedup_vs_blender"] = round(vs["ms_per_frame_median"] / ms_frame, 1)
            rec["blender_mean_strain"] = vs["mean_strain"]
            rec["blender_max_strain"] = vs["max_strain"]
        rec.update(self.metrics.as_dict())
        if self.note:
            rec["note"] = self.note
        emit(rec)
        return rec


def blender_case(scene_name, sheet, frames, runs, quality, self_collision, intersect_frames=(), note=None):
    case = BlenderRuns(scene_name, sheet, frames, quality, self_collision, intersect_frames, note)
    for _ in range(runs):
        case.run()
    return case.record()


def drape_case(scene_name, sheet, frames, runs, substeps, steps_per_frame, vs=None,
               intersect_frames=(), self_collision=False, note=None):
    case = DrapeRuns(scene_name, sheet, frames, substeps, steps_per_frame, intersect_frames,
                     self_collision, note)
    for _ in range(runs):
        case.run()
    return case.record(vs)


def paired_case(runs, blender, drape):
    """Blender and Drape runs alternated (B, D, B, D, ...) so that a busy neighbour on
    this shared machine weighs on both alike; returns (blender record, drape record).
    `blender` may be None (no bpy): Drape alone."""
    for _ in range(runs):
        if blender is not None:
            blender.run()
        drape.run()
    b = blender.record() if blender is not None else None
    return b, drape.record(vs=b)


def run_drape_addon(sheet, frames, with_metrics=True):
    """Drape as the add-on inside Blender: scene.frame_set drives its runtime (read the
    evaluated pin targets and colliders, step, write the result back for the viewport)."""
    import bpy
    obj = bs.build_drape_addon_scene(sheet, frames)
    scene = bpy.context.scene
    metrics = Q.FrameMetrics(sheet.rest, sheet.face_indices, sheet.face_sizes) if with_metrics else None
    frame_ms = []
    step_ms = []
    from drape.scene import runtime
    for f in range(2, frames + 1):
        t0 = time.perf_counter()
        scene.frame_set(f)
        frame_ms.append((time.perf_counter() - t0) * 1000.0)
        entry = runtime.get(obj)
        if entry is None or entry.error:
            raise RuntimeError(f"Drape add-on did not simulate frame {f}: {entry and entry.error}")
        step_ms.append(entry.last_step_ms)
        if with_metrics:
            x = bs.evaluated_positions(obj)
            c = bs.sphere_center(f)
            metrics.add(x, Q.inside_capsule(x, c, c, bs.SPHERE_RADIUS))
    return frame_ms, step_ms, metrics, obj.drape.substeps


def drape_addon_case(scene_name, sheet, frames, runs, vs=None, note=None):
    per_run, steps, metrics, substeps = [], [], None, None
    for r in range(runs):
        ms, st, m, substeps = run_drape_addon(sheet, frames, with_metrics=(r == 0))
        per_run.append(ms)
        steps.append(statistics.fmean(st))
        if r == 0:
            metrics = m
    ms_frame = _median_of_means(per_run)
    rec = {
        "scene": scene_name, "simulator": "drape_addon", "vertices": sheet.n, "substeps": substeps,
        "steps_per_frame": 1, "self_collision": False, "threads": 1, "frames": frames - 1, "runs": runs,
        "fps": bs.FPS, "ms_per_frame_median": round(ms_frame, 3),
        "ms_per_step_median": round(statistics.median(steps), 3),
        "ms_per_frame_runs": [round(statistics.fmean(r), 3) for r in per_run],
    }
    if vs is not None:
        rec["vs"] = f"blender_cloth quality {vs['quality']}"
        rec["blender_ms_per_frame"] = vs["ms_per_frame_median"]
        rec["speedup_vs_blender"] = round(vs["ms_per_frame_median"] / ms_frame, 1)
    rec.update(metrics.as_dict())
    if note:
        rec["note"] = note
    emit(rec)
    return rec


def warm_drape(steps_per_frame):
    """Compile the solver's kernels once so the timed runs measure steps, not numba."""
    solver = drape_api()
    t0 = time.perf_counter()
    sheet = bs.Sheet(8)
    run_drape(sheet, 3, drape_params(solver), steps_per_frame)
    if drape_has_self_collision():
        run_drape(sheet, 3, drape_params(solver), steps_per_frame, self_collision=True)
    return time.perf_counter() - t0


def mean_strain_over(metrics):
    return metrics.mean_strain_sum / max(metrics.frames, 1)


def find_blender_quality(sheet, frames, target_mean_strain, candidates):
    """Cheapest Blender quality whose mean strain over `frames` is <= the target
    (one probe run each, ascending). Returns (quality or None, probes)."""
    probes = []
    for q in candidates:
        _, m = run_blender(sheet, frames, q, False)
        s = mean_strain_over(m)
        probes.append({"quality": q, "mean_strain": round(s, 5), "max_strain": round(m.max_strain, 5)})
        log(f"blender quality {q}: mean strain {s:.5f} (target {target_mean_strain:.5f})")
        if s <= target_mean_strain:
            return q, probes
    return None, probes


def find_drape_substeps(sheet, frames, steps_per_frame, target_mean_strain, candidates):
    solver = drape_api()
    probes = []
    for n in candidates:
        _, _, m = run_drape(sheet, frames, drape_params(solver, n), steps_per_frame)
        s = mean_strain_over(m)
        probes.append({"substeps": n, "mean_strain": round(s, 5), "max_strain": round(m.max_strain, 5)})
        log(f"drape substeps {n}: mean strain {s:.5f} (target {target_mean_strain:.5f})")
        if s <= target_mean_strain:
            return n, probes
    return None, probes


# --------------------------------------------------------------------------- the run

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: few frames, 1 run, small sizes")
    ap.add_argument("--no-blender", action="store_true", help="Drape cases only")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames", type=int, default=48, help="frames of the 10k cases (24 fps)")
    ap.add_argument("--steps-per-frame", type=int, default=DRAPE_STEPS_PER_FRAME)
    ap.add_argument("--out", default=OUT_DIR)
    args = ap.parse_args(argv)

    quick = args.quick
    runs = 1 if quick else args.runs
    frames = 12 if quick else args.frames
    sc_frames = 4 if quick else SELF_COLLISION_FRAMES
    big_frames = 6 if quick else BIG_FRAMES
    spf = args.steps_per_frame
    use_blender = not args.no_blender and bs.blender_available()
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]

    compile_s = warm_drape(spf)
    log(f"drape kernels compiled/loaded in {compile_s:.2f} s")
    solver = drape_api()
    default_substeps = drape_params(solver).substeps

    sheet10 = bs.Sheet(100)
    mid = frames // 2
    inter10 = (mid, frames)

    S = "hanging_sheet_sphere"
    # 1. Blender at its default quality 5 against Drape at the add-on's defaults.
    b5, d_def = paired_case(
        runs,
        BlenderRuns(S, sheet10, frames, 5, False, inter10,
                    note="Blender Cloth defaults (mass 0.3 kg/vertex, tension 15), quality 5") if use_blender else None,
        DrapeRuns(S, sheet10, frames, default_substeps, spf, inter10,
                  note="Drape with the add-on defaults; same 0.3 kg/vertex as Blender"))

    # 1b. Drape as the add-on: scene.frame_set with the live runtime (the whole frame, as an artist gets it).
    if use_blender:
        try:
            drape_addon_case(S, sheet10, frames, runs, vs=b5,
                             note="drape.cloth_add on the sheet, sphere as a capsule collider; "
                                  "ms per frame = scene.frame_set (read inputs, step, write back)")
        except Exception as exc:  # the add-on is optional for this benchmark
            log(f"drape add-on case skipped: {exc}")

    probe_frames = min(frames, 16)
    if use_blender:
        # 2. Blender at the cheapest quality whose stretch is no more than Drape's defaults.
        _, _, dm = run_drape(sheet10, probe_frames, drape_params(solver), spf)
        target = mean_strain_over(dm)
        q, probes = find_blender_quality(sheet10, probe_frames, target,
                                         [1, 2, 3, 5] if quick else [1, 2, 3, 4, 5, 7, 10])
        emit({"scene": S, "simulator": "blender_cloth", "search": "quality_matching_drape_stretch",
              "vertices": sheet10.n, "frames": probe_frames - 1, "drape_mean_strain": round(target, 5),
              "matched_quality": q, "probes": probes})
        qualities = [1, 2, 3, 5] if quick else [1, 2, 3, 4, 5, 7, 10]
        bq = None
        while q is not None and q != 5:
            bq = blender_case(S, sheet10, frames, runs, q, False, inter10,
                              note=f"quality {q}: the cheapest whose mean strain <= Drape's defaults")
            # Matched on the first frames; over the whole run Blender must not
            # stretch more than Drape either, else the next quality up.
            if bq["mean_strain"] <= d_def["mean_strain"]:
                break
            later = [c for c in qualities if c > q]
            q = later[0] if later else None
        if q is not None and q != 5 and bq is not None:
            emit({"scene": S, "comparison": f"drape defaults vs blender_cloth quality {q} (matched stretch)",
                  "vertices": sheet10.n, "drape_ms_per_frame": d_def["ms_per_frame_median"],
                  "blender_ms_per_frame": bq["ms_per_frame_median"],
                  "speedup_vs_blender": round(bq["ms_per_frame_median"] / d_def["ms_per_frame_median"], 1),
                  "drape_mean_strain": d_def["mean_strain"], "blender_mean_strain": bq["mean_strain"]})
        # 3. Drape with more substeps until its stretch is no more than Blender's at quality 5.
        if d_def["mean_strain"] > b5["mean_strain"]:
            n, probes = find_drape_substeps(sheet10, probe_frames, spf, b5["mean_strain"],
                                            [n for n in (6, 8, 12, 16, 24, 32, 48) if n > default_substeps])
            emit({"scene": S, "simulator": "drape", "search": "substeps_matching_blender_q5_stretch",
                  "vertices": sheet10.n, "frames": probe_frames - 1, "blender_mean_strain": b5["mean_strain"],
                  "matched_substeps": n, "probes": probes})
            if n is not None:
                drape_case(S, sheet10, frames, runs, n, spf, vs=b5, intersect_frames=inter10,
                           note="Drape with stretch <= Blender quality 5")

    # 4. Self collision on (Blender costs seconds per frame here: a few frames only).
    if drape_has_self_collision():
        paired_case(
            runs,
            BlenderRuns(S, sheet10, sc_frames, 5, True, (sc_frames,),
                        note=f"self collision on; {sc_frames - 1} frames only") if use_blender else None,
            DrapeRuns(S, sheet10, sc_frames, default_substeps, spf, (sc_frames,), self_collision=True,
                      note=f"self collision on; the same {sc_frames - 1} frames"))
        drape_case(S, sheet10, frames, runs, default_substeps, spf, intersect_frames=inter10,
                   self_collision=True, note="self collision on, full length")
    else:
        log("drape self collision not available yet: skipped")

    # 5. 40k vertices.
    sheet40 = bs.Sheet(200)
    b40, _ = paired_case(
        runs,
        BlenderRuns(S, sheet40, big_frames, 5, False, (big_frames,),
                    note=f"{big_frames - 1} frames only") if use_blender else None,
        DrapeRuns(S, sheet40, big_frames, default_substeps, spf, (big_frames,),
                  note=f"the same {big_frames - 1} frames"))

    # 6. Scaling curve: Drape 1k..100k, Blender up to 40k (10k and 40k from the cases above).
    drape_sizes = [31, 50, 100, 150, 200, 250, 316] if not quick else [31, 100]
    blender_sizes = {31: (24, runs), 50: (24, runs), 150: (9, 1)} if not quick else {31: (6, 1)}
    known = {100: b5, 200: b40}
    scaling_frames = 12 if quick else 24
    for res in drape_sizes:
        sh = sheet10 if res == 100 else (sheet40 if res == 200 else bs.Sheet(res))
        blender = None
        if use_blender and res in blender_sizes:
            bf, br = blender_sizes[res]
            blender = BlenderRuns("scaling", sh, bf, 5, False, note=f"{bf - 1} frames, {br} run(s)")
            for _ in range(br):
                blender.run()
        drape = DrapeRuns("scaling", sh, scaling_frames, default_substeps, spf)
        for _ in range(runs):
            drape.run()
        vs = blender.record() if blender is not None else known.get(res)
        drape.record(vs=vs)
    summary = {"scene": "summary", "total_s": round(time.perf_counter() - t_start, 1),
               "load_average_start": load_start, "load_average_end": [round(x, 2) for x in os.getloadavg()],
               "drape_compile_s": round(compile_s, 2), "machine_cores": os.cpu_count(),
               "note": "shared 2-core machine: medians, noisy"}
    emit(summary)
    path = os.path.join(args.out, "bench_blender.jsonl")
    with open(path, "w") as fh:
        for r in RESULTS:
            fh.write(json.dumps(r) + "\n")
    log(f"wrote {path}")
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(OUT_DIR), "tools"))
        import plot_bench
        png = plot_bench.plot(RESULTS, os.path.join(args.out, "bench_scaling.png"))
        log(f"wrote {png}")
    except ImportError as exc:
        log(f"no plot ({exc}); install matplotlib (requirements-dev.txt) for out/bench_scaling.png")
    return 0


def drape_has_self_collision():
    try:
        from drape.solver import selfcollision  # noqa: F401
        return True
    except ImportError:
        return False


DRAPE_STEPS_PER_FRAME = 1      # as the add-on's timeline/bake: one solver step per frame, N substeps
SELF_COLLISION_FRAMES = 5      # Blender self collision costs 2-12 s per frame here: 4 simulated frames
BIG_FRAMES = 7                 # 40k vertices (2-5 s per frame in Blender): 6 simulated frames

if __name__ == "__main__":
    sys.exit(main())
