"""Shared benchmark helpers: JSON-line output, median timing, the reference
scene (a sheet hanging from its top row, a capsule swinging through it)."""

import json
import sys
import time

import numpy as np


def emit(**fields):
    """Print one JSON line (one benchmark case), with the machine's speed just
    after it (host_calibration_ms, see host_calibration_ms())."""
    fields.setdefault("host_calibration_ms", host_calibration_ms())
    print(json.dumps(fields, sort_keys=False), flush=True)


class HostProbe:
    """One step of a fixed small case, timed: a 32x32 sheet hanging from its
    top row, default settings, 2 substeps, no collider.

    On a machine that shares its cores the probe's time can switch between
    a fast and a slow state every few tens of milliseconds, and the steps
    of a case measured right after a slow probe are slower too. So each
    measured step of a case can be tagged with the probe before it
    (quiet_median) and each JSON line carries the machine's speed just
    after the case (host_calibration_ms), to compare runs from different
    hours."""

    _shared = None

    def __init__(self):
        from drape import solver
        rest, faces, sizes, pin = hanging_sheet(32, 32)
        self.solver = solver
        self.params = solver.ClothParams(substeps=2)
        self.model = solver.build_model(rest, faces, sizes, solver.vertex_masses(rest, faces, sizes, 0.2), pin,
                                        self.params)
        self.state = self.model.new_state()
        self.count = 0
        self.seen = []  # every probe time so far (ms): their low end is the uncontended machine
        for _ in range(100):
            self.time_ms()

    @classmethod
    def shared(cls):
        """The process's probe, or None where the solver cannot be imported
        (inside a Blender without the extension)."""
        if cls._shared is None:
            try:
                cls._shared = cls()
            except ImportError:
                cls._shared = False
        return cls._shared or None

    def time_ms(self):
        """One probe step, in ms (the sheet restarts every 600 steps, so it
        stays a hanging sheet)."""
        if self.count % 600 == 0:
            self.state = self.model.new_state()
        self.count += 1
        t = time.perf_counter()
        self.solver.step(self.model, self.state, None, 1.0 / 60.0, self.params)
        ms = (time.perf_counter() - t) * 1e3
        self.seen.append(ms)
        return ms

    def quiet_limit_ms(self, room=1.15):
        """A probe at most this long ran uncontended: `room` over the
        fastest fiftieth of every probe this process timed (a case measured
        wholly in a contended stretch then has few quiet steps or none,
        rather than calling its slow steps quiet)."""
        return room * float(np.percentile(self.seen, 2))


def host_calibration_ms(steps=60, blocks=3):
    """Median ms of `blocks` x `steps` probe steps (HostProbe), measured
    now; None without the solver."""
    probe = HostProbe.shared()
    if probe is None:
        return None
    for _ in range(20):
        probe.time_ms()
    return round(float(np.median([probe.time_ms() for _ in range(steps * blocks)])), 4)


def quiet_median(values, probes_ms, scale=1e3):
    """(median of the values, times `scale`, of the steps that followed a
    fast probe, their count; None, 0 if none did): fast = under
    HostProbe.quiet_limit_ms(), taken once over every probe so far. values:
    seconds by default (ms out); pass scale=1 for values in ms. The
    uncontended cost, next to the plain median (which stays the figure of
    record)."""
    fast = np.asarray(probes_ms) <= HostProbe.shared().quiet_limit_ms()
    if not fast.any():
        return None, 0
    return round(float(np.median(np.asarray(values)[fast])) * scale, 4), int(fast.sum())


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
