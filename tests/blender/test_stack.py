"""Drape at its place in the modifier stack, and in the scene's units.

The oracle is Blender's own evaluation: a modifier below Drape must give
what Blender gives when it applies that modifier to Drape's output (a copy of
the mesh holding Drape's positions, evaluated with the same modifier); what
is above Drape (a Mirror, a Subdivision Surface, shape keys, an Armature) is
the simulated mesh: at the start frame the cloth is Blender's evaluation of
it, and its pinned vertices follow that evaluation on every frame. Bakes are
checked against the live playback they replace, and the unit-scale pair
against the same scene in metres.
"""

import importlib.util
import os

import bpy
import numpy as np
import pytest

from drape.bake import job as bake_job
from drape.scene import meshdata, runtime, writeback

# The bake tests' mesh readers, loaded as test_bake_safety.py loads them.
_spec = importlib.util.spec_from_file_location(
    "drape_test_stack_helpers", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_bake.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
read_co = _helpers.read_co
evaluated_co = _helpers.evaluated_co

FRAMES = 12




def without_drape(obj):
    """Blender's evaluation of ``obj`` with Drape's modifier switched off:
    the modifiers above it (and below it) applied to the mesh as modelled."""
    mod = writeback.find_modifier(obj)
    mod.show_viewport = False
    try:
        return evaluated_co(obj)
    finally:
        mod.show_viewport = True


def cape(name, size=8, location=(0.0, 0.0, 1.0)):
    """A grid of 1 x 1 (Blender units), its +Y edge in the vertex group 'pin'."""
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=size, y_subdivisions=size, size=1.0, location=location)
    obj = bpy.context.active_object
    obj.name = name
    obj.data.name = name + "Mesh"
    co = read_co(obj.data)
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(co[:, 1] > co[:, 1].max() - 1e-6)], 1.0, 'REPLACE')
    return obj


def make_cloth(obj):
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.drape.cloth_add(pin_group="pin") == {'FINISHED'}


def move_drape(obj, index):
    current = writeback.modifier_index(obj)
    obj.modifiers.move(current, index)


def play(scene, last=FRAMES):
    for f in range(scene.frame_start, last + 1):
        scene.frame_set(f)


def copy_settings(src, dst):
    for prop in src.bl_rna.properties:
        if prop.is_readonly or prop.identifier in {"name", "type", "rna_type"}:
            continue
        try:
            setattr(dst, prop.identifier, getattr(src, prop.identifier))
        except (AttributeError, TypeError, ValueError):
            pass


def blender_applies(obj, mod, drape_output):
    """What Blender makes of Drape's output under ``mod``: a copy of the mesh
    (no Drape) holding ``drape_output`` and the same modifier, evaluated."""
    mesh = bpy.data.meshes.new("oracle")
    src = obj.data
    mesh.vertices.add(len(src.vertices))
    mesh.loops.add(len(src.loops))
    mesh.polygons.add(len(src.polygons))
    corners = np.empty(len(src.loops), np.int32)
    src.loops.foreach_get("vertex_index", corners)
    mesh.loops.foreach_set("vertex_index", corners)
    starts = np.empty(len(src.polygons), np.int32)
    sizes = np.empty(len(src.polygons), np.int32)
    src.polygons.foreach_get("loop_start", starts)
    src.polygons.foreach_get("loop_total", sizes)
    mesh.polygons.foreach_set("loop_start", starts)
    mesh.vertices.foreach_set("co", np.ascontiguousarray(drape_output, np.float32).ravel())
    mesh.update(calc_edges=True)
    oracle = bpy.data.objects.new("Oracle", mesh)
    bpy.context.scene.collection.objects.link(oracle)
    oracle.matrix_world = obj.matrix_world
    copy = oracle.modifiers.new(mod.name, mod.type)
    copy_settings(mod, copy)
    try:
        return evaluated_co(oracle)
    finally:
        bpy.data.objects.remove(oracle)
        bpy.data.meshes.remove(mesh)


# --- below Drape: the modifiers work on the simulated result -----------------------------

BELOW = {
    "SUBSURF": lambda m: setattr(m, "levels", 1),
    "SOLIDIFY": lambda m: setattr(m, "thickness", 0.03),
    "MIRROR": lambda m: setattr(m, "use_bisect_axis", (False, False, False)),
}


@pytest.mark.parametrize("kind", sorted(BELOW))
def test_modifier_below_drape_works_on_the_simulated_result(empty_scene, kind):
    scene = empty_scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    obj = cape("Cape", location=(0.8, 0.0, 1.0))
    mod = obj.modifiers.new("Post", kind)
    BELOW[kind](mod)
    make_cloth(obj)
    assert [m.name for m in obj.modifiers] == ["Drape", "Post"]  # added above what post-processes
    play(scene)
    assert runtime.messages(obj) == []
    drape_output = runtime.dense_positions_local(obj)
    assert drape_output.shape == (len(obj.data.vertices), 3)
    assert np.abs(drape_output - read_co(obj.data)).max() > 0.05, "the cloth should have fallen"
    got = evaluated_co(obj)
    expected = blender_applies(obj, mod, drape_output)
    assert got.shape == expected.shape and got.shape[0] > len(obj.data.vertices)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


# --- above Drape: the evaluated mesh there is the simulated mesh ------------------------

def _mirror_above(obj):
    mod = obj.modifiers.new("Mirror", 'MIRROR')
    mod.use_clip = False
    return mod


def _subsurf_above(obj):
    mod = obj.modifiers.new("Subdivision", 'SUBSURF')
    mod.levels = 1
    return mod


def _shape_keys_above(obj):
    obj.shape_key_add(name="Basis", from_mix=False)
    key = obj.shape_key_add(name="Lift", from_mix=False)
    co = read_co(obj.data)
    co[co[:, 1] > co[:, 1].max() - 1e-6, 2] += 0.3
    key.points.foreach_set("co", co.ravel())
    key.value = 0.0
    key.keyframe_insert("value", frame=1)
    key.value = 1.0
    key.keyframe_insert("value", frame=FRAMES)
    return None


def _armature_above(obj):
    arm_data = bpy.data.armatures.new("Rig")
    rig = bpy.data.objects.new("Rig", arm_data)
    bpy.context.scene.collection.objects.link(rig)
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode='EDIT')
    bone = arm_data.edit_bones.new("pin")
    bone.head, bone.tail = (0.0, 0.5, 1.0), (0.0, 0.5, 1.5)
    bpy.ops.object.mode_set(mode='OBJECT')
    pose = rig.pose.bones["pin"]
    pose.location = (0.0, 0.0, 0.0)
    pose.keyframe_insert("location", frame=1)
    pose.location = (0.4, 0.0, 0.0)
    pose.keyframe_insert("location", frame=FRAMES)
    mod = obj.modifiers.new("Armature", 'ARMATURE')
    mod.object = rig
    return mod


ABOVE = {"MIRROR": _mirror_above, "SUBSURF": _subsurf_above, "SHAPE_KEYS": _shape_keys_above,
         "ARMATURE": _armature_above}


def _above_cloth(scene, kind):
    scene.frame_start, scene.frame_end = 1, FRAMES
    obj = cape("Cape", location=(0.0, 0.0, 1.0))
    if kind == "MIRROR":  # the half on +X, mirrored about the origin
        obj.location.x = 0.5 + 1e-3
        bpy.context.view_layer.update()
    ABOVE[kind](obj)
    make_cloth(obj)
    move_drape(obj, len(obj.modifiers) - 1)  # Drape last: everything else is above it
    return obj


@pytest.mark.parametrize("kind", sorted(ABOVE))
def test_what_is_above_drape_is_the_simulated_mesh(empty_scene, kind):
    scene = empty_scene
    obj = _above_cloth(scene, kind)
    scene.frame_set(1)
    blender = without_drape(obj)
    assert runtime.messages(obj) == []
    rest = runtime.dense_positions_local(obj)
    np.testing.assert_allclose(rest, blender, atol=1e-5, rtol=0)  # the rest shape: the mesh above Drape
    if kind in ("MIRROR", "SUBSURF"):
        assert blender.shape[0] > len(obj.data.vertices)
    play(scene)
    assert runtime.messages(obj) == []
    drape_output = runtime.dense_positions_local(obj)
    got = evaluated_co(obj)
    np.testing.assert_allclose(got, drape_output, atol=1e-6, rtol=0)  # nothing below: shown as simulated
    targets = without_drape(obj)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    pinned = meshdata.sample(obj, depsgraph).pin_weight >= 0.999
    assert pinned.sum() >= 8
    # Pins follow the mesh above Drape on this frame; the rest of the cloth has fallen.
    assert np.abs(got[pinned] - targets[pinned]).max() < 2e-3
    assert np.abs(got[~pinned] - targets[~pinned]).max() > 0.05


def test_subdivision_added_above_while_playing_rebuilds(empty_scene):
    scene = empty_scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    obj = cape("Cape")
    make_cloth(obj)
    play(scene, 4)
    sub = obj.modifiers.new("Subdivision", 'SUBSURF')
    sub.levels = 1
    obj.modifiers.move(len(obj.modifiers) - 1, 0)
    scene.frame_set(5)
    assert runtime.messages(obj) == []
    assert runtime.dense_positions_local(obj).shape[0] == len(without_drape(obj))
    scene.frame_set(6)
    assert runtime.messages(obj) == []


def _animate_ratio(dec, start, end):
    dec.ratio = 1.0
    dec.keyframe_insert("ratio", frame=start)
    dec.ratio = 0.4
    dec.keyframe_insert("ratio", frame=end)


def test_topology_that_changes_between_frames_is_refused(empty_scene):
    scene = empty_scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    obj = cape("Cape")
    dec = obj.modifiers.new("Decimate", 'DECIMATE')
    make_cloth(obj)
    assert [m.name for m in obj.modifiers] == ["Drape", "Decimate"]  # added above it: the Decimate is below
    move_drape(obj, 1)  # the artist puts Drape below the Decimate
    scene.frame_set(1)
    play(scene, 3)
    assert runtime.messages(obj) == []

    # Animated while playing: the frame where the topology changes says so, never silently.
    _animate_ratio(dec, 3, 6)
    errors = []
    for f in range(4, 8):
        scene.frame_set(f)
        errors += [text for _icon, text in runtime.messages(obj)]
    assert any("changed topology" in text and "'Cape'" in text for text in errors), errors
    # From the start frame it is refused before it plays, in the panel's words too.
    assert meshdata.animated_topology(obj)  # the panel draws these
    scene.frame_set(1)
    text = " ".join(t for _i, t in runtime.messages(obj))
    assert "'Decimate'" in text and "changes the topology between frames" in text

    # The operator refuses it as well, and changes nothing.
    obj.drape.enabled = False
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    with pytest.raises(RuntimeError, match="Nothing changed: 'Cape': modifier 'Decimate' .*animated"):
        bpy.ops.drape.cloth_add(pin_group="pin")
    assert not obj.drape.enabled


# --- bakes play at Drape's place, under the modifiers below it ---------------------------

def _live(scene, obj, frames):
    out = {}
    for f in range(scene.frame_start, max(frames) + 1):
        scene.frame_set(f)
        if f in frames:
            out[f] = evaluated_co(obj)
    return out


BAKE_FRAMES = (2, 7, FRAMES)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["SHAPE_KEYS", "PC2", "ALEMBIC"])
@pytest.mark.parametrize("case", ["SUBSURF_BELOW", "SOLIDIFY_BELOW", "MIRROR_BELOW", "ARMATURE_ABOVE",
                                  "SHAPE_KEYS_ABOVE"])
def test_bake_equals_live_playback(empty_scene, tmp_path, case, target):
    scene = empty_scene
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "stack.blend"))
    kind, where = case.rsplit("_", 1)
    if where == "BELOW":
        scene.frame_start, scene.frame_end = 1, FRAMES
        obj = cape("Cape", location=(0.8, 0.0, 1.0))
        BELOW[kind](obj.modifiers.new("Post", kind))
        make_cloth(obj)
    else:
        obj = _above_cloth(scene, kind)
    obj.drape_bake.target = target
    live = _live(scene, obj, BAKE_FRAMES)
    scene.frame_set(1)
    bake_job.run_blocking(scene, [obj], 1, FRAMES, log=None)
    assert obj.drape_bake.baked
    for f in BAKE_FRAMES:
        scene.frame_set(f)
        np.testing.assert_allclose(evaluated_co(obj), live[f], atol=2e-5, rtol=0, err_msg=f"frame {f}")


@pytest.mark.parametrize("target", ["SHAPE_KEYS", "PC2", "ALEMBIC"])
def test_bake_of_a_subdivided_cloth(empty_scene, tmp_path, target):
    """With a topology change above Drape, only a bake played at Drape's
    place can stand for it: PC2 and Alembic do; shape keys (played before
    every modifier) say so, and change nothing."""
    scene = empty_scene
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "stack.blend"))
    obj = _above_cloth(scene, "SUBSURF")
    obj.drape_bake.target = target
    if target == "SHAPE_KEYS":  # shape keys play before every modifier
        with pytest.raises(bake_job.BakeError, match="Shape keys cannot hold this bake.*'Subdivision'.*Point Cache"):
            bake_job.run_blocking(scene, [obj], 1, FRAMES, log=None)
        assert not obj.drape_bake.baked
        return
    live = _live(scene, obj, BAKE_FRAMES)
    scene.frame_set(1)
    bake_job.run_blocking(scene, [obj], 1, FRAMES, log=None)
    for f in BAKE_FRAMES:
        scene.frame_set(f)
        np.testing.assert_allclose(evaluated_co(obj), live[f], atol=2e-5, rtol=0, err_msg=f"frame {f}")


# --- the scene's units --------------------------------------------------------------------

def _unit_scene(scene, k):
    """The metre scene at ``k`` = 1; at ``k`` = 100 every length is 100 times
    larger in Blender units and the Unit Scale is 0.01: the same scene."""
    scene.frame_start, scene.frame_end = 1, 30
    scene.unit_settings.system = 'METRIC'
    scene.unit_settings.scale_length = 1.0 / k
    scene.gravity = (0.0, 0.0, -9.81 * k)  # shown as -9.81 m/s² in both
    obj = cape("Cape", size=10, location=(0.0, 0.0, 1.0 * k))
    obj.scale = (k, k, k)
    bpy.ops.object.transform_apply(location=False, rotation=False, scale=True)
    make_cloth(obj)
    obj.drape.thickness = 0.02 * k
    obj.drape.tethers = False
    bpy.ops.object.empty_add(location=(0.0, 0.1 * k, 0.55 * k))
    body = bpy.context.active_object
    body.name = "Body"
    body.rotation_euler = (0.0, 1.5708, 0.0)  # a capsule lying along -X... under the cape
    body.scale = (k, 0.6 * k, k)
    body.location.x = 0.3 * k
    body.drape_collider.kind = 'CAPSULE'
    body.drape_collider.radius_start = body.drape_collider.radius_end = 0.15
    bpy.ops.object.effector_add(type='WIND', location=(0.0, -1.0 * k, 0.5 * k))
    wind = bpy.context.active_object
    wind.rotation_euler = (-1.5708, 0.0, 0.0)  # blowing along +Y
    wind.field.strength = 3.0
    wind.field.use_max_distance = True
    wind.field.distance_max = 3.0 * k
    return obj


def _settle(scene, k):
    obj = _unit_scene(scene, k)
    play(scene, 30)
    assert runtime.messages(obj) == []
    world = meshdata.to_world(runtime.dense_positions_local(obj), obj.matrix_world)
    return world / k


def test_a_scene_at_unit_scale_001_settles_like_the_metre_scene(empty_scene):
    metre = _settle(empty_scene, 1.0)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    hundred = _settle(bpy.context.scene, 100.0)
    start = read_co(bpy.data.objects["Cape"].data) / 100.0
    moved = np.abs(metre - (start + (0.0, 0.0, 1.0))).max()
    assert moved > 0.1, "the cape should have fallen onto the capsule"
    # within 0.5 % of the cape's size (1 m), vertex by vertex
    assert np.abs(hundred - metre).max() < 0.005
    # and the sag itself (the lowest point below the pins) within 0.5 %
    sag_m = 1.0 - metre[:, 2].min()
    sag_h = 1.0 - hundred[:, 2].min()
    assert abs(sag_h - sag_m) <= 0.005 * sag_m
