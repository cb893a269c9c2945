"""Nothing lost, ever: bakes and saves as an artist and a farm job meet them.

Two .blend files sharing a cache folder, a re-bake to another folder, a
headless job with --output and with --scene, full disks (a small tmpfs;
skipped with the reason where mounting is not allowed), a Blender API that
fails mid-bake. Positions come from an analytic deformation (test_bake.py's)
unless the test is about the real simulation.
"""

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import bpy
import numpy as np
import pytest

from drape.bake import install, job as bake_job, pc2
from drape.bake.targets import shape_keys

_spec = importlib.util.spec_from_file_location(
    "drape_test_bake_helpers", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_bake.py"))
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
ATOL = helpers.ATOL
AnalyticSource = helpers.AnalyticSource
add_grid = helpers.add_grid
read_co = helpers.read_co
evaluated_co = helpers.evaluated_co
evaluate_in_fresh_blender = helpers.evaluate_in_fresh_blender
cache_listing = helpers.cache_listing
HEADLESS = helpers.HEADLESS
_SOURCE_FILE = helpers._SOURCE_FILE


@pytest.fixture
def source_guard():
    previous = bake_job.set_frame_source(None)
    yield
    bake_job.set_frame_source(previous)


def _file_state(folder):
    """name -> (size, mtime in ns, bytes) of every file in ``folder``."""
    if not os.path.isdir(folder):
        return {}
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            st = os.stat(path)
            with open(path, "rb") as fh:
                out[name] = (st.st_size, st.st_mtime_ns, fh.read())
    return out


def _new_shot(path, names=("Cape",), target='PC2', folder="//drape_cache/", size=10):
    """A fresh file with grids named ``names``, saved at ``path``; returns the objects."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 12
    objs = []
    for i, name in enumerate(names):
        obj = add_grid(name, size=size, location=(3.0 * i, 0.0, 1.0))
        obj.drape_bake.target = target
        obj.drape_bake.folder = folder
        objs.append(obj)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return objs


def _bake(objs, scale=1.0, **kw):
    src = AnalyticSource(objs, scale=scale)
    bake_job.set_frame_source(src)
    bake_job.run_blocking(bpy.context.scene, objs, 1, 12, log=None, **kw)
    return src


# --- a re-bake elsewhere, two files sharing a folder ---------------------------

@pytest.mark.parametrize("target", ['PC2', 'ALEMBIC'])
def test_rebake_elsewhere_keeps_the_cache_the_saved_file_plays(addon, tmp_path, source_guard, target):
    path = tmp_path / "shot.blend"
    (cape,) = _new_shot(path, target=target, folder="//A/")
    src = _bake([cape])
    bpy.ops.wm.save_mainfile()
    ext = ".pc2" if target == 'PC2' else ".abc"
    a_file = tmp_path / "A" / f"Cape{ext}"
    before = _file_state(tmp_path / "A")

    # Reopen, bake to B, do not save.
    bpy.ops.wm.open_mainfile(filepath=str(path))
    cape = bpy.data.objects["Cape"]
    _bake([cape], scale=2.0, folder="//B/")
    assert cape.drape_bake.baked_filepath == f"//B/Cape{ext}"
    assert _file_state(tmp_path / "A") == before, "the saved file's cache is untouched"
    assert bake_job.unused_caches(str(tmp_path / "A")) == [], "the saved shot.blend still plays it"
    # The saved file still plays its bake, in a fresh Blender.
    positions, _ = evaluate_in_fresh_blender(path, {"Cape": [4, 12]}, tmp_path / "eval")
    for f in (4, 12):
        np.testing.assert_allclose(positions[("Cape", f)], src.expected("Cape", f), atol=ATOL, rtol=0)

    # Saved now: nothing plays A's file any more; the clean-up deletes it, and only it.
    bpy.ops.wm.save_mainfile()
    assert bake_job.unused_caches(str(tmp_path / "A")) == [str(a_file)]
    assert bake_job.unused_caches(str(tmp_path / "B")) == []
    bpy.context.view_layer.objects.active = cape
    assert bpy.ops.drape.cache_cleanup(folder=str(tmp_path / "A")) == {'FINISHED'}
    assert not a_file.exists()
    assert bpy.ops.drape.cache_cleanup(folder=str(tmp_path / "B")) == {'CANCELLED'}
    assert (tmp_path / "B" / f"Cape{ext}").is_file()


def test_two_blend_files_sharing_a_cache_folder(addon, tmp_path, source_guard):
    shared = str(tmp_path / "shared_cache")
    a_path, b_path = tmp_path / "a.blend", tmp_path / "b.blend"
    (cape_a,) = _new_shot(a_path, folder=shared)
    src_a = _bake([cape_a])
    bpy.ops.wm.save_mainfile()
    a_state = _file_state(shared)

    # Another shot with an object of the same name, baking into the same folder.
    (cape_b,) = _new_shot(b_path, folder=shared)
    src_b = _bake([cape_b], scale=3.0)
    assert cape_b.drape_bake.baked_filepath == os.path.join(shared, "Cape_2.pc2")
    after = _file_state(shared)
    assert after["Cape.pc2"] == a_state["Cape.pc2"], "a.blend's cache is not written over"
    bpy.ops.wm.save_mainfile()
    # Re-baking b reuses its own file; a's stays as it was.
    _bake([cape_b], scale=3.0)
    assert cape_b.drape_bake.baked_filepath == os.path.join(shared, "Cape_2.pc2")
    assert _file_state(shared)["Cape.pc2"] == a_state["Cape.pc2"]
    assert bake_job.read_users(shared) == {"Cape.pc2": [str(a_path)], "Cape_2.pc2": [str(b_path)]}
    assert bake_job.unused_caches(shared) == []

    # Each file plays its own bake.
    for path, src, tag in ((a_path, src_a, "a"), (b_path, src_b, "b")):
        positions, _ = evaluate_in_fresh_blender(path, {"Cape": [6]}, tmp_path / f"eval_{tag}")
        np.testing.assert_allclose(positions[("Cape", 6)], src.expected("Cape", 6), atol=ATOL, rtol=0)

    # b saved as a copy under another name: freeing b with "delete files" keeps
    # the file the other name still plays.
    copy = tmp_path / "b_copy.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(copy), copy=True)
    bpy.context.view_layer.objects.active = cape_b
    assert bpy.ops.drape.bake_free(delete_files=True) == {'FINISHED'}
    assert os.path.isfile(os.path.join(shared, "Cape_2.pc2"))
    assert _file_state(shared)["Cape.pc2"] == a_state["Cape.pc2"]


def test_free_bake_without_a_bake_says_why(addon, tmp_path):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    add_grid("Plain")
    with pytest.raises(RuntimeError, match="'Plain' has no Drape bake to free"):
        bpy.ops.drape.bake_free()
    bpy.ops.object.select_all(action='DESELECT')
    bpy.context.view_layer.objects.active = None
    with pytest.raises(RuntimeError, match="No active object"):
        bpy.ops.drape.bake_free()


# --- rollback on any failure ------------------------------------------------------

def _tmp_drape_files():
    tmp = tempfile.gettempdir()
    return sorted(n for n in os.listdir(tmp) if n.startswith("drape"))


def _full_snapshot(objs, folder):
    """Everything a bake may touch: the objects' shape keys (names, mute,
    value, positions), modifiers and their settings, bake settings, mesh
    attributes; every action (name, channels, keys); cache files (size,
    mtime, bytes); drape* files in the temporary folder; datablock names."""
    state = {"objects": {}}
    for obj in objs:
        keys = obj.data.shape_keys
        key_state = None
        if keys is not None:
            key_state = {"name": keys.name, "action": keys.animation_data.action.name
                         if keys.animation_data and keys.animation_data.action else None,
                         "blocks": [(kb.name, kb.mute, kb.value, helpers.read_co_key(kb).tobytes())
                                    for kb in keys.key_blocks]}
        mods = []
        for m in obj.modifiers:
            settings = {p.identifier: repr(getattr(m, p.identifier)) for p in m.bl_rna.properties
                        if p.identifier not in ("rna_type", "persistent_uid", "is_override_data")
                        and p.type != 'POINTER' and p.type != 'COLLECTION'}
            cache = getattr(m, "cache_file", None)
            settings["cache_file"] = (cache.name, cache.filepath) if cache is not None else None
            mods.append(settings)
        st = obj.drape_bake
        state["objects"][obj.name] = {
            "mesh": obj.data.name, "keys": key_state, "modifiers": mods,
            "settings": {p.identifier: getattr(st, p.identifier) for p in st.bl_rna.properties
                         if p.identifier != "rna_type"},
            "attributes": sorted(a.name for a in obj.data.attributes),
            "co": read_co(obj.data).tobytes(),
        }
    actions = {}
    for action in bpy.data.actions:
        fcurves = []
        for fc in _action_fcurves(action):
            co = np.empty(len(fc.keyframe_points) * 2, np.float32)
            fc.keyframe_points.foreach_get("co", co)
            fcurves.append((fc.data_path, co.tobytes()))
        actions[action.name] = sorted(fcurves)
    state["actions"] = actions
    state["meshes"] = sorted(m.name for m in bpy.data.meshes)
    state["shape_keys"] = sorted(k.name for k in bpy.data.shape_keys)
    state["cache_files"] = sorted((c.name, c.filepath) for c in bpy.data.cache_files)
    state["files"] = {k: v for k, v in _file_state(folder).items()}
    state["tmp"] = _tmp_drape_files()
    return state


def _action_fcurves(action):
    from drape.scene import compat

    return compat.action_fcurves(action)


def _rollback_shot(tmp_path, target):
    """A saved file with one object baked to ``target`` once already, with an
    artist's own animated shape key and a rig modifier."""
    (obj,) = _new_shot(tmp_path / "shot.blend", names=("Cloth",), target=target)
    obj.modifiers.new("Rig", 'ARMATURE')
    obj.shape_key_add(name="Basis")
    own = obj.shape_key_add(name="Bulge")
    own.points.foreach_set("co", (read_co(obj.data) + [0.0, 0.0, 0.3]).ravel())
    own.value = 0.4
    own.keyframe_insert("value", frame=1)
    own.value = 0.8
    own.keyframe_insert("value", frame=12)
    obj.data.attributes.new(install.DRAPE_RESULT_ATTRIBUTE, 'FLOAT_VECTOR', 'POINT')
    bpy.ops.wm.save_mainfile()
    _bake([obj])
    bpy.ops.wm.save_mainfile()
    return obj


def _fail_on_frame(frame):
    """A frame source whose API went away at ``frame`` (what 4.2 did to the bake)."""
    inner = bake_job._frame_source

    def source(obj):
        if bpy.context.scene.frame_current == frame:
            raise AttributeError("'AnimData' object has no attribute 'action_slot'")
        return inner(obj)
    return source


@pytest.mark.parametrize("target", ['SHAPE_KEYS', 'PC2', 'ALEMBIC'])
@pytest.mark.parametrize("where", ["frame", "install", "free"])
def test_any_failure_leaves_everything_as_it_was(addon, tmp_path, source_guard, monkeypatch, target, where):
    obj = _rollback_shot(tmp_path, target)
    bpy.context.scene.frame_set(5)
    before = _full_snapshot([obj], tmp_path / "drape_cache")
    assert before["objects"]["Cloth"]["settings"]["baked_target"] == target

    src = AnalyticSource([obj], scale=2.0)
    bake_job.set_frame_source(src)
    if where == "frame":
        bake_job.set_frame_source(_fail_on_frame(7))
    elif where == "install":
        # Fails after the new keys / modifier / action are in: the most to undo.
        def changed_api(*args, **kw):
            raise AttributeError("'MeshCacheModifier' object has no attribute 'flip_axis'")
        monkeypatch.setattr(install, "record", changed_api)
    else:
        # Fails inside the free of the old bake, half done.
        real = install.set_muted

        def changed_api(obj_, names, mute):
            real(obj_, names, mute)
            raise AttributeError("'ShapeKey' object has no attribute 'mute'")
        monkeypatch.setattr(install, "set_muted", changed_api)
    bpy.context.view_layer.objects.active = obj
    with pytest.raises(RuntimeError, match="Bake failed, nothing changed: AttributeError"):
        bpy.ops.drape.bake(objects='ACTIVE', frame_range='CUSTOM', frame_start=1, frame_end=12)
    monkeypatch.undo()
    after = _full_snapshot([obj], tmp_path / "drape_cache")
    for key in before:
        assert after[key] == before[key], key
    # ...and the earlier bake still plays.
    bpy.context.scene.frame_set(6)
    np.testing.assert_allclose(evaluated_co(obj), helpers.analytic(read_co(obj.data), 6), atol=ATOL, rtol=0)


def test_failed_rename_over_the_earlier_cache_leaves_it(addon, tmp_path, source_guard, monkeypatch):
    obj = _rollback_shot(tmp_path, 'PC2')
    before = _full_snapshot([obj], tmp_path / "drape_cache")

    def failed_rename(self):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(pc2.PC2Writer, "commit", failed_rename)
    bake_job.set_frame_source(AnalyticSource([obj], scale=2.0))
    with pytest.raises(OSError):
        bake_job.run_blocking(bpy.context.scene, [obj], 1, 12, log=None)
    monkeypatch.undo()
    after = _full_snapshot([obj], tmp_path / "drape_cache")
    for key in before:
        assert after[key] == before[key], key


def test_failure_of_the_second_object_undoes_the_first(addon, tmp_path, source_guard, monkeypatch):
    objs = _new_shot(tmp_path / "pair.blend", names=("First", "Second"), target='PC2')
    objs[1].drape_bake.target = 'SHAPE_KEYS'
    _bake(objs)
    bpy.ops.wm.save_mainfile()
    before = _full_snapshot(objs, tmp_path / "drape_cache")
    real = shape_keys.install_keys

    def changed_api(obj, frames, positions):
        real(obj, frames, positions)
        raise TypeError("bpy_prop_collection.foreach_set(): changed")
    monkeypatch.setattr(shape_keys, "install_keys", changed_api)
    bake_job.set_frame_source(AnalyticSource(objs, scale=2.0))
    with pytest.raises(TypeError):
        bake_job.run_blocking(bpy.context.scene, objs, 1, 12, log=None)
    monkeypatch.undo()
    after = _full_snapshot(objs, tmp_path / "drape_cache")
    for key in before:
        assert after[key] == before[key], key


def test_modal_bake_that_fails_mid_way_reports_and_restores(addon, tmp_path, source_guard, monkeypatch):
    from drape.operators import bake as bake_operators

    monkeypatch.setattr(bake_operators, "_TICK_BUDGET_MS", 0.0)
    obj = _rollback_shot(tmp_path, 'SHAPE_KEYS')
    before = _full_snapshot([obj], tmp_path / "drape_cache")
    bake_job.set_frame_source(AnalyticSource([obj], scale=2.0))
    bake_job.set_frame_source(_fail_on_frame(5))
    bpy.context.view_layer.objects.active = obj
    op, ctx = helpers._fake_operator(objects='ACTIVE', frame_end=12), helpers._fake_context()
    assert op.invoke(ctx, helpers._event('NONE')) == {'RUNNING_MODAL'}
    texts = [c[1] for c in ctx.workspace.calls if c[1]]
    assert "compiles the solver" in texts[0], "the status warns before the first frames"
    result = {'RUNNING_MODAL'}
    while result == {'RUNNING_MODAL'}:
        result = op.modal(ctx, helpers._event('TIMER'))
    assert result == {'CANCELLED'}
    kind, text = op.reports[-1]
    assert kind == {'ERROR'} and text.startswith("Bake failed, nothing changed: AttributeError:")
    assert [c[0] for c in ctx.window_manager.calls][-2:] == ["event_timer_remove", "progress_end"]
    after = _full_snapshot([obj], tmp_path / "drape_cache")
    for key in before:
        assert after[key] == before[key], key


# --- progress --------------------------------------------------------------------

def test_eta_counts_compilation_and_wall_time():
    # Frame 1 resets (fast), frame 2 compiles the solver for 447 s, then
    # 0.18 s frames; the wall clock also counts 0.02 s per frame between frames.
    times = [0.025, 447.0] + [0.18] * 8
    elapsed = sum(times) + 0.02 * len(times)
    assert bake_job.slow_frames(times) == [1]
    left = bake_job.eta_seconds(times, done=10, total=72, elapsed=elapsed)
    steady = (elapsed - 447.0) / 9  # wall seconds per frame without the compiling one
    assert left == pytest.approx(steady * 62, rel=1e-12)
    assert 11.0 < left < 13.0
    # One frame in, the wall time is all there is to go by: long, not "1.8 s".
    assert bake_job.eta_seconds([447.0], done=1, total=72, elapsed=447.0) == pytest.approx(447.0 * 71)
    assert bake_job.eta_seconds([], done=0, total=72, elapsed=0.0) is None
    # A scene whose every frame is slow is not "compiling".
    assert bake_job.slow_frames([2.0, 2.1, 1.9, 2.2]) == []
    assert bake_job.format_duration(447.0) == "7 min 27 s"


def test_progress_text_names_the_compilation(addon, tmp_path, source_guard):
    (obj,) = _new_shot(tmp_path / "p.blend", names=("Slow",))
    bake_job.set_frame_source(AnalyticSource([obj]))
    job = bake_job.BakeJob(bpy.context.scene, [obj], 1, 12).validate().begin()
    try:
        assert job.may_compile() and "compiles the solver" in job.starting_text()
        job.step()
        job.frame_times[0] = 0.02
        job.step()
        job.frame_times[1] = 120.0  # as if this frame had compiled
        job.t0 -= 120.0
        job.step()
        assert not job.may_compile()
        text = job.progress_text()
        assert "compiling the solver (first run) took 2 min 00 s" in text
        assert "elapsed" in text and "left" in text
        left = bake_job.eta_seconds(job.frame_times, 3, job.total, job.elapsed())
        assert left < 60.0, "the compiling frame is not in the rate"
    finally:
        job.abort()


# --- headless ---------------------------------------------------------------------

def _headless(*args, timeout=600):
    return subprocess.run([sys.executable, HEADLESS, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def frame_source_file(tmp_path):
    path = tmp_path / "source.py"
    path.write_text(_SOURCE_FILE)
    return f"{path}:source"


def _expected_headless(rest, frame):
    # _SOURCE_FILE's deformation is test_bake.analytic with scale 1.
    return helpers.analytic(rest, frame)


def test_output_job_leaves_the_input_and_its_caches_alone(addon, tmp_path, source_guard, frame_source_file):
    shot_dir = tmp_path / "shot"
    shot_dir.mkdir()
    path = shot_dir / "shot.blend"
    (cape,) = _new_shot(path, target='PC2')
    rest = read_co(cape.data)
    bake_job.set_frame_source(AnalyticSource([cape], scale=2.0))
    bake_job.run_blocking(bpy.context.scene, [cape], 1, 12, log=None)
    bpy.ops.wm.save_mainfile()
    input_bytes = path.read_bytes()
    input_caches = _file_state(shot_dir / "drape_cache")
    listing = sorted(os.listdir(shot_dir))

    # Output next to the input: the default folder is the input's too.
    proc = _headless(path, "--object", "Cape", "--target", "PC2", "--output", shot_dir / "job.blend",
                     "--frame-source", frame_source_file)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "drape_cache/Cape.pc2 is played by" in proc.stdout and "baking to Cape_2.pc2" in proc.stdout
    assert path.read_bytes() == input_bytes
    now = _file_state(shot_dir / "drape_cache")
    assert now["Cape.pc2"] == input_caches["Cape.pc2"], "the input's cache is untouched"
    assert sorted(os.listdir(shot_dir)) == sorted(listing + ["job.blend"]), "no temporary files left"

    # Output in another folder, with a '//' folder: both mean next to the output.
    out_dir = tmp_path / "farm" / "out"
    out_dir.mkdir(parents=True)
    proc = _headless(path, "--object", "Cape", "--target", "PC2", "--folder", "//cache/cloth/",
                     "--output", out_dir / "skirt_job.blend", "--frame-source", frame_source_file)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out_dir / "cache" / "cloth" / "Cape.pc2").is_file()
    assert _file_state(shot_dir / "drape_cache")["Cape.pc2"] == input_caches["Cape.pc2"]
    assert path.read_bytes() == input_bytes
    reader = textwrap.dedent("""
        import sys, json, bpy
        bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
        obj = bpy.data.objects["Cape"]
        print("PATHS " + json.dumps([obj.modifiers["Drape Bake"].filepath, obj["drape_bake"]["baked_filepath"]
                                     if "drape_bake" in obj.keys() else None]))
    """)
    out = subprocess.run([sys.executable, "-c", reader, str(out_dir / "skirt_job.blend")],
                         capture_output=True, text=True, timeout=300)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("PATHS "))
    assert json.loads(line[6:])[0] == "//cache/cloth/Cape.pc2"
    positions, modifiers = evaluate_in_fresh_blender(out_dir / "skirt_job.blend", {"Cape": [3, 12]},
                                                     tmp_path / "eval")
    assert modifiers["Cape"] == ['MESH_CACHE']
    for f in (3, 12):
        np.testing.assert_allclose(positions[("Cape", f)], _expected_headless(rest, f), atol=ATOL, rtol=0)
    # The input still plays its own bake.
    positions, _ = evaluate_in_fresh_blender(path, {"Cape": [5]}, tmp_path / "eval_in")
    np.testing.assert_allclose(positions[("Cape", 5)], helpers.analytic(rest, 5, 2.0), atol=ATOL, rtol=0)


def test_scene_option_bakes_that_scene_at_its_frames(addon, tmp_path, source_guard, frame_source_file):
    path = tmp_path / "two_scenes.blend"
    bpy.ops.wm.read_factory_settings(use_empty=True)
    shot = bpy.context.scene
    shot.name = "Shot"
    shot.frame_start, shot.frame_end = 1, 30
    shot.frame_current = 7
    alt = bpy.data.scenes.new("Alt")
    alt.frame_start, alt.frame_end = 101, 120
    obj = add_grid("AltCape")
    shot.collection.objects.unlink(obj)
    alt.collection.objects.link(obj)
    rest = read_co(obj.data)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))

    proc = _headless(path, "--object", "AltCape", "--target", "PC2", "--frame-source", frame_source_file)
    assert proc.returncode == 2 and "not in scene 'Shot'" in proc.stderr
    proc = _headless(path, "--scene", "Alt", "--object", "AltCape", "--target", "PC2",
                     "--frame-source", frame_source_file)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    head, samples = pc2.read(str(tmp_path / "drape_cache" / "AltCape.pc2"))
    assert (head["start_frame"], head["num_samples"]) == (101.0, 20)
    for k, frame in enumerate(range(101, 121)):
        np.testing.assert_allclose(samples[k], _expected_headless(rest, frame), atol=ATOL, rtol=0)


def _cape(name, location):
    obj = add_grid(name, size=8, location=location)
    co = read_co(obj.data)
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(co[:, 1] > co[:, 1].max() - 1e-6)], 1.0, 'REPLACE')
    return obj


@pytest.mark.slow
def test_scene_option_bakes_the_real_simulation_of_that_scene(empty_scene, tmp_path, source_guard):
    shot = empty_scene
    shot.name = "Shot"
    shot.frame_start, shot.frame_end = 1, 30
    cape = _cape("AltCape", (0.0, 0.0, 1.0))
    bpy.ops.object.select_all(action='DESELECT')
    cape.select_set(True)
    bpy.context.view_layer.objects.active = cape
    assert bpy.ops.drape.cloth_add(pin_group="pin") == {'FINISHED'}
    alt = bpy.data.scenes.new("Alt")
    alt.frame_start, alt.frame_end = 1, 10
    shot.collection.objects.unlink(cape)
    alt.collection.objects.link(cape)
    shot.frame_set(1)
    path = tmp_path / "alt_shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    proc = _headless(path, "--scene", "Alt", "--object", "AltCape", "--target", "PC2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _, samples = pc2.read(str(tmp_path / "drape_cache" / "AltCape.pc2"))
    assert len(samples) == 10
    assert np.abs(samples[-1] - samples[0]).max() > 0.01, "the samples are of different frames"
    # The same simulation, live in this process, in the Alt scene.
    from drape.scene import runtime

    for f in range(1, 11):
        alt.frame_set(f)
        with bpy.context.temp_override(scene=alt):
            live = runtime.dense_positions_local(cape)
        np.testing.assert_allclose(samples[f - 1], live, atol=1e-5, rtol=0, err_msg=f"frame {f}")


# --- full disks -----------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """``make(kib)`` mounts a tmpfs of that size and returns its path."""
    mounts = []

    def make(kib):
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs for a full disk here: {proc.stderr.strip() or proc.returncode}")
        mounts.append(where)
        return where

    yield make
    for where in reversed(mounts):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(where, leave):
    """Fills the disk at ``where`` up to ``leave`` free bytes."""
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(where, "filler"), "ab") as fh:
        fh.write(b"\0" * max(0, free - leave))
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize


def test_alembic_on_a_full_disk_fails_cleanly_and_blender_survives(addon, tmp_path, source_guard, small_disk):
    disk = small_disk(8192)
    (cape,) = _new_shot(tmp_path / "abc.blend", target='ALEMBIC', folder=str(disk / "cache"), size=40)
    _bake([cape])
    before = _full_snapshot([cape], disk / "cache")
    frames_size = 32 + 12 * 12 * len(cape.data.vertices)
    # Room for the temporary frames, not for the .abc.
    _fill(disk, frames_size + 96 * 1024)
    bake_job.set_frame_source(AnalyticSource([cape], scale=2.0))
    bpy.context.view_layer.objects.active = cape
    with pytest.raises(RuntimeError) as info:
        bpy.ops.drape.bake(objects='ACTIVE', frame_range='CUSTOM', frame_start=1, frame_end=12)
    message = str(info.value)
    assert "Bake failed, nothing changed: 'Cape': Blender's Alembic exporter was killed by SIGABRT" in message
    assert "the disk is full" in message and "the earlier bake is unchanged" in message
    assert _full_snapshot([cape], disk / "cache") == before
    # This Blender is alive and still plays the old bake.
    bpy.context.scene.frame_set(8)
    np.testing.assert_allclose(evaluated_co(cape), helpers.analytic(read_co(cape.data), 8), atol=ATOL, rtol=0)


def test_headless_save_on_a_full_disk_exits_1_and_keeps_the_files(addon, tmp_path, source_guard, small_disk,
                                                                  frame_source_file):
    disk = small_disk(4096)
    path = disk / "shot.blend"
    cache = tmp_path / "cache"  # the caches have room; the .blend's disk does not
    (cape,) = _new_shot(path, target='PC2', folder=str(cache))
    _bake([cape], scale=2.0)
    bpy.ops.wm.save_mainfile()
    os.unlink(str(path) + "1")
    input_bytes = path.read_bytes()
    caches = _file_state(cache)
    assert "Cape.pc2" in caches
    earlier = disk / "job.blend"
    shutil.copy(path, earlier)
    earlier_bytes = earlier.read_bytes()
    free = _fill(disk, 64 * 1024)
    assert free < len(input_bytes), "the disk must be too full for another copy of the .blend"

    for extra in (("--output", earlier), ()):
        proc = _headless(path, "--object", "Cape", "--frame-source", frame_source_file, *extra)
        assert proc.returncode == 1, (extra, proc.stdout[-2000:] + proc.stderr[-2000:])
        assert "nothing saved" in proc.stderr and "as they were" in proc.stderr, proc.stderr[-2000:]
        assert _file_state(cache) == caches, "the input's cache is put back"
        assert path.read_bytes() == input_bytes
        assert earlier.read_bytes() == earlier_bytes
        assert sorted(os.listdir(disk)) == ["filler", "job.blend", "shot.blend"], "no partial files left"


def test_headless_save_is_verified_before_it_replaces_the_input(addon, tmp_path, source_guard, frame_source_file,
                                                                monkeypatch):
    """A saved file that does not hold the bake (cut short) is never renamed
    over the input: the save is read back by a child Blender first."""
    from drape.bake import headless

    path = tmp_path / "shot.blend"
    (cape,) = _new_shot(path, target='PC2')
    input_bytes = path.read_bytes()
    bake_job.set_frame_source(AnalyticSource([cape]))
    job = bake_job.run_blocking(bpy.context.scene, [cape], 1, 12, log=None)
    real_save = bpy.ops.wm.save_as_mainfile

    class _Ops:
        @staticmethod
        def save_as_mainfile(filepath, **kw):
            real_save(filepath=filepath, **kw)
            with open(filepath, "r+b") as fh:  # what a full disk left behind
                fh.truncate(64 * 1024)

    class _Bpy:
        ops = type("ops", (), {"wm": _Ops})

    failure = headless._save_verified(_Bpy, job, str(path))
    assert failure is not None and "does not open as a complete bake" in failure
    assert path.read_bytes() == input_bytes
    assert sorted(os.listdir(tmp_path)) == sorted(["drape_cache", "shot.blend", "source.py"])
    assert headless._save_verified(bpy, job, str(path)) is None
    assert path.read_bytes() != input_bytes
