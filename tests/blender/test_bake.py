"""Baking to shape keys, PC2 + Mesh Cache and Alembic + Mesh Sequence Cache.

The frames come from an analytic deformation (independent of the solver)
installed as the bake's frame source, so every check compares Blender's
evaluated mesh, in a fresh process, with numbers computed here. The test
with a real Drape cloth is at the end.
"""

import errno
import json
import os
import subprocess
import sys
import textwrap

import bpy
import numpy as np
import pytest

from drape.bake import install, job as bake_job, pc2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMES = (1, 7, 13, 24)
# float32 precision for coordinates of magnitude ~2 (a few ulps: shape keys
# add and subtract the basis in float32).
ATOL = 2e-6

def analytic(rest, frame, scale=1.0):
    """A smooth deformation that differs on every frame and every vertex."""
    rest = np.asarray(rest, dtype=np.float64)
    wave = 0.1 * scale * np.sin(0.3 * frame + 2.0 * rest[:, 0:1])
    out = rest * (1.0 + 0.02 * scale * np.sin(0.2 * frame)) + wave * np.array([0.0, 0.0, 1.0])
    out[:, 1] += 0.01 * scale * frame
    return out.astype(np.float32)


class AnalyticSource:
    """``source(obj)``: the analytic positions of the scene's current frame,
    from each object's rest positions captured at construction."""

    def __init__(self, objects, scale=1.0):
        self.rest = {o.name: read_co(o.data) for o in objects}
        self.scale = scale
        self.calls = 0

    def expected(self, name, frame):
        return analytic(self.rest[name], frame, self.scale)

    def __call__(self, obj):
        self.calls += 1
        return self.expected(obj.name, bpy.context.scene.frame_current)


def read_co(mesh):
    co = np.empty(len(mesh.vertices) * 3, dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def evaluated_co(obj):
    depsgraph = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(depsgraph)
    mesh = ev.to_mesh()
    try:
        return read_co(mesh)
    finally:
        ev.to_mesh_clear()


def add_grid(name, size=10, location=(0.0, 0.0, 1.0)):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=size, y_subdivisions=size, size=1.0, location=location)
    obj = bpy.context.active_object
    obj.name = name
    obj.data.name = name + "Mesh"
    return obj


_READER = textwrap.dedent("""
    import json, sys
    import bpy, numpy as np
    blend, request, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    bpy.ops.wm.open_mainfile(filepath=blend)
    scene = bpy.context.scene
    result = {}
    for name, frames in request.items():
        obj = bpy.data.objects[name]
        for f in frames:
            scene.frame_set(f)
            dg = bpy.context.evaluated_depsgraph_get()
            ev = obj.evaluated_get(dg)
            m = ev.to_mesh()
            co = np.empty(len(m.vertices) * 3, np.float32)
            m.vertices.foreach_get("co", co)
            ev.to_mesh_clear()
            np.save(f"{out}/{name}_{f}.npy", co.reshape(-1, 3))
        result[name] = [m.type for m in obj.modifiers]
    json.dump(result, open(f"{out}/modifiers.json", "w"))
""")


def evaluate_in_fresh_blender(blend, request, out_dir):
    """Opens ``blend`` in a new Python process with bpy (no Drape add-on)
    and returns {(name, frame): evaluated positions}, {name: modifier types}."""
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", _READER, str(blend), json.dumps(request), str(out_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    positions = {(name, f): np.load(os.path.join(out_dir, f"{name}_{f}.npy"))
                 for name, frames in request.items() for f in frames}
    with open(os.path.join(out_dir, "modifiers.json")) as fh:
        return positions, json.load(fh)


def bake_state(obj):
    """Everything a bake puts on an object, for before/after comparisons."""
    st = obj.drape_bake
    state = {
        "settings": {k: getattr(st, k) for k in ("baked", "baked_target", "baked_filepath",
                                                  "baked_frame_start", "baked_frame_end",
                                                  "baked_action", "disabled_modifiers")},
        "modifiers": [(m.name, m.type, m.show_viewport, m.show_render) for m in obj.modifiers],
        "keys": {},
    }
    keys = obj.data.shape_keys
    if keys is not None:
        for kb in keys.key_blocks:
            state["keys"][kb.name] = (kb.mute, read_co_key(kb).tobytes())
    return state


def read_co_key(kb):
    co = np.empty(len(kb.data) * 3, dtype=np.float32)
    kb.data.foreach_get("co", co)
    return co


# --- fixtures ----------------------------------------------------------------

@pytest.fixture
def source_guard():
    """Restores the bake's frame source after the test."""
    previous = bake_job.set_frame_source(None)
    yield
    bake_job.set_frame_source(previous)


@pytest.fixture
def shot(empty_scene, tmp_path, source_guard):
    """A saved .blend with three cloth-like grids, one per bake target, and
    the analytic source installed."""
    scene = empty_scene
    scene.frame_start, scene.frame_end = 1, 24
    objs = {}
    for i, (name, target) in enumerate((("ClothSK", 'SHAPE_KEYS'), ("ClothPC2", 'PC2'),
                                        ("ClothABC", 'ALEMBIC'))):
        obj = add_grid(name, location=(3.0 * i, 0.0, 1.0))
        obj.drape_bake.target = target
        objs[target] = obj
    path = tmp_path / "shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    src = AnalyticSource(objs.values())
    bake_job.set_frame_source(src)
    return dict(scene=scene, objs=objs, src=src, path=path, cache=tmp_path / "drape_cache")


def cache_listing(folder):
    """The cache files in ``folder``, without Drape's registry of who plays them."""
    return sorted(n for n in os.listdir(folder) if n != bake_job.REGISTRY_NAME)


def bake_all(scene, frame_start=1, frame_end=24, **kw):
    return bake_job.run_blocking(scene, [o for o in scene.objects if o.type == 'MESH'],
                                 frame_start, frame_end, log=None, **kw)


def snapshot(shot):
    files = {}
    if shot["cache"].exists():
        for name in sorted(os.listdir(shot["cache"])):
            files[name] = (shot["cache"] / name).read_bytes()
    return files, {n: bake_state(o) for n, o in shot["objs"].items()}, shot["scene"].frame_current


# --- the three targets, read back in a fresh Blender --------------------------

def test_each_target_plays_back_in_a_fresh_blender(shot, tmp_path):
    result = bpy.ops.drape.bake(objects='ALL', frame_range='CUSTOM', frame_start=1, frame_end=24)
    assert result == {'FINISHED'}
    objs, src = shot["objs"], shot["src"]
    for target, obj in objs.items():
        st = obj.drape_bake
        assert st.baked and st.baked_target == target
        assert (st.baked_frame_start, st.baked_frame_end) == (1, 24)
    assert objs['PC2'].drape_bake.baked_filepath == "//drape_cache/ClothPC2.pc2"
    assert objs['ALEMBIC'].drape_bake.baked_filepath == "//drape_cache/ClothABC.abc"
    assert cache_listing(shot["cache"]) == ["ClothABC.abc", "ClothPC2.pc2"]
    bpy.ops.wm.save_mainfile()
    users = bake_job.read_users(str(shot["cache"]))
    assert users == {"ClothABC.abc": [str(shot["path"])], "ClothPC2.pc2": [str(shot["path"])]}

    request = {o.name: list(FRAMES) for o in objs.values()}
    positions, modifiers = evaluate_in_fresh_blender(shot["path"], request, tmp_path / "eval")
    assert modifiers["ClothPC2"] == ['MESH_CACHE']
    assert modifiers["ClothABC"] == ['MESH_SEQUENCE_CACHE']
    assert modifiers["ClothSK"] == []
    for obj in objs.values():
        rest = src.rest[obj.name]
        for f in FRAMES:
            got = positions[(obj.name, f)]
            want = src.expected(obj.name, f)
            assert not np.allclose(got, rest, atol=1e-3), "the bake must move the mesh"
            np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"{obj.name} frame {f}")


def test_pc2_header_and_sample_count(shot):
    obj = shot["objs"]['PC2']
    bake_job.run_blocking(shot["scene"], [obj], 3, 20, log=None)
    path = shot["cache"] / "ClothPC2.pc2"
    head = pc2.read_header(str(path))
    n = len(obj.data.vertices)
    assert head == dict(version=1, num_points=n, start_frame=3.0, sample_rate=1.0, num_samples=18)
    assert path.stat().st_size == 32 + 18 * n * 12
    _, data = pc2.read(str(path))
    np.testing.assert_array_equal(data[5], shot["src"].expected(obj.name, 8))
    mod = obj.modifiers[install.MODIFIER_NAME]
    assert (mod.cache_format, mod.deform_mode, mod.time_mode, mod.play_mode) == ('PC2', 'OVERWRITE', 'FRAME', 'SCENE')
    assert mod.frame_start == 3.0
    # Played back in this session too: sample k at frame 3 + k.
    shot["scene"].frame_set(8)
    np.testing.assert_allclose(evaluated_co(obj), shot["src"].expected(obj.name, 8), atol=ATOL, rtol=0)


def test_shape_key_bake_exports_gltf_morph_animation(shot, tmp_path):
    obj = shot["objs"]['SHAPE_KEYS']
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    keys = obj.data.shape_keys.key_blocks
    assert [k.name for k in keys][1:] == [install.key_name(f) for f in range(1, 25)]
    # Exactly one key fully on at every frame, Blender's own evaluation.
    for f in (1, 2, 12, 24):
        shot["scene"].frame_set(f)
        values = np.array([k.value for k in keys[1:]])
        assert values[f - 1] == 1.0 and np.count_nonzero(values) == 1
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    out = tmp_path / "cloth.gltf"
    assert bpy.ops.export_scene.gltf(filepath=str(out), export_format='GLTF_SEPARATE', use_selection=True,
                                     export_animations=True, export_morph=True) == {'FINISHED'}
    gltf = json.loads(out.read_text())
    mesh = gltf["meshes"][0]
    assert len(mesh["primitives"][0]["targets"]) == 24
    assert mesh["extras"]["targetNames"] == [install.key_name(f) for f in range(1, 25)]
    channels = [c for a in gltf["animations"] for c in a["channels"] if c["target"]["path"] == "weights"]
    assert len(channels) == 1
    anim = next(a for a in gltf["animations"] if channels[0] in a["channels"])
    sampler = anim["samplers"][channels[0]["sampler"]]

    def accessor(index):
        acc = gltf["accessors"][index]
        view = gltf["bufferViews"][acc["bufferView"]]
        raw = (tmp_path / gltf["buffers"][view["buffer"]]["uri"]).read_bytes()
        start = view.get("byteOffset", 0) + acc.get("byteOffset", 0)
        assert acc["componentType"] == 5126
        return np.frombuffer(raw, dtype="<f4", count=acc["count"], offset=start)

    times = accessor(sampler["input"])
    weights = accessor(sampler["output"]).reshape(len(times), 24)
    fps = shot["scene"].render.fps / shot["scene"].render.fps_base
    frames = np.rint(times * fps).astype(int)  # the exporter writes time = frame / fps
    for frame, row in zip(frames, weights):
        want = np.zeros(24)
        want[frame - 1] = 1.0
        np.testing.assert_allclose(row, want, atol=1e-6)
    assert sorted(frames) == list(range(1, 25))


# --- nothing lost ------------------------------------------------------------

def test_cancelled_bake_leaves_previous_bake_byte_identical(shot):
    bake_all(shot["scene"])
    shot["scene"].frame_set(5)
    before = snapshot(shot)
    bake_job.set_frame_source(AnalyticSource(shot["objs"].values(), scale=2.0))
    job = bake_job.BakeJob(shot["scene"], list(shot["objs"].values()), 1, 24)
    job.validate()
    job.begin()
    for _ in range(6):
        job.step()
    assert not any(o.drape_bake.baked for o in shot["objs"].values()), "old bake hidden while re-baking"
    assert any(name.endswith(f".tmp-{os.getpid()}") for name in os.listdir(shot["cache"]))
    job.abort()
    assert snapshot(shot) == before
    # ...and it still plays.
    obj = shot["objs"]['PC2']
    np.testing.assert_allclose(evaluated_co(obj), shot["src"].expected(obj.name, 5), atol=ATOL, rtol=0)


def test_unwritable_folder_fails_cleanly(shot, tmp_path):
    bake_all(shot["scene"])
    before = snapshot(shot)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(RuntimeError, match="ClothPC2.*cannot create the cache folder"):
        bpy.ops.drape.bake(objects='ALL', frame_range='SCENE', folder=str(blocker / "cache"))
    assert snapshot(shot) == before


def test_disk_full_mid_bake_fails_cleanly(shot, monkeypatch):
    bake_all(shot["scene"])
    before = snapshot(shot)
    real_write = pc2.PC2Writer._write
    calls = []

    def write_until_full(self, data):
        calls.append(1)
        if len(calls) > 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, data)

    monkeypatch.setattr(pc2.PC2Writer, "_write", write_until_full)
    bake_job.set_frame_source(AnalyticSource(shot["objs"].values(), scale=2.0))
    with pytest.raises(bake_job.BakeError, match="'Cloth(SK|PC2|ABC)': writing .* failed: the disk is full"):
        bake_all(shot["scene"])
    assert snapshot(shot) == before


def test_bad_ranges_and_unsaved_file_change_nothing(shot, tmp_path):
    scene = shot["scene"]
    bake_all(scene)
    before = snapshot(shot)
    with pytest.raises(bake_job.BakeError, match="Empty frame range 10..5"):
        bake_all(scene, 10, 5)
    with pytest.raises(RuntimeError, match="Empty frame range"):
        bpy.ops.drape.bake(objects='ALL', frame_range='CUSTOM', frame_start=10, frame_end=5)
    twin = bpy.data.objects.new("Twin", shot["objs"]['SHAPE_KEYS'].data)
    scene.collection.objects.link(twin)
    with pytest.raises(bake_job.BakeError, match="'ClothSK': its mesh 'ClothSKMesh' is shared with 'Twin'"):
        bake_job.run_blocking(scene, [shot["objs"]['SHAPE_KEYS']], 1, 24, log=None)
    bpy.data.objects.remove(twin)
    assert snapshot(shot) == before

    bpy.ops.wm.read_factory_settings(use_empty=True)
    obj = add_grid("Unsaved")
    bake_job.set_frame_source(AnalyticSource([obj]))
    obj.drape_bake.target = 'PC2'
    with pytest.raises(bake_job.BakeError, match="'Unsaved'.*not saved yet"):
        bake_job.run_blocking(bpy.context.scene, [obj], 1, 3, log=None)
    assert not obj.drape_bake.baked and len(obj.modifiers) == 0
    # An absolute folder needs no saved file; shape keys need no folder.
    bake_job.run_blocking(bpy.context.scene, [obj], 1, 3, folder=str(tmp_path / "abs"), log=None)
    assert obj.drape_bake.baked and (tmp_path / "abs" / "Unsaved.pc2").is_file()


def test_object_deleted_or_changed_mid_bake(shot):
    scene = shot["scene"]
    bake_all(scene)
    before = snapshot(shot)
    sk = shot["objs"]['SHAPE_KEYS']
    bake_job.set_frame_source(AnalyticSource(shot["objs"].values(), scale=2.0))

    job = bake_job.BakeJob(scene, [shot["objs"]['PC2'], sk], 1, 24).validate().begin()
    job.step()
    # A topology change (one more vertex) on the shape-key object.
    me = sk.data
    me.vertices.add(1)
    with pytest.raises(bake_job.BakeError, match="'ClothSK'.*changed from 121 to 122 vertices"):
        job.step()
    job.abort()
    assert snapshot(shot)[0] == before[0], "cache files untouched"
    assert bake_state(shot["objs"]['PC2']) == before[1]['PC2']

    victim = add_grid("Victim")
    bake_job.set_frame_source(AnalyticSource([victim, shot["objs"]['PC2']]))
    job = bake_job.BakeJob(scene, [shot["objs"]['PC2'], victim], 1, 24).validate().begin()
    job.step()
    bpy.data.objects.remove(victim)
    with pytest.raises(bake_job.BakeError, match="'Victim' was deleted during the bake"):
        job.step()
    job.abort()
    assert snapshot(shot)[0] == before[0]
    assert bake_state(shot["objs"]['PC2']) == before[1]['PC2']


# --- free, re-bake, stack placement ------------------------------------------

def test_free_restores_the_live_mesh(shot):
    obj = shot["objs"]['SHAPE_KEYS']
    rig = obj.modifiers.new("Rig", 'ARMATURE')
    rest = read_co(obj.data)
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    assert obj.drape_bake.created_basis and not rig.show_viewport, "rig would move the baked cloth twice"
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.drape.bake_free() == {'FINISHED'}
    assert rig.show_viewport and obj.data.shape_keys is None

    # The artist's own shape key (on, at 0.5) fed the simulation: muted while
    # the bake plays, so the result is exactly the bake; back afterwards.
    obj.shape_key_add(name="Basis")
    own = obj.shape_key_add(name="Bulge")
    own.points.foreach_set("co", (rest + [0.0, 0.0, 0.3]).ravel())
    own.value = 0.5
    own.keyframe_insert("value", frame=1)
    own.value = 0.7
    own.keyframe_insert("value", frame=30)
    artist_action = obj.data.shape_keys.animation_data.action
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    assert obj.data.shape_keys.animation_data.action == artist_action, "baked into the artist's action"
    assert own.mute and not obj.drape_bake.created_basis
    shot["scene"].frame_set(6)
    np.testing.assert_allclose(evaluated_co(obj), shot["src"].expected(obj.name, 6), atol=ATOL, rtol=0)
    job = bake_job.BakeJob(shot["scene"], [obj], 1, 24).validate().begin()
    assert not own.mute and rig.show_viewport, "a re-bake simulates with the artist's inputs"
    job.abort()
    assert own.mute and not rig.show_viewport
    assert bpy.ops.drape.bake_free() == {'FINISHED'}
    assert not own.mute and [k.name for k in obj.data.shape_keys.key_blocks] == ["Basis", "Bulge"]
    from drape.scene import compat

    anim = obj.data.shape_keys.animation_data
    assert anim.action == artist_action
    fcurves = list(compat.animation_fcurves(anim))
    assert [fc.data_path for fc in fcurves] == ['key_blocks["Bulge"].value']
    assert len(fcurves[0].keyframe_points) == 2
    obj.shape_key_clear()
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.drape.bake_free() == {'FINISHED'}
    st = obj.drape_bake
    assert not st.baked and st.baked_target == "" and obj.data.shape_keys is None
    assert rig.show_viewport and rig.show_render
    assert not [a for a in bpy.data.actions if a.name.startswith(install.ACTION_PREFIX)]
    shot["scene"].frame_set(12)
    np.testing.assert_array_equal(evaluated_co(obj), rest)

    pc = shot["objs"]['PC2']
    bake_job.run_blocking(shot["scene"], [pc], 1, 24, log=None)
    bpy.context.view_layer.objects.active = pc
    assert bpy.ops.drape.bake_free(delete_files=True) == {'FINISHED'}
    assert len(pc.modifiers) == 0 and not (shot["cache"] / "ClothPC2.pc2").exists()


def test_rebake_replaces_the_old_bake(shot):
    scene = shot["scene"]
    obj = shot["objs"]['PC2']
    bake_job.run_blocking(scene, [obj], 1, 24, log=None)
    first = (shot["cache"] / "ClothPC2.pc2").read_bytes()
    src2 = AnalyticSource([obj], scale=2.0)
    src2.rest = shot["src"].rest
    bake_job.set_frame_source(src2)
    bake_job.run_blocking(scene, [obj], 1, 24, log=None)
    assert [m.name for m in obj.modifiers] == [install.MODIFIER_NAME]
    assert (shot["cache"] / "ClothPC2.pc2").read_bytes() != first
    scene.frame_set(9)
    np.testing.assert_allclose(evaluated_co(obj), src2.expected(obj.name, 9), atol=ATOL, rtol=0)
    # To another target: the PC2 modifier goes, keys come; the file stays
    # (the saved shot.blend may still play it).
    second = (shot["cache"] / "ClothPC2.pc2").read_bytes()
    bake_job.run_blocking(scene, [obj], 1, 24, target='SHAPE_KEYS', log=None)
    assert len(obj.modifiers) == 0 and (shot["cache"] / "ClothPC2.pc2").read_bytes() == second
    assert obj.drape_bake.baked_target == 'SHAPE_KEYS'
    np.testing.assert_allclose(evaluated_co(obj), src2.expected(obj.name, 9), atol=ATOL, rtol=0)


def test_cache_modifier_takes_the_place_of_the_simulation(shot):
    obj = shot["objs"]['PC2']
    obj.modifiers.new("Rig", 'ARMATURE')
    obj.modifiers.new("Drape", 'NODES')
    attr = obj.data.attributes.new(install.DRAPE_RESULT_ATTRIBUTE, 'FLOAT_VECTOR', 'POINT')
    assert attr is not None
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    assert [m.name for m in obj.modifiers] == ["Rig", install.MODIFIER_NAME, "Drape"]
    assert install.DRAPE_RESULT_ATTRIBUTE not in obj.data.attributes

    plain = shot["objs"]['ALEMBIC']
    plain.modifiers.new("Hook", 'HOOK')
    plain.modifiers.new("Subdiv", 'SUBSURF')
    bake_job.run_blocking(shot["scene"], [plain], 1, 24, log=None)
    assert [m.name for m in plain.modifiers] == ["Hook", install.MODIFIER_NAME, "Subdiv"]


# --- headless ------------------------------------------------------------------

HEADLESS = os.path.join(ROOT, "tools", "bake_headless.py")

_SOURCE_FILE = textwrap.dedent("""
    import bpy, numpy as np

    def source(obj):
        co = np.empty(len(obj.data.vertices) * 3, np.float32)
        obj.data.vertices.foreach_get("co", co)
        rest = co.reshape(-1, 3).astype(np.float64)
        f = bpy.context.scene.frame_current
        out = rest * (1.0 + 0.02 * np.sin(0.2 * f)) + 0.1 * np.sin(0.3 * f + 2.0 * rest[:, 0:1]) * [0.0, 0.0, 1.0]
        out[:, 1] += 0.01 * f
        return out.astype(np.float32)
""")


def _headless(*args):
    return subprocess.run([sys.executable, HEADLESS, *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def test_headless_command_bakes_a_saved_blend(shot, tmp_path):
    src_file = tmp_path / "source.py"
    src_file.write_text(_SOURCE_FILE)
    path = shot["path"]
    # A failing job saves nothing: the .blend stays byte-identical.
    before = path.read_bytes()
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    proc = _headless(path, "--object", "ClothPC2", "--target", "pc2", "--folder", blocker / "sub",
                     "--frame-source", f"{src_file}:source")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "'ClothPC2': cannot create the cache folder" in proc.stderr
    assert path.read_bytes() == before

    proc = _headless(path, "--object", "ClothPC2", "--object", "ClothSK", "--start", 1, "--end", 24,
                     "--frame-source", f"{src_file}:source")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Drape bake ClothPC2, ClothSK: frame 24 (24/24)" in proc.stdout
    assert (shot["cache"] / "ClothPC2.pc2").is_file()
    request = {"ClothPC2": [1, 24], "ClothSK": [5, 24]}
    positions, modifiers = evaluate_in_fresh_blender(path, request, tmp_path / "eval")
    assert modifiers == {"ClothPC2": ['MESH_CACHE'], "ClothSK": []}
    for (name, f), got in positions.items():
        np.testing.assert_allclose(got, shot["src"].expected(name, f), atol=ATOL, rtol=0)

    assert _headless(path, "--object", "Nope").returncode == 2


# --- with the real simulation ----------------------------------------------------

def _cape(name, location):
    obj = add_grid(name, size=10, location=location)
    co = read_co(obj.data)
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(co[:, 1] > co[:, 1].max() - 1e-6)], 1.0, 'REPLACE')
    return obj


@pytest.mark.slow
def test_real_drape_cloth_bakes_to_every_target(empty_scene, tmp_path, source_guard):
    scene = empty_scene
    scene.frame_start, scene.frame_end = 1, 24
    capes = {}
    for i, target in enumerate(('SHAPE_KEYS', 'PC2', 'ALEMBIC')):
        obj = _cape(f"Cape_{target}", (3.0 * i, 0.0, 1.0))
        obj.drape_bake.target = target
        capes[target] = obj
    bpy.ops.object.select_all(action='DESELECT')
    for obj in capes.values():
        obj.select_set(True)
    assert bpy.ops.drape.cloth_add(pin_group="pin") == {'FINISHED'}
    path = tmp_path / "capes.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    rest = {o.name: read_co(o.data) for o in capes.values()}

    scene.frame_set(1)
    assert bpy.ops.drape.bake(objects='ALL', frame_range='SCENE') == {'FINISHED'}
    assert all(o.drape_bake.baked for o in capes.values())
    bpy.ops.wm.save_mainfile()
    frames = [2, 12, 24]
    baked, _ = evaluate_in_fresh_blender(path, {o.name: frames for o in capes.values()}, tmp_path / "eval")

    # What the live simulation shows (Drape's own write-back) after the bake is freed.
    for obj in capes.values():
        bpy.context.view_layer.objects.active = obj
        assert bpy.ops.drape.bake_free() == {'FINISHED'}
    live = {}
    for f in range(1, 25):
        scene.frame_set(f)
        if f in frames:
            live.update({(o.name, f): evaluated_co(o) for o in capes.values()})
    for key, got in baked.items():
        assert np.abs(got - rest[key[0]]).max() > 0.01, f"{key}: the cloth should have moved"
        np.testing.assert_allclose(got, live[key], atol=1e-5, rtol=0, err_msg=str(key))


# --- the modal operator, driven by hand (the bpy module has no window) --------

class _Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(*args, **kw):
            self.calls.append((name,) + args)
            return object() if name == "event_timer_add" else None
        return record


def _fake_operator(**props):
    from drape.operators.bake import DRAPE_OT_bake

    namespace = {name: DRAPE_OT_bake.__dict__[name]
                 for name in ("invoke", "modal", "execute", "_make_job", "_cleanup", "_status", "_done_text",
                              "_report_failure")}
    namespace["report"] = lambda self, kind, text: self.reports.append((kind, text))
    op = type("FakeBakeOperator", (), namespace)()
    op.reports = []
    defaults = dict(objects='ALL', target='OBJECT', frame_range='CUSTOM', frame_start=1, frame_end=24, folder="")
    defaults.update(props)
    for key, value in defaults.items():
        setattr(op, key, value)
    return op


def _fake_context():
    from types import SimpleNamespace

    ctx = bpy.context
    return SimpleNamespace(scene=ctx.scene, active_object=ctx.active_object, selected_objects=ctx.selected_objects,
                           window=object(), window_manager=_Recorder(), workspace=_Recorder(), area=_Recorder())


def _event(kind):
    from types import SimpleNamespace

    return SimpleNamespace(type=kind)


@pytest.fixture
def one_frame_per_tick(monkeypatch):
    from drape.operators import bake as bake_operators

    monkeypatch.setattr(bake_operators, "_TICK_BUDGET_MS", 0.0)


def test_modal_bake_shows_progress_and_finishes(shot, one_frame_per_tick):
    op, ctx = _fake_operator(), _fake_context()
    assert op.invoke(ctx, _event('NONE')) == {'RUNNING_MODAL'}
    assert op.modal(ctx, _event('MOUSEMOVE')) == {'PASS_THROUGH'}
    result = {'RUNNING_MODAL'}
    ticks = 0
    while result == {'RUNNING_MODAL'}:
        result = op.modal(ctx, _event('TIMER'))
        ticks += 1
    assert result == {'FINISHED'}, op.reports
    assert ticks == 24
    assert all(o.drape_bake.baked for o in shot["objs"].values())
    wm = [c[0] for c in ctx.window_manager.calls]
    assert wm[:3] == ["event_timer_add", "modal_handler_add", "progress_begin"]
    assert wm[-2:] == ["event_timer_remove", "progress_end"] and wm.count("progress_update") == ticks
    texts = [c[1] for c in ctx.workspace.calls if c[1]]
    assert any("frame 24 (24/24)" in t and "ms/frame" in t and "s left" in t for t in texts), texts
    assert ctx.workspace.calls[-1] == ("status_text_set", None)


def test_escape_cancels_and_leaves_everything_as_it_was(shot, one_frame_per_tick):
    bake_all(shot["scene"])
    shot["scene"].frame_set(3)
    before = snapshot(shot)
    bake_job.set_frame_source(AnalyticSource(shot["objs"].values(), scale=2.0))
    op, ctx = _fake_operator(), _fake_context()
    assert op.invoke(ctx, _event('NONE')) == {'RUNNING_MODAL'}
    assert op.modal(ctx, _event('TIMER')) == {'RUNNING_MODAL'}
    assert op.modal(ctx, _event('TIMER')) == {'RUNNING_MODAL'}
    assert op.modal(ctx, _event('ESC')) == {'CANCELLED'}
    assert op.reports[-1][0] == {'WARNING'} and "cancelled" in op.reports[-1][1]
    assert snapshot(shot) == before
    assert [c[0] for c in ctx.window_manager.calls][-2:] == ["event_timer_remove", "progress_end"]


def test_alembic_rebake_reads_the_new_file(shot):
    scene = shot["scene"]
    obj = shot["objs"]['ALEMBIC']
    bake_job.run_blocking(scene, [obj], 1, 24, log=None)
    scene.frame_set(10)
    np.testing.assert_allclose(evaluated_co(obj), shot["src"].expected(obj.name, 10), atol=ATOL, rtol=0)
    src2 = AnalyticSource([obj], scale=3.0)
    src2.rest = shot["src"].rest
    bake_job.set_frame_source(src2)
    bake_job.run_blocking(scene, [obj], 1, 24, log=None)
    assert [m.type for m in obj.modifiers] == ['MESH_SEQUENCE_CACHE']
    assert len(bpy.data.cache_files) == 1, "the old CacheFile datablock is removed"
    scene.frame_set(11)
    np.testing.assert_allclose(evaluated_co(obj), src2.expected(obj.name, 11), atol=ATOL, rtol=0)
    assert cache_listing(shot["cache"]) == ["ClothABC.abc"]


def _saved_cape_shot(scene, path, frame_end):
    """A pinned Drape cape over frames 1..frame_end, saved at ``path``."""
    scene.frame_start, scene.frame_end = 1, frame_end
    cape = _cape("Cape", (0.0, 0.0, 1.0))
    bpy.ops.object.select_all(action='DESELECT')
    cape.select_set(True)
    assert bpy.ops.drape.cloth_add(pin_group="pin") == {'FINISHED'}
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return cape


@pytest.mark.slow
def test_headless_bakes_a_real_drape_cloth(empty_scene, tmp_path, source_guard):
    scene = empty_scene
    path = tmp_path / "farm_shot.blend"
    cape = _saved_cape_shot(scene, path, 16)
    proc = _headless(path, "--object", "Cape", "--target", "PC2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Drape bake Cape: frame 16 (16/16)" in proc.stdout
    head = pc2.read_header(str(tmp_path / "drape_cache" / "Cape.pc2"))
    assert (head["num_samples"], head["num_points"]) == (16, len(cape.data.vertices))
    baked, modifiers = evaluate_in_fresh_blender(path, {"Cape": [8, 16]}, tmp_path / "eval")
    assert modifiers["Cape"] == ['MESH_CACHE', 'NODES']
    # The same simulation, live, in this process.
    for f in range(1, 17):
        scene.frame_set(f)
        if f in (8, 16):
            np.testing.assert_allclose(baked[("Cape", f)], evaluated_co(cape), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_packaged_headless_entry_bakes_like_a_farm_node(empty_scene, tmp_path):
    # What `blender -b shot.blend --python-expr "...drape.bake.headless...; sys.exit(h.main())"
    # -- --object Cape` does on a node with the extension installed: the file is open,
    # Drape is enabled, the entry inside the package reads the arguments after "--".
    path = tmp_path / "node_shot.blend"
    cape = _saved_cape_shot(empty_scene, path, 6)
    expr = ("import sys, bpy, drape; drape.register(); "
            f"bpy.ops.wm.open_mainfile(filepath={str(path)!r}); "
            "import drape.bake.headless as h; sys.exit(h.main())")
    proc = subprocess.run([sys.executable, "-c", expr, "--", "--object", "Cape", "--target", "PC2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    head = pc2.read_header(str(tmp_path / "drape_cache" / "Cape.pc2"))
    assert (head["num_samples"], head["num_points"]) == (6, len(cape.data.vertices))
    # Without Drape enabled the entry refuses with a usage error and saves nothing.
    before = path.read_bytes()
    expr = (f"import sys, bpy; bpy.ops.wm.open_mainfile(filepath={str(path)!r}); "
            "import drape.bake.headless as h; sys.exit(h.main())")
    proc = subprocess.run([sys.executable, "-c", expr, "--", "--object", "Cape"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "Drape is not enabled" in proc.stderr
    assert path.read_bytes() == before


def test_subframes_interpolate_linearly_for_motion_blur(shot):
    scene = shot["scene"]
    bake_all(scene)
    for target in ('SHAPE_KEYS', 'PC2'):
        obj = shot["objs"][target]
        scene.frame_set(5, subframe=0.5)
        want = 0.5 * (shot["src"].expected(obj.name, 5).astype(np.float64) + shot["src"].expected(obj.name, 6))
        np.testing.assert_allclose(evaluated_co(obj), want, atol=1e-5, rtol=0, err_msg=target)


class _Layout:
    """Records what a panel draws."""

    def __init__(self, log):
        self.__dict__["log"] = log

    def __getattr__(self, name):
        def call(*args, **kw):
            self.log.append((name, args, kw))
            return _Layout(self.log)
        return call

    def __setattr__(self, name, value):
        self.log.append(("set", name, value))


def test_bake_panel_draws_settings_and_state(shot):
    from types import SimpleNamespace

    from drape.panels import bake as bake_panels

    obj = shot["objs"]['PC2']
    log = []
    bake_panels._draw(_Layout(log), SimpleNamespace(active_object=obj))
    props = [c[1][1] for c in log if c[0] == "prop"]
    assert props[:3] == ["target", "folder", "use_scene_range"]
    assert [c[1][0] for c in log if c[0] == "operator"] == ["drape.bake", "drape.bake_free", "drape.bake", "drape.bake",
                                                            "drape.cache_cleanup"]
    bake_job.run_blocking(shot["scene"], [obj], 1, 24, log=None)
    log.clear()
    bake_panels._draw(_Layout(log), SimpleNamespace(active_object=obj))
    labels = [c[2].get("text") for c in log if c[0] == "label"]
    assert "Baked to Point Cache (PC2): frames 1-24" in labels and "//drape_cache/ClothPC2.pc2" in labels


def test_operator_bakes_the_active_or_the_selected_objects(shot):
    objs = shot["objs"]
    bpy.ops.object.select_all(action='DESELECT')
    objs['PC2'].select_set(True)
    objs['ALEMBIC'].select_set(True)
    bpy.context.view_layer.objects.active = objs['SHAPE_KEYS']
    assert bpy.ops.drape.bake(objects='SELECTED', target='PC2', frame_range='CUSTOM',
                              frame_start=2, frame_end=6) == {'FINISHED'}
    assert [o.drape_bake.baked_target for o in objs.values()] == ["", 'PC2', 'PC2']
    assert cache_listing(shot["cache"]) == ["ClothABC.pc2", "ClothPC2.pc2"]
    # The active object, its own target and (scene) range.
    assert bpy.ops.drape.bake(objects='ACTIVE') == {'FINISHED'}
    st = objs['SHAPE_KEYS'].drape_bake
    assert (st.baked_target, st.baked_frame_start, st.baked_frame_end) == ('SHAPE_KEYS', 1, 24)
    assert bpy.ops.drape.bake_free(objects='ALL') == {'FINISHED'}
    assert not any(o.drape_bake.baked_target for o in objs.values())
