"""Solver benchmark: the reference scene (a sheet hanging from its top row, a
capsule swinging back and forth through it), growth with resolution, JIT
compile time. One JSON line per case; never part of the test suite.

    make bench-solver            (or: .venv/bin/python benchmarks/bench_solver.py [--quick] [--pinned])

--pinned runs only the pinned-sheet rows (strain once settled, tethers on
and off) and the settling rows (a sphere through a hanging sheet, and how
much the same damping slows a fall, a drape and a pinned sheet's swing);
--settling runs only the settling rows.

Timings are per-step medians of single-threaded steps after warm-up. On a
shared machine they are noisy: compare medians from the same run. The target
rows (100x100 at 2 substeps, 32x32 at 20) run three blocks of 240 steps and
also report the lowest block median (ms_per_step_median_best_block).
"""

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
                      settle_damping=10.0, settle_speed=0.1)
PIN_LAYOUTS = ("one_corner", "two_corners", "one_edge", "two_edges")


def _pinned_model(nx, layout, params):
    rest, fi, fs, _ = hanging_sheet(nx, nx)
    top, left, right = (np.isclose(rest[:, 2], 1.0), np.isclose(rest[:, 0], 0.0), np.isclose(rest[:, 0], 1.0))
    held = {"one_corner": top & left, "two_corners": top & (left | right), "one_edge": top,
            "two_edges": left | right}[layout]
    return build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.15), held.astype(np.float32), params)


def pinned_sheet(nx, layout, frames=96, fps=24, tethers=True):
    """A 1 m sheet of nx x nx quads hung by one corner, its two top corners,
    its top row or its left and right columns, at the add-on's defaults:
    ms per step and the edge strain once it has hung for `frames` frames
    (max_stretch: the largest l / rest - 1; mean_strain: the mean of
    |l / rest - 1|, compression counts)."""
    params = ClothParams(**ADDON_DEFAULTS, tethers=tethers)
    model = _pinned_model(nx, layout, params)
    state = model.new_state()
    times = []
    for _ in range(frames):
        c0 = time.thread_time()
        step(model, state, None, 1.0 / fps, params)
        times.append(time.thread_time() - c0)
    s = edge_strain(state.positions_aos(), model.stretch.pairs, model.stretch.rest)
    return dict(scene=f"pinned_sheet_{layout}" + ("" if tethers else "_no_tethers"), vertices=int(model.n),
                substeps=params.substeps, threads=1, tethers=tethers, fps=fps, frames=frames,
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
    base = moved(dict(air_drag=0.0, settle_damping=0.0))
    slow = 1.0 - moved(damping) / base
    params = ClothParams(**{**ADDON_DEFAULTS, **damping})
    return dict(scene="damping_slowdown", vertices=(nx + 1) ** 2, substeps=params.substeps, threads=1, fps=24,
                air_drag=params.air_drag, settle_damping=params.settle_damping, settle_speed=params.settle_speed,
                free_fall_slowdown=round(float(slow[0]), 4), drape_slowdown=round(float(slow[1]), 4),
                pinned_swing_slowdown=round(float(slow[2]), 4), ms_per_step_median=None)


# The add-on's defaults; its air drag alone; Blender's Cloth's default air
# damping as plain drag (bench_blender.py's fit); the plain drag that settles
# the sphere-hit row within about 2 s.
DAMPING_CASES = (dict(), dict(settle_damping=0.0), dict(settle_damping=0.0, air_drag=0.815),
                 dict(settle_damping=0.0, air_drag=2.3))


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


def pinned_rows(quick):
    """The pinned-sheet and settling rows (--pinned runs only these)."""
    for nx in ((20, 50) if quick else (20, 50, 100)):
        for layout in PIN_LAYOUTS:
            emit(**pinned_sheet(nx, layout))
            emit(**pinned_sheet(nx, layout, tethers=False))
    settling_rows()


def main():
    quick = "--quick" in sys.argv
    if "--settling" in sys.argv:
        settling_rows()
        return
    if "--pinned" in sys.argv:
        pinned_rows(quick)
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


if __name__ == "__main__":
    main()
