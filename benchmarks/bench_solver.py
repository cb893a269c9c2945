"""Solver benchmark: the reference scene (a sheet hanging from its top row, a
capsule swinging back and forth through it), growth with resolution, JIT
compile time, and the same work on 1 and 2 threads (--threads: only those
rows). One JSON line per case; never part of the test suite.

    make bench-solver            (or: .venv/bin/python benchmarks/bench_solver.py [--quick] [--pinned] [--threads])
    .venv/bin/python benchmarks/bench_solver.py --case garment   (only the garment rows)

--pinned runs only the pinned-sheet rows (strain once settled, tethers on
and off) and the settling rows (a sphere through a hanging sheet, and how
much the same damping slows a fall, a drape and a pinned sheet's swing);
--settling runs only the settling rows.
--threads runs only the 1- and 2-thread rows.

Timings are per-step medians of single-threaded steps after warm-up. On a
shared machine they are noisy: compare medians from the same run. The target
rows (100x100 at 2 substeps, 32x32 at 20) run three blocks of 240 steps and
also report the lowest block median (ms_per_step_median_best_block).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import HostProbe, edge_strain, emit, hanging_sheet, median_ms, quiet_median, swinging_capsule  # noqa: E402

from drape.solver import Capsules, ClothParams, StepInputs, build_model, step, vertex_masses  # noqa: E402

DT = 1.0 / 60.0


def _scene(nx, substeps, tethers, limits=True):
    rest, fi, fs, pin = hanging_sheet(nx, nx)
    params = ClothParams(substeps=substeps, tethers=tethers, stretch_limits=limits)
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
    return model, params, rest


def settled_hanging_ratio(nx, substeps, tethers, steps=240, limits=True):
    """Pinned row to lowest point once settled (no collider), over the rest length."""
    model, params, rest = _scene(nx, substeps, tethers, limits)
    state = model.new_state()
    for _ in range(steps):
        step(model, state, None, DT, params)
    z = state.positions[2]
    return float((rest[0, 2] - z.min()) / (rest[0, 2] - rest[:, 2].min()))


def swinging(nx, substeps, tethers, warmup=120, measured=240, scene="hanging_sheet_swinging_capsule",
             limits=True, repeats=1):
    """Per-step times over `repeats` blocks of `measured` steps (the capsule
    keeps swinging between them; a 1 s pause before each). On a shared
    machine some stretches of a minute run every step slower, so the
    lowest of the blocks' medians is reported as well; the contention
    switches faster than a block, though (common.HostProbe), so each
    measured step follows one probe step and the median of the steps after
    a fast probe is reported too (ms_per_step_median_quiet, the uncontended
    cost). ms_per_step_median stays the median over every measured step."""
    model, params, rest = _scene(nx, substeps, tethers, limits)
    state = model.new_state()
    pairs, rest_len = model.stretch.pairs, model.stretch.rest
    t = 0.0
    times, cpu_times, means, maxes, block_medians, probes = [], [], [], [], [], []
    probe = HostProbe.shared()
    for i in range(warmup + repeats * measured):
        k = i - warmup
        if k >= 0 and k % measured == 0:
            time.sleep(1.0)
        inputs = StepInputs(capsules=swinging_capsule(t, t + DT))
        if k >= 0 and probe is not None:
            probes.append(probe.time_ms())
        c0 = time.thread_time()
        t0 = time.perf_counter()
        step(model, state, inputs, DT, params)
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        t += DT
        if k >= 0:
            times.append(elapsed)
            cpu_times.append(cpu)
            if (k + 1) % measured == 0:
                block_medians.append(median_ms(times[-measured:]))
            if i % 10 == 0:
                s = edge_strain(state.positions_aos(), pairs, rest_len)
                means.append(float(s.mean()))
                maxes.append(float(s.max()))
    row = dict(scene=scene, vertices=int(model.n), substeps=substeps, threads=1, tethers=tethers,
               stretch_limits=limits,
               ms_per_step_median=round(median_ms(times), 4),
               ms_per_step_p10=round(float(np.percentile(times, 10)) * 1e3, 4),
               # This thread's CPU time: leaves out waiting for a core on a busy machine.
               cpu_ms_per_step_median=round(median_ms(cpu_times), 4),
               mean_strain=round(float(np.mean(means)), 5), max_strain=round(float(np.max(maxes)), 5),
               steps=repeats * measured, load_avg_1min=round(os.getloadavg()[0], 2))
    if probes:
        row["ms_per_step_median_quiet"], row["quiet_steps"] = quiet_median(times, probes)
    if repeats > 1:
        row["ms_per_step_median_best_block"] = round(min(block_medians), 4)
        row["block_medians_ms"] = [round(b, 4) for b in block_medians]
    return row


COMPILE_PROBE = """
import time, sys
t0 = time.perf_counter()
sys.path.insert(0, {bench!r})
from common import hanging_sheet, swinging_capsule
from drape.solver import ClothParams, StepInputs, build_model, step, vertex_masses
rest, fi, fs, pin = hanging_sheet(8, 8)
p = ClothParams(substeps=2)
m = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, p)
st = m.new_state()
t1 = time.perf_counter()
step(m, st, StepInputs(capsules=swinging_capsule(0, 1 / 60)), 1 / 60, p)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


# The add-on's defaults (properties.py) at 24 frames a second.
ADDON_DEFAULTS = dict(substeps=4, iterations=1, bend_compliance=1e3, tether_compliance=1e-9, air_drag=0.1,
                      settle_damping=10.0, settle_speed=0.1, air_resistance=1.0)
PIN_LAYOUTS = ("one_corner", "two_corners", "one_edge", "two_edges")


def _pinned_model(nx, layout, params):
    rest, fi, fs, _ = hanging_sheet(nx, nx)
    top, left, right = (np.isclose(rest[:, 2], 1.0), np.isclose(rest[:, 0], 0.0), np.isclose(rest[:, 0], 1.0))
    held = {"one_corner": top & left, "two_corners": top & (left | right), "one_edge": top,
            "two_edges": left | right}[layout]
    return build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(np.float32), params)


# The long-range stretch solves compared on the pinned sheets: the
# straight-row stretch limits (the default) and the multilevel stretch.
STRETCH_SOLVES = {"hierarchy": dict(stretch_hierarchy=True, stretch_limits=False),
                  "limits": dict(stretch_hierarchy=False, stretch_limits=True)}


def pinned_sheet(nx, layout, frames=96, fps=24, tethers=True, solve="limits"):
    """A 1 m sheet of nx x nx quads hung by one corner, its two top corners,
    its top row or its left and right columns, at the add-on's defaults:
    ms per step and the edge strain once it has hung for `frames` frames
    (max_stretch: the largest l / rest - 1; mean_strain: the mean of
    |l / rest - 1|, compression counts). solve: a STRETCH_SOLVES key."""
    params = ClothParams(**ADDON_DEFAULTS, tethers=tethers, **STRETCH_SOLVES[solve])
    model = _pinned_model(nx, layout, params)
    state = model.new_state()
    times = []
    for _ in range(frames):
        c0 = time.thread_time()
        step(model, state, None, 1.0 / fps, params)
        times.append(time.thread_time() - c0)
    s = edge_strain(state.positions_aos(), model.stretch.pairs, model.stretch.rest)
    return dict(scene=f"pinned_sheet_{layout}" + ("" if tethers else "_no_tethers") + ("" if solve == "limits" else
                f"_{solve}"), vertices=int(model.n),
                substeps=params.substeps, threads=1, tethers=tethers, stretch_solve=solve, fps=fps, frames=frames,
                ms_per_step_median=round(median_ms(times[frames // 4:]), 4),
                max_stretch=round(float(s.max()), 5), mean_strain=round(float(np.abs(s).mean()), 5))


def sphere_hit_settling(nx, layout, speed=1.0, fps=24, hung=48, after=240, **damping):
    """The pinned sheet hung for `hung` frames, then a 15 cm sphere passes
    through its middle along y at `speed` m/s and leaves: the largest
    vertex movement per frame (mm) 2 s after it left, and the first frame
    after it left with every vertex moving under 0.1 mm (None: not within
    `after` frames). damping: air_drag, settle_damping in place of the
    add-on's defaults."""
    params = ClothParams(**{**ADDON_DEFAULTS, **damping})
    model = _pinned_model(nx, layout, params)
    state = model.new_state()
    dt = 1.0 / fps
    for _ in range(hung):
        step(model, state, None, dt, params)
    y = -0.5
    radius = np.array([0.15])
    while y < 0.5:
        a0, a1 = np.array([[0.5, y, 0.5]]), np.array([[0.5, y + speed * dt, 0.5]])
        step(model, state, StepInputs(capsules=Capsules(a0=a0, b0=a0, a1=a1, b1=a1, radius_a=radius,
                                                        radius_b=radius)), dt, params)
        y += speed * dt
    moves = []
    for _ in range(after):
        before = state.positions.copy()
        step(model, state, None, dt, params)
        moves.append(float(np.abs(state.positions - before).max()) * 1e3)
    moves = np.asarray(moves)
    still = np.flatnonzero(moves < 0.1)
    return dict(scene=f"sphere_hit_settling_{layout}", vertices=int(model.n), substeps=params.substeps, threads=1,
                fps=fps, sphere_speed_m_s=speed, air_drag=params.air_drag, settle_damping=params.settle_damping,
                air_resistance=params.air_resistance,
                move_mm_per_frame_2s_after=round(float(moves[2 * fps - 1]), 4),
                frames_to_settle=int(still[0]) + 1 if len(still) else None, ms_per_step_median=None)


def _released(nx, seconds, plane, held, sphere, params, fps=24):
    """A 1 m sheet of nx x nx quads released from rest (plane "xy": flat at
    z = 0.5, centred on the origin, held: a bool mask of pinned vertices,
    sphere: a 30 cm sphere at the origin): its rest and z after `seconds`."""
    rest, fi, fs, _ = hanging_sheet(nx, nx)
    rest = rest[:, [0, 2, 1]] - np.array([0.5, 0.5, -0.5]) if plane == "xy" else rest
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held(rest).astype(np.float32), params)
    state = model.new_state()
    c, r = np.zeros((1, 3)), np.array([0.3])
    inputs = StepInputs(capsules=Capsules(a0=c, b0=c, a1=c, b1=c, radius_a=r, radius_b=r)) if sphere else None
    for _ in range(int(round(seconds * fps))):
        step(model, state, inputs, 1.0 / fps, params)
    return rest, state.positions[2].astype(np.float64)


def damping_slowdown(nx=20, **damping):
    """How much a damping setting slows real motion, as 1 - distance moved /
    distance moved undamped (no air drag, no settling): a flat sheet's free
    fall in 0.5 s, the corners of a flat sheet dropped over a 30 cm sphere
    in 0.4 s, and the far edge of a flat sheet pinned along one edge
    swinging down in 0.4 s."""
    def moved(settings):
        params = ClothParams(**{**ADDON_DEFAULTS, **settings})
        none = lambda rest: np.zeros(len(rest), bool)  # noqa: E731
        rest, z = _released(nx, 0.5, "xy", none, False, params)
        fall = 0.5 - z.mean()
        rest, z = _released(nx, 0.4, "xy", none, True, params)
        corners = (np.abs(rest[:, 0]) > 0.49) & (np.abs(rest[:, 1]) > 0.49)
        drape = 0.5 - z[corners].mean()
        rest, z = _released(nx, 0.4, "xy", lambda r: np.isclose(r[:, 1], 0.5), False, params)
        swing = 0.5 - z[np.isclose(rest[:, 1], -0.5)].mean()
        return np.array([fall, drape, swing])
    base = moved(dict(air_drag=0.0, settle_damping=0.0, air_resistance=0.0))
    slow = 1.0 - moved(damping) / base
    params = ClothParams(**{**ADDON_DEFAULTS, **damping})
    return dict(scene="damping_slowdown", vertices=(nx + 1) ** 2, substeps=params.substeps, threads=1, fps=24,
                air_drag=params.air_drag, settle_damping=params.settle_damping, settle_speed=params.settle_speed,
                air_resistance=params.air_resistance,
                free_fall_slowdown=round(float(slow[0]), 4), drape_slowdown=round(float(slow[1]), 4),
                pinned_swing_slowdown=round(float(slow[2]), 4), ms_per_step_median=None)


# The add-on's defaults (settling and air resistance); its settling without
# the air resistance; its air drag alone; Blender's Cloth's default air
# damping as plain drag (bench_blender.py's fit); a stronger plain drag
# (2.3/s: the sphere-hit rows still move a few mm a frame 2 s after the hit
# and take about 6 s to settle under 0.1 mm a frame).
NO_AIR = dict(air_resistance=0.0)
DAMPING_CASES = (dict(), NO_AIR, dict(NO_AIR, settle_damping=0.0), dict(NO_AIR, settle_damping=0.0, air_drag=0.815),
                 dict(NO_AIR, settle_damping=0.0, air_drag=2.3))


def settling_rows():
    for damping in DAMPING_CASES:
        for layout in ("two_corners", "one_edge"):
            for speed in (1.0, 4.0):
                emit(**sphere_hit_settling(50, layout, speed=speed, **damping))
        emit(**damping_slowdown(**damping))


def compile_times():
    """First build + step in a fresh process, numba cache empty (cold) and warm."""
    bench = str(pathlib.Path(__file__).resolve().parent)
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold", "warm"):
            res = subprocess.run([sys.executable, "-c", COMPILE_PROBE.format(bench=bench)], env=env,
                                 capture_output=True, text=True, check=True)
            build_s, step_s = (float(v) for v in res.stdout.split())
            out[label] = (build_s, step_s)
    return out


def _split_sheet(nx):
    """The hanging sheet cut down its middle column into two panels (the
    column's vertices doubled) and the stitches that join them again."""
    rest, fi, fs, pin = hanging_sheet(nx, nx)
    cols = nx + 1
    mid = nx // 2
    column = np.flatnonzero(np.arange(len(rest)) % cols == mid)
    twin = len(rest) + np.arange(len(column))
    rest = np.concatenate([rest, rest[column]])
    pin = np.concatenate([pin, pin[column]])
    quads = fi.reshape(-1, 4).copy()
    right = (rest[quads].mean(axis=1)[:, 0] > rest[column[0], 0])
    remap = np.arange(len(rest))
    remap[column] = twin
    quads[right] = remap[quads[right]]
    return rest, quads.reshape(-1), fs, pin, np.stack([column, twin], axis=1)


def _box(k):
    """A closed quad cube of k x k quads a side, 1 m, centred at (0.5, 0, 0.5),
    wound outwards."""
    g = np.linspace(-0.5, 0.5, k + 1)
    points, quads = [], []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            u, v = np.meshgrid(g, g, indexing="ij")
            p = np.zeros((k + 1, k + 1, 3))
            p[..., axis] = sign * 0.5
            p[..., (axis + 1) % 3], p[..., (axis + 2) % 3] = u, v
            base = sum(len(x) for x in points)
            idx = base + np.arange((k + 1) ** 2).reshape(k + 1, k + 1)
            q = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], axis=-1).reshape(-1, 4)
            quads.append(q if sign > 0 else q[:, ::-1])
            points.append(p.reshape(-1, 3))
    pts = np.concatenate(points)
    keys, first, inverse = np.unique(np.round(pts, 9), axis=0, return_index=True, return_inverse=True)
    fi = inverse.ravel()[np.concatenate(quads)].reshape(-1)
    return keys + [0.5, 0.0, 0.5], fi, np.full(len(fi) // 4, 4)


def garment_rows(blocks=4, warmup=60, measured=120):
    """The 10k-vertex scenes with sewing, max distance (the sheet, cut into
    two panels sewn together) and pressure with max distance (a closed box),
    each against the same scene without them: per-step medians of blocks
    that alternate between the two, the capsule swinging through both."""
    rest, fi, fs, pin, stitches = _split_sheet(100)
    box, bfi, bfs = _box(41)
    scenes = {
        "garment_sheet100_sewing_max_distance": (rest, fi, fs, pin, stitches,
                                                 dict(max_distance=0.3, sewing_max_force=1.0)),
        "garment_box10k_pressure_max_distance": (box, bfi, bfs, np.zeros(len(box), np.float32), None,
                                                 dict(max_distance=0.3, pressure=True, pressure_volume=1.0,
                                                      gravity=(0.0, 0.0, 0.0))),
    }
    for scene, (r, f, s, p, st, on) in scenes.items():
        runs = {}
        for label, extra in (("off", {}), ("on", on)):
            off_gravity = {"gravity": on["gravity"]} if "gravity" in on else {}
            params = ClothParams(substeps=2, **{**off_gravity, **extra})
            model = build_model(r, f, s, vertex_masses(r, f, s, 0.2), p, params)
            if label == "on" and st is not None:
                model.set_sewing(st)
            runs[label] = [model, model.new_state(), params, [], 0.0]
        targets = np.asarray(r, np.float32)
        for block in range(blocks + 1):
            for label in (("off", "on") if block % 2 == 0 else ("on", "off")):
                model, state, params, times, t = runs[label]
                for i in range(warmup if block == 0 else measured):
                    inputs = StepInputs(pin_targets=targets, capsules=swinging_capsule(t, t + DT))
                    c0 = time.thread_time()
                    step(model, state, inputs, DT, params)
                    if block:
                        times.append(time.thread_time() - c0)
                    t += DT
                runs[label][4] = t
        off, on_ = runs["off"][3], runs["on"][3]
        per_block = [median_ms(on_[b * measured:(b + 1) * measured]) / median_ms(off[b * measured:(b + 1) * measured])
                     for b in range(blocks)]
        emit(scene=scene, vertices=int(runs["on"][0].n), substeps=2, threads=1,
             ms_per_step_median=round(median_ms(on_), 4), ms_per_step_median_without=round(median_ms(off), 4),
             ratio_median=round(median_ms(on_) / median_ms(off), 3),
             ratio_per_block=[round(x, 3) for x in per_block], steps=blocks * measured,
             load_avg_1min=round(os.getloadavg()[0], 2))
def pinned_rows(quick):
    """The pinned-sheet and settling rows (--pinned runs only these)."""
    for nx in ((20, 50) if quick else (20, 50, 100)):
        for layout in PIN_LAYOUTS:
            for solve in STRETCH_SOLVES:
                emit(**pinned_sheet(nx, layout, solve=solve))
                emit(**pinned_sheet(nx, layout, tethers=False, solve=solve))
    settling_rows()


# ---------------------------------------------------------------- threads
#
# The same work on 1 and 2 threads, in alternating blocks (on a shared
# machine the load drifts between them): wall time, since CPU time leaves
# out exactly what a second thread saves.

# Eight independent cloths of different sizes (28,440 vertices), self
# collision on two, each with its own swinging capsule: the scene of
# solver.threads.step_all, at the add-on's defaults (24 fps, 4 substeps).
EIGHT_CLOTHS = (84, 72, 60, 56, 52, 48, 44, 40)
EIGHT_SELF = (52, 48)


def _eight_cloths():
    from drape.solver.selfcollision import SelfCollision

    params = ClothParams(substeps=4)
    cloths = []
    for nx in EIGHT_CLOTHS:
        rest, fi, fs, pin = hanging_sheet(nx, nx)
        model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
        if nx in EIGHT_SELF:
            model.self_collision = SelfCollision.from_model(model, thickness=0.004)
        cloths.append((model, model.new_state()))
    return cloths, params


def _alternating(work, counts=(1, 2), blocks=12, per_block=10):
    """{count: per-call wall seconds} of work(count) over `blocks` blocks of
    `per_block` calls per count, the counts taking turns block by block."""
    from drape.solver import threads

    times = {c: [] for c in counts}
    cpu = {c: [0.0, 0.0] for c in counts}
    for b in range(blocks):
        for c in (counts if b % 2 == 0 else counts[::-1]):
            with threads.numba_threads(c):
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(per_block):
                    t = time.perf_counter()
                    work(c)
                    times[c].append(time.perf_counter() - t)
                cpu[c][0] += time.process_time() - c0
                cpu[c][1] += time.perf_counter() - w0
    # The cores the process had while it ran (CPU time over wall time, all
    # threads): on a shared machine the second one is often not there, and
    # no speed-up can exceed this.
    times["cores_used"] = {c: round(v[0] / v[1], 3) for c, v in cpu.items()}
    return times


def _thread_rows(scene, vertices, substeps, times, **extra):
    cores = times.pop("cores_used")
    one = median_ms(times[1])
    for count, ts in times.items():
        extra["cores_used"] = cores[count]
        ms = median_ms(ts)
        emit(scene=scene, vertices=vertices, substeps=substeps, threads=count,
             ms_per_step_median=round(ms, 4), ms_per_step_p10=round(float(np.percentile(ts, 10)) * 1e3, 4),
             ms_per_step_p90=round(float(np.percentile(ts, 90)) * 1e3, 4),
             speedup_vs_1_thread=round(one / ms, 3), steps=len(ts), load_avg_1min=round(os.getloadavg()[0], 2),
             **extra)


def eight_cloths_frame(blocks=12, per_block=10):
    """One frame of the eight cloths (solver.threads.step_all) on 1 and 2 threads."""
    from drape.solver import threads

    cloths, params = _eight_cloths()
    clock = [0.0]

    def frame(count):
        t = clock[0]
        inputs = StepInputs(capsules=swinging_capsule(t, t + 1 / 24))
        threads.step_all([(m, s, inputs, 1 / 24, params) for m, s in cloths], count)
        clock[0] = t + 1 / 24

    for _ in range(24):
        frame(1)
    times = _alternating(frame, blocks=blocks, per_block=per_block)
    contacts = sum(m.self_collision.count for m, _ in cloths if m.self_collision is not None)
    _thread_rows("eight_cloths_frame", sum(m.n for m, _ in cloths), params.substeps, times, cloths=len(cloths),
                 self_collision_cloths=len(EIGHT_SELF), self_contacts_last=int(contacts))


def sheet_step_threads(nx=100, blocks=12, per_block=20):
    """The 10k reference step (swinging capsule, 2 substeps) with numba at 1
    and 2 threads: the step of one cloth runs serial inside (solver.threads)."""
    model, params, _rest = _scene(nx, 2, True)
    state = model.new_state()
    clock = [0.0]

    def one(_count):
        t = clock[0]
        step(model, state, StepInputs(capsules=swinging_capsule(t, t + DT)), DT, params)
        clock[0] = t + DT

    for _ in range(60):
        one(1)
    _thread_rows("hanging_sheet_swinging_capsule_threads", int(model.n), 2,
                 _alternating(one, blocks=blocks, per_block=per_block))


REGION_PROBE = """
import json, sys, time
import numba, numpy as np
from numba import njit, prange

@njit(parallel=True, nogil=True)
def region(a):
    n = a.shape[0]
    for b in prange(2):
        for i in range(b * n // 2, (b + 1) * n // 2):
            a[i] = a[i] * np.float32(0.999) + np.float32(0.001)

a = np.ones(2500, np.float32)
region(a)
numba.set_num_threads(2)
ts = []
for _ in range(3000):
    t = time.perf_counter()
    region(a)
    ts.append(time.perf_counter() - t)
print(json.dumps([numba.threading_layer(), float(np.median(ts)) * 1e6, float(np.percentile(ts, 90)) * 1e6]))
"""


def region_launch():
    """What one numba parallel region over 2,500 floats costs on 2 threads,
    per threading layer (each in its own process: numba picks one per
    process). The reason one cloth's colour batches stay serial."""
    for layer in ("default", "workqueue"):
        env = dict(os.environ)
        if layer != "default":
            env["NUMBA_THREADING_LAYER"] = layer
        res = subprocess.run([sys.executable, "-c", REGION_PROBE], env=env, capture_output=True, text=True)
        if res.returncode != 0:
            emit(scene="parallel_region_launch", vertices=None, substeps=None, threads=2, layer=layer,
                 ms_per_step_median=None, error=res.stderr.strip().splitlines()[-1:])
            continue
        name, med, p90 = json.loads(res.stdout.strip().splitlines()[-1])
        emit(scene="parallel_region_launch", vertices=None, substeps=None, threads=2, layer=name,
             ms_per_step_median=None, us_per_region_median=round(med, 2), us_per_region_p90=round(p90, 2))


CEILING_PROBE = """
import json, threading, time
import numpy as np
from numba import njit

@njit(nogil=True)
def spin(n):
    s = 0.0
    for i in range(n):
        s += np.sqrt(i * 1.0)
    return s

spin(10)
out = {}
for rep in range(5):
    for k in (1, 2):
        ts = [threading.Thread(target=spin, args=(30_000_000,)) for _ in range(k)]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        out.setdefault(k, []).append((time.perf_counter() - t) / k)
print(json.dumps([float(np.median(out[1])), float(np.median(out[2]))]))
"""


def thread_ceiling():
    """What 2 threads can give on this machine now: two independent loops
    that share nothing and hold no lock, time per loop on 1 and 2 threads.
    On a machine whose other core is busy with other work this stays near
    1x, and no thread row of the same run can beat it."""
    res = subprocess.run([sys.executable, "-c", CEILING_PROBE], capture_output=True, text=True, check=True)
    one, two = json.loads(res.stdout.strip().splitlines()[-1])
    emit(scene="parallel_ceiling", vertices=None, substeps=None, threads=2, ms_per_step_median=None,
         ms_per_loop_1_thread=round(one * 1e3, 3), ms_per_loop_2_threads=round(two * 1e3, 3),
         speedup_vs_1_thread=round(one / two, 3), load_avg_1min=round(os.getloadavg()[0], 2))


def pool_dispatch(repeats=400, spin_us=(25, 100, 400)):
    """threads.run_all of two jobs that each spin for a fixed time without
    the GIL, on the calling thread and on 2 threads: how long a job must be
    before a second thread pays (solver.threads.MIN_PARALLEL_COST_NS)."""
    from numba import njit

    from drape.solver import threads

    @njit(nogil=True)
    def spin(count):
        s = 0.0
        for i in range(count):
            s += np.sqrt(float(i))
        return s

    spin(10)
    t = time.perf_counter()
    spin(10_000_000)
    per_count = (time.perf_counter() - t) / 10_000_000
    for us in spin_us:
        count = int(us * 1e-6 / per_count)
        jobs = [lambda: spin(count)] * 2
        times = {1: [], 2: []}
        for _ in range(repeats):
            for c in (1, 2):
                t = time.perf_counter()
                threads.run_all(jobs, c)
                times[c].append(time.perf_counter() - t)
        one = float(np.median(times[1]))
        for c, ts in times.items():
            emit(scene="pool_dispatch", vertices=None, substeps=None, threads=c, jobs=2,
                 us_per_job=round(one / 2 * 1e6, 1),
                 ms_per_step_median=None, us_per_run_median=round(float(np.median(ts)) * 1e6, 2),
                 us_per_run_p90=round(float(np.percentile(ts, 90)) * 1e6, 2),
                 speedup_vs_1_thread=round(one / float(np.median(ts)), 3))


def colour_pass(sizes=(100, 316), repeats=600):
    """The stretch pass alone (constraints.distance: solve_distance_fast4 on
    1 thread, solve_distance_colours on 2) of a 10k and a 100k-vertex sheet:
    where splitting each colour over threads starts to pay
    (solver.threads.COLOUR_SPLIT_MIN_VERTICES)."""
    from drape.solver import threads
    from drape.solver.constraints.distance import solve_distance_colours, solve_distance_fast4
    from drape.solver.jit import compiled_fast

    for nx in sizes:
        model, _params, rest = _scene(nx, 2, True)
        st = model.stretch
        st.set_inverse_masses(model.inv_mass)
        st.refresh_coefficients(1e-3)
        ab, coef, offsets = st.ab_rec, st.coef.reshape(-1), st.colour_offsets
        p4 = np.zeros(4 * model.n, np.float32)
        p4[0::4], p4[2::4] = rest[:, 0] * 1.01, rest[:, 2] * 1.01
        kernels = {1: lambda: solve_distance_fast4(p4, ab, coef, False),
                   2: lambda: solve_distance_colours(p4, ab, coef, offsets, False)}
        with compiled_fast():
            for c, k in kernels.items():
                with threads.numba_threads(c):
                    k()
            times = _alternating(lambda c: kernels[c](), blocks=12, per_block=repeats // 12)
        _thread_rows("colour_pass_stretch", int(model.n), None, times, colours=int(len(offsets) - 1))


def large_sheet_step_threads(nx=316, blocks=8, per_block=10):
    """A 100k-vertex sheet with the swinging capsule, 2 substeps: loop.run on
    1 thread, loop.run_threaded (each colour split, turned on for this row:
    solver.threads.COLOUR_SPLIT_MIN_VERTICES) on 2."""
    from drape.solver import threads

    threads.BACKGROUND_COMPILE = False  # compiled before the timing, not during it
    threads.COLOUR_SPLIT_MIN_VERTICES, saved = 0, threads.COLOUR_SPLIT_MIN_VERTICES  # on, whatever the default
    model, params, _rest = _scene(nx, 2, True)
    state = model.new_state()
    clock = [0.0]

    def one(_count):
        t = clock[0]
        step(model, state, StepInputs(capsules=swinging_capsule(t, t + DT)), DT, params)
        clock[0] = t + DT

    for c in (1, 2, 1, 2):
        with threads.numba_threads(c):
            one(c)
    _thread_rows("large_sheet_swinging_capsule_threads", int(model.n), 2,
                 _alternating(one, blocks=blocks, per_block=per_block))
    threads.BACKGROUND_COMPILE = True
    threads.COLOUR_SPLIT_MIN_VERTICES = saved


def thread_rows():
    thread_ceiling()
    pool_dispatch()
    colour_pass()
    region_launch()
    sheet_step_threads()
    large_sheet_step_threads()
    eight_cloths_frame()


def main():
    quick = "--quick" in sys.argv
    if "--case" in sys.argv and sys.argv[sys.argv.index("--case") + 1:][:1] == ["garment"]:
        garment_rows()   # only the garment rows
        return
    if "--settling" in sys.argv:
        settling_rows()
        return
    if "--pinned" in sys.argv:
        pinned_rows(quick)
        return
    if "--threads" in sys.argv:  # only the 1- and 2-thread rows
        thread_rows()
        return
    ct = compile_times()
    emit(scene="jit_compile", vertices=81, substeps=2, threads=1, ms_per_step_median=None,
         compile_cold_s=round(ct["cold"][0] + ct["cold"][1], 3), first_step_cold_s=round(ct["cold"][1], 3),
         compile_warm_cache_s=round(ct["warm"][0] + ct["warm"][1], 3),
         first_step_warm_cache_s=round(ct["warm"][1], 3))
    # The defaults (tethers and stretch limits), the reference's setup
    # (tethers only), and neither.
    for tethers, limits in ((True, True), (True, False), (False, False)):
        row = swinging(100, 2, tethers, limits=limits, repeats=3)
        row["hanging_length_ratio"] = round(settled_hanging_ratio(100, 2, tethers, limits=limits), 4)
        emit(**row)
    for limits in (True, False):
        row = swinging(32, 20, True, scene="sheet32_20_substeps_swinging_capsule", limits=limits, repeats=3)
        emit(**row)
    pinned_rows(quick)
    sizes = (32, 64, 100) if quick else (32, 64, 100, 200, 300)
    base = None
    for nx in sizes:
        row = swinging(nx, 2, True, warmup=30, measured=60 if nx >= 200 else 120,
                       scene="growth_swinging_capsule")
        per_vertex = row["ms_per_step_median"] * 1e6 / row["vertices"]
        base = base or per_vertex
        row["ns_per_vertex"] = round(per_vertex, 2)
        row["ns_per_vertex_vs_32"] = round(per_vertex / base, 3)
        emit(**row)
    garment_rows()
    thread_rows()


if __name__ == "__main__":
    main()
