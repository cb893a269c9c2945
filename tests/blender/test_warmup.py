"""The solver compiled in the background (scene.warmup) is what the first play loads.

Subprocesses with an empty NUMBA_CACHE_DIR run the background compile to the
end ("compile"); then a fresh process ("play") plays real Blender scenes, one
per kind of simulation the compile covers, and counts with numba's own
dispatcher statistics what its kernels did: every signature must come from
the cache (``cache_misses`` 0) and none may be compiled there. The same runs
against the installed extension (``bl_ext.user_default.drape``, the venv's
numba hidden) check that the workers' cache entries carry the names and paths
Blender's process looks them up by. The probe part imports nothing outside
the standard library at module level, so the file also runs as a script.
"""

import importlib
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALLED = "bl_ext.user_default.drape"
SCENES = ("default", "self", "proxy", "windy", "pair", "mesh")


# --------------------------------------------------------------------- probe


def _enable(package):
    """Enable the add-on as Blender would; ``DRAPE_PROBE_ROOT`` loads the
    package ``drape`` from another folder (a checkout with changes)."""
    import bpy

    if package == INSTALLED:
        bpy.ops.preferences.addon_enable(module=package)
    else:
        root = os.environ.get("DRAPE_PROBE_ROOT")
        if root and package not in sys.modules:
            spec = importlib.util.spec_from_file_location(package, os.path.join(root, "__init__.py"),
                                                          submodule_search_locations=[root])
            module = importlib.util.module_from_spec(spec)
            sys.modules[package] = module
            spec.loader.exec_module(module)
        importlib.import_module(package).register()
    return importlib.import_module(package)


def _dispatchers(package):
    from numba.core.dispatcher import Dispatcher

    found = {}
    for name, module in list(sys.modules.items()):
        if module is not None and (name == package or name.startswith(package + ".")):
            for value in list(vars(module).values()):
                if isinstance(value, Dispatcher):
                    found[f"{value.py_func.__module__}.{value.py_func.__qualname__}"] = value
    return found


def _counts(package):
    out = {}
    for name, d in _dispatchers(package).items():
        out[name] = (sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))
    return out


def _sheet(name, n=40, z=1.0, pin=True):
    import bpy
    import numpy as np

    bpy.ops.mesh.primitive_grid_add(x_subdivisions=n, y_subdivisions=n, size=1.0, location=(0, 0, z))
    obj = bpy.context.active_object
    obj.name = name
    co = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    if pin:
        top = np.where(co[:, 1] > co[:, 1].max() - 1e-5)[0]
        obj.vertex_groups.new(name="pin").add([int(i) for i in top], 1.0, 'REPLACE')
    return obj


def _add_cloth(obj, **settings):
    import bpy

    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.drape.cloth_add(pin_group="pin" if obj.vertex_groups.get("pin") else "")
    for key, value in settings.items():
        setattr(obj.drape, key, value)


def _capsule():
    import bpy

    bpy.ops.object.select_all(action='DESELECT')
    bpy.ops.object.empty_add(location=(-0.6, 0.0, 0.6), rotation=(0, 0, -math.pi / 2))
    cap = bpy.context.active_object
    cap.scale = (1, 1.2, 1)
    bpy.ops.drape.collider_add(type='CAPSULE', radius=0.15)
    return cap


def build_scene(kind):
    """The scenes a user plays, one per kind of simulation (warmup.needed):
    "default" the 40 x 40 pinned sheet with a capsule; "self" with self
    collision; "proxy" a dense sheet simulated on a coarse proxy; "windy" a
    damped, two-iteration sheet in a Wind field; "pair" two cloths colliding
    with each other; "mesh" the default sheet over a Mesh collider (a
    cube). Returns (scene, cloth objects)."""
    import bpy

    # The home file, not the factory settings: those disable an add-on enabled in the preferences.
    bpy.ops.wm.read_homefile(use_empty=True)
    scene = bpy.context.scene
    if kind == "proxy":
        proxy = _sheet("Proxy", n=10, pin=False)
        dense = _sheet("Dense", n=60)
        _add_cloth(dense, sim_source='PROXY', proxy=proxy)
        proxy.hide_set(True)
        cloths = [dense]
    elif kind == "pair":
        a = _sheet("A", n=20, z=1.0)
        b = _sheet("B", n=20, z=1.004)
        _add_cloth(a, cloth_collision=True, layer=0)
        _add_cloth(b, cloth_collision=True, layer=1)
        cloths = [a, b]
    else:
        sheet = _sheet("Sheet")
        settings = {}
        if kind == "self":
            settings = dict(self_collision=True)
        elif kind == "windy":
            settings = dict(iterations=2, stretch_damping=0.1)
        _add_cloth(sheet, **settings)
        cloths = [sheet]
        if kind == "windy":
            bpy.ops.object.effector_add(type='WIND', location=(0, -2, 1), rotation=(-math.pi / 2, 0, 0))
            bpy.context.active_object.field.strength = 3.0
        if kind == "mesh":
            bpy.ops.object.select_all(action='DESELECT')
            bpy.ops.mesh.primitive_cube_add(size=0.6, location=(0, 0, 0.6))
            bpy.ops.drape.collider_add(type='MESH')
    _capsule()
    return scene, cloths


def _compile(package, out, groups):
    from_module = _enable(package)
    warmup = importlib.import_module(package + ".scene.warmup")
    t0 = time.perf_counter()
    warmup.start(from_module.__name__, force=True, groups=groups or None)
    ok = warmup.wait(timeout=1200)
    report = warmup.report()
    warmup.stop()
    report.update(ok=ok, wall_s=time.perf_counter() - t0, cache_dir=os.environ.get("NUMBA_CACHE_DIR", ""),
                  marker=os.path.isfile(os.path.join(os.environ.get("NUMBA_CACHE_DIR", ""), warmup.MARKER)))
    out.write_text(json.dumps(report))


def _play(package, out, kinds):
    import bpy

    _enable(package)
    runtime = importlib.import_module(package + ".scene.runtime")
    results = {"cache_dir": os.environ.get("NUMBA_CACHE_DIR", ""), "scenes": {}}
    for kind in kinds:
        before = _counts(package)
        scene, cloths = build_scene(kind)
        t0 = time.perf_counter()
        c0 = time.process_time()
        for frame in (1, 2, 3):
            scene.frame_set(frame)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        after = _counts(package)
        sim = runtime.get(cloths[0])
        compiled = {k: after[k][1] - before.get(k, (0, 0))[1] for k in after
                    if after[k][1] > before.get(k, (0, 0))[1]}
        loaded = sum(after[k][0] - before.get(k, (0, 0))[0] for k in after)
        results["scenes"][kind] = dict(compiled=compiled, loaded=loaded, wall_s=wall, cpu_s=cpu,
                                       steps=sim.steps if sim else 0, error=sim.error if sim else "no simulation")
    bpy.ops.wm.read_homefile(use_empty=True)
    out.write_text(json.dumps(results))


def _child_cpu(pids):
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return total


def _first_play(package, out, kind):
    """Enable, build the scene, play at 24 frames a second until the cloth
    has simulated a step: the wall and CPU seconds to there (this process
    and the workers), the longest frame, what the cloth showed meanwhile."""
    import bpy
    import numpy as np

    t0, c0 = time.perf_counter(), time.process_time()
    _enable(package)
    warmup = importlib.import_module(package + ".scene.warmup")
    runtime = importlib.import_module(package + ".scene.runtime")
    rep = warmup.report()
    pids = rep["pids"] if rep else []
    scene, cloths = build_scene(kind)
    cloth = cloths[0]
    rest = np.empty(len(cloth.data.vertices) * 3, np.float32)
    cloth.data.vertices.foreach_get("co", rest)
    frames, moved_while_waiting, statuses = [], 0.0, set()
    frame, first = 1, None
    while time.perf_counter() - t0 < 600:
        a = time.perf_counter()
        scene.frame_set(frame)
        frames.append(time.perf_counter() - a)
        sim = runtime.get(cloth)
        if sim is not None and sim.steps >= 1:
            first = time.perf_counter() - t0
            break
        shown = cloth.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
        co = np.empty(len(shown.vertices) * 3, np.float32)
        shown.vertices.foreach_get("co", co)
        moved_while_waiting = max(moved_while_waiting, float(np.abs(co - rest).max()))
        statuses.add(warmup.status_line(scene))
        frame = frame + 1 if frame < scene.frame_end else scene.frame_start
        time.sleep(max(0.0, 1 / 24 - frames[-1]))
    result = dict(first_s=first, cpu_s=time.process_time() - c0, workers_cpu_s=_child_cpu(pids),
                  frames=len(frames), longest_frame_s=max(frames),
                  longest_at=frames.index(max(frames)), last_frames_s=frames[-3:], moved_while_waiting=moved_while_waiting,
                  statuses=sorted(s for s in statuses if s), report=warmup.report(),
                  error=sim.error if sim else None)
    bpy.ops.wm.read_homefile(use_empty=True)
    importlib.import_module(package).unregister()
    out.write_text(json.dumps(result))


def _install(zip_path, out):
    import bpy

    result = bpy.ops.extensions.package_install_files(filepath=str(zip_path), repo="user_default",
                                                      enable_on_install=False)
    out.write_text(json.dumps({"installed": sorted(result)}))


def main(argv):
    mode, package, out = argv[1], argv[2], pathlib.Path(argv[3])
    if package == INSTALLED:
        sys.path.insert(0, str(ROOT / "tools"))
        from import_guard import only_under

        only_under(("numba", "llvmlite", "drape"), os.environ["BLENDER_USER_RESOURCES"])
    if mode == "install":
        _install(argv[4], out)
    elif mode == "compile":
        _compile(package, out, [g for g in argv[4].split(",") if g])
    elif mode == "play":
        _play(package, out, argv[4].split(","))
    elif mode == "firstplay":
        _first_play(package, out, argv[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
    sys.exit(0)  # the tests below are pytest's


# --------------------------------------------------------------------- tests (pytest only below)

import pytest  # noqa: E402

bpy = pytest.importorskip("bpy")


def _run(mode, package, tmp, *args, env=None, timeout=1500):
    out = tmp / f"{mode}-{len(list(tmp.iterdir()))}.json"
    proc = subprocess.run([sys.executable, __file__, mode, package, str(out), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        pytest.fail(f"{mode} probe failed (exit {proc.returncode}):\n{tail}")
    return json.loads(out.read_text())


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _check_compiled(report):
    assert report["ok"], report
    assert not report["failed"] and not report["pending"], report
    # An empty cache: the workers compiled, nothing was there to load.
    compiled = {g: r["compiled"] for g, r in report["done"].items()}
    assert all(n > 0 for n in compiled.values()), compiled
    assert report["marker"], "a finished compile is recorded for the next start"


def _check_played(played, kinds):
    for kind in kinds:
        result = played["scenes"][kind]
        assert result["error"] is None and result["steps"] >= 2, (kind, result)
        assert result["compiled"] == {}, f"{kind}: compiled in the playing process: {result['compiled']}"
        assert result["loaded"] > 0, (kind, result)


@pytest.mark.slow
def test_background_compile_is_what_the_first_play_of_every_kind_loads(tmp_path):
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    env = _env(NUMBA_CACHE_DIR=cache)
    report = _run("compile", "drape", tmp_path, "", env=env)
    _check_compiled(report)
    played = _run("play", "drape", tmp_path, ",".join(SCENES), env=env)
    assert played["cache_dir"] == str(cache)
    _check_played(played, SCENES)
    # Loaded, the default scene's first frames take a fraction of the seconds compiling them took.
    default = played["scenes"]["default"]
    compile_s = sum(report["done"][g]["cpu_s"] for g in ("build", "step_sweep", "step_solve", "step"))
    assert default["wall_s"] < 0.25 * compile_s, (default, compile_s)


@pytest.mark.slow
def test_first_play_with_a_mesh_collider_loads_what_the_mesh_group_compiled(tmp_path):
    # Only the groups a sheet over a Mesh collider needs (warmup.needed):
    # playing it then compiles nothing in Blender's process.
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    env = _env(NUMBA_CACHE_DIR=cache)
    report = _run("compile", "drape", tmp_path, "build,step_sweep,step_solve,mesh", env=env)
    _check_compiled(report)
    _check_played(_run("play", "drape", tmp_path, "mesh", env=env), ["mesh"])


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The linux-x64 zip installed with Blender's installer into a scratch user folder."""
    import platform

    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the installed-extension run builds the linux-x64 zip")
    work = tmp_path_factory.mktemp("warmup-ext")
    dist = work / "dist"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build_extension.py"), "--platform", "linux-x64",
                           "--output-dir", str(dist)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"build failed: {proc.stderr.strip() or proc.stdout.strip()}")
    user = work / "user"
    user.mkdir()
    env = _env(BLENDER_USER_RESOURCES=user)
    _run("install", INSTALLED, work, next(dist.glob("*.zip")), env=env)
    shutil.rmtree(dist, ignore_errors=True)
    yield work, env
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_installed_extension_loads_what_its_workers_compiled(installed):
    work, env = installed
    report = _run("compile", INSTALLED, work, "build,step", env=env)
    _check_compiled(report)
    user = pathlib.Path(env["BLENDER_USER_RESOURCES"]).resolve()
    cache = pathlib.Path(report["cache_dir"]).resolve()
    assert cache.name == "numba_cache" and user in cache.parents, report["cache_dir"]
    assert any(cache.rglob("*.nbi")), "the workers wrote numba's index files into the extension's user folder"
    played = _run("play", INSTALLED, work, "default,windy", env=env)
    assert pathlib.Path(played["cache_dir"]).resolve() == cache
    _check_played(played, ["default"])
    # What the workers were not asked for compiles on first use, and the count sees it.
    assert played["scenes"]["windy"]["error"] is None
    assert played["scenes"]["windy"]["compiled"], played["scenes"]["windy"]


# --------------------------------------------------------------------- in this process, no compiling


@pytest.fixture
def fresh_warmup(addon):
    from drape.scene import warmup

    warmup.stop()
    yield warmup
    warmup.stop()


def test_background_mode_starts_nothing_unless_asked(fresh_warmup):
    warmup = fresh_warmup
    assert bpy.app.background
    assert warmup.start("drape") == []
    assert warmup.report() is None and warmup.ready() and warmup.status_line() is None


def test_no_python_to_start_falls_back_to_compiling_in_blender(fresh_warmup, monkeypatch, tmp_path, capsys):
    warmup = fresh_warmup
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warmup, "_python", lambda: str(tmp_path / "no-such-python"))
    pending = warmup.start("drape", force=True)
    assert pending == []
    rep = warmup.report()
    assert set(rep["failed"]) == set(warmup.GROUPS) and rep["workers"] == 0
    assert warmup.ready() and warmup.ready_for([_plain_cloth()], bpy.context.scene)
    line = warmup.status_line(bpy.context.scene)
    assert "no-such-python" in line and "first play" in line
    assert "compiles in Blender" in capsys.readouterr().out


def test_a_worker_that_dies_on_import_falls_back_with_its_reason(fresh_warmup, monkeypatch, tmp_path):
    warmup = fresh_warmup
    child = tmp_path / "child.py"
    child.write_text("import sys\nsys.stderr.write('ImportError: no numba here\\n')\nsys.exit(3)\n")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warmup, "_CHILD", str(child))
    warmup.start("drape", force=True)
    assert warmup.wait(timeout=60)
    rep = warmup.report()
    assert set(rep["failed"]) == set(warmup.GROUPS) and not rep["done"]
    line = warmup.status_line()
    assert "exit code 3" in line and "no numba here" in line


def test_a_recorded_compile_is_ready_at_once_without_a_process(fresh_warmup, monkeypatch, tmp_path):
    warmup = fresh_warmup
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    root = list(sys.modules["drape"].__path__)[0]
    marker = tmp_path / warmup.MARKER
    marker.write_text(json.dumps({"fingerprint": warmup._fingerprint(root), "groups": sorted(warmup.GROUPS)}))
    assert warmup.start("drape", force=True) == []
    assert warmup.report()["workers"] == 0 and warmup.ready()
    warmup.stop()
    # A source of the solver changed (numba recompiles it): the record no longer counts.
    marker.write_text(json.dumps({"fingerprint": "0" * 64, "groups": sorted(warmup.GROUPS)}))
    monkeypatch.setattr(warmup, "_python", lambda: None)
    warmup.start("drape", force=True)
    assert warmup.report()["done"] == {} and set(warmup.report()["failed"]) == set(warmup.GROUPS)


def _plain_cloth(name="Plain"):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    obj = _sheet(name, n=4, pin=False)
    _add_cloth(obj)
    return obj


def test_each_kind_of_cloth_needs_its_groups(addon):
    from drape.scene import warmup

    parts = {"build", "step_sweep", "step_solve"}
    cases = {
        "default": parts | {"step"},
        "self": parts | {"self"},
        "proxy": parts | {"step", "skin"},
        "windy": parts | {"general"},
        "pair": parts | {"self"},
        "mesh": parts | {"mesh"},
    }
    for kind, expected in cases.items():
        scene, cloths = build_scene(kind)
        assert warmup.needed(cloths, scene) == expected, kind
        assert warmup.needed_by(scene) == expected, kind
    scene, (sheet,) = build_scene("self")
    sheet.drape.iterations = 3
    assert warmup.needed([sheet], scene) == parts | {"self", "self_general"}


def test_progress_counts_the_needed_groups_by_their_weight(fresh_warmup, monkeypatch, tmp_path):
    warmup = fresh_warmup
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warmup, "_python", lambda: None)
    warmup.start("drape", force=True)
    state = warmup._state
    # As if the workers had finished "build" and were still on the rest.
    state.failed.clear()
    state.finished = None
    state.message = None
    state.queue = [g for g in warmup.GROUPS if g != "build"]
    state.done["build"] = {"group": "build", "wall_s": warmup.GROUPS["build"]}
    default = ("build", "step_sweep", "step_solve", "step")
    want = warmup.GROUPS["build"] / sum(warmup.GROUPS[g] for g in default)
    assert warmup.progress(set(default)) == pytest.approx(want)
    obj = _plain_cloth()
    scene = bpy.context.scene
    assert not warmup.ready_for([obj], scene)
    assert state.queue[:3] == ["step_sweep", "step_solve", "step"], "what the scene needs is compiled next"
    assert warmup.status_line(scene) == f"Compiling the solver… {int(100 * want)}%"
    for g in default[1:]:
        state.done[g] = {"group": g, "wall_s": warmup.GROUPS[g]}
    assert warmup.ready_for([obj], scene) and warmup.status_line(scene) is None


def _hooked():
    import inspect

    from drape.scene import runtime

    return "warmup.ready_for" in inspect.getsource(runtime.update_scene)


@pytest.mark.slow
@pytest.mark.skipif(not _hooked(), reason="the frame handler does not ask scene.warmup yet")
def test_playing_while_compiling_never_stops_blender_for_more_than_a_second(tmp_path):
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    # DRAPE_BACKGROUND_COMPILE=1: the background compile a UI session gets, in background mode.
    result = _run("firstplay", "drape", tmp_path, "default",
                  env=_env(NUMBA_CACHE_DIR=cache, DRAPE_BACKGROUND_COMPILE="1"))
    assert result["error"] is None and result["first_s"] is not None, result
    assert result["frames"] > 24, "playback went on while the solver compiled"
    assert result["longest_frame_s"] <= 1.0, result
    assert result["moved_while_waiting"] == 0.0, "the cloth stays at rest until it simulates"
    assert any(s.startswith("Compiling the solver") for s in result["statuses"]), result["statuses"]
    done = result["report"]["done"]
    assert {"build", "step_sweep", "step_solve", "step"} <= set(done), result["report"]
