"""Compile the solver in the background so the first play does not freeze Blender.

numba compiles a kernel the first time it is called, in the calling thread:
inside Blender that is the UI thread, and the first play after installing
would stop Blender for the minute numba needs. So enabling the add-on starts
:mod:`scene.warmup_child` in one or two processes of Blender's own Python
(``sys.executable``), which import the same source files under the same
package name, drive the solver as a live cloth would and leave every kernel
in numba's disk cache (the add-on's ``NUMBA_CACHE_DIR``); Blender's process
then loads them from there instead of compiling.

The work comes in groups (``GROUPS``: the default step, self collision, a
proxy's skinning...), handed to whichever process is free, the ones the
scene in front of the artist needs first (:func:`ready_for` moves them to
the front). While a cloth's groups are not compiled the frame handler leaves
it as it is (shown at rest): playback goes on, and the cloth simulates from
the first frame after they are. A group done is recorded in the cache folder
with a fingerprint of the sources, Python, numba and the CPU, so a later
start with nothing new to compile is ready at once, without a process.

Where no process can be started, or one fails, the groups it did not finish
count as ready: the solver compiles in Blender on the first play, as without
this module, and :func:`status_line` says so.

Hooks (three places): ``start(__package__)`` in the add-on's register() once
``NUMBA_CACHE_DIR`` is set and ``stop()`` in unregister(); ``ready_for(objs,
scene)`` before each simulation in the frame handler; ``status_line(scene)``
as a label in the cloth panel. A bake, which blocks anyway, calls ``wait()``.
"""

import atexit
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import threading
import time

# Group names in the order they are compiled (unless a scene asks for others
# first), with the seconds of CPU each took to compile cold, used only to
# weigh the progress shown; see warmup_child for what each one drives.
GROUPS = {
    "step_sweep": 9.0,
    "build": 2.5,
    "step_solve": 5.0,
    "step": 4.0,
    "general": 25.0,
    "mesh": 50.0,
    "self": 53.0,
    "skin": 19.0,
    "self_general": 4.0,
}

MARKER = "drape-warmup.json"
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warmup_child.py")
_PREFIX = "drape-warmup "


class _Worker:
    def __init__(self, proc):
        self.proc = proc
        self.group = None          # the group it compiles now
        self.started = None        # when it began that group
        self.tail = []             # its last lines of other output (numba's warnings, a traceback)
        self.thread = None


class _Warmup:
    """The state shared by the frame handler, the panel and the threads that
    read the workers' output (under ``lock``)."""

    def __init__(self, package, root, marker_path, fingerprint):
        self.lock = threading.Lock()
        self.package = package
        self.root = root
        self.marker_path = marker_path
        self.fingerprint = fingerprint
        self.queue = []            # groups not handed out yet, next first
        self.done = {}             # group -> the worker's report (wall_s, cpu_s, compiled, loaded)
        self.failed = {}           # group -> why (compiled in Blender on first use instead)
        self.skipped = set()       # groups not asked for (compiled in Blender on first use)
        self.workers = []
        self.started = time.perf_counter()
        self.finished = None
        self.message = None
        self.printed = False
        self.stopping = False

    def pending(self):
        return [g for g in GROUPS if g not in self.done and g not in self.failed and g not in self.skipped]

    def settled(self, group):
        """Nothing more will happen to ``group`` in the background."""
        return group in self.done or group in self.failed or group in self.skipped


_state = None


# --------------------------------------------------------------------------- start / stop


def _python():
    """Blender's own Python executable (the bpy module's: the venv's), or None."""
    exe = sys.executable
    if exe and os.path.isfile(exe) and "python" in os.path.basename(exe).lower():
        return exe
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for name in (f"python{version}", "python3", "python", "python.exe"):
        for folder in ("bin", ""):
            candidate = os.path.join(sys.prefix, folder, name)
            if os.path.isfile(candidate):
                return candidate
    return None


def _fingerprint(root):
    """What the cache's validity depends on: the source files of the
    kernels and of what they import (numba invalidates a kernel when its
    file changes), what the workers run, Python, numba, the CPU and numba's
    settings from the environment."""
    h = hashlib.sha256()
    files = [os.path.join("scene", "_kernels.py"), os.path.join("scene", "warmup_child.py")]
    for folder, dirs, names in os.walk(os.path.join(root, "solver")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.relpath(os.path.join(folder, n), root) for n in sorted(names) if n.endswith(".py")]
    for rel in files:
        h.update(rel.encode())
        try:
            with open(os.path.join(root, rel), "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError:
            h.update(b"missing")
    try:
        from importlib.metadata import version

        numba_version = version("numba") + "/" + version("llvmlite")
    except Exception:  # noqa: BLE001 - an unusual install: the marker then only names Python
        numba_version = "?"
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu += "".join(sorted({ln for ln in f if ln.startswith(("model name", "flags"))}))
    except OSError:
        pass
    numba_env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("NUMBA_", "DRAPE_PORTABLE")))
    h.update(json.dumps([sys.version, sys.executable, root, numba_version, cpu, platform.machine(),
                         numba_env]).encode())
    return h.hexdigest()


def _read_marker(path, fingerprint):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return set()
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
        return set()
    return {g for g in data.get("groups", ()) if g in GROUPS}


def _write_marker(state):
    if state.marker_path is None:
        return
    tmp = f"{state.marker_path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"fingerprint": state.fingerprint, "groups": sorted(state.done)}, f)
        os.replace(tmp, state.marker_path)
    except OSError:
        pass  # only the next start's shortcut is lost


def start(package, *, workers=None, force=False, groups=None):
    """Start compiling in the background (idempotent). ``package``: the
    add-on's ``__package__``. Does nothing in background mode (a render farm
    or a script: there is no UI to keep alive, the solver compiles on first
    use) unless ``force`` or ``DRAPE_BACKGROUND_COMPILE=1``; never with
    ``DRAPE_BACKGROUND_COMPILE=0``.
    ``workers``: processes (default two, one on a single core); ``groups``:
    only these (default all). Returns the groups still to compile (empty:
    nothing to do)."""
    global _state
    if _state is not None:
        return _state.pending()
    switch = os.environ.get("DRAPE_BACKGROUND_COMPILE", "")
    if switch == "0":
        return []
    if not force and switch != "1":
        try:
            import bpy

            if bpy.app.background:
                return []
        except ImportError:
            return []
    module = sys.modules[package]
    root = list(module.__path__)[0]  # exactly as this process spells it: numba keys the cache on it
    cache_dir = os.environ.get("NUMBA_CACHE_DIR") or None
    fingerprint = _fingerprint(root)
    marker = os.path.join(cache_dir, MARKER) if cache_dir else None
    state = _Warmup(package, root, marker, fingerprint)
    for group in (_read_marker(marker, fingerprint) if marker else ()):
        state.done[group] = {"group": group, "from": "marker"}
    state.skipped = set(GROUPS) - set(GROUPS if groups is None else groups)
    state.queue = state.pending()
    _state = state
    if not state.queue:
        state.finished = time.perf_counter()
        _preload(package)
        return []
    python = _python()
    if python is None:
        _fail_all(state, "Blender's Python executable was not found")
        return state.pending()
    # Two workers halve the wall time on two cores or more; without a file
    # lock for numba's index (warmup_child.serialise_cache_writes) only one.
    most = 2 if importlib.util.find_spec("fcntl") is not None else 1
    count = workers or int(os.environ.get("DRAPE_BACKGROUND_WORKERS", "0") or 0) or max(
        1, min(most, os.cpu_count() or 1, len(state.queue)))
    env = dict(os.environ)
    command = [python, "-I", _CHILD, package, root, json.dumps(sys.path)]
    for _ in range(count):
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, encoding="utf-8", errors="replace", env=env, bufsize=1)
        except OSError as exc:
            if not state.workers:
                _fail_all(state, f"could not start {python} ({exc})")
                return state.pending()
            break
        worker = _Worker(proc)
        worker.thread = threading.Thread(target=_read, args=(state, worker), name="drape-warmup", daemon=True)
        state.workers.append(worker)
        worker.thread.start()
    atexit.register(stop)
    _start_redraw_timer()
    _preload(package)
    return state.pending()


def _preload(package):
    """Import the solver (numba and the decoration of its kernels: a few
    tenths of a second) in a thread while the workers compile, so the first
    simulated frame only loads kernels. Python switches threads every few
    milliseconds, so the UI keeps running; an import the frame handler
    starts meanwhile waits for this one instead of doing it twice."""
    def run():
        try:
            for name in (".solver", ".solver.selfcollision", ".solver.skinning"):
                importlib.import_module(package + name)
        except Exception:  # noqa: BLE001 - the frame handler's own import reports it
            pass

    threading.Thread(target=run, name="drape-preload", daemon=True).start()


def _fail_all(state, why):
    with state.lock:
        for group in state.pending():
            state.failed[group] = why
        state.queue = []
        state.finished = time.perf_counter()
        state.message = (f"Drape: the solver could not compile in the background ({why}); "
                         f"it compiles in Blender on the first play, which pauses Blender for about a minute")
    if not state.printed:
        state.printed = True
        print(state.message)


def _hand_out(state, worker):
    """Give ``worker`` the next group (under the lock) or close its input."""
    if state.queue:
        worker.group = state.queue.pop(0)
        worker.started = time.perf_counter()
        try:
            worker.proc.stdin.write(worker.group + "\n")
            worker.proc.stdin.flush()
            return
        except (OSError, ValueError):
            state.failed[worker.group] = "the compiling process stopped"
    worker.group = None
    try:
        worker.proc.stdin.close()
    except (OSError, ValueError):
        pass


def _read(state, worker):
    """A worker's output, line by line (its own thread)."""
    for line in worker.proc.stdout:
        if not line.startswith(_PREFIX):
            worker.tail = (worker.tail + [line.rstrip()])[-20:]
            continue
        try:
            report = json.loads(line[len(_PREFIX):])
        except ValueError:
            continue
        event = report.get("event")
        with state.lock:
            if event == "done" and report.get("group") in GROUPS:
                state.done[report["group"]] = report
                state.failed.pop(report["group"], None)
                _write_marker(state)
            elif event == "error" and report.get("group") in GROUPS:
                state.failed[report["group"]] = report.get("message", "error")
                worker.tail = (worker.tail + str(report.get("trace", "")).splitlines())[-20:]
            elif event == "error":  # the imports failed: this worker compiles nothing
                worker.tail = (worker.tail + str(report.get("trace", "")).splitlines())[-20:]
                break
            if event in ("ready", "done", "error"):
                _hand_out(state, worker)
    code = worker.proc.wait()
    if state.stopping:
        return
    with state.lock:
        if worker.group is not None and worker.group not in state.done:
            state.failed[worker.group] = f"the compiling process stopped (exit code {code})"
        worker.group = None
        alive = [w for w in state.workers if w.proc.poll() is None]
        if not alive:
            why = None
            if state.queue or (code != 0 and not state.done):
                tail = " | ".join(t for t in worker.tail[-3:] if t)
                why = f"exit code {code}" + (f": {tail}" if tail else "")
                for group in list(state.queue):
                    state.failed[group] = why
                state.queue = []
            state.finished = time.perf_counter()
            if state.failed and state.message is None:
                why = why or next(iter(state.failed.values()))
                state.message = (f"Drape: part of the solver did not compile in the background ({why}); "
                                 f"it compiles in Blender when first used")
    if state.message and not state.printed:
        state.printed = True
        print(state.message)


def stop():
    """Stop the background processes (unregister, Blender quitting); the
    groups they finished stay in the cache."""
    global _state
    state, _state = _state, None
    _stop_redraw_timer()
    try:
        atexit.unregister(stop)
    except Exception:  # noqa: BLE001 - interpreter shutting down
        pass
    if state is None:
        return
    state.stopping = True
    for worker in state.workers:
        if worker.proc.poll() is None:
            worker.proc.terminate()
    for worker in state.workers:
        try:
            worker.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        if worker.thread is not None:
            worker.thread.join(timeout=2.0)
        for stream in (worker.proc.stdin, worker.proc.stdout):
            try:
                stream.close()
            except (OSError, ValueError, AttributeError):
                pass


# --------------------------------------------------------------------------- asking


def needed(objs, scene=None):
    """The groups a simulation of ``objs`` (one cloth, or one cloth-cloth
    group) runs: mirrors how solver.step chooses its kernel (the default
    path is one iteration, undamped stretch, shear and bend, no wind) and
    what runtime adds (self collision, a proxy's or automatic mesh's skin)."""
    lead = objs[0].drape
    # The default step's kernels come first for every cloth: every loop calls them.
    groups = {"build", "step_sweep", "step_solve"}
    windy = False
    if scene is not None:
        from . import wind

        windy = bool(wind.wind_fields(scene))
    default = (lead.iterations == 1 and lead.stretch_damping == 0 and lead.shear_damping == 0
               and lead.bend_damping == 0 and not windy)
    # Sewing, pressure and the skinned constraints run in the general step too.
    garment = bool(getattr(lead, "use_sewing", False) or getattr(lead, "use_pressure", False)
                   or getattr(lead, "max_distance", 0.0) > 0 or getattr(lead, "backstop_radius", 0.0) > 0)
    default = default and not garment
    if lead.self_collision or len(objs) > 1:
        groups.add("self" if default else "self_general")
        groups.add("self")
    elif scene is not None and _has_mesh_colliders(scene):
        # Mesh colliders always take the general step, with their kernels.
        groups.add("mesh")
    else:
        groups.add("step" if default else "general")
    if any(o.drape.sim_source != 'SELF' for o in objs):
        groups.add("skin")
    return groups


def _has_mesh_colliders(scene):
    from . import colliders

    return any(o.drape_collider.kind == 'MESH' for o in colliders.collider_objects(scene))


def needed_by(scene):
    """The groups every Drape cloth of ``scene`` needs (see needed)."""
    cloths = [o for o in scene.objects if o.type == 'MESH' and o.drape.enabled]
    together = sorted((o for o in cloths if o.drape.cloth_collision), key=lambda o: o.name)
    if len(together) < 2:
        together = []
    groups = needed(together, scene) if together else set()
    for obj in cloths:
        if obj not in together:
            groups |= needed([obj], scene)
    return groups


def wait_for(scene, timeout=None):
    """Block until what ``scene``'s cloths need is compiled (a bake, which
    plays the frames itself and blocks Blender anyway, calls this first:
    otherwise the frame handler would leave its frames unsimulated)."""
    return wait(needed_by(scene), timeout)


def ready(groups=None):
    """Whether ``groups`` (default: all) can run without compiling in this
    process: compiled in the background, or given up on (then they compile
    here on first use, as without a background compile)."""
    state = _state
    if state is None:
        return True
    with state.lock:
        return all(state.settled(g) for g in (GROUPS if groups is None else groups))


def prioritize(groups):
    """Compile ``groups`` next (those not handed out yet)."""
    state = _state
    if state is None:
        return
    with state.lock:
        state.queue.sort(key=lambda g: g not in groups)


def ready_for(objs, scene=None):
    """Whether the frame handler may simulate ``objs`` now; if not, their
    groups are compiled next. Cheap: called for every simulation every frame."""
    state = _state
    if state is None or state.finished is not None and not state.queue:
        return True
    groups = needed(objs, scene)
    if ready(groups):
        return True
    prioritize(groups)
    return False


def wait(groups=None, timeout=None):
    """Block until ``groups`` (default: all) are ready, or ``timeout`` seconds
    pass; returns whether they are. For work that blocks Blender anyway (a
    bake): waiting here costs no more than compiling, and compiles nothing twice."""
    deadline = None if timeout is None else time.perf_counter() + timeout
    if groups is not None:
        prioritize(set(groups))
    while not ready(groups):
        if deadline is not None and time.perf_counter() >= deadline:
            return False
        time.sleep(0.05)
    return True


def progress(groups=None):
    """0..1: how much of ``groups`` (default: all) is compiled, by the CPU
    time each took here before (scaled by how fast this machine did the
    groups done so far); a group being compiled counts in proportion to its
    elapsed time, up to 90 %."""
    state = _state
    if state is None:
        return 1.0
    names = list(GROUPS if groups is None else groups)
    now = time.perf_counter()
    with state.lock:
        measured = [(r["wall_s"], GROUPS[g]) for g, r in state.done.items() if "wall_s" in r]
        speed = sum(m for m, _ in measured) / max(sum(w for _, w in measured), 1e-9) if measured else 1.0
        running = {w.group: now - w.started for w in state.workers if w.group is not None}
        total = sum(GROUPS[g] for g in names)
        got = 0.0
        for g in names:
            if state.settled(g):
                got += GROUPS[g]
            elif g in running:
                got += GROUPS[g] * min(running[g] / max(GROUPS[g] * speed, 1e-9), 0.9)
    return got / total if total else 1.0


def status_line(scene=None):
    """One line for the cloth panel, or None when there is nothing to say:
    how far the compile of what the scene's cloths need has come, or why it
    compiles in Blender instead."""
    state = _state
    if state is None:
        return None
    if state.message:
        return state.message.removeprefix("Drape: ")
    groups = needed_by(scene) if scene is not None else set()
    groups = groups or {"build", "step_sweep", "step_solve", "step"}
    if ready(groups):
        return None
    return f"Compiling the solver… {int(100 * progress(groups))}%"


def report():
    """What happened so far, for tests and benchmarks: {"done": {group: the
    worker's report}, "failed": {group: why}, "pending": [...], "elapsed_s"}."""
    state = _state
    if state is None:
        return None
    with state.lock:
        end = state.finished or time.perf_counter()
        return {"done": dict(state.done), "failed": dict(state.failed), "pending": state.pending(),
                "elapsed_s": end - state.started, "workers": len(state.workers),
                "pids": [w.proc.pid for w in state.workers]}


# --------------------------------------------------------------------------- redraw


def _redraw():
    """Timer: redraw the panels while compiling (they show the progress)."""
    import bpy

    state = _state
    for window in getattr(bpy.context.window_manager, "windows", ()):
        for area in window.screen.areas:
            if area.type in {'VIEW_3D', 'PROPERTIES'}:
                area.tag_redraw()
    if state is None or (state.finished is not None and not state.queue):
        return None
    return 0.5


def _start_redraw_timer():
    try:
        import bpy

        if not bpy.app.timers.is_registered(_redraw):
            bpy.app.timers.register(_redraw, first_interval=0.5)
    except (ImportError, AttributeError):
        pass


def _stop_redraw_timer():
    try:
        import bpy

        if bpy.app.timers.is_registered(_redraw):
            bpy.app.timers.unregister(_redraw)
    except (ImportError, AttributeError):
        pass
