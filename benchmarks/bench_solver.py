"""Solver benchmark: the reference scene (a sheet hanging from its top row, a
capsule swinging back and forth through it), growth with resolution, JIT
compile time. One JSON line per case; never part of the test suite.

    make bench-solver            (or: .venv/bin/python benchmarks/bench_solver.py [--quick] [--pinned])
    .venv/bin/python benchmarks/bench_solver.py --case garment   (only the garment rows)

--pinned runs only the pinned-sheet rows (strain once settled, tethers on
and off) and the settling rows (a sphere through a hanging sheet).

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
ADDON_DEFAULTS = dict(substeps=4, iterations=1, bend_compliance=1e3, tether_compliance=1e-9, air_drag=0.1)
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


def sphere_hit_settling(nx, layout, speed=1.0, fps=24, hung=48, after=240, air_drag=None):
    """The pinned sheet hung for `hung` frames, then a 15 cm sphere passes
    through its middle along y at `speed` m/s and leaves: the largest
    vertex movement per frame (mm) 2 s after it left, and the first frame
    after it left with every vertex moving under 0.1 mm (None: not within
    `after` frames). air_drag: None = the add-on's default."""
    settings = dict(ADDON_DEFAULTS)
    if air_drag is not None:
        settings["air_drag"] = air_drag
    params = ClothParams(**settings)
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
                fps=fps, sphere_speed_m_s=speed, air_drag=params.air_drag,
                move_mm_per_frame_2s_after=round(float(moves[2 * fps - 1]), 4),
                frames_to_settle=int(still[0]) + 1 if len(still) else None, ms_per_step_median=None)


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
            emit(**pinned_sheet(nx, layout))
            emit(**pinned_sheet(nx, layout, tethers=False))
    for layout in ("two_corners", "one_edge"):
        for drag in (None, 1.0):
            emit(**sphere_hit_settling(50, layout, air_drag=drag))


def main():
    quick = "--quick" in sys.argv
    if "--case" in sys.argv and sys.argv[sys.argv.index("--case") + 1:][:1] == ["garment"]:
        garment_rows()   # only the garment rows
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
    garment_rows()


if __name__ == "__main__":
    main()
