"""Threads give the same bytes as one thread, and as the plain serial step.

Each scene runs the solver paths a cloth can take (the default loop with a
swinging capsule, the general loop with damping, iterations and wind, two
layered sheets with self and cloth-cloth contacts); the layered one is
chaotic, so a single rounding difference shows within a few frames. The
oracle is the plain `step` called on this thread with numba at one thread.
"""

import hashlib
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest

from drape.solver import Capsules, ClothParams, SolverError, StepInputs, build_model, step, threads, vertex_masses
from drape.solver import jit
from drape.solver.selfcollision import SelfCollision, merge_meshes

DT = 1.0 / 60.0
two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")


def _sheet(n, size, z=0.0):
    xs = np.linspace(-size / 2, size / 2, n + 1)
    x, y = np.meshgrid(xs, xs)
    rest = np.stack([x.ravel(), y.ravel(), np.full(x.size, z)], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1)
    return rest, quads.ravel(), np.full(n * n, 4)


def _capsule(f, speed=1.0):
    o0, o1 = (np.array([0.0, 0.25 * np.sin(2 * np.pi * speed * t / 0.6), 0.05 * np.sin(2 * np.pi * t / 0.42)])
              for t in (f * DT, (f + 1) * DT))
    caps = Capsules(a0=[[-0.6, 0, -0.1] + o0], b0=[[0.6, 0, -0.1] + o0], a1=[[-0.6, 0, -0.1] + o1],
                    b1=[[0.6, 0, -0.1] + o1], radius_a=[0.1], radius_b=[0.1])
    return caps, o1


class Scene:
    """A model, its state and the inputs of each frame."""

    def __init__(self, kind, n=10):
        self.kind = kind
        if kind == "layered":
            m = merge_meshes([_sheet(n, 0.6, 0.11), _sheet(n, 0.6, 0.13)])
            rest, fi, fs, region = m.positions, m.face_indices, m.face_sizes, m.region
            pin = np.zeros(len(rest), np.float32)
            mid = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)[n // 2]
            pin[mid] = 1.0
            pin[mid + (n + 1) ** 2] = 1.0
            self.params = ClothParams(substeps=8)
        else:
            rest, fi, fs = _sheet(n, 0.8)
            region = None
            pin = np.zeros(len(rest), np.float32)
            pin[: n + 1] = 1.0
            self.params = (ClothParams(substeps=3) if kind == "default" else
                           ClothParams(substeps=2, iterations=3, stretch_damping=0.05, bend_damping=0.1,
                                       air_drag=0.2))
        self.rest = rest.astype(np.float32)
        masses = vertex_masses(rest, fi, fs, 0.2)
        self.model = build_model(rest, fi, fs, masses, pin, self.params, region=region)
        if kind == "layered":
            self.model.self_collision = SelfCollision.from_model(self.model, thickness=0.006, layers=[0, 1])
            self.model.set_collider_offset(np.where(region == 1, 0.006, 0.0))
        self.state = self.model.new_state()
        self.frame = 0

    def args(self):
        """(model, state, inputs, dt, params) for the next frame."""
        caps, o1 = _capsule(self.frame, speed=1.0 + 0.1 * len(self.kind))
        wind = np.array([1.5, 0.5, 0.0]) if self.kind == "general" else None
        self.frame += 1
        inputs = StepInputs(pin_targets=self.rest + o1.astype(np.float32), capsules=caps, wind_velocity=wind)
        return self.model, self.state, inputs, DT, self.params

    def digest(self, h):
        h.update(self.state.positions.tobytes())
        h.update(self.state.velocities.tobytes())


KINDS = ("default", "general", "layered")


def _alone(kinds, frames, numba_count=1):
    """The oracle: each scene stepped by plain step() on this thread."""
    out = []
    with threads.numba_threads(numba_count):
        for kind in kinds:
            s, h = Scene(kind), hashlib.sha256()
            for _ in range(frames):
                step(*s.args())
                s.digest(h)
            out.append(h.hexdigest())
    return out


@two_threads
def test_each_scene_is_bit_identical_at_1_and_2_numba_threads():
    one = _alone(KINDS, 10, numba_count=1)
    two = _alone(KINDS, 10, numba_count=2)
    assert one == two


@pytest.fixture
def always_threaded(monkeypatch):
    """The pool even for these small cloths (it keeps small work on one thread)."""
    monkeypatch.setattr(threads, "MIN_PARALLEL_COST_NS", 0)


@two_threads
@pytest.mark.parametrize("count", [1, 2, 3])
def test_cloths_stepped_side_by_side_match_each_stepped_alone(count, always_threaded):
    kinds = KINDS * 2  # six cloths, two of each
    frames = 8
    reference = _alone(kinds, frames)
    scenes = [Scene(k) for k in kinds]
    hashes = [hashlib.sha256() for _ in scenes]
    for _ in range(frames):
        threads.step_all([s.args() for s in scenes], count)
        for s, h in zip(scenes, hashes):
            s.digest(h)
    assert [h.hexdigest() for h in hashes] == reference
    assert scenes[2].model.self_collision.count > 0, "the layers made no contacts: nothing was tested"


@two_threads
def test_jobs_run_at_once_on_serial_numba_workers():
    """With 2 threads two jobs overlap (each waits for the other at a
    barrier), and each sees numba at one thread; the caller's count stays."""
    barrier = threading.Barrier(2, timeout=20)
    before = numba.get_num_threads()

    def job():
        barrier.wait()
        return threading.get_ident(), numba.get_num_threads()

    (a, ea), (b, eb) = threads.run_all([job, job], 2)
    assert ea is None and eb is None
    assert a[0] != b[0] and a[1] == b[1] == 1
    assert numba.get_num_threads() == before
    # One thread, or work too small to hand over: the jobs run here, one
    # after the other, in order.
    for count, cost in ((1, None), (2, [threads.MIN_PARALLEL_COST_NS] + [1] * 4)):
        seen = []
        out = threads.run_all([lambda i=i: seen.append((i, threading.get_ident())) or i for i in range(5)], count,
                              cost)
        assert seen == [(i, threading.get_ident()) for i in range(5)] and [r for r, _ in out] == list(range(5))


@two_threads
def test_a_failing_cloth_changes_nothing_and_the_others_step(always_threaded):
    kinds = ("default", "general", "default")
    reference = _alone(kinds, 1)
    scenes = [Scene(k) for k in kinds]
    args = [s.args() for s in scenes]
    bad = args[1][2]
    bad.pin_targets = bad.pin_targets.copy()
    bad.pin_targets[3, 1] = np.nan
    before = scenes[1].state.positions.copy()
    with pytest.raises(SolverError, match="pin_targets"):
        threads.step_all(args, 2)
    np.testing.assert_array_equal(scenes[1].state.positions, before)
    for i in (0, 2):
        h = hashlib.sha256()
        scenes[i].digest(h)
        assert h.hexdigest() == reference[i]


def test_thread_counts_resolve_within_what_numba_has():
    have = threads.available()
    assert threads.resolve(0) == have and threads.resolve(None) == have
    assert threads.resolve(1) == 1 and threads.resolve(10 * have) == have
    try:
        threads.set_override(1)
        assert threads.resolve(0) == 1 and threads.resolve(8) == 1
        threads.set_override(0)
        assert threads.resolve(1) == have
        with pytest.raises(ValueError, match="threads"):
            threads.set_override(-2)
    finally:
        threads.set_override(None)
    assert threads.resolve(1) == 1


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_threads_setting_is_checked(bad):
    with pytest.raises(SolverError, match="ClothParams.threads"):
        ClothParams(threads=bad).validate()
    ClothParams(threads=3).validate()


@two_threads
def test_pools_end_on_shutdown_and_start_again():
    threads.run_all([lambda: 1, lambda: 2], 2)
    named = [t for t in threading.enumerate() if t.name.startswith("drape-step")]
    assert named
    threads.shutdown()
    for t in named:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in named)
    assert [r for r, _ in threads.run_all([lambda: 1, lambda: 2], 2)] == [1, 2]


per_thread_vectoriser = pytest.mark.skipif(not jit._THREAD_SCOPED,
                                           reason="this numba has no pass builder to scope per thread")


@per_thread_vectoriser
def test_the_vectoriser_switch_is_per_thread():
    """Two threads in compiled_fast at once, leaving in the other order than
    they came, and a third outside: each inside sees it on until it leaves
    (nested too), the one outside never does (a background compile keeps
    numba's default while a step runs), and numba's global setting is never
    touched."""
    from numba.core import config

    from drape.solver.jit import compiled_fast, vectoriser_on

    before = config.SLP_VECTORIZE
    a_in, b_in, a_out, c_seen = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with compiled_fast():
            with compiled_fast():
                a_in.set()
                b_in.wait(10)
            seen["a nested out"] = vectoriser_on()
            c_seen.wait(10)
        seen["a out"] = vectoriser_on()
        a_out.set()

    def second():
        a_in.wait(10)
        with compiled_fast():
            b_in.set()
            a_out.wait(10)
            seen["b in"] = vectoriser_on()
        seen["b out"] = vectoriser_on()

    def outside():
        b_in.wait(10)
        seen["c"] = vectoriser_on()
        seen["c global"] = config.SLP_VECTORIZE
        c_seen.set()

    ts = [threading.Thread(target=f) for f in (first, second, outside)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert seen == {"a nested out": True, "a out": bool(before), "b in": True, "b out": bool(before),
                    "c": bool(before), "c global": before}
    assert config.SLP_VECTORIZE == before


def test_asking_for_every_thread_starts_no_numba_threads():
    """In a fresh process the default count (every core) starts nothing;
    any other count is set for the calling thread and put back."""
    import subprocess
    import sys

    code = ("import numba\nfrom numba.np.ufunc import parallel\nfrom drape.solver import threads\n"
            "with threads.numba_threads(0):\n    pass\nprint(parallel._is_initialized)\n"
            "with threads.numba_threads(1):\n    inside = numba.get_num_threads()\n"
            "print(inside, numba.get_num_threads() == threads.available())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "1", "True"]


def _side_by_side(frames, count):
    """The digests of six cloths stepped side by side (always in the pool)."""
    threads.MIN_PARALLEL_COST_NS = 0
    scenes = [Scene(k) for k in KINDS * 2]
    hashes = [hashlib.sha256() for _ in scenes]
    for _ in range(frames):
        threads.step_all([s.args() for s in scenes], count)
        for s, h in zip(scenes, hashes):
            s.digest(h)
    return [h.hexdigest() for h in hashes]


@two_threads
def test_side_by_side_under_numba_s_workqueue_layer():
    """numba's fallback threading layer aborts the process when two threads
    launch parallel regions at once, even at one thread each: the steps run
    side by side must launch none (a kernel with parallel=True must check
    numba.get_num_threads() > 1 first, as skinning does). Six cloths, self
    collision on two, stepped on 2 threads in a process on workqueue."""
    code = ("import sys\nsys.path.insert(0, {here!r})\nimport numba\nimport test_threads as t\n"
            "print(' '.join(t._side_by_side(6, 2)))\nprint(numba.threading_layer())\n"
            ).format(here=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "workqueue"
    assert lines[-2].split() == _alone(KINDS * 2, 6)


@pytest.mark.slow
@two_threads
def test_a_large_cloth_split_by_colour_matches_the_serial_loop(monkeypatch):
    """loop.run_threaded (each colour over numba's threads) against loop.run,
    byte for byte, on the default scene and the layered one (self contacts),
    the threshold lowered so these small cloths take it."""
    from drape.solver import loop

    monkeypatch.setattr(threads, "COLOUR_SPLIT_MIN_VERTICES", 0)
    monkeypatch.setattr(threads, "BACKGROUND_COMPILE", False)
    kinds = ("default", "layered")
    serial = _alone(kinds, 10, numba_count=1)
    split = _alone(kinds, 10, numba_count=2)
    assert loop.run_threaded.signatures, "the split loop never ran: nothing was compared"
    assert split == serial


def _folded(n=24, seed=3):
    """A sheet folded over itself along x = 0, its top half 4 mm above the
    bottom one and moving at random: thousands of self contacts."""
    rest, fi, fs = _sheet(n, 0.6)
    pos = rest.copy()
    top = pos[:, 0] > 0
    pos[top, 0] = -pos[top, 0]
    pos[top, 2] = 0.004
    model = build_model(rest, fi, fs, vertex_masses(rest, fi, fs, 0.2), np.zeros(len(rest), np.float32),
                        ClothParams())
    sc = SelfCollision.from_model(model, thickness=0.006, patch_size=12)
    vel = np.random.default_rng(seed).normal(0.0, 0.3, pos.shape)
    return sc, pos.T.astype(np.float32).copy(), vel.T.astype(np.float32).copy()


def _found(sc):
    return [a.tobytes() for a in (sc.contact_vertex, sc.contact_kind, sc.contact_normal, sc.contact_frame,
                                  sc.contact_target, sc.contact_friction)] + [sc.candidates, sc.narrow_pairs]


@two_threads
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_threaded_detection_finds_the_serial_contacts_in_their_order(workers, monkeypatch):
    """The patch broad phase split over workers (more workers than threads
    too) gives the serial detection's contacts, in its order, byte for
    byte, and its pair counts; also once the contact buffers had to grow."""
    import drape.solver.selfcollision as selfcollision
    from drape.solver.selfcollision import broad

    monkeypatch.setattr(threads, "BACKGROUND_COMPILE", False)
    monkeypatch.setattr(selfcollision, "DETECT_SPLIT_MIN_PATCHES", 0)
    sc, pos, vel = _folded()
    g = np.array([0.0, 0.0, -9.81], np.float32)
    sc.detect(pos, vel, DT, g)
    serial = _found(sc)
    assert sc.count > 500, "too few contacts to compare"
    assert len(sc._pstart) - 1 >= 3 * workers, "too few patches to share out"
    # The workers are numba's threads: more of them than threads is the
    # kernel called with more scratch rows.
    monkeypatch.setattr(selfcollision, "thread_work",
                        lambda n, nt, npatch, _t, cap, tw=broad.thread_work: tw(n, nt, npatch, workers, cap))
    monkeypatch.setattr(sc, "_tw", None, raising=False)
    sc._alloc(64)   # too small: the threaded detection must grow the buffers as the serial one does
    with threads.numba_threads(2):
        sc.detect(pos, vel, DT, g, threads=2)
    assert sc.detect_threads == workers, "the threaded detection did not run"
    assert _found(sc) == serial


@two_threads
def test_self_colliding_steps_are_bit_identical_with_threaded_detection(monkeypatch):
    """The layered scene (self and cloth-cloth contacts) and a falling
    folded sheet, stepped at 1 and 2 numba threads with the detection
    threaded whatever the cloth's size: the same bytes."""
    import drape.solver.selfcollision as selfcollision

    monkeypatch.setattr(threads, "BACKGROUND_COMPILE", False)
    monkeypatch.setattr(selfcollision, "DETECT_SPLIT_MIN_PATCHES", 0)

    def layered(count):
        scene, h = Scene("layered"), hashlib.sha256()
        with threads.numba_threads(count):
            for _ in range(12):
                step(*scene.args())
                scene.digest(h)
        sc = scene.model.self_collision
        return h.hexdigest(), sc.detect_threads, sc.count

    (one, used_one, _), (two, used_two, contacts) = layered(1), layered(2)
    assert (used_one, used_two) == (1, 2), "the threaded detection did not run"
    assert contacts > 0
    assert one == two

    def fall(count):
        sc, pos, vel = _folded()
        model = build_model(*_sheet(24, 0.6), vertex_masses(*_sheet(24, 0.6), 0.2),
                            np.zeros(25 * 25, np.float32), ClothParams())
        model.self_collision = sc
        state = model.new_state(pos.T.copy())
        state.velocities[:] = vel
        h = hashlib.sha256()
        with threads.numba_threads(count):
            for _ in range(10):
                step(model, state, StepInputs(), DT, ClothParams(threads=count))
                h.update(state.positions.tobytes())
        return h.hexdigest(), sc.detect_threads, sc.count

    (one, used_one, contacts), (two, used_two, _) = fall(1), fall(2)
    assert (used_one, used_two) == (1, 2), "the threaded detection did not run"
    assert contacts > 0
    assert one == two


_BACKGROUND = """
import sys, threading
sys.path.insert(0, {tests!r})
import numpy as np
import test_threads as t
import drape.solver.selfcollision as selfcollision
from drape.solver import threads
from drape.solver.jit import compiled_fast
selfcollision.DETECT_SPLIT_MIN_PATCHES = 0
sc, pos, vel = t._folded()
g = np.array([0.0, 0.0, -9.81], np.float32)
sc.detect(pos, vel, t.DT, g)                 # serial, compiled as in a step
serial = t._found(sc)
inside, done = threading.Event(), threading.Event()
def step_running():                          # a step holds the vectoriser on meanwhile
    with compiled_fast():
        inside.set()
        done.wait(600)
runner = threading.Thread(target=step_running)
runner.start()
inside.wait(10)
with threads.numba_threads(2):
    sc.detect(pos, vel, t.DT, g, threads=2)  # starts the background compile
    first = sc.detect_threads
    threads.wait_for_compiles()
    sc.detect(pos, vel, t.DT, g, threads=2)
done.set()
runner.join()
print(first, sc.detect_threads, t._found(sc) == serial)
"""


@pytest.mark.slow
@two_threads
@per_thread_vectoriser
def test_background_compile_of_the_threaded_detection_rounds_as_the_serial_one(tmp_path):
    """In a fresh cache: the threaded detection compiled in the background
    while another thread is inside jit.compiled_fast (a step running) makes
    the serial detection's contacts byte for byte; the serial kernel serves
    until it is ready."""
    code = _BACKGROUND.format(tests=os.path.dirname(__file__))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ["1", "2", "True"]
