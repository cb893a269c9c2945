"""Self collision benchmarks (`make bench-selfcollision`): one JSON line per case.

Cases (1 numba thread, 60 Hz steps, medians over the measured steps):
- hanging_sheet_32 at 20 substeps with the swinging capsule: detection and
  solve time per step, for each broad phase (patch = default, grid);
  reference: 2.166 ms detection, 0.007 ms solve; target <= 0.15 ms detection.
- hanging_sheet_100 at 2 substeps: the whole step with self collision against
  the step without it (target ratio <= 3).
- layered_sheets (two sheets pinned along a swinging capsule, layer order
  set) with contacts cached once, against no self collision (target ratio
  <= 1.3); and the same scene with live detection every step. Both rows
  also count intersecting triangle pairs between the two layers (exact
  test, benchmarks/quality.py) every other frame over the first 120
  frames: what the cost buys.
- crushed_pile_N (an N x N 1 m sheet on the ground, crushed sideways
  between two wall planes to a third of its width over 2 s, 8 substeps, 2
  iterations) and swung_layers (the layered scene with live detection),
  each with the intersection recovery (SelfCollision.recover) on and off:
  ms per step and the intersecting triangle pairs (exact test, every frame
  of the crushed pile, every other frame of the layers): the largest count
  in a frame and the count at the end.
- detect_threads_N (the hanging sheet with the swinging capsule, N x N):
  detection alone on 1 and 2 numba threads, over the same 40 step-start
  states in alternating blocks (wall time, medians), the threaded kernel
  taken whatever the cloth's size (SelfCollision's DETECT_SPLIT_MIN_PATCHES
  says from which size the step takes it); the contacts of both compared
  byte for byte.
`bench_selfcollision.py crushed`, `... layers` or `... threads` runs only those rows.
The machine may be shared: figures are noisy. Each ratio row steps the scene
with and without self collision in lockstep (run_paired), so both see the same
moments of the machine; each pair alone (a third scene between them changes
both).
Step totals are thread CPU time (ms_per_step_median), detect_ms / solve_ms
SelfCollision's wall timers. The 32x32 rows also give detect_ms_quiet, the
median over the steps taken right after a fast probe step (common.HostProbe:
the machine was uncontended then); detect_ms stays the figure of record.
"""

import sys
import time

import numba
import numpy as np

from common import HostProbe, emit, hanging_sheet, log, quiet_median, swinging_capsule
from quality import crossings_between, intersecting_pairs

from drape.solver import Capsules, ClothParams, Planes, StepInputs, build_model, step, vertex_masses
from drape.solver.selfcollision import SelfCollision, merge_meshes

DT = 1.0 / 60.0


def run_steps(model, state, inputs_at, params, warm, steps, sc=None):
    """Step warm + steps times; per measured step: total, detect, solve (ms).

    The step total is this thread's CPU time (time.thread_time): on the
    shared, loaded machine wall time also counts waiting for a core. The
    detect figure is SelfCollision's own (wall) timer; the solve runs inside
    the compiled step (SelfCollision.solve_args) and is not timed apart, so
    solve is reported as the step's cost beyond the same step without self
    collision, less detection (see main)."""
    return run_paired([(model, state, inputs_at, params, sc)], warm, steps)[0]


def run_paired(runs, warm, steps):
    """run_steps for several (model, state, inputs_at, params, sc) in
    lockstep: step i of each, then step i + 1 of each. A ratio of two runs
    then compares steps taken a few milliseconds apart, not minutes apart,
    which a shared machine's drifting speed cannot skew. A probe step before
    each round (common.HostProbe) tags it as quiet or contended: the fifth
    item is (median detect ms of the quiet rounds, their count)."""
    out = [([], [], []) for _ in runs]
    probe = HostProbe.shared()
    probes = []
    for i in range(warm + steps):
        if i >= warm and probe is not None:
            probes.append(probe.time_ms())
        for (model, state, inputs_at, params, sc), (total, detect, solve) in zip(runs, out):
            inputs = inputs_at(i)
            t = time.thread_time()
            step(model, state, inputs, DT, params)
            dt = time.thread_time() - t
            if i >= warm:
                total.append(dt * 1e3)
                if sc is not None:
                    detect.append(sc.detect_ms)
                    solve.append(sc.solve_ms)
    med = lambda a: float(np.median(a)) if a else 0.0  # noqa: E731

    def quiet_detect(detect):
        return quiet_median(detect, probes, scale=1) if detect and probes else (None, 0)

    return [(med(total), med(detect), med(solve), (min(detect) if detect else 0.0), quiet_detect(detect))
            for total, detect, solve in out]


def hanging_run(n, substeps, broad_phase=None, thickness=0.005):
    """(model, state, inputs_at, params, sc) of the hanging sheet with the swinging capsule."""
    rest, fi, fs, pin = hanging_sheet(n, n)
    params = ClothParams(substeps=substeps)
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), pin, params)
    sc = None
    if broad_phase is not None:
        sc = SelfCollision.from_model(model, thickness=thickness, broad_phase=broad_phase)
        model.self_collision = sc
    state = model.new_state()
    targets = rest.astype(np.float32)

    def inputs_at(i):
        return StepInputs(pin_targets=targets, capsules=swinging_capsule(i * DT, (i + 1) * DT))

    return model, state, inputs_at, params, sc


def hanging(n, substeps, broad_phase=None, warm=60, steps=240, thickness=0.005):
    run = hanging_run(n, substeps, broad_phase, thickness)
    return run[0], run_steps(*run[:4], warm, steps, run[4]), run[4]


def layered_scene(n=24, size=0.6, gap=0.008):
    """Two sheets 8 mm apart (inner region 0, outer region 1, faces up), their
    middle rows pinned to a capsule along x that swings 0.25 m in y."""
    def sheet(z):
        xs = np.linspace(-size / 2, size / 2, n + 1)
        x, y = np.meshgrid(xs, xs)
        rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1)
        idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
        quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
        return rest, quads.ravel(), np.full(n * n, 4)
    merged = merge_meshes([sheet(0.11), sheet(0.11 + gap)])
    pin = np.zeros(len(merged.positions), np.float32)
    mid = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)[n // 2]
    pin[mid] = 1.0
    pin[mid + (n + 1) ** 2] = 1.0

    def offset(t, amplitude=0.25, period=0.6):
        return np.array([0.0, amplitude * np.sin(2 * np.pi * t / period), 0.0])

    def inputs(t0, t1):
        o0, o1 = offset(t0), offset(t1)
        caps = Capsules(a0=[[-0.6, 0, 0] + o0], b0=[[0.6, 0, 0] + o0], a1=[[-0.6, 0, 0] + o1],
                        b1=[[0.6, 0, 0] + o1], radius_a=[0.1], radius_b=[0.1])
        return StepInputs(pin_targets=merged.positions + o1.astype(np.float32), capsules=caps)
    return merged, pin, inputs


def layered_run(cached, substeps=10, live=False):
    """cached: contacts cached once at the rest pose; live: detected every
    step; neither: no self collision."""
    merged, pin, inputs = layered_scene()
    params = ClothParams(substeps=substeps)
    model = build_model(merged.positions, merged.face_indices, merged.face_sizes,
                        vertex_masses(merged.positions, merged.face_indices, merged.face_sizes, 0.2),
                        pin, params, region=merged.region)
    sc = SelfCollision.from_model(model, thickness=0.006, layers=[0, 1])
    state = model.new_state()
    # Contacts cached once from the rest pose (the talk's bake-time caching),
    # radius 12 mm so the 8 mm layer gap is covered, between the layers only.
    if cached:
        sc.cache_contacts(state.positions, radius=0.012, between_regions=True)
        model.self_collision = sc
    elif live:
        model.self_collision = sc

    def inputs_at(i):
        return inputs(i * DT, (i + 1) * DT)

    return model, state, inputs_at, params, (sc if cached or live else None)


def layer_crossings(run, frames=120, every=2):
    """Step a fresh layered run for `frames` frames; every `every` frames
    count the triangle pairs of the two layers that intersect: (largest
    count, frames with any, frames checked)."""
    model, state, inputs_at, params, sc = run
    tri = sc.triangles
    region = sc.region[tri[:, 0]]
    ta, tb = tri[region == 0], tri[region == 1]
    nb = int(np.count_nonzero(sc.region == 0))
    counts = []
    for i in range(frames):
        step(model, state, inputs_at(i), DT, params)
        if i % every == every - 1:
            x = state.positions.T
            counts.append(crossings_between(x[:nb], ta, x[nb:], tb - nb)[0])
    return max(counts), sum(c > 0 for c in counts), len(counts)


def crushed_run(n, recover, substeps=8, iterations=2):
    """(model, state, inputs_at, params, sc) of the crushed pile."""
    xs = np.linspace(-0.5, 0.5, n + 1)
    x, y = np.meshgrid(xs, xs)
    rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, 0.01)], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    fi = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1).ravel()
    fs = np.full(n * n, 4)
    params = ClothParams(substeps=substeps, iterations=iterations)
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), np.zeros(len(rest), np.float32), params)
    sc = SelfCollision.from_model(model, thickness=0.006)
    sc.recover = recover
    model.self_collision = sc
    state = model.new_state(rest + np.random.default_rng(1).normal(0, 0.001, rest.shape) * [0, 0, 1])

    def wall(f):
        return 0.52 - min(f / 120.0, 1.0) * (0.52 - 0.17)

    def inputs_at(f):
        a, b = wall(f), wall(f + 1)
        normals = [[0, 0, 1], [1, 0, 0], [-1, 0, 0]]
        return StepInputs(planes=Planes(point0=[[0, 0, 0], [-a, 0, 0], [a, 0, 0]], normal0=normals,
                                        point1=[[0, 0, 0], [-b, 0, 0], [b, 0, 0]], normal1=normals))
    return model, state, inputs_at, params, sc


def scenario_row(scene, run, frames, every):
    """Step a run `frames` frames, counting intersecting triangle pairs every
    `every` frames; emit ms per step (thread CPU, median) and the counts."""
    model, state, inputs_at, params, sc = run
    ms, counts, untangle = [], [], []
    for i in range(frames):
        t = time.thread_time()
        step(model, state, inputs_at(i), DT, params)
        ms.append((time.thread_time() - t) * 1e3)
        untangle.append(sc.untangle_ms if sc.recover else 0.0)
        if i % every == every - 1:
            counts.append(intersecting_pairs(state.positions.T, sc.triangles))
    emit(scene=scene, vertices=model.n, substeps=int(params.substeps), iterations=int(params.iterations), threads=1,
         recover=bool(sc.recover), ms_per_step_median=round(float(np.median(ms)), 3),
         ms_per_step_p90=round(float(np.percentile(ms, 90)), 3),
         untangle_ms_median=round(float(np.median(untangle)), 3),
         crossing_pairs_max=int(max(counts)), crossing_pairs_end=int(counts[-1]),
         frames_with_crossings=int(sum(c > 0 for c in counts)), frames_checked=len(counts))


def scenario_rows():
    for n in (32, 64):
        for recover in (False, True):
            scenario_row(f"crushed_pile_{n}", crushed_run(n, recover), 150, 1)
    for recover in (False, True):
        run = layered_run(False, live=True)
        run[4].recover = recover
        scenario_row("swung_layers", run, 120, 2)


def _contacts(sc):
    return tuple(a.tobytes() for a in (sc.contact_vertex, sc.contact_kind, sc.contact_normal, sc.contact_frame,
                                       sc.contact_target, sc.contact_friction))


def detect_threads_row(n, states=40, every=5, blocks=12):
    """Detection of the N x N hanging sheet on 1 and 2 threads (see the
    module docstring)."""
    import drape.solver.selfcollision as selfcollision
    from drape.solver import threads

    if threads.available() < 2:
        log(f"detect_threads_{n}: numba has one thread here; skipped")
        return
    model, state, inputs_at, params, sc = hanging_run(n, 2, "patch")
    g = np.asarray(params.gravity, np.float32)
    saved = []
    for i in range(60 + states * every):
        if i >= 60 and (i - 60) % every == 0:
            saved.append((state.positions.copy(), state.velocities.copy()))
        step(model, state, inputs_at(i), DT, params)
    threads.BACKGROUND_COMPILE, background = False, threads.BACKGROUND_COMPILE
    selfcollision.DETECT_SPLIT_MIN_PATCHES, min_patches = 0, selfcollision.DETECT_SPLIT_MIN_PATCHES
    times = {1: [], 2: []}
    same = True
    try:
        for b in range(blocks):
            found = {}
            for count in ((1, 2) if b % 2 == 0 else (2, 1)):
                with threads.numba_threads(count):
                    found[count] = []
                    for pos, vel in saved:
                        t = time.perf_counter()
                        sc.detect(pos, vel, DT, g, threads=count)
                        times[count].append(time.perf_counter() - t)
                        found[count].append(_contacts(sc))
            same = same and found[1] == found[2]
    finally:
        threads.BACKGROUND_COMPILE = background
        selfcollision.DETECT_SPLIT_MIN_PATCHES = min_patches
    one = float(np.median(times[1])) * 1e3
    for count in (1, 2):
        ms = float(np.median(times[count])) * 1e3
        emit(scene=f"detect_threads_{n}", vertices=model.n, substeps=2, threads=count, broad_phase="patch",
             patches=len(sc._pstart) - 1, split_min_patches=min_patches, detect_ms=round(ms, 4),
             detect_ms_p25=round(float(np.percentile(times[count], 25)) * 1e3, 4),
             detect_ms_p75=round(float(np.percentile(times[count], 75)) * 1e3, 4),
             speedup_vs_1_thread=round(one / ms, 3), contacts_identical=bool(same), detects=len(times[count]))


def thread_rows():
    for n in (32, 64, 100):
        detect_threads_row(n)


def main():
    numba.set_num_threads(1)
    if sys.argv[1:] in (["crushed"], ["layers"]):
        scenario_rows()
        return 0
    if sys.argv[1:] == ["threads"]:
        thread_rows()
        return 0
    log("compiling (first run fills numba's cache)...")
    hanging(8, 2, "patch", warm=2, steps=2)
    hanging(8, 2, "grid", warm=2, steps=2)

    base32 = hanging(32, 20, None)[1]
    for bp in ("patch", "grid"):
        model, (total, det, sol, det_min, (det_quiet, n_quiet)), sc = hanging(32, 20, bp)
        emit(scene="hanging_sheet_32_capsule", vertices=model.n, substeps=20, threads=1,
             broad_phase=bp, ms_per_step_median=round(total, 4),
             ms_per_step_without_self_collision=round(base32[0], 4),
             detect_ms=round(det, 4), detect_ms_min=round(det_min, 4),
             # The median over the steps after a fast probe step: the uncontended cost.
             detect_ms_quiet=det_quiet, quiet_steps=n_quiet,
             solve_ms=round(max(total - base32[0] - det, 0.0), 4),
             contacts_last=sc.count, reference_detect_ms=2.166, target_detect_ms=0.15)

    # The ratios: the step with self collision and the same scene without
    # it, stepped in lockstep (run_paired).
    off_run = hanging_run(100, 2, None)
    on_run = hanging_run(100, 2, "patch")
    (off, _, _, _, _), (on, det, sol, det_min, _) = run_paired([off_run, on_run], 60, 240)
    emit(scene="hanging_sheet_100_capsule", vertices=on_run[0].n, substeps=2, threads=1, broad_phase="patch",
         ms_per_step_median=round(on, 4), ms_per_step_without_self_collision=round(off, 4),
         ratio=round(on / off, 3), detect_ms=round(det, 4), solve_ms=round(max(on - off - det, 0.0), 4),
         target_ratio=3.0)

    layered_rows()
    scenario_rows()
    thread_rows()
    return 0


def layered_rows():
    """The layered scene with cached and with live contacts, each against
    the scene without self collision, each pair in its own lockstep: the
    live run's long steps interleaved with the two short ones would slow
    them and skew their ratio."""
    cached_run = layered_run(True)
    live_run = layered_run(False, live=True)
    (off, _, _, _, _), (cached, _, sol, _, _) = run_paired([layered_run(False), cached_run], 30, 120)
    (off_live, _, _, _, _), (live, live_det, _, _, _) = run_paired([layered_run(False), live_run], 30, 120)
    worst, bad, checked = layer_crossings(layered_run(True))
    emit(scene="layered_sheets_capsule_cached", vertices=cached_run[0].n, substeps=10, threads=1,
         ms_per_step_median=round(cached, 4), ms_per_step_without_self_collision=round(off, 4),
         ratio=round(cached / off, 3), detect_ms=0.0, solve_ms=round(max(cached - off, 0.0), 4),
         cached_contacts=cached_run[4].count, between_layer_pairs_max=worst,
         frames_with_between_layer_pairs=bad, frames_checked=checked, target_ratio=1.3)
    worst, bad, checked = layer_crossings(layered_run(False, live=True))
    emit(scene="layered_sheets_capsule_live", vertices=live_run[0].n, substeps=10, threads=1,
         ms_per_step_median=round(live, 4), ms_per_step_without_self_collision=round(off_live, 4),
         ratio=round(live / off_live, 3), detect_ms=round(live_det, 4),
         solve_ms=round(max(live - off_live - live_det, 0.0), 4), between_layer_pairs_max=worst,
         frames_with_between_layer_pairs=bad, frames_checked=checked)


if __name__ == "__main__":
    sys.exit(main())
