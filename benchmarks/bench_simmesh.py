"""Simulate coarse, render dense: cost per step of the same 100x100-quad
hanging sheet (10,201 rendered vertices) with a swinging capsule, 2 substeps,
60 Hz, when the simulated mesh is the render mesh itself, an authored 45x45
proxy, or the render mesh simplified to 2000 vertices (Blender's Decimate
through scene.simmesh). Every step includes skinning the dense mesh.
Also: binding time for 10k and 100k dense vertices.

One JSON line per case (see DEVELOPERS.md). The reference solver's own
published figures (ISPC, one thread, skinning on the GPU): 1.387 / 0.300 /
0.281 ms. Each row
runs twice: with Drape's defaults (stretch limits on; the scene names as
before) and, named "..., tethers only", with the reference's constraints
(stretch, shear, bending, tethers; no long-range stretch solve, which the
reference solver does not have), as bench_solver's first row.
`stretch_limits` in each line says which.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import HostProbe, emit, hanging_sheet, log, median_ms, quiet_median, swinging_capsule  # noqa: E402

import numba  # noqa: E402

from drape import solver  # noqa: E402
from drape.solver import skinning  # noqa: E402

DT = 1.0 / 60.0
SUBSTEPS = 2
WARMUP_STEPS = 30
STEPS = 240
REPEATS = 3  # whole runs; the median is over every step of every run
AREAL_DENSITY = 0.2  # kg/m^2


def make_params(stretch_limits=True):
    """The solver's defaults, or (stretch_limits False) the reference's
    constraints: no long-range stretch solve (no multilevel stretch, no
    stretch limits)."""
    if stretch_limits:
        return solver.ClothParams(substeps=SUBSTEPS, iterations=1)
    return solver.ClothParams(substeps=SUBSTEPS, iterations=1, stretch_limits=False, stretch_hierarchy=False)


def simulate(rest, faces, sizes, pin, dense_rest, dense_pin, binding, stretch_limits):
    """Median ms per step (solver step + skinning when there is a binding),
    plus the medians of each part."""
    params = make_params(stretch_limits)
    mass = solver.vertex_masses(rest, faces, sizes, AREAL_DENSITY)
    model = solver.build_model(rest, faces, sizes, mass, pin, params)
    coarse_targets = np.asarray(rest, np.float32)
    dense_targets = np.asarray(dense_rest, np.float32)
    out = np.empty((len(dense_rest), 3), np.float32)
    totals, steps, skins, cpu_totals, cpu_steps, cpu_skins, probes = [], [], [], [], [], [], []
    # A probe step before each measured step tags it as run on a quiet or a
    # contended host (common.HostProbe).
    probe = HostProbe.shared()
    for run in range(REPEATS):
        state = model.new_state()
        t = 0.0
        for i in range(WARMUP_STEPS + STEPS):
            inputs = solver.StepInputs(pin_targets=coarse_targets,
                                       capsules=swinging_capsule(t, t + DT))
            if i >= WARMUP_STEPS and probe is not None:
                probes.append(probe.time_ms())
            # The wall clock is read around the step and around the skinning,
            # and the thread clock between them is left out of both: reading
            # it is a system call, not per-step cost.
            c0 = time.thread_time()
            t0 = time.perf_counter()
            solver.step(model, state, inputs, DT, params)
            t1 = time.perf_counter()
            c1 = time.thread_time()
            t1b = time.perf_counter()
            if binding is not None:
                skinning.skin(binding, state.positions, out=out, pin_targets=dense_targets)
            t2 = time.perf_counter()
            c2 = time.thread_time()
            t += DT
            if i >= WARMUP_STEPS:
                totals.append((t1 - t0) + (t2 - t1b))
                steps.append(t1 - t0)
                skins.append(t2 - t1b)
                cpu_totals.append(c2 - c0)
                cpu_steps.append(c1 - c0)
                cpu_skins.append(c2 - c1)
    result = state.positions_aos() if binding is None else out.copy()
    assert np.all(np.isfinite(result)), "simulation blew up"
    quiet = quiet_median(totals, probes) if probes else (None, 0)
    return (median_ms(totals), median_ms(steps), median_ms(skins), median_ms(cpu_totals),
            median_ms(cpu_steps), median_ms(cpu_skins), result, quiet)


FULL_RESULT = {}


def row(scene, rest, faces, sizes, pin, dense_rest, dense_pin, stretch_limits=True, **extra):
    binding = None
    bind_ms = None
    if rest is not dense_rest:
        tris = skinning.triangulate(faces, sizes)
        t = time.perf_counter()
        binding = skinning.bind(rest, tris, dense_rest, dense_pinned=dense_pin >= 0.999)
        bind_ms = (time.perf_counter() - t) * 1e3
    total, step_ms, skin_ms, cpu_ms, cpu_solve_ms, cpu_skin_ms, result, quiet = simulate(
        rest, faces, sizes, pin, dense_rest, dense_pin, binding, stretch_limits)
    if binding is None:
        FULL_RESULT[stretch_limits] = result
    else:
        # How far the rendered sheet ends up from the full-resolution
        # simulation after the same 4 s of capsule motion (mm). Mostly the
        # coarse cloth's own dynamics (folds it cannot make, a different
        # swing phase), not skinning error: skinning is exact at rest and
        # tested against an analytic cylinder in tests/solver.
        gap = np.linalg.norm(result - FULL_RESULT[stretch_limits], axis=1) * 1e3
        extra.update(gap_to_full_sim_mm_mean=round(float(gap.mean()), 2),
                     gap_to_full_sim_mm_max=round(float(gap.max()), 2))
    emit(scene=scene, vertices=int(len(dense_rest)), substeps=SUBSTEPS, threads=1,
         ms_per_step_median=round(total, 4), stretch_limits=stretch_limits,
         # The median of the steps after a fast probe step: the uncontended cost.
         ms_per_step_median_quiet=quiet[0], quiet_steps=quiet[1],
         # This thread's CPU time: leaves out waiting for a core on a busy machine.
         cpu_ms_per_step_median=round(cpu_ms, 4), simulated_vertices=int(len(rest)),
         rendered_vertices=int(len(dense_rest)), solver_ms_median=round(step_ms, 4),
         skin_ms_median=round(skin_ms, 4),
         # The same split in thread CPU time (the solver and the skinning are
         # sped up separately; wall medians of each part carry the box's noise).
         solver_cpu_ms_median=round(cpu_solve_ms, 4), skin_cpu_ms_median=round(cpu_skin_ms, 4),
         bind_ms=None if bind_ms is None else round(bind_ms, 2),
         steps=STEPS * REPEATS, load_avg_1min=round(os.getloadavg()[0], 2), **extra)


def bind_rows(coarse, coarse_faces, coarse_sizes):
    tris = skinning.triangulate(coarse_faces, coarse_sizes)
    for n in (100, 316):  # 10,201 and 100,489 dense vertices
        dense, _, _, _ = hanging_sheet(n, n)
        # Lift the dense sheet off the coarse one a little: real offsets.
        dense = dense + np.array([0.0, 0.003, 0.0])
        skinning.bind(coarse, tris, dense[:100])  # compiled already; warm caches
        times = []
        for _ in range(5):
            t = time.perf_counter()
            skinning.bind(coarse, tris, dense)
            times.append(time.perf_counter() - t)
        emit(scene=f"bind {len(dense)} dense to {len(coarse)} coarse", vertices=int(len(dense)),
             substeps=None, threads=int(numba.get_num_threads()), ms_per_step_median=None,
             bind_ms_median=round(median_ms(times), 2), simulated_vertices=int(len(coarse)),
             rendered_vertices=int(len(dense)), load_avg_1min=round(os.getloadavg()[0], 2))


def main():
    dense, dense_faces, dense_sizes, dense_pin = hanging_sheet(100, 100)
    log(f"machine: {os.cpu_count()} cpus, numba threads {numba.get_num_threads()}; "
        "shared machine: medians over all steps, expect noise")

    proxy, proxy_faces, proxy_sizes, proxy_pin = hanging_sheet(45, 45)
    try:
        from drape.scene import simmesh
    except ImportError as exc:  # no bpy: skip the Blender-side row
        log(f"simplified row skipped: {exc}")
        simplified = None
    else:
        t = time.perf_counter()
        simplified = simmesh.simplify(dense, dense_faces, dense_sizes, {"pin": dense_pin}, 2000)
        simplify_s = time.perf_counter() - t

    for limits, suffix in ((True, ""), (False, ", tethers only")):
        row("simulated 100x100" + suffix, dense, dense_faces, dense_sizes, dense_pin, dense, dense_pin,
            stretch_limits=limits, reference_ms=1.387)
        row("authored 45x45 proxy" + suffix, proxy, proxy_faces, proxy_sizes, proxy_pin, dense, dense_pin,
            stretch_limits=limits, reference_ms=0.300)
        if simplified is not None:
            c_pos, c_faces, c_sizes, c_weights = simplified
            row("simplified to 2000" + suffix, c_pos, c_faces, c_sizes, c_weights["pin"], dense, dense_pin,
                stretch_limits=limits, reference_ms=0.281, simplify_s=round(simplify_s, 2))

    bind_rows(proxy, proxy_faces, proxy_sizes)


if __name__ == "__main__":
    main()
