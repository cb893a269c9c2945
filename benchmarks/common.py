"""Shared benchmark helpers: JSON-line output, median timing, the reference
scene (a sheet hanging from its top row, a capsule swinging through it)."""

import json
import sys
import time

import numpy as np


def emit(**fields):
    """Print one JSON line (one benchmark case)."""
    print(json.dumps(fields, sort_keys=False), flush=True)


def median_ms(seconds):
    return float(np.median(np.asarray(seconds))) * 1e3


def timed(fn, repeats, clock=time.perf_counter):
    """Call fn() `repeats` times; return the list of durations (s)."""
    out = []
    for _ in range(repeats):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def cpu_timed(fn, repeats):
    """Like timed() but in this thread's CPU time: on a shared, busy machine
    it leaves out the time the thread waited for a core (wall time does not)."""
    return timed(fn, repeats, clock=time.thread_time)


def hanging_sheet(nx, ny, size=1.0):
    """An nx x ny-quad square sheet in the XZ plane (y = 0), top edge at
    z = size, pinned along its top row.

    Returns rest (n, 3) float64, face_indices (4 nx ny,) int64, face_sizes
    (nx ny,) int64, pin_weight (n,) float32.
    """
    xs = np.linspace(0.0, size, nx + 1)
    zs = np.linspace(size, 0.0, ny + 1)
    x, z = np.meshgrid(xs, zs)
    rest = np.stack([x.ravel(), np.zeros(x.size), z.ravel()], axis=1)
    idx = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    quads = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], axis=-1)
    face_indices = quads.reshape(-1).astype(np.int64)
    face_sizes = np.full(nx * ny, 4, dtype=np.int64)
    pin_weight = np.zeros(len(rest), dtype=np.float32)
    pin_weight[: nx + 1] = 1.0
    return rest, face_indices, face_sizes, pin_weight


def swinging_capsule_ends(t, size=1.0, period=2.0, amplitude=None, radius=None):
    """Capsule end points at time t: horizontal (along x) across the lower
    half of the sheet, swinging in y back and forth through it."""
    amplitude = 0.4 * size if amplitude is None else amplitude
    # cos: it starts at the far end of its swing, clear of the sheet.
    y = amplitude * np.cos(2.0 * np.pi * t / period)
    z = 0.35 * size
    a = np.array([[0.2 * size, y, z]])
    b = np.array([[0.8 * size, y, z]])
    r = np.array([0.12 * size if radius is None else radius])
    return a, b, r


def swinging_capsule(t0, t1, size=1.0, period=2.0):
    """solver.Capsules for one step from t0 to t1 (imported lazily so the
    helpers stay importable without the solver)."""
    from drape.solver import Capsules

    a0, b0, r = swinging_capsule_ends(t0, size, period)
    a1, b1, _ = swinging_capsule_ends(t1, size, period)
    return Capsules(a0=a0, b0=b0, a1=a1, b1=b1, radius_a=r, radius_b=r)


def edge_strain(positions, pairs, rest_length):
    """l / rest - 1 per edge (0 = rest length)."""
    d = positions[pairs[:, 0]] - positions[pairs[:, 1]]
    return np.linalg.norm(d, axis=1) / np.maximum(rest_length, 1e-12) - 1.0


def log(msg):
    print(msg, file=sys.stderr, flush=True)
